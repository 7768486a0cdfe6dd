//! [`S3StoreBuilder`]: configuration of an [`S3Store`], in object_store's builder style.

use std::fmt;
use std::sync::Arc;

use fence_core::{Error, ErrorKind};
use fence_wire::names::Location;
use fence_wire::options::StoreOptions;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::ClientConfigKey;

use crate::credentials::{no_credentials, CredentialSource, NamedSource};
use crate::store::S3Store;
use fence_wire::client::Timeouts;
use fence_wire::exchange::ObservingConnector;

pub use fence_wire::options::DEFAULT_LEASE_TTL;

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
    location: Location,
    options: StoreOptions,
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
            location: Location::default(),
            options: StoreOptions::default(),
            metadata_disabled: false,
        }
    }

    /// Bucket and optional key prefix from `s3://bucket/prefix/path`.
    pub fn with_url(mut self, url: impl AsRef<str>) -> Self {
        self.location.set_url(url.as_ref(), &["s3"]);
        self
    }

    /// The bucket.
    pub fn with_bucket(mut self, bucket: impl Into<String>) -> Self {
        self.location.bucket = Some(bucket.into());
        self
    }

    /// Every key is stored under `prefix/` (validated like a [`Key`](fence_core::Key)).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.location.prefix = Some(prefix.into());
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

    /// Any other object_store S3 option (session token, proxy, …), as in its
    /// [`AmazonS3ConfigKey`](https://docs.rs/object_store/0.14/object_store/aws/enum.AmazonS3ConfigKey.html).
    /// What fence decides itself (conditional puts, bulk deletes, the clients' timeouts and
    /// retries) is set again by [`build`](S3StoreBuilder::build) whatever is given here.
    pub fn with_config(mut self, key: AmazonS3ConfigKey, value: impl Into<String>) -> Self {
        self.s3 = self.s3.with_config(key, value);
        self
    }

    fence_wire::store_option_setters!(options);

    /// Builds the store: two object_store clients with separate connection pools, one for
    /// conditional writes (no retries, short timeouts), one for reads (retries on). Neither
    /// follows redirects.
    pub fn build(self) -> Result<S3Store, Error> {
        let names = self.location.names()?;
        let bucket = self.bucket_name()?;
        self.check_http()?;
        let base = self
            .credentials(&bucket)?
            .with_bucket_name(&bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            // One plain DELETE per object: core S3 API, answered by status like every request.
            .with_disable_bulk_delete(true);
        let options = self.options;
        let cas = base
            .clone()
            .with_http_connector(connector(options.cas_timeouts()))
            .with_retry(options.cas_retry());
        let read = base
            .with_http_connector(connector(options.read_timeouts()))
            .with_retry(options.read_retry());
        Ok(S3Store::new(
            build_client(cas, &bucket)?,
            build_client(read, &bucket)?,
            bucket,
            names,
            options.cas_timeout(),
            options.limits,
        ))
    }

    /// The bucket, if its name can be one: S3's rule is 3 to 63 lowercase letters, digits,
    /// dots and hyphens, starting and ending with a letter or a digit. Legacy and
    /// S3-compatible names (up to 255 characters, also uppercase letters and underscores, or
    /// shorter) are let through; a space, a slash or any other character is refused before
    /// any I/O (object_store would build no valid request from it).
    fn bucket_name(&self) -> Result<String, Error> {
        let bucket = self
            .location
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
            .field("location", &self.location)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
        assert_eq!(b.store_options().cas_timeout(), Duration::from_secs(3));
        let b = b.with_cas_timeout(Duration::from_millis(700));
        assert_eq!(b.store_options().cas_timeout(), Duration::from_millis(700));
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
