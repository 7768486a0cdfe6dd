//! [`DynamoDbStoreBuilder`]: the table, the prefix, the endpoint and region, who we are, and
//! how long to wait.

use std::fmt;

use fence_core::{Entropy, Error, ErrorKind};
use fence_s3::credentials::aws_credentials;
use fence_s3::CredentialSource;
use fence_wire::client::{redirect_free_client, Timeouts};
use fence_wire::limits::StoreLimits;
use fence_wire::names::Location;
use fence_wire::options::StoreOptions;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{ClientConfigKey, ClientOptions};

use crate::item::{Place, ROOT_PARTITION};
use crate::store::{Config, DynamoDbStore};
use crate::wire::Signer;

pub use fence_wire::options::DEFAULT_LEASE_TTL;

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
    location: Location,
    endpoint: Option<String>,
    options: StoreOptions,
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
        let limits = StoreLimits {
            record: MAX_RECORD,
            ..StoreLimits::default()
        };
        DynamoDbStoreBuilder {
            aws,
            metadata_disabled: false,
            location: Location::default(),
            endpoint: None,
            options: StoreOptions {
                limits,
                ..StoreOptions::default()
            },
            entropy: None,
        }
    }

    /// The table and the optional prefix from `dynamodb://TABLE/PREFIX`.
    pub fn with_url(mut self, url: impl AsRef<str>) -> Self {
        self.location.set_url(url.as_ref(), &["dynamodb"]);
        self
    }

    /// The table.
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.location.bucket = Some(table.into());
        self
    }

    /// The prefix (validated like a [`Key`](fence_core::Key)): the partition every key of
    /// the store is written to. Stores with different prefixes share a table without
    /// sharing a key.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.location.prefix = Some(prefix.into());
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

    /// One of object_store's S3 configuration keys the credentials, the region and the HTTP
    /// client are read from (the names the `AWS_*` variables stand for): `access_key_id`,
    /// `secret_access_key`, `session_token`, `region`, `skip_signature`,
    /// `metadata_endpoint`, the web identity and container keys, the client options. Keys
    /// that mean nothing to DynamoDB (the bucket, S3's own settings) are ignored; the
    /// endpoint is [`with_endpoint`](Self::with_endpoint)'s.
    pub fn with_config(mut self, key: AmazonS3ConfigKey, value: impl Into<String>) -> Self {
        self.aws = self.aws.with_config(key, value);
        self
    }

    /// The endpoint, if one is set (`None`: AWS's for the region).
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
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

    fence_wire::store_option_setters!(
        options,
        "The record limit (default and most [`MAX_RECORD`], what a DynamoDB item holds beside \
         its key; a larger one fails [`build`](Self::build))."
    );

    /// The randomness of versions (seeded in simulations).
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Validates the configuration and makes the two HTTP clients (conditional writes:
    /// no retries, `ttl / 3`; reads and listings: retried, their own pool). No I/O: the
    /// table is described before the store's first request.
    pub fn build(self) -> Result<DynamoDbStore, Error> {
        let place = self.place()?;
        let limits = self.options.limits;
        if limits.record > MAX_RECORD {
            return Err(invalid(format!(
                "a record limit of {} bytes is over what a DynamoDB item holds ({MAX_RECORD} \
                 bytes of record in an item of at most 400 KB)",
                limits.record
            )));
        }
        let region = self.region();
        let endpoint = self.endpoint_url(&region)?;
        let signer = Signer {
            region,
            credentials: aws_credentials(&self.aws, self.metadata_disabled)?,
        };
        let writes = self.client(self.options.cas_timeouts())?;
        let reads = self.client(self.options.read_timeouts())?;
        Ok(DynamoDbStore::new(Config {
            place,
            endpoint,
            signer,
            writes,
            reads,
            cas_timeout: self.options.cas_timeout(),
            read_timeout: self.options.read_timeout,
            read_retries: self.options.read_retries,
            limits,
            entropy: self.entropy.unwrap_or_default(),
        }))
    }

    /// The table and partition, validated: DynamoDB's table names are 3 to 255 letters,
    /// digits, `_`, `-` and `.`; the prefix is a key.
    fn place(&self) -> Result<Place, Error> {
        let names = self.location.names()?;
        let table = self.location.bucket.clone().unwrap_or_default();
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if !(3..=255).contains(&table.len()) || !table.chars().all(allowed) {
            return Err(invalid(format!(
                "table name {table:?} is missing or invalid: DynamoDB table names are 3 to 255 \
                 letters, digits, '_', '-' and '.'"
            )));
        }
        let prefix = names.prefix();
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
    fn endpoint_url(&self, region: &str) -> Result<String, Error> {
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

    fn client(&self, timeouts: Timeouts) -> Result<reqwest::Client, Error> {
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
            .field("location", &self.location)
            .field("endpoint", &self.endpoint)
            .field("options", &self.options)
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
            b.endpoint_url("eu-west-1").unwrap(),
            "https://dynamodb.eu-west-1.amazonaws.com"
        );
        let local = b
            .with_endpoint("http://127.0.0.1:8000/")
            .with_allow_http(true);
        assert_eq!(local.endpoint_url("x").unwrap(), "http://127.0.0.1:8000");
    }

    #[test]
    fn the_record_limit_defaults_to_what_an_item_holds() {
        assert_eq!(keyed().store_options().limits.record, MAX_RECORD);
    }

    #[test]
    fn debug_hides_credentials() {
        let b = DynamoDbStoreBuilder::new().with_credentials("AKID", "hunter2-secret");
        assert!(!format!("{b:?}").contains("hunter2-secret"));
    }
}
