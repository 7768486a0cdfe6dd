//! [`DynamoDbStoreBuilder`]: the table, the prefix, the endpoint and region, who we are, and
//! how long to wait.

use std::fmt;
use std::time::Duration;

use fence_core::{Entropy, Error, ErrorKind};
use fence_s3::credentials::aws_credentials;
use fence_s3::CredentialSource;
use fence_wire::client::{redirect_free_client, Timeouts};
use fence_wire::limits::StoreLimits;
use fence_wire::listing::ListingLimits;
use fence_wire::names::{parse_url, ObjectNames};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{ClientConfigKey, ClientOptions};

use crate::item::{Place, ROOT_PARTITION};
use crate::store::{Config, DynamoDbStore};
use crate::wire::Signer;

/// The lease TTL the conditional writes' timeouts derive from unless set.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// The largest record a store accepts: DynamoDB's items are at most 400 KB (409,600 bytes),
/// attribute names and the key attributes included; 4 KiB of it are left to the partition
/// key (the prefix, at most 1 KiB), the sort key (the key, at most 1 KiB), the version and
/// the attribute names.
pub const MAX_RECORD: usize = 400 * 1024 - 4 * 1024;

/// The region requests are signed for unless one is set.
pub const DEFAULT_REGION: &str = "us-east-1";

/// The client options an operator may set through `AWS_*` variables that matter to fence's
/// HTTP client (see [`fence_wire::client::redirect_free_client`]).
const CLIENT_KEYS: [ClientConfigKey; 7] = [
    ClientConfigKey::AllowHttp,
    ClientConfigKey::AllowInvalidCertificates,
    ClientConfigKey::ProxyUrl,
    ClientConfigKey::ProxyExcludes,
    ClientConfigKey::UserAgent,
    ClientConfigKey::Http1Only,
    ClientConfigKey::Http2Only,
];

/// Configures a [`DynamoDbStore`]: the table and prefix, the endpoint and region, the
/// credentials (the sources and order of fence-s3: static keys, a web identity token, the
/// container endpoint, then the instance metadata service unless turned off), and the
/// timeouts of its two clients.
///
/// `Debug` never shows credentials.
///
/// ```
/// use std::time::Duration;
/// use fence_dynamodb::DynamoDbStore;
/// let store = DynamoDbStore::builder()
///     .with_url("dynamodb://fence-locks/fleet-a")
///     .with_endpoint("http://127.0.0.1:8000")
///     .with_allow_http(true)
///     .with_region("eu-west-1")
///     .with_credentials("AKIDEXAMPLE", "not-a-real-secret")
///     .with_lease_ttl(Duration::from_secs(6))
///     .build()
///     .unwrap();
/// assert_eq!((store.table(), store.prefix()), ("fence-locks", Some("fleet-a")));
/// assert!(!format!("{store:?}").contains("not-a-real-secret"));
/// ```
#[derive(Clone)]
pub struct DynamoDbStoreBuilder {
    aws: AmazonS3Builder,
    metadata_disabled: bool,
    table: Option<String>,
    prefix: Option<String>,
    endpoint: Option<String>,
    invalid: Option<String>,
    lease_ttl: Duration,
    cas_timeout: Option<Duration>,
    read_timeout: Duration,
    read_retries: usize,
    limits: StoreLimits,
    entropy: Option<Entropy>,
}

impl Default for DynamoDbStoreBuilder {
    fn default() -> Self {
        Self::from_aws(AmazonS3Builder::new())
    }
}

impl DynamoDbStoreBuilder {
    /// A builder with nothing set: give at least the table (or URL) and credentials.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the `AWS_*` variables fence-s3 reads for credentials and the client
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, the web identity and
    /// container variables, `AWS_ALLOW_HTTP`, …), the region (`AWS_REGION`, else
    /// `AWS_DEFAULT_REGION`), `AWS_EC2_METADATA_DISABLED`, and the endpoint the AWS SDKs read
    /// for DynamoDB: `AWS_ENDPOINT_URL_DYNAMODB`, else `AWS_ENDPOINT_URL`.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let disabled = var("AWS_EC2_METADATA_DISABLED")
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1"));
        let mut builder = Self::from_aws(AmazonS3Builder::from_env());
        builder.metadata_disabled = disabled;
        builder.endpoint = var("AWS_ENDPOINT_URL_DYNAMODB").or_else(|| var("AWS_ENDPOINT_URL"));
        builder
    }

    fn from_aws(aws: AmazonS3Builder) -> Self {
        DynamoDbStoreBuilder {
            aws,
            metadata_disabled: false,
            table: None,
            prefix: None,
            endpoint: None,
            invalid: None,
            lease_ttl: DEFAULT_LEASE_TTL,
            cas_timeout: None,
            read_timeout: Duration::from_secs(10),
            read_retries: 3,
            limits: StoreLimits {
                record: MAX_RECORD,
                ..StoreLimits::default()
            },
            entropy: None,
        }
    }

    /// The table and the optional prefix from `dynamodb://TABLE/PREFIX`.
    pub fn with_url(mut self, url: impl AsRef<str>) -> Self {
        match parse_url(url.as_ref(), &["dynamodb"]) {
            Ok((table, prefix)) => {
                self.table = Some(table);
                self.prefix = prefix;
            }
            Err(why) => self.invalid = Some(why),
        }
        self
    }

    /// The table.
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// The prefix (validated like a [`Key`](fence_core::Key)): the partition every key of
    /// the store is written to. Stores with different prefixes share a table without
    /// sharing a key.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The endpoint, e.g. `http://127.0.0.1:8000` for a local server (default:
    /// `https://dynamodb.<region>.amazonaws.com`).
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The region requests are signed for (default [`DEFAULT_REGION`]).
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.aws = self.aws.with_region(region);
        self
    }

    /// Static credentials. Never shown by `Debug` or in errors.
    pub fn with_credentials(mut self, access_key_id: &str, secret_access_key: &str) -> Self {
        self.aws = self
            .aws
            .with_access_key_id(access_key_id)
            .with_secret_access_key(secret_access_key);
        self
    }

    /// Allows a plain-HTTP endpoint (local test servers).
    pub fn with_allow_http(mut self, allow: bool) -> Self {
        self.aws = self.aws.with_allow_http(allow);
        self
    }

    /// Whether the instance metadata service may be asked for credentials when no other
    /// source is configured (default: yes; `AWS_EC2_METADATA_DISABLED=true` says no).
    pub fn with_instance_metadata(mut self, enabled: bool) -> Self {
        self.metadata_disabled = !enabled;
        self
    }

    /// Where the store's credentials will come from, as configured now.
    ///
    /// ```
    /// use fence_dynamodb::DynamoDbStore;
    /// use fence_s3::CredentialSource;
    /// let keys = DynamoDbStore::builder().with_credentials("AKID", "secret");
    /// assert_eq!(keys.credential_source(), CredentialSource::Static);
    /// ```
    pub fn credential_source(&self) -> CredentialSource {
        CredentialSource::of(&self.aws, self.metadata_disabled)
    }

    /// The lease TTL the conditional writes' timeout derives from (default 10 s): each is
    /// bounded by `ttl / 3` unless [`with_cas_timeout`](Self::with_cas_timeout) says
    /// otherwise.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// The whole-request timeout of one conditional write (default: lease TTL / 3).
    pub fn with_cas_timeout(mut self, timeout: Duration) -> Self {
        self.cas_timeout = Some(timeout);
        self
    }

    /// The timeout of one read or listing page, and how many times a failed read is tried
    /// again (default 10 s, 3).
    pub fn with_read_policy(mut self, timeout: Duration, retries: usize) -> Self {
        self.read_timeout = timeout;
        self.read_retries = retries;
        self
    }

    /// The record limit (default and most [`MAX_RECORD`], what a DynamoDB item holds):
    /// `put` refuses a larger body with [`ErrorKind::InvalidInput`] naming the limit before
    /// anything is sent, and `get` refuses a longer item as [`ErrorKind::Corrupt`]. Declared
    /// as [`Capabilities::max_body`](fence_core::Capabilities::max_body). A limit over
    /// [`MAX_RECORD`] fails [`build`](Self::build).
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

    /// The randomness of versions (seeded in simulations).
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Validates the configuration and makes the two HTTP clients (conditional writes:
    /// no retries, `ttl / 3`; reads and listings: retried, their own pool). No I/O: the
    /// table is described before the store's first request.
    pub fn build(self) -> Result<DynamoDbStore, Error> {
        if let Some(why) = &self.invalid {
            return Err(invalid(why.clone()));
        }
        let place = self.place()?;
        if self.limits.record > MAX_RECORD {
            return Err(invalid(format!(
                "a record limit of {} bytes is over what a DynamoDB item holds ({MAX_RECORD} \
                 bytes of record in an item of at most 400 KB)",
                self.limits.record
            )));
        }
        let region = self.region();
        let endpoint = self.endpoint(&region)?;
        let signer = Signer {
            region,
            credentials: aws_credentials(&self.aws, self.metadata_disabled)?,
        };
        let cas_timeout = self.cas_timeout();
        let writes = self.client(cas_timeout, cas_timeout.min(Duration::from_secs(1)))?;
        let reads = self.client(self.read_timeout, Duration::from_secs(5))?;
        Ok(DynamoDbStore::new(Config {
            place,
            endpoint,
            signer,
            writes,
            reads,
            cas_timeout,
            read_timeout: self.read_timeout,
            read_retries: self.read_retries,
            limits: self.limits,
            entropy: self.entropy.unwrap_or_default(),
        }))
    }

    /// The table and partition, validated: DynamoDB's table names are 3 to 255 letters,
    /// digits, `_`, `-` and `.`; the prefix is a key.
    fn place(&self) -> Result<Place, Error> {
        let table = self.table.clone().unwrap_or_default();
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if !(3..=255).contains(&table.len()) || !table.chars().all(allowed) {
            return Err(invalid(format!(
                "table name {table:?} is missing or invalid: DynamoDB table names are 3 to 255 \
                 letters, digits, '_', '-' and '.'"
            )));
        }
        let prefix = ObjectNames::new(self.prefix.as_deref())?.prefix();
        let partition = match prefix.is_empty() {
            true => ROOT_PARTITION.to_owned(),
            false => prefix,
        };
        Ok(Place { table, partition })
    }

    fn region(&self) -> String {
        [AmazonS3ConfigKey::Region, AmazonS3ConfigKey::DefaultRegion]
            .iter()
            .filter_map(|k| self.aws.get_config_value(k))
            .find(|r| !r.is_empty())
            .unwrap_or_else(|| DEFAULT_REGION.to_owned())
    }

    /// The endpoint: as given (without a trailing `/`), else AWS's for the region. A plain
    /// `http://` one needs `allow_http`.
    fn endpoint(&self, region: &str) -> Result<String, Error> {
        let endpoint = match &self.endpoint {
            Some(e) => e.trim_end_matches('/').to_owned(),
            None => format!("https://dynamodb.{region}.amazonaws.com"),
        };
        let lower = endpoint.to_ascii_lowercase();
        let scheme_ok = lower.starts_with("http://") || lower.starts_with("https://");
        if !scheme_ok || endpoint.contains(['?', '#']) {
            return Err(invalid(format!(
                "endpoint must be http(s)://host[:port]: {endpoint:?}"
            )));
        }
        if lower.starts_with("http://") && !self.allows_http() {
            return Err(invalid(format!(
                "the endpoint {endpoint:?} is plain http://: allow it with AWS_ALLOW_HTTP=true \
                 (with_allow_http(true)), or use https://"
            )));
        }
        Ok(endpoint)
    }

    fn allows_http(&self) -> bool {
        self.client_options()
            .get_config_value(&ClientConfigKey::AllowHttp)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes"))
    }

    fn client_options(&self) -> ClientOptions {
        CLIENT_KEYS
            .iter()
            .fold(ClientOptions::new(), |options, key| {
                match self.aws.get_config_value(&AmazonS3ConfigKey::Client(*key)) {
                    Some(value) => options.with_config(*key, value),
                    None => options,
                }
            })
    }

    fn cas_timeout(&self) -> Duration {
        let derived = (self.lease_ttl / 3).max(Duration::from_millis(100));
        self.cas_timeout.unwrap_or(derived)
    }

    fn client(&self, request: Duration, connect: Duration) -> Result<reqwest::Client, Error> {
        let timeouts = Timeouts { request, connect };
        let agent = concat!("fence-dynamodb/", env!("CARGO_PKG_VERSION"));
        redirect_free_client(&self.client_options(), timeouts, agent).map_err(|e| {
            Error::new(ErrorKind::InvalidInput, "cannot build the HTTP client")
                .with_source(e)
                .not_committed()
        })
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidInput, message).not_committed()
}

impl fmt::Debug for DynamoDbStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbStoreBuilder")
            .field("table", &self.table)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("lease_ttl", &self.lease_ttl)
            .field("cas_timeout", &self.cas_timeout)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed() -> DynamoDbStoreBuilder {
        DynamoDbStoreBuilder::new().with_credentials("AKID", "secret")
    }

    #[test]
    fn refuses_bad_configuration_before_any_io() {
        for builder in [
            keyed(),
            keyed().with_url("s3://t/x"),
            keyed().with_url("dynamodb://a b/x"),
            keyed().with_table("xy"),
            keyed().with_url("dynamodb://table/a/../b"),
            keyed()
                .with_url("dynamodb://table")
                .with_endpoint("127.0.0.1:8000"),
            keyed()
                .with_url("dynamodb://table")
                .with_endpoint("http://127.0.0.1:1"),
            keyed()
                .with_url("dynamodb://table")
                .with_record_limit(MAX_RECORD + 1),
            DynamoDbStoreBuilder::new()
                .with_url("dynamodb://table")
                .with_instance_metadata(false),
        ] {
            let err = builder.clone().build().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{builder:?}");
        }
    }

    #[test]
    fn the_prefix_is_the_partition_and_no_prefix_is_the_root() {
        let built = |url: &str| keyed().with_url(url).place().unwrap();
        assert_eq!(built("dynamodb://t12/fleet/a/").partition, "fleet/a");
        assert_eq!(built("dynamodb://t12").partition, ROOT_PARTITION);
    }

    #[test]
    fn endpoint_and_region_have_aws_defaults() {
        let b = keyed().with_url("dynamodb://table");
        assert_eq!(b.region(), DEFAULT_REGION);
        let b = b.with_region("eu-west-1");
        assert_eq!(
            b.endpoint("eu-west-1").unwrap(),
            "https://dynamodb.eu-west-1.amazonaws.com"
        );
        let local = b
            .with_endpoint("http://127.0.0.1:8000/")
            .with_allow_http(true);
        assert_eq!(local.endpoint("x").unwrap(), "http://127.0.0.1:8000");
    }

    #[test]
    fn cas_timeout_derives_from_the_lease_ttl() {
        let b = keyed().with_lease_ttl(Duration::from_secs(9));
        assert_eq!(b.cas_timeout(), Duration::from_secs(3));
        assert_eq!(
            b.with_cas_timeout(Duration::from_millis(700)).cas_timeout(),
            Duration::from_millis(700)
        );
    }

    #[test]
    fn debug_hides_credentials() {
        let b = DynamoDbStoreBuilder::new().with_credentials("AKID", "hunter2-secret");
        assert!(!format!("{b:?}").contains("hunter2-secret"));
    }
}
