//! [`GcsStoreBuilder`]: where the bucket is, how to reach it, who we are, how long to wait.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{Entropy, Error, ErrorKind, Key, DEFAULT_RECORD_LIMIT};
use fence_wire::limits::StoreLimits;
use fence_wire::listing::ListingLimits;

use crate::auth::{Credentials, TokenProvider};
use crate::store::GcsStore;

/// The public GCS endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";
/// The lease TTL the request timeouts are derived from, unless set.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// Timeouts of record traffic, derived from the lease TTL (see [`Timeouts::for_lease_ttl`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Whole request, connect to last body byte.
    pub request: Duration,
    /// TCP + TLS connect.
    pub connect: Duration,
}

impl Timeouts {
    /// `request` = TTL/3 within 250 ms..2.5 s (a renewal at TTL/3 must give up while
    /// authority remains); `connect` = TTL/10 within 100 ms..1 s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use fence_gcs::Timeouts;
    /// let t = Timeouts::for_lease_ttl(Duration::from_secs(10));
    /// assert_eq!(t.request, Duration::from_millis(2500));
    /// assert_eq!(t.connect, Duration::from_secs(1));
    /// ```
    pub fn for_lease_ttl(ttl: Duration) -> Self {
        let clamp = |d: Duration, lo: u64, hi: u64| {
            d.clamp(Duration::from_millis(lo), Duration::from_millis(hi))
        };
        Timeouts {
            request: clamp(ttl / 3, 250, 2500),
            connect: clamp(ttl / 10, 100, 1000),
        }
    }
}

/// Builds a [`GcsStore`].
///
/// Credentials are never guessed for a non-default endpoint: an emulator needs
/// [`with_anonymous`](Self::with_anonymous) (or a token provider), so a test can never fall
/// back to a cloud metadata server.
///
/// ```
/// use fence_gcs::GcsStore;
/// let store = GcsStore::builder()
///     .with_url("gs://my-bucket/fence/prod")
///     .with_endpoint("http://127.0.0.1:4443")
///     .with_anonymous()
///     .build()
///     .unwrap();
/// assert_eq!(store.bucket(), "my-bucket");
/// assert_eq!(store.prefix(), Some("fence/prod"));
/// ```
#[derive(Default)]
pub struct GcsStoreBuilder {
    url: Option<String>,
    endpoint: Option<String>,
    credentials: Option<Credentials>,
    lease_ttl: Option<Duration>,
    record_limit: Option<usize>,
    listing_limits: Option<ListingLimits>,
    conditional_delete: bool,
    entropy: Option<Entropy>,
}

impl fmt::Debug for GcsStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GcsStoreBuilder")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .field("credentials", &self.credentials)
            .field("lease_ttl", &self.lease_ttl)
            .field("record_limit", &self.record_limit)
            .field("listing_limits", &self.listing_limits)
            .field("conditional_delete", &self.conditional_delete)
            .finish()
    }
}

impl GcsStoreBuilder {
    /// `gs://bucket` or `gs://bucket/prefix`: every key lives under `prefix/`.
    #[must_use]
    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Another endpoint than [`DEFAULT_ENDPOINT`], e.g. an emulator's `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Sends no `Authorization` header (emulators, public buckets).
    #[must_use]
    pub fn with_anonymous(mut self) -> Self {
        self.credentials = Some(Credentials::Anonymous);
        self
    }

    /// Takes a bearer token from `provider` before every request.
    #[must_use]
    pub fn with_token_provider(mut self, provider: Arc<dyn TokenProvider>) -> Self {
        self.credentials = Some(Credentials::Provider(provider));
        self
    }

    /// The lease TTL the record traffic's timeouts derive from ([`Timeouts::for_lease_ttl`]).
    #[must_use]
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// The record limit (default [`DEFAULT_RECORD_LIMIT`], 5 MiB): `put` refuses a larger
    /// body with [`ErrorKind::InvalidInput`] before any I/O (records go as one multipart
    /// upload), and `get` stops reading an object past it and answers
    /// [`ErrorKind::Corrupt`] naming the key. Declared as
    /// [`Capabilities::max_body`](fence_core::Capabilities::max_body).
    #[must_use]
    pub fn with_record_limit(mut self, bytes: usize) -> Self {
        self.record_limit = Some(bytes);
        self
    }

    /// The bounds of one `list` (default [`ListingLimits::DEFAULT`]); a listing past them
    /// fails with [`ErrorKind::Unsupported`] saying which.
    #[must_use]
    pub fn with_listing_limits(mut self, limits: ListingLimits) -> Self {
        self.listing_limits = Some(limits);
        self
    }

    /// Declares that the server honours `ifGenerationMatch` on `DELETE` (real GCS does;
    /// fake-gcs-server ignores it). Off by default: `delete` then answers
    /// [`ErrorKind::Unsupported`] and callers release with a tombstone.
    #[must_use]
    pub fn with_conditional_delete(mut self, enabled: bool) -> Self {
        self.conditional_delete = enabled;
        self
    }

    /// The randomness of multipart boundaries (seeded in simulations).
    #[must_use]
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Validates the configuration and builds the HTTP clients. Does no I/O.
    pub fn build(self) -> Result<GcsStore, Error> {
        let url = self
            .url
            .as_deref()
            .ok_or_else(|| invalid("no gs:// URL given"))?;
        let (bucket, prefix) = parse_url(url)?;
        let endpoint = parse_endpoint(self.endpoint.as_deref())?;
        let credentials = choose_credentials(self.credentials, &endpoint)?;
        let timeouts = Timeouts::for_lease_ttl(self.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL));
        GcsStore::new(crate::store::Config {
            endpoint,
            bucket,
            prefix,
            credentials,
            timeouts,
            limits: StoreLimits {
                record: self.record_limit.unwrap_or(DEFAULT_RECORD_LIMIT),
                listing: self.listing_limits.unwrap_or_default(),
            },
            conditional_delete: self.conditional_delete,
            entropy: self.entropy.unwrap_or_default(),
        })
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidInput, message).not_committed()
}

/// Splits `gs://bucket/prefix` into a bucket name and a validated prefix.
pub(crate) fn parse_url(url: &str) -> Result<(String, Option<String>), Error> {
    let rest = url
        .strip_prefix("gs://")
        .ok_or_else(|| invalid(format!("not a gs:// URL: {url:?}")))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if !valid_bucket(bucket) {
        return Err(invalid(format!("invalid bucket name {bucket:?}")));
    }
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return Ok((bucket.to_owned(), None));
    }
    let prefix = Key::new(prefix).map_err(|e| invalid(format!("invalid prefix: {e}")))?;
    Ok((bucket.to_owned(), Some(prefix.as_str().to_owned())))
}

/// GCS bucket names: 3..=222 characters of `a-z 0-9 - _ .`, starting and ending alphanumeric.
fn valid_bucket(b: &str) -> bool {
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=222).contains(&b.len())
        && b.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
        && edge_ok(b.chars().next())
        && edge_ok(b.chars().last())
}

fn parse_endpoint(endpoint: Option<&str>) -> Result<String, Error> {
    let endpoint = endpoint.unwrap_or(DEFAULT_ENDPOINT).trim_end_matches('/');
    let scheme_ok = endpoint.starts_with("http://") || endpoint.starts_with("https://");
    if !scheme_ok || endpoint.contains(['?', '#']) {
        return Err(invalid(format!(
            "endpoint must be http(s)://host[:port]: {endpoint:?}"
        )));
    }
    Ok(endpoint.to_owned())
}

/// Explicit credentials win. Without any: the public endpoint uses Google's default
/// credentials (feature `auth`); any other endpoint is refused, so an emulator setup never
/// reaches for a metadata server by accident.
fn choose_credentials(given: Option<Credentials>, endpoint: &str) -> Result<Credentials, Error> {
    if let Some(c) = given {
        return Ok(c);
    }
    if endpoint != DEFAULT_ENDPOINT {
        return Err(invalid(
            "a custom endpoint needs explicit credentials: with_anonymous() for an emulator, \
             or with_token_provider(..)",
        ));
    }
    default_credentials()
}

#[cfg(feature = "auth")]
fn default_credentials() -> Result<Credentials, Error> {
    Ok(Credentials::Provider(Arc::new(
        crate::auth::GoogleDefaultCredentials::default(),
    )))
}

#[cfg(not(feature = "auth"))]
fn default_credentials() -> Result<Credentials, Error> {
    Err(invalid(
        "real GCS needs credentials: enable the `auth` feature of fence-gcs for Google's \
         default credentials, or call with_token_provider(..)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bucket_and_prefix() {
        assert_eq!(parse_url("gs://b-1").unwrap(), ("b-1".into(), None));
        assert_eq!(parse_url("gs://bkt/").unwrap(), ("bkt".into(), None));
        assert_eq!(
            parse_url("gs://bkt/a/b/").unwrap(),
            ("bkt".into(), Some("a/b".into()))
        );
    }

    #[test]
    fn refuses_bad_urls() {
        for bad in [
            "s3://bkt/x",
            "gs://",
            "gs://B",
            "gs://bkt/a//b",
            "gs://bkt/../x",
            "gs://-ab",
        ] {
            assert_eq!(
                parse_url(bad).unwrap_err().kind(),
                ErrorKind::InvalidInput,
                "{bad}"
            );
        }
    }

    #[test]
    fn emulator_endpoint_needs_explicit_credentials() {
        let err = GcsStoreBuilder::default()
            .with_url("gs://bkt")
            .with_endpoint("http://127.0.0.1:1")
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn endpoint_must_be_http() {
        let err = parse_endpoint(Some("127.0.0.1:80")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(parse_endpoint(Some("http://h:1/")).unwrap(), "http://h:1");
    }

    #[test]
    fn timeouts_follow_the_ttl_within_bounds() {
        let t = Timeouts::for_lease_ttl(Duration::from_millis(300));
        assert_eq!(t.request, Duration::from_millis(250));
        assert_eq!(t.connect, Duration::from_millis(100));
        let t = Timeouts::for_lease_ttl(Duration::from_secs(3));
        assert_eq!(t.request, Duration::from_secs(1));
        assert_eq!(t.connect, Duration::from_millis(300));
    }
}
