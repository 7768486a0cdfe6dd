//! Where an [`S3Store`](crate::S3Store)'s credentials come from, and what an operator is told
//! when none could be had.
//!
//! object_store looks for credentials in this order: static keys, a web identity token, a
//! container credentials URI, and, when none of them is configured, the instance metadata
//! service (IMDS, `http://169.254.169.254`, or `AWS_METADATA_ENDPOINT`). It reads no profile
//! files (`~/.aws/credentials`, `AWS_PROFILE`). fence keeps that order and adds:
//!
//! - `AWS_EC2_METADATA_DISABLED=true` (the AWS SDKs' switch) turns IMDS off: with no other
//!   source, [`build`](crate::S3StoreBuilder::build) fails before any I/O;
//! - a source that has to be asked over the network (IMDS, STS for a web identity, the
//!   container endpoint) is asked through object_store's own HTTP client, not through the
//!   store's observing one, so its answer is never taken for the store's (a 403 from IMDS was
//!   reported as "access denied" by the bucket); and when it gives no credentials, the error
//!   is a [`CredentialsUnavailable`] naming every source tried.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_core::{Error, ErrorKind};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsCredential, AwsCredentialProvider};
use object_store::{BackoffConfig, ClientConfigKey, CredentialProvider, RetryConfig};

/// The instance metadata endpoint object_store asks unless `AWS_METADATA_ENDPOINT` says
/// otherwise.
pub const DEFAULT_METADATA_ENDPOINT: &str = "http://169.254.169.254";

/// The bucket name object_store's builder needs to make a credential provider for another
/// service than S3 (it is never asked for).
const NO_BUCKET: &str = "fence-credentials";

/// The variables of the sources before IMDS, as an operator sets them.
const ENVIRONMENT_SOURCES: &str = "AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY, \
    AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or \
    AWS_CONTAINER_CREDENTIALS_FULL_URI";

/// Where an S3 store's credentials come from, in object_store's order of precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialSource {
    /// Static keys (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, or
    /// [`with_credentials`](crate::S3StoreBuilder::with_credentials)).
    Static,
    /// No signing at all (`AWS_SKIP_SIGNATURE=true`).
    Unsigned,
    /// A web identity token exchanged at STS (`AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`).
    WebIdentity,
    /// The container credentials endpoint (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or
    /// `_FULL_URI`).
    Container,
    /// Nothing else configured: the instance metadata service at `endpoint`, unless it is
    /// turned off (`AWS_EC2_METADATA_DISABLED=true`).
    InstanceMetadata {
        /// Where IMDS is asked.
        endpoint: String,
        /// Whether asking it is turned off.
        disabled: bool,
    },
}

impl CredentialSource {
    /// The source `s3` (object_store's builder as configured) would use, with the instance
    /// metadata service turned off by `metadata_disabled`.
    pub fn of(s3: &AmazonS3Builder, metadata_disabled: bool) -> CredentialSource {
        let set = |key: AmazonS3ConfigKey| s3.get_config_value(&key).is_some_and(|v| !v.is_empty());
        let truthy = |key: AmazonS3ConfigKey| {
            s3.get_config_value(&key).is_some_and(|v| {
                matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on")
            })
        };
        if truthy(AmazonS3ConfigKey::SkipSignature) {
            CredentialSource::Unsigned
        } else if set(AmazonS3ConfigKey::AccessKeyId) || set(AmazonS3ConfigKey::SecretAccessKey) {
            CredentialSource::Static
        } else if set(AmazonS3ConfigKey::WebIdentityTokenFile) && set(AmazonS3ConfigKey::RoleArn) {
            CredentialSource::WebIdentity
        } else if set(AmazonS3ConfigKey::ContainerCredentialsRelativeUri)
            || set(AmazonS3ConfigKey::ContainerCredentialsFullUri)
        {
            CredentialSource::Container
        } else {
            CredentialSource::InstanceMetadata {
                endpoint: s3
                    .get_config_value(&AmazonS3ConfigKey::MetadataEndpoint)
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| DEFAULT_METADATA_ENDPOINT.to_owned()),
                disabled: metadata_disabled,
            }
        }
    }

    /// Whether credentials come from a service asked over the network.
    pub(crate) fn is_remote(&self) -> bool {
        matches!(
            self,
            CredentialSource::WebIdentity
                | CredentialSource::Container
                | CredentialSource::InstanceMetadata {
                    disabled: false,
                    ..
                }
        )
    }
}

/// No credentials could be had from the store's [`CredentialSource`]. Its text names every
/// source tried; the cause (the answer of the service asked, if one was) is its `source`.
///
/// ```
/// use fence_s3::{CredentialSource, CredentialsUnavailable};
/// let e = CredentialsUnavailable::new(CredentialSource::InstanceMetadata {
///     endpoint: "http://169.254.169.254".into(),
///     disabled: true,
/// });
/// let text = e.to_string();
/// assert!(text.contains("AWS_ACCESS_KEY_ID") && text.contains("AWS_EC2_METADATA_DISABLED"));
/// ```
#[derive(Debug)]
pub struct CredentialsUnavailable {
    source_tried: CredentialSource,
    cause: Option<object_store::Error>,
}

impl CredentialsUnavailable {
    /// No credentials from `source`.
    pub fn new(source: CredentialSource) -> Self {
        CredentialsUnavailable {
            source_tried: source,
            cause: None,
        }
    }

    /// The source that gave none.
    pub fn source_tried(&self) -> &CredentialSource {
        &self.source_tried
    }
}

impl fmt::Display for CredentialsUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source_tried {
            CredentialSource::InstanceMetadata { endpoint, disabled } => {
                write!(
                    f,
                    "no AWS credentials: none in the environment ({ENVIRONMENT_SOURCES}); \
                     profile files (~/.aws, AWS_PROFILE) are not read; "
                )?;
                if *disabled {
                    write!(
                        f,
                        "the instance metadata service is off (AWS_EC2_METADATA_DISABLED)"
                    )
                } else {
                    write!(
                        f,
                        "and the instance metadata service at {endpoint} gave none"
                    )
                }
            }
            CredentialSource::WebIdentity => write!(
                f,
                "no AWS credentials from the web identity token (AWS_WEB_IDENTITY_TOKEN_FILE, \
                 AWS_ROLE_ARN) at STS"
            ),
            CredentialSource::Container => write!(
                f,
                "no AWS credentials from the container credentials endpoint \
                 (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI)"
            ),
            CredentialSource::Static | CredentialSource::Unsigned => {
                write!(f, "the configured AWS credentials were not usable")
            }
        }
    }
}

impl std::error::Error for CredentialsUnavailable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_ref().map(|e| e as _)
    }
}

/// A remote credential source, asked through object_store's own HTTP client (bounded: one
/// retry, 5 s per request), whose failure names the sources tried.
#[derive(Debug)]
pub(crate) struct NamedSource {
    inner: Arc<dyn CredentialProvider<Credential = AwsCredential>>,
    source: CredentialSource,
}

impl NamedSource {
    /// The provider object_store would make for `s3` (with `bucket`), built on its own HTTP
    /// client rather than the store's.
    pub(crate) fn new(
        s3: &AmazonS3Builder,
        bucket: &str,
        source: CredentialSource,
    ) -> object_store::Result<NamedSource> {
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 1,
            retry_timeout: Duration::from_secs(10),
        };
        let own = s3
            .clone()
            .with_bucket_name(bucket)
            .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), "5s")
            .with_retry(retry)
            .build()?;
        Ok(NamedSource {
            inner: own.credentials().clone(),
            source,
        })
    }
}

#[async_trait]
impl CredentialProvider for NamedSource {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        self.inner.get_credential().await.map_err(|cause| {
            let e = CredentialsUnavailable {
                source_tried: self.source.clone(),
                cause: Some(cause),
            };
            object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            }
        })
    }
}

/// The error of a configuration with no credential source at all (the instance metadata
/// service turned off and nothing else set): invalid input, before any I/O, naming the
/// sources tried.
pub(crate) fn no_credentials(source: CredentialSource) -> Error {
    Error::new(ErrorKind::InvalidInput, "no AWS credentials")
        .with_source(CredentialsUnavailable::new(source))
        .not_committed()
}

/// The credentials of another AWS service than S3 (fence-dynamodb signs its requests with
/// them), from object_store's S3 configuration `s3` — its `AWS_*` variables and explicit keys
/// — with the sources, order and safeguards of an [`S3Store`](crate::S3Store): static keys as
/// configured; a remote source asked through its own bounded HTTP client, its failure naming
/// the sources tried; no source at all (IMDS turned off by `metadata_disabled`) an error
/// before any I/O. `None` when signing is off (`AWS_SKIP_SIGNATURE=true`). Does no I/O.
///
/// ```
/// use object_store::aws::AmazonS3Builder;
/// let keys = AmazonS3Builder::new().with_access_key_id("AKID").with_secret_access_key("s");
/// assert!(fence_s3::credentials::aws_credentials(&keys, false).unwrap().is_some());
/// let nothing = fence_s3::credentials::aws_credentials(&AmazonS3Builder::new(), true);
/// assert_eq!(nothing.unwrap_err().kind(), fence_core::ErrorKind::InvalidInput);
/// ```
pub fn aws_credentials(
    s3: &AmazonS3Builder,
    metadata_disabled: bool,
) -> Result<Option<AwsCredentialProvider>, Error> {
    let source = CredentialSource::of(s3, metadata_disabled);
    let unusable = |e: object_store::Error| {
        Error::new(ErrorKind::InvalidInput, "AWS credentials cannot be set up")
            .with_source(e)
            .not_committed()
    };
    match source {
        CredentialSource::InstanceMetadata { disabled: true, .. } => Err(no_credentials(source)),
        CredentialSource::Unsigned => Ok(None),
        CredentialSource::Static => {
            let built = s3.clone().with_bucket_name(NO_BUCKET).build();
            Ok(Some(built.map_err(unusable)?.credentials().clone()))
        }
        remote => {
            let named = NamedSource::new(s3, NO_BUCKET, remote).map_err(unusable)?;
            Ok(Some(Arc::new(named)))
        }
    }
}
