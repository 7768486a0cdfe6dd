//! Operators for stores on 127.0.0.1 (test servers, emulators): explicit endpoint and
//! credentials, and every lookup of the environment, of config files and of a cloud metadata
//! service turned off, so nothing leaves the machine.

use opendal::services::{Azblob, Gcs, S3};
use opendal::Operator;

/// Azurite's well-known development account.
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";

/// Azurite's published development account key.
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// An S3-compatible server's coordinates.
#[derive(Clone)]
pub struct S3Server {
    /// `http://host:port`.
    pub endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// The region the server signs for.
    pub region: String,
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key (never shown by `Debug`).
    pub secret_access_key: String,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Server")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// OpenDAL's s3 service on `server`, under `root`, path-style, signed with the given keys.
///
/// ```
/// let server = fence_opendal::emulator::S3Server {
///     endpoint: "http://127.0.0.1:8333".into(),
///     bucket: "fleet".into(),
///     region: "us-east-1".into(),
///     access_key_id: "AKID".into(),
///     secret_access_key: "secret".into(),
/// };
/// let op = fence_opendal::emulator::s3(&server, "/tests").unwrap();
/// assert_eq!(op.info().scheme(), "s3");
/// assert!(!format!("{server:?}").contains("secret"));
/// ```
pub fn s3(server: &S3Server, root: &str) -> opendal::Result<Operator> {
    Operator::new(
        S3::default()
            .bucket(&server.bucket)
            .root(root)
            .endpoint(&server.endpoint)
            .region(&server.region)
            .access_key_id(&server.access_key_id)
            .secret_access_key(&server.secret_access_key)
            .disable_config_load()
            .disable_ec2_metadata(),
    )
}

/// OpenDAL's azblob service on Azurite at `endpoint` (`http://host:port`), container
/// `container`, under `root`, with the development account.
pub fn azurite(endpoint: &str, container: &str, root: &str) -> opendal::Result<Operator> {
    Operator::new(
        Azblob::default()
            .container(container)
            .root(root)
            .endpoint(&format!(
                "{}/{AZURITE_ACCOUNT}",
                endpoint.trim_end_matches('/')
            ))
            .account_name(AZURITE_ACCOUNT)
            .account_key(AZURITE_KEY),
    )
}

/// OpenDAL's gcs service on an emulator at `endpoint`, bucket `bucket`, under `root`,
/// unsigned, with the VM metadata service and config loading off.
pub fn gcs(endpoint: &str, bucket: &str, root: &str) -> opendal::Result<Operator> {
    Operator::new(
        Gcs::default()
            .bucket(bucket)
            .root(root)
            .endpoint(endpoint)
            .skip_signature()
            .disable_vm_metadata()
            .disable_config_load(),
    )
}

/// Builds an operator for a root (`/prefix`).
pub type Open = Box<dyn Fn(&str) -> opendal::Result<Operator> + Send + Sync>;

/// The test server `name` (`seaweedfs`, `moto`, `azurite`, `fake-gcs-server`) from the
/// variables `scripts/servers/*.sh` write (`FENCE_S3_*`, `FENCE_AZURE_*`, `FENCE_GCS_*`), or
/// `None` when they are not set (or `name` is none of those). Used by this workspace's tests
/// and benchmarks.
pub fn from_test_env(name: &str) -> Option<Open> {
    let var = |v: &str| std::env::var(v).ok().filter(|x| !x.is_empty());
    match name {
        "seaweedfs" | "moto" => {
            let endpoint = match name {
                "seaweedfs" => var("FENCE_S3_SEAWEED_ENDPOINT")?,
                _ => var("FENCE_S3_MOTO_ENDPOINT")?,
            };
            let server = S3Server {
                endpoint,
                bucket: var("FENCE_S3_BUCKET")?,
                region: var("FENCE_S3_REGION").unwrap_or_else(|| "us-east-1".into()),
                access_key_id: var("FENCE_S3_ACCESS_KEY_ID")?,
                secret_access_key: var("FENCE_S3_SECRET_ACCESS_KEY")?,
            };
            Some(Box::new(move |root| s3(&server, root)))
        }
        "azurite" => {
            let (e, c) = (var("FENCE_AZURE_ENDPOINT")?, var("FENCE_AZURE_CONTAINER")?);
            Some(Box::new(move |root| azurite(&e, &c, root)))
        }
        "fake-gcs-server" => {
            let (e, b) = (var("FENCE_GCS_ENDPOINT")?, var("FENCE_GCS_BUCKET")?);
            Some(Box::new(move |root| gcs(&e, &b, root)))
        }
        _ => None,
    }
}
