//! One module per backend, each behind its cargo feature, each with one entry point:
//! `open(url, options) -> Result<Opened, Error>`, given a URL of its scheme. A new backend is
//! a module here, a [`Scheme`] variant, a feature in Cargo.toml and one line below.

#[cfg(feature = "azure")]
mod azure;
#[cfg(feature = "dynamodb")]
mod dynamodb;
#[cfg(feature = "fs")]
mod file;
#[cfg(feature = "gcs")]
mod gcs;
#[cfg(feature = "opendal")]
mod opendal;
#[cfg(feature = "s3")]
mod s3;

use std::sync::Arc;

use fence_core::{Error, MemoryStore};

use crate::message::quoted;
use crate::open::{invalid, OpenOptions, Opened};
use crate::scheme::Scheme;

/// Opens `url`, of `scheme`, with the backend built in for it.
pub(crate) fn open(scheme: Scheme, url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    // With every feature on, the last arm is unreachable.
    #[allow(unreachable_patterns)]
    match scheme {
        Scheme::Memory => memory(url, options),
        #[cfg(feature = "fs")]
        Scheme::File => file::open(url, options),
        #[cfg(feature = "s3")]
        Scheme::S3 => s3::open(url, options),
        #[cfg(feature = "gcs")]
        Scheme::Gcs => gcs::open(url, options),
        #[cfg(feature = "azure")]
        Scheme::Azure => azure::open(url, options),
        #[cfg(feature = "opendal")]
        Scheme::Opendal => opendal::open(url, options),
        #[cfg(feature = "dynamodb")]
        Scheme::DynamoDb => dynamodb::open(url, options),
        other => Err(other.not_built_in()),
    }
}

/// `memory://`: a new store in this process's memory, which no other process shares.
fn memory(url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    if url != "memory://" {
        return Err(invalid(format!(
            "memory:// takes no path (got {}): each memory:// store is its own, in this \
             process only",
            quoted(url)
        )));
    }
    options.refuse_options(Scheme::Memory)?;
    let store = Arc::new(MemoryStore::new());
    Ok(Opened::remote(Scheme::Memory, url, store))
}

/// Whether an option's value says yes, as object_store reads its flags.
#[cfg(any(
    feature = "s3",
    feature = "azure",
    feature = "opendal",
    feature = "dynamodb"
))]
fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "on" | "yes" | "y"
    )
}

/// The host of `endpoint` (`scheme://host[:port]/…` or `host[:port]`), lower-cased.
#[cfg(any(feature = "s3", feature = "azure", feature = "dynamodb"))]
fn host_of(endpoint: &str) -> String {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    host.to_ascii_lowercase()
}

/// The option that turns the instance metadata service off, as `AWS_EC2_METADATA_DISABLED`.
#[cfg(any(feature = "s3", feature = "dynamodb"))]
const METADATA_DISABLED: [&str; 2] = ["aws_ec2_metadata_disabled", "ec2_metadata_disabled"];

/// An AWS client (S3, DynamoDB) without a credential source asks the instance metadata
/// service, whose credentials sign only for AWS: for another endpoint (SeaweedFS, MinIO,
/// moto, …) that is refused up front, naming the sources and what to set.
#[cfg(any(feature = "s3", feature = "dynamodb"))]
fn check_aws_credentials(
    source: &fence_s3::CredentialSource,
    endpoint: Option<&str>,
) -> Result<(), Error> {
    let fence_s3::CredentialSource::InstanceMetadata { .. } = source else {
        return Ok(());
    };
    let Some(endpoint) = endpoint.filter(|e| !is_aws(e)) else {
        return Ok(());
    };
    Err(invalid(format!(
        "no AWS credentials for the endpoint {}: none in the environment or the options \
         (AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE, \
         AWS_CONTAINER_CREDENTIALS_*), and the instance metadata service is not asked, since \
         its credentials sign only for AWS: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
         (options access_key_id and secret_access_key), or AWS_SKIP_SIGNATURE=true \
         (skip_signature) for a store that checks no signatures",
        quoted(endpoint)
    )))
}

/// Whether `endpoint`'s host is AWS's.
#[cfg(any(feature = "s3", feature = "dynamodb"))]
fn is_aws(endpoint: &str) -> bool {
    let host = host_of(endpoint);
    host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn")
}

#[cfg(all(test, any(feature = "s3", feature = "dynamodb")))]
mod tests {
    use super::*;

    #[test]
    fn aws_hosts_are_told_from_others() {
        assert!(is_aws("https://s3.eu-west-1.amazonaws.com"));
        assert!(is_aws("https://dynamodb.us-east-1.amazonaws.com"));
        assert!(is_aws("https://bucket.s3.cn-north-1.amazonaws.com.cn/"));
        assert!(!is_aws("http://127.0.0.1:9000"));
        assert!(!is_aws("https://amazonaws.com.evil.example"));
    }
}
