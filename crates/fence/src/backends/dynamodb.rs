//! `dynamodb://table/prefix`: [fence-dynamodb](fence_dynamodb), configured from the `AWS_*`
//! variables fence-s3 reads (credentials, region, client) and the endpoint the AWS SDKs read
//! for DynamoDB (`AWS_ENDPOINT_URL_DYNAMODB`, else `AWS_ENDPOINT_URL`); as options, the same
//! keys by object_store's names and `endpoint`.

use std::sync::Arc;

use fence_core::Error;
use fence_dynamodb::{DynamoDbStore, DynamoDbStoreBuilder};
use object_store::aws::AmazonS3ConfigKey;
use object_store::ClientConfigKey;

use crate::credentials::explained;
use crate::open::{fence_decides, unknown_option, OpenOptions, Opened};
use crate::scheme::Scheme;

use super::{check_aws_credentials, truthy, METADATA_DISABLED};

/// The option names of the endpoint, beside object_store's `endpoint` keys.
const ENDPOINT: [&str; 2] = ["aws_endpoint_url_dynamodb", "endpoint_url_dynamodb"];

/// What the options may set.
const KNOWN: &str = "endpoint, region, access_key_id, secret_access_key, session_token, \
    skip_signature, metadata_endpoint, web identity and container keys, allow_http and the \
    other client options by object_store's names, aws_ec2_metadata_disabled";

/// Opens `url` with the `AWS_*` environment (unless left out) and `options` over it.
pub(super) fn open(url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    let mut builder = match options.reads_environment() {
        true => DynamoDbStore::from_env(),
        false => DynamoDbStore::builder(),
    }
    .with_url(url);
    for (key, value) in options.pairs() {
        builder = configure(builder, key, value)?;
    }
    check_aws_credentials(&builder.credential_source(), builder.endpoint())?;
    if let Some(ttl) = options.ttl() {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build().map_err(explained)?;
    Ok(Opened::remote(Scheme::DynamoDb, url, Arc::new(store)))
}

/// `builder` with the option `key` set to `value`.
fn configure(
    builder: DynamoDbStoreBuilder,
    key: &str,
    value: &str,
) -> Result<DynamoDbStoreBuilder, Error> {
    if METADATA_DISABLED.contains(&key) {
        return Ok(builder.with_instance_metadata(!truthy(value)));
    }
    if ENDPOINT.contains(&key) {
        return Ok(builder.with_endpoint(value));
    }
    let unknown = || unknown_option(Scheme::DynamoDb, key, KNOWN);
    let parsed: AmazonS3ConfigKey = key.parse().map_err(|_| unknown())?;
    match parsed {
        AmazonS3ConfigKey::Endpoint => Ok(builder.with_endpoint(value)),
        AmazonS3ConfigKey::Bucket => Err(fence_decides(
            Scheme::DynamoDb,
            key,
            "the URL names the table",
        )),
        AmazonS3ConfigKey::Client(ClientConfigKey::Timeout | ClientConfigKey::ConnectTimeout) => {
            Err(fence_decides(
                Scheme::DynamoDb,
                key,
                "its timeouts derive from the lease TTL",
            ))
        }
        k if signs_or_connects(&k) => Ok(builder.with_config(k, value)),
        _ => Err(unknown()),
    }
}

/// Whether `key` is one DynamoDB's requests are signed or sent with (not one of S3's own).
fn signs_or_connects(key: &AmazonS3ConfigKey) -> bool {
    use AmazonS3ConfigKey as K;
    matches!(
        key,
        K::AccessKeyId
            | K::SecretAccessKey
            | K::Token
            | K::Region
            | K::DefaultRegion
            | K::SkipSignature
            | K::MetadataEndpoint
            | K::ImdsV1Fallback
            | K::WebIdentityTokenFile
            | K::RoleArn
            | K::RoleSessionName
            | K::StsEndpoint
            | K::ContainerCredentialsRelativeUri
            | K::ContainerCredentialsFullUri
            | K::ContainerAuthorizationTokenFile
            | K::Client(_)
    )
}
