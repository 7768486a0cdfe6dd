//! `s3://bucket/prefix`: [fence-s3](fence_s3), configured from object_store's `AWS_*`
//! variables and its [`AmazonS3ConfigKey`] names as options.

use std::sync::Arc;

use fence_core::Error;
use fence_s3::{S3Store, S3StoreBuilder};
use object_store::aws::AmazonS3ConfigKey;
use object_store::ClientConfigKey;

use crate::credentials::explained;
use crate::open::{fence_decides, unknown_option, OpenOptions, Opened};
use crate::scheme::Scheme;

use super::{check_aws_credentials, truthy};

use super::METADATA_DISABLED;

/// Opens `url` with the `AWS_*` environment (unless left out) and `options` over it.
pub(super) fn open(url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    let mut builder = match options.reads_environment() {
        true => S3Store::from_env(),
        false => S3Store::builder(),
    }
    .with_url(url);
    for (key, value) in options.pairs() {
        builder = configure(builder, key, value)?;
    }
    check_credentials(&builder)?;
    if let Some(ttl) = options.ttl() {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build().map_err(explained)?;
    Ok(Opened::remote(Scheme::S3, url, Arc::new(store)))
}

/// `builder` with the option `key` (object_store's name of it, or
/// `aws_ec2_metadata_disabled`) set to `value`.
fn configure(builder: S3StoreBuilder, key: &str, value: &str) -> Result<S3StoreBuilder, Error> {
    if METADATA_DISABLED.contains(&key) {
        return Ok(builder.with_instance_metadata(!truthy(value)));
    }
    let parsed: AmazonS3ConfigKey = key.parse().map_err(|_| {
        unknown_option(
            Scheme::S3,
            key,
            "object_store's AmazonS3ConfigKey names (endpoint, region, access_key_id, \
             secret_access_key, session_token, allow_http, skip_signature, metadata_endpoint, \
             …) and aws_ec2_metadata_disabled",
        )
    })?;
    if let Some(why) = fences_own(&parsed) {
        return Err(fence_decides(Scheme::S3, key, why));
    }
    Ok(builder.with_config(parsed, value))
}

/// Why fence sets `key` itself, if it does.
fn fences_own(key: &AmazonS3ConfigKey) -> Option<&'static str> {
    match key {
        AmazonS3ConfigKey::Bucket => Some("the URL names the bucket"),
        AmazonS3ConfigKey::ConditionalPut | AmazonS3ConfigKey::CopyIfNotExists => {
            Some("its writes are conditional with If-Match and If-None-Match")
        }
        AmazonS3ConfigKey::DisableBulkDelete => Some("it deletes one object per request"),
        AmazonS3ConfigKey::Client(ClientConfigKey::Timeout | ClientConfigKey::ConnectTimeout) => {
            Some("its timeouts derive from the lease TTL")
        }
        _ => None,
    }
}

/// Without a credential source, object_store asks the instance metadata service, whose
/// credentials sign only for AWS: for another endpoint (SeaweedFS, MinIO, moto, …) that is
/// refused up front (see [`super::check_aws_credentials`]).
fn check_credentials(builder: &S3StoreBuilder) -> Result<(), Error> {
    check_aws_credentials(&builder.credential_source(), builder.endpoint().as_deref())
}
