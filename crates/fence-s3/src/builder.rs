//! [`S3StoreBuilder`]: configuration of an [`S3Store`], in object_store's builder style.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{Error, ErrorKind};
use fence_wire::limits::StoreLimits;
use fence_wire::listing::ListingLimits;
use fence_wire::names::{parse_url, ObjectNames};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::{BackoffConfig, ClientConfigKey, RetryConfig};

use crate::credentials::{no_credentials, CredentialSource, NamedSource};
use crate::store::S3Store;
use fence_wire::client::Timeouts;
use fence_wire::exchange::ObservingConnector;

/// The lease TTL the CAS client's timeouts derive from unless set.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// Configures an [`S3Store`]: endpoint, region, credentials, bucket and key prefix, and the
/// timeouts of its two clients (see the crate docs).
///
/// `Debug` never shows credentials.
///
/// ```
/// use std::time::Duration;
/// use fence_s3::S3Store;
/// let store = S3Store::builder()
///     .with_url("s3://my-bucket/fleet-a")
///     .with_endpoint("http://127.0.0.1:9000")
///     .with_allow_http(true)
///     .with_region("us-east-1")
///     .with_credentials("AKIDEXAMPLE", "not-a-real-secret")
///     .with_lease_ttl(Duration::from_secs(6))
///     .build()
///     .unwrap();
/// assert_eq!(store.bucket(), "my-bucket");
/// assert!(!format!("{store:?}").contains("not-a-real-secret"));
/// ```
#[derive(Clone)]
pub struct S3StoreBuilder {
    s3: AmazonS3Builder,
    bucket: Option<String>,
    prefix: Option<String>,
    lease_ttl: Duration,
    cas_timeout: Option<Duration>,
    read_timeout: Duration,
    read_retries: usize,
    limits: StoreLimits,
    invalid: Option<String>,
    metadata_disabled: bool,
}

impl Default for S3StoreBuilder {
    fn default() -> Self {
        Self::from_s3(AmazonS3Builder::new())
    }
}

impl S3StoreBuilder {
    /// An empty builder: set at least the bucket (or URL) and credentials.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads object_store's `AWS_*` environment variables (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`, `AWS_BUCKET`, `AWS_ALLOW_HTTP`,
    /// `AWS_METADATA_ENDPOINT`, …) and `AWS_EC2_METADATA_DISABLED`. With no credential source
    /// configured, the instance metadata service is asked, as the AWS SDKs do (see
    /// [`credential_source`](S3StoreBuilder::credential_source)).
    pub fn from_env() -> Self {
        let disabled = std::env::var("AWS_EC2_METADATA_DISABLED")
            .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1"));
        Self::from_s3(AmazonS3Builder::from_env()).with_instance_metadata(!disabled)
    }

    fn from_s3(s3: AmazonS3Builder) -> Self {
        S3StoreBuilder {
            s3,
            bucket: None,
            prefix: None,
            lease_ttl: DEFAULT_LEASE_TTL,
            cas_timeout: None,
            read_timeout: Duration::from_secs(30),
            read_retries: 3,
            limits: StoreLimits::default(),
            invalid: None,
            metadata_disabled: false,
        }
    }

    /// Bucket and optional key prefix from `s3://bucket/prefix/path`.
    pub fn with_url(mut self, url: impl AsRef<str>) -> Self {
        match parse_url(url.as_ref(), &["s3"]) {
            Ok((bucket, prefix)) => {
                self.bucket = Some(bucket);
                self.prefix = prefix;
            }
            Err(why) => self.invalid = Some(why),
        }
        self
    }

    /// The bucket.
    pub fn with_bucket(mut self, bucket: impl Into<String>) -> Self {
        self.bucket = Some(bucket.into());
        self
    }

    /// Every key is stored under `prefix/` (validated like a [`Key`](fence_core::Key)).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The endpoint, e.g. `http://127.0.0.1:9000` for a local S3-compatible server.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.s3 = self.s3.with_endpoint(endpoint);
        self
    }

    /// The region the requests are signed for.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.s3 = self.s3.with_region(region);
        self
    }

    /// Static credentials (access key id and secret). Never shown by `Debug` or in errors.
    pub fn with_credentials(mut self, access_key_id: &str, secret_access_key: &str) -> Self {
        self.s3 = self
            .s3
            .with_access_key_id(access_key_id)
            .with_secret_access_key(secret_access_key);
        self
    }

    /// The endpoint, if one is set (`AWS_ENDPOINT`, `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_S3`
    /// or [`with_endpoint`](S3StoreBuilder::with_endpoint)); `None` means AWS itself.
    pub fn endpoint(&self) -> Option<String> {
        [AmazonS3ConfigKey::S3Endpoint, AmazonS3ConfigKey::Endpoint]
            .iter()
            .filter_map(|k| self.s3.get_config_value(k))
            .find(|e| !e.is_empty())
    }

    /// Whether the instance metadata service may be asked for credentials when no other
    /// source is configured (default: yes; `AWS_EC2_METADATA_DISABLED=true` says no). With it
    /// off and no other source, [`build`](S3StoreBuilder::build) fails before any I/O.
    pub fn with_instance_metadata(mut self, enabled: bool) -> Self {
        self.metadata_disabled = !enabled;
        self
    }

    /// Where the store's credentials will come from, as configured now.
    ///
    /// ```
    /// use fence_s3::{CredentialSource, S3Store};
    /// let keys = S3Store::builder().with_credentials("AKID", "secret");
    /// assert_eq!(keys.credential_source(), CredentialSource::Static);
    /// let none = S3Store::builder().with_instance_metadata(false);
    /// assert!(matches!(none.credential_source(), CredentialSource::InstanceMetadata { disabled: true, .. }));
    /// ```
    pub fn credential_source(&self) -> CredentialSource {
        CredentialSource::of(&self.s3, self.metadata_disabled)
    }

    /// Allows plain-HTTP endpoints (local test servers).
    pub fn with_allow_http(mut self, allow: bool) -> Self {
        self.s3 = self.s3.with_allow_http(allow);
        self
    }

    /// The lease TTL the conditional-write timeouts derive from (default 10 s): each
    /// conditional write is bounded by `ttl / 3` unless [`with_cas_timeout`] says otherwise.
    ///
    /// [`with_cas_timeout`]: S3StoreBuilder::with_cas_timeout
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// The whole-request timeout of one conditional write (default: lease TTL / 3).
    pub fn with_cas_timeout(mut self, timeout: Duration) -> Self {
        self.cas_timeout = Some(timeout);
        self
    }

    /// The request timeout and retry count of reads and lists (default 30 s, 3 retries).
    pub fn with_read_policy(mut self, timeout: Duration, retries: usize) -> Self {
        self.read_timeout = timeout;
        self.read_retries = retries;
        self
    }

    /// The record limit (default [`fence_core::DEFAULT_RECORD_LIMIT`], 5 MiB): `put` refuses a larger
    /// body before any I/O, and `get` stops reading an object past it and answers
    /// [`ErrorKind::Corrupt`] naming the key. Declared as
    /// [`Capabilities::max_body`](fence_core::Capabilities::max_body). It bounds what a
    /// read can make this process hold.
    pub fn with_record_limit(mut self, bytes: usize) -> Self {
        self.limits.record = bytes;
        self
    }

    /// The bounds of one `list` (default [`ListingLimits::DEFAULT`]); a listing past them
    /// fails with [`ErrorKind::Unsupported`] saying which.
    pub fn with_listing_limits(mut self, limits: ListingLimits) -> Self {
        self.limits.listing = limits;
        self
    }

    /// Builds the store: two object_store clients with separate connection pools, one for
    /// conditional writes (no retries, short timeouts), one for reads (retries on). Neither
    /// follows redirects.
    pub fn build(self) -> Result<S3Store, Error> {
        if let Some(why) = &self.invalid {
            return Err(invalid(why.clone()));
        }
        let bucket = self.bucket_name()?;
        let names = ObjectNames::new(self.prefix.as_deref())?;
        self.check_http()?;
        let base = self
            .credentials(&bucket)?
            .with_bucket_name(&bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            // One plain DELETE per object: core S3 API, answered by status like every request.
            .with_disable_bulk_delete(true);
        let cas_timeout = self.cas_timeout();
        let cas = build_client(cas_client(base.clone(), cas_timeout), &bucket)?;
        let read = build_client(self.read_client(base), &bucket)?;
        Ok(S3Store::new(
            cas,
            read,
            bucket,
            names,
            cas_timeout,
            self.limits,
        ))
    }

    /// The bucket, if its name can be one: S3's rule is 3 to 63 lowercase letters, digits,
    /// dots and hyphens, starting and ending with a letter or a digit. Legacy and
    /// S3-compatible names (up to 255 characters, also uppercase letters and underscores, or
    /// shorter) are let through; a space, a slash or any other character is refused before
    /// any I/O (object_store would build no valid request from it).
    fn bucket_name(&self) -> Result<String, Error> {
        let bucket = self
            .bucket
            .clone()
            .or_else(|| self.s3.get_config_value(&AmazonS3ConfigKey::Bucket))
            .unwrap_or_default();
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
        let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        let valid = (1..=255).contains(&bucket.len())
            && bucket.chars().all(allowed)
            && ends(bucket.chars().next())
            && ends(bucket.chars().last());
        if !valid {
            return Err(invalid(format!(
                "bucket name {bucket:?} is missing or invalid: S3 bucket names are 3 to 63 \
                 lowercase letters, digits, dots and hyphens, starting and ending with a letter \
                 or a digit"
            )));
        }
        Ok(bucket)
    }

    /// A plain-HTTP endpoint needs `allow_http`: object_store would refuse every request
    /// ("URL scheme is not allowed"), which looks like an unreachable store.
    fn check_http(&self) -> Result<(), Error> {
        let allowed = self
            .s3
            .get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
            .is_some_and(|v| {
                matches!(
                    v.to_ascii_lowercase().as_str(),
                    "1" | "true" | "on" | "yes" | "y"
                )
            });
        let plain = [AmazonS3ConfigKey::Endpoint, AmazonS3ConfigKey::S3Endpoint]
            .iter()
            .filter_map(|k| self.s3.get_config_value(k))
            .find(|e| e.to_ascii_lowercase().starts_with("http://"));
        match plain {
            Some(endpoint) if !allowed => Err(invalid(format!(
                "the endpoint {endpoint:?} is plain http://: allow it with AWS_ALLOW_HTTP=true \
                 (with_allow_http(true)), or use https://"
            ))),
            _ => Ok(()),
        }
    }

    /// object_store's builder with the credentials the store will use: a remote source is
    /// asked through its own HTTP client and names the sources tried when it gives none (see
    /// [`crate::credentials`]); with no source at all, an error before any I/O.
    fn credentials(&self, bucket: &str) -> Result<AmazonS3Builder, Error> {
        let source = self.credential_source();
        if let CredentialSource::InstanceMetadata { disabled: true, .. } = source {
            return Err(no_credentials(source));
        }
        if !source.is_remote() {
            return Ok(self.s3.clone());
        }
        let provider = NamedSource::new(&self.s3, bucket, source).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("S3 credentials for bucket {bucket:?} cannot be set up"),
            )
            .with_source(e)
            .not_committed()
        })?;
        Ok(self.s3.clone().with_credentials(Arc::new(provider)))
    }

    fn cas_timeout(&self) -> Duration {
        let derived = (self.lease_ttl / 3).max(Duration::from_millis(100));
        self.cas_timeout.unwrap_or(derived)
    }

    fn read_client(&self, base: AmazonS3Builder) -> AmazonS3Builder {
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: self.read_retries,
            retry_timeout: self.read_timeout * 2,
        };
        base.with_http_connector(connector(Timeouts {
            request: self.read_timeout,
            connect: Duration::from_secs(5),
        }))
        .with_retry(retry)
    }
}

/// The client of conditional writes: no retries at all, every request bounded by `timeout`.
fn cas_client(base: AmazonS3Builder, timeout: Duration) -> AmazonS3Builder {
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 0,
        retry_timeout: timeout,
    };
    base.with_http_connector(connector(Timeouts {
        request: timeout,
        connect: timeout.min(Duration::from_secs(1)),
    }))
    .with_retry(retry)
}

/// The HTTP layer of a client: redirects off, every attempt recorded, answers bounded (see
/// [`fence_wire::exchange`]). S3 error codes are in the bodies only.
fn connector(timeouts: Timeouts) -> ObservingConnector {
    ObservingConnector {
        timeouts,
        agent: concat!("fence-s3/", env!("CARGO_PKG_VERSION")),
        code_header: None,
    }
}

fn build_client(s3: AmazonS3Builder, bucket: &str) -> Result<AmazonS3, Error> {
    s3.build().map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("S3 configuration for bucket {bucket:?} is invalid"),
        )
        .with_source(e)
        .not_committed()
    })
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidInput, message).not_committed()
}

impl fmt::Debug for S3StoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3StoreBuilder")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("lease_ttl", &self.lease_ttl)
            .field("cas_timeout", &self.cas_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::CredentialsUnavailable;

    #[test]
    fn refuses_bad_configuration_before_any_io() {
        let no_bucket = S3StoreBuilder::new().build().unwrap_err();
        assert_eq!(no_bucket.kind(), ErrorKind::InvalidInput);
        let bad_url = S3StoreBuilder::new()
            .with_url("http://x")
            .build()
            .unwrap_err();
        assert_eq!(bad_url.kind(), ErrorKind::InvalidInput);
        let bad_prefix = S3StoreBuilder::new()
            .with_bucket("b")
            .with_prefix("a/../b")
            .build()
            .unwrap_err();
        assert_eq!(bad_prefix.kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn cas_timeout_derives_from_the_lease_ttl() {
        let b = S3StoreBuilder::new().with_lease_ttl(Duration::from_secs(9));
        assert_eq!(b.cas_timeout(), Duration::from_secs(3));
        let b = b.with_cas_timeout(Duration::from_millis(700));
        assert_eq!(b.cas_timeout(), Duration::from_millis(700));
    }

    #[test]
    fn configuration_mistakes_are_invalid_input_before_any_io() {
        let keyed = || S3StoreBuilder::new().with_credentials("AKID", "secret");
        let space = keyed().with_url("s3://bucket with space/x").build();
        assert_eq!(space.unwrap_err().kind(), ErrorKind::InvalidInput);
        let plain = keyed()
            .with_bucket("bucket")
            .with_endpoint("http://127.0.0.1:9")
            .build();
        assert_eq!(plain.unwrap_err().kind(), ErrorKind::InvalidInput);
        let allowed = keyed()
            .with_bucket("bucket")
            .with_endpoint("http://127.0.0.1:9")
            .with_allow_http(true)
            .build();
        assert!(allowed.is_ok());
    }

    #[test]
    fn no_credential_source_with_metadata_off_names_the_sources() {
        let builder = S3StoreBuilder::new()
            .with_bucket("bucket")
            .with_instance_metadata(false);
        let e = builder.build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let missing = std::error::Error::source(&e)
            .and_then(|c| c.downcast_ref::<CredentialsUnavailable>())
            .expect("the cause says which sources were tried");
        assert!(matches!(
            missing.source_tried(),
            CredentialSource::InstanceMetadata { disabled: true, .. }
        ));
    }

    #[test]
    fn credential_sources_follow_object_stores_order() {
        use object_store::aws::AmazonS3ConfigKey as K;
        let with = |pairs: &[(K, &str)]| {
            let mut b = S3StoreBuilder::new();
            for (k, v) in pairs {
                b.s3 = b.s3.with_config(*k, *v);
            }
            b.credential_source()
        };
        assert_eq!(
            with(&[(K::AccessKeyId, "a"), (K::SecretAccessKey, "s")]),
            CredentialSource::Static
        );
        assert_eq!(
            with(&[(K::SkipSignature, "true")]),
            CredentialSource::Unsigned
        );
        let web = [
            (K::WebIdentityTokenFile, "/t"),
            (K::RoleArn, "arn:aws:iam::1:role/r"),
        ];
        assert_eq!(with(&web), CredentialSource::WebIdentity);
        assert_eq!(
            with(&[(K::ContainerCredentialsRelativeUri, "/v2/x")]),
            CredentialSource::Container
        );
        assert_eq!(
            with(&[(K::MetadataEndpoint, "http://127.0.0.1:1")]),
            CredentialSource::InstanceMetadata {
                endpoint: "http://127.0.0.1:1".into(),
                disabled: false
            }
        );
    }

    #[test]
    fn debug_hides_credentials() {
        let b = S3StoreBuilder::new().with_credentials("AKID", "hunter2-secret");
        assert!(!format!("{b:?}").contains("hunter2-secret"));
    }
}
