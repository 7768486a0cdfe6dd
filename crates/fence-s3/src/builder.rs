//! [`S3StoreBuilder`]: configuration of an [`S3Store`], in object_store's builder style.

use std::fmt;
use std::time::Duration;

use fence_core::{Error, ErrorKind};
use fence_wire::limits::StoreLimits;
use fence_wire::listing::ListingLimits;
use fence_wire::names::{parse_url, ObjectNames};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::{BackoffConfig, RetryConfig};

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
    /// …). Without explicit credentials object_store falls back to the instance metadata
    /// service, as the AWS SDKs do.
    pub fn from_env() -> Self {
        Self::from_s3(AmazonS3Builder::from_env())
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
        let base = self
            .s3
            .clone()
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

    fn bucket_name(&self) -> Result<String, Error> {
        let bucket = self
            .bucket
            .clone()
            .or_else(|| self.s3.get_config_value(&AmazonS3ConfigKey::Bucket))
            .unwrap_or_default();
        if bucket.is_empty() || bucket.contains('/') {
            return Err(invalid(format!(
                "bucket name {bucket:?} is missing or invalid"
            )));
        }
        Ok(bucket)
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
    fn debug_hides_credentials() {
        let b = S3StoreBuilder::new().with_credentials("AKID", "hunter2-secret");
        assert!(!format!("{b:?}").contains("hunter2-secret"));
    }
}
