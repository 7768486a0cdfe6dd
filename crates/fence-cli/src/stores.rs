//! Stores named by URL: `file:///path`, `memory://`, `s3://bucket/prefix`, `gs://bucket/prefix`,
//! `az://container/prefix` (or `azure://`), `opendal+<service>://name/prefix`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fence_core::{ConditionalStore, MemoryStore};
use fence_fs::FsStore;

use crate::exit::{shown, Failure, STORE};

/// An opened store and the URL that names it for other processes (`FENCE_STORE`): a
/// `file://` URL is made absolute.
#[derive(Debug, Clone)]
pub struct OpenedStore {
    /// The store.
    pub store: Arc<dyn ConditionalStore>,
    /// Its canonical URL.
    pub url: String,
    /// The directory of a `file://` store.
    pub root: Option<PathBuf>,
    /// The file mode a `file://` store was opened with (`--file-mode`), for the commands
    /// `fence run` starts (`FENCE_FILE_MODE`).
    pub file_mode: Option<u32>,
}

/// How a `file://` store is opened: the mode of the files it creates (its directories get
/// the matching execute bits), or read-only. Other stores ignore it.
#[derive(Debug, Clone, Copy, Default)]
pub struct FileAccess {
    /// `--file-mode` / `FENCE_FILE_MODE`; default 0600 (directories 0700).
    pub file_mode: Option<u32>,
    /// Open for reading only: nothing is created or written (`status`, `get`), so a
    /// read-only mount, a snapshot or a store this user can only read can be inspected.
    pub read_only: bool,
}

/// Parses `--file-mode`: an octal mode with read and write for the owner and no execute
/// bits, e.g. `0660` to share a store with a group.
///
/// ```
/// assert_eq!(fence_cli::stores::parse_file_mode("0660"), Ok(0o660));
/// assert_eq!(fence_cli::stores::parse_file_mode("640"), Ok(0o640));
/// assert!(fence_cli::stores::parse_file_mode("0400").is_err());
/// assert!(fence_cli::stores::parse_file_mode("0755").is_err());
/// assert!(fence_cli::stores::parse_file_mode("rw").is_err());
/// ```
pub fn parse_file_mode(text: &str) -> Result<u32, String> {
    let mode = u32::from_str_radix(text, 8).ok().filter(|m| *m <= 0o777);
    match mode {
        Some(m) if m & 0o600 == 0o600 && m & 0o111 == 0 => Ok(m),
        _ => Err(format!(
            "expected an octal file mode like 0640 or 0660: read and write for the owner, no \
             execute bits (got {})",
            shown(text)
        )),
    }
}

/// The directory mode that goes with file mode `file`: execute where read is allowed
/// (0600 → 0700, 0640 → 0750, 0660 → 0770).
pub fn dir_mode_for(file: u32) -> u32 {
    file | ((file & 0o444) >> 2)
}

/// Opens the store named by `url` for a command that shares it with other processes (`run`,
/// `put`, `get`, `status`): as [`open_with`], but `memory://`, which lives and dies inside one
/// process, is refused (exit 2): a lease there would exclude nothing.
///
/// ```
/// use fence_cli::stores::{open_shared, FileAccess};
/// assert_eq!(open_shared("memory://", None, FileAccess::default()).unwrap_err().code, 2);
/// ```
pub fn open_shared(
    url: &str,
    lease_ttl: Option<Duration>,
    access: FileAccess,
) -> Result<OpenedStore, Failure> {
    if url == "memory://" {
        return Err(Failure::usage(
            "memory:// lives inside one process, so a lease there excludes nothing across \
             processes (only probe and demo take it): use file:///path on one machine, or an \
             object store",
        ));
    }
    open_with(url, lease_ttl, access)
}

/// Removes `dir` if nothing but fence-fs's own `.fence` folder (lock and temp files of
/// objects that are gone) is left in it. Only for directories this process wrote alone.
fn remove_if_empty(dir: &Path) -> std::io::Result<()> {
    let mut entries = std::fs::read_dir(dir)?;
    let only_internal = entries.all(|e| e.is_ok_and(|e| e.file_name() == ".fence"));
    if only_internal {
        let internal = dir.join(".fence");
        if internal.is_dir() {
            std::fs::remove_dir_all(&internal)?;
        }
    }
    std::fs::remove_dir(dir)
}

impl OpenedStore {
    /// For a `file://` store: removes the empty directories at and above `prefix` (up to the
    /// store's root, which stays), deepest first; returns those left (not empty, or not
    /// removable), relative to the root. Other stores have no directories: nothing to do.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// std::fs::create_dir_all(dir.path().join("a/b/c")).unwrap();
    /// std::fs::write(dir.path().join("a/keep"), "x").unwrap();
    /// let opened = fence_cli::stores::open(&format!("file://{}", dir.path().display()), None).unwrap();
    /// assert_eq!(opened.prune_dirs("a/b/c"), vec!["a".to_owned()]);
    /// assert!(!dir.path().join("a/b").exists());
    /// ```
    pub fn prune_dirs(&self, prefix: &str) -> Vec<String> {
        let Some(root) = &self.root else {
            return Vec::new();
        };
        let mut left = Vec::new();
        let mut rel = Path::new(prefix.trim_matches('/'));
        while !rel.as_os_str().is_empty() {
            let dir = root.join(rel);
            if dir.is_dir() && remove_if_empty(&dir).is_err() {
                left.push(rel.display().to_string());
            }
            rel = rel.parent().unwrap_or(Path::new(""));
        }
        left
    }

    /// Removes a `file://` store's whole directory (the demo's own temporary one).
    pub fn remove_dir(&self) {
        if let Some(root) = &self.root {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// Opens the store named by `url`. `lease_ttl` tunes the transport timeouts of remote stores.
///
/// Errors: exit 2 for an unknown scheme, a malformed URL, a relative `file://` path, a missing
/// directory or missing configuration (what to set is in the message); exit 69 when the
/// store cannot be opened.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let url = format!("file://{}", dir.path().display());
/// let opened = fence_cli::stores::open(&url, None).unwrap();
/// assert!(opened.url.starts_with("file:///"));
/// assert_eq!(fence_cli::stores::open("ftp://x", None).unwrap_err().code, 2);
/// // Relative to the working directory would make the same URL another lock domain elsewhere.
/// assert_eq!(fence_cli::stores::open("file://locks", None).unwrap_err().code, 2);
/// ```
pub fn open(url: &str, lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    open_with(url, lease_ttl, FileAccess::default())
}

/// [`open`], a `file://` store opened as `access` says.
pub fn open_with(
    url: &str,
    lease_ttl: Option<Duration>,
    access: FileAccess,
) -> Result<OpenedStore, Failure> {
    if url == "memory://" {
        return Ok(OpenedStore {
            store: Arc::new(MemoryStore::new()),
            url: url.to_owned(),
            root: None,
            file_mode: None,
        });
    }
    if let Some(path) = url.strip_prefix("file://") {
        return open_dir(Path::new(path), access);
    }
    if url.starts_with("s3://") {
        return open_s3(url, lease_ttl);
    }
    if url.starts_with("gs://") {
        return open_gcs(url, lease_ttl);
    }
    if url.starts_with("az://") || url.starts_with("azure://") {
        return open_azure(url, lease_ttl);
    }
    if url.starts_with("opendal+") {
        return open_opendal(url, lease_ttl);
    }
    Err(Failure::usage(format!(
        "unsupported store URL {}: use file:///path, memory://, s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or opendal+s3://bucket/prefix",
        shown(url)
    )))
}

/// Opens an existing directory as a [`FsStore`]: only an absolute path, so one URL names one
/// lock domain whatever the working directory.
fn open_dir(path: &Path, access: FileAccess) -> Result<OpenedStore, Failure> {
    if path.as_os_str().is_empty() {
        return Err(Failure::usage(
            "file:// URL without a path (use file:///abs/path)",
        ));
    }
    if !path.is_absolute() {
        return Err(Failure::usage(format!(
            "file:// URL with a relative path {}: use file:///abs/path (three slashes), so the URL \
             names the same directory from every working directory",
            shown(&path.display().to_string())
        )));
    }
    if !path.is_dir() {
        return Err(Failure::usage(format!(
            "store directory {} does not exist or is not a directory (create it first: mkdir -p)",
            shown(&path.display().to_string())
        )));
    }
    let abs = std::fs::canonicalize(path).map_err(|e| {
        Failure::usage(format!(
            "cannot resolve store directory {}: {e}",
            shown(&path.display().to_string())
        ))
    })?;
    let mut options = FsStore::options().read_only(access.read_only);
    if let Some(mode) = access.file_mode {
        options = options.file_mode(mode).dir_mode(dir_mode_for(mode));
    }
    let store = options.open(&abs)?;
    Ok(OpenedStore {
        store: Arc::new(store),
        url: format!("file://{}", abs.display()),
        root: Some(abs),
        file_mode: access.file_mode,
    })
}

/// Without a credential source, object_store asks the instance metadata service, whose
/// credentials sign only for AWS: for another endpoint (SeaweedFS, MinIO, moto, …) refuse
/// that up front, naming the sources and what to set.
#[cfg(feature = "s3")]
fn check_s3_credentials(builder: &fence_s3::S3StoreBuilder) -> Result<(), Failure> {
    use fence_s3::CredentialSource;
    let source = builder.credential_source();
    let CredentialSource::InstanceMetadata { .. } = source else {
        return Ok(());
    };
    let Some(endpoint) = builder.endpoint().filter(|e| !is_aws(e)) else {
        return Ok(());
    };
    Err(Failure::usage(format!(
        "no AWS credentials for the endpoint {}: none in the environment (AWS_ACCESS_KEY_ID with \
         AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONTAINER_CREDENTIALS_*), and \
         the instance metadata service is not asked, since its credentials sign only for AWS: \
         set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_SKIP_SIGNATURE=true for a \
         store that checks no signatures)",
        shown(&endpoint)
    )))
}

/// Whether `endpoint`'s host is AWS's.
#[cfg(feature = "s3")]
fn is_aws(endpoint: &str) -> bool {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    let host = host.to_ascii_lowercase();
    host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn")
}

/// The failure for an error caused by missing credentials, if `e` was: it names every source
/// tried and what to set (exit 2 when there was none to try, 69 when a service asked for
/// them, the instance metadata or managed identity endpoint, gave none).
pub fn credential_failure(e: &fence_core::Error) -> Option<Failure> {
    #[cfg(feature = "s3")]
    {
        use crate::exit::{with_causes, USAGE};
        use fence_s3::{CredentialSource, CredentialsUnavailable};
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            if let Some(missing) = c.downcast_ref::<CredentialsUnavailable>() {
                let (code, advice) = match missing.source_tried() {
                    CredentialSource::InstanceMetadata { disabled, .. } => (
                        if *disabled { USAGE } else { STORE },
                        "; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (from an AWS CLI \
                         profile: eval \"$(aws configure export-credentials --format env)\")",
                    ),
                    _ => (STORE, ""),
                };
                let line = with_causes(missing.to_string(), std::error::Error::source(missing));
                return Some(Failure::new(code, format!("{line}{advice}")));
            }
            cause = c.source();
        }
    }
    #[cfg(feature = "azure")]
    {
        use crate::exit::with_causes;
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            if let Some(missing) = c.downcast_ref::<fence_azure::CredentialsUnavailable>() {
                let line = with_causes(missing.to_string(), std::error::Error::source(missing));
                return Some(Failure::new(
                    STORE,
                    format!("{line}; set AZURE_STORAGE_ACCOUNT_KEY (or another credential above)"),
                ));
            }
            cause = c.source();
        }
    }
    let _ = e;
    None
}

#[cfg(feature = "s3")]
fn open_s3(url: &str, lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    let mut builder = fence_s3::S3Store::from_env().with_url(url);
    check_s3_credentials(&builder)?;
    if let Some(ttl) = lease_ttl {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build()?;
    Ok(OpenedStore {
        store: Arc::new(store),
        url: url.to_owned(),
        root: None,
        file_mode: None,
    })
}

#[cfg(not(feature = "s3"))]
fn open_s3(_url: &str, _lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    Err(Failure::usage(
        "s3:// stores are not built into this fence binary (rebuild with the `s3` feature)",
    ))
}

/// The GCS emulator endpoint from `FENCE_GCS_ENDPOINT` or `STORAGE_EMULATOR_HOST` (spoken to
/// anonymously), if set: `http(s)://host[:port]` or `host:port`.
#[cfg(feature = "gcs")]
fn gcs_endpoint() -> Result<Option<String>, Failure> {
    let Some((var, raw)) = ["FENCE_GCS_ENDPOINT", "STORAGE_EMULATOR_HOST"]
        .into_iter()
        .find_map(|v| Some((v, std::env::var(v).ok().filter(|e| !e.is_empty())?)))
    else {
        return Ok(None);
    };
    let endpoint = if raw.contains("://") {
        raw.clone()
    } else {
        format!("http://{raw}")
    };
    check_endpoint(&endpoint).map_err(|why| {
        Failure::usage(format!(
            "{var}={} is not an emulator endpoint ({why}): set it to the emulator's base URL, \
             e.g. {var}=http://127.0.0.1:4443",
            shown(&raw)
        ))
    })?;
    Ok(Some(endpoint))
}

/// Whether `endpoint` is `http(s)://host[:port]` with nothing after it but an optional `/`.
#[cfg(feature = "gcs")]
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let parsed = url::Url::parse(endpoint).map_err(|e| e.to_string())?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("scheme {} is not http or https", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("only scheme, host and port are allowed".into());
    }
    Ok(())
}

/// Without an emulator endpoint, gs:// means real GCS: this binary needs Google's default
/// credentials for that, which only the `gcs-auth` feature brings.
#[cfg(feature = "gcs")]
fn check_gcs_credentials(endpoint: Option<&str>) -> Result<(), Failure> {
    if endpoint.is_some() || cfg!(feature = "gcs-auth") {
        return Ok(());
    }
    Err(Failure::usage(
        "gs:// has no credentials in this fence binary: for an emulator set FENCE_GCS_ENDPOINT \
         (e.g. http://127.0.0.1:4443); for real GCS rebuild fence with `--features gcs-auth` and \
         provide Google's default credentials (GOOGLE_APPLICATION_CREDENTIALS)",
    ))
}

#[cfg(feature = "gcs")]
fn open_gcs(url: &str, lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    let endpoint = gcs_endpoint()?;
    check_gcs_credentials(endpoint.as_deref())?;
    let mut builder = fence_gcs::GcsStore::builder().with_url(url);
    if let Some(endpoint) = endpoint {
        builder = builder.with_endpoint(endpoint).with_anonymous();
    }
    if let Some(ttl) = lease_ttl {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build()?;
    Ok(OpenedStore {
        store: Arc::new(store),
        url: url.to_owned(),
        root: None,
        file_mode: None,
    })
}

#[cfg(not(feature = "gcs"))]
fn open_gcs(_url: &str, _lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    Err(Failure::usage(
        "gs:// stores are not built into this fence binary (rebuild with the `gcs` feature)",
    ))
}

/// Azure Blob from object_store's `AZURE_*` variables (`AZURE_STORAGE_ACCOUNT_NAME`,
/// `AZURE_STORAGE_ACCOUNT_KEY`, …; `AZURE_STORAGE_USE_EMULATOR=true` with
/// `AZURITE_BLOB_STORAGE_URL` for Azurite).
#[cfg(feature = "azure")]
fn open_azure(url: &str, lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    let mut builder = fence_azure::AzureStore::from_env().with_url(url);
    if let Some(ttl) = lease_ttl {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build()?;
    Ok(OpenedStore {
        store: Arc::new(store),
        url: url.to_owned(),
        root: None,
        file_mode: None,
    })
}

#[cfg(not(feature = "azure"))]
fn open_azure(_url: &str, _lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    Err(Failure::usage(
        "az:// stores are not built into this fence binary (rebuild with the `azure` feature)",
    ))
}

/// `opendal+<service>://<bucket or container>/<prefix>` through fence-opendal: OpenDAL's s3,
/// azblob or gcs service, configured from `OPENDAL_<SERVICE>_<KEY>` variables (OpenDAL's
/// config keys, e.g. `OPENDAL_S3_ENDPOINT`, `OPENDAL_AZBLOB_ACCOUNT_KEY`) and whatever the
/// service's own builder reads (the S3 service: `AWS_*`).
#[cfg(feature = "opendal")]
fn open_opendal(url: &str, lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    let malformed = || {
        Failure::usage(format!(
            "malformed OpenDAL store URL {}: use opendal+s3://bucket/prefix, \
             opendal+azblob://container/prefix or opendal+gcs://bucket/prefix",
            shown(url)
        ))
    };
    let (scheme, rest) = url["opendal+".len()..]
        .split_once("://")
        .ok_or_else(malformed)?;
    let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if name.is_empty() || name.contains(['?', '#', '@']) {
        return Err(malformed());
    }
    let mut config = opendal_config(scheme);
    check_opendal_credentials(scheme, &config)?;
    config.push(("root".into(), format!("/{prefix}")));
    let op = opendal_operator(scheme, name, config)?;
    let mut builder = fence_opendal::OpendalStore::builder(op);
    if let Some(ttl) = lease_ttl {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build()?;
    Ok(OpenedStore {
        store: Arc::new(store),
        url: url.to_owned(),
        root: None,
        file_mode: None,
    })
}

#[cfg(not(feature = "opendal"))]
fn open_opendal(_url: &str, _lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    Err(Failure::usage(
        "opendal+ stores are not built into this fence binary (rebuild with the `opendal` feature)",
    ))
}

/// The `OPENDAL_<SCHEME>_<KEY>` variables as OpenDAL config pairs (`key` lower-cased); the
/// URL names the bucket (container) and the root.
#[cfg(feature = "opendal")]
fn opendal_config(scheme: &str) -> Vec<(String, String)> {
    let prefix = format!("OPENDAL_{}_", scheme.to_ascii_uppercase());
    std::env::vars()
        .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_ascii_lowercase(), v)))
        .filter(|(k, _)| !matches!(k.as_str(), "root" | "bucket" | "container"))
        .collect()
}

/// Without explicit credentials OpenDAL's builders fall back to a cloud metadata service
/// (EC2 IMDS, the GCE metadata server, Azure's managed identity), which serves only that
/// cloud: refused up front for a custom endpoint, with what to set.
#[cfg(feature = "opendal")]
fn check_opendal_credentials(scheme: &str, config: &[(String, String)]) -> Result<(), Failure> {
    let has = |k: &str| config.iter().any(|(key, v)| key == k && !v.is_empty());
    let env = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    let unsigned = config
        .iter()
        .any(|(k, v)| k == "skip_signature" && (v == "true" || v == "1"));
    let (custom_endpoint, credentials, what) = match scheme {
        "s3" => (
            has("endpoint") || env("AWS_ENDPOINT_URL") || env("AWS_ENDPOINT"),
            has("access_key_id") || env("AWS_ACCESS_KEY_ID") || env("AWS_WEB_IDENTITY_TOKEN_FILE"),
            "OPENDAL_S3_ACCESS_KEY_ID and OPENDAL_S3_SECRET_ACCESS_KEY (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
        ),
        "gcs" => (
            has("endpoint"),
            has("credential") || has("credential_path") || has("token"),
            "OPENDAL_GCS_CREDENTIAL_PATH (or OPENDAL_GCS_TOKEN)",
        ),
        _ => (
            true,
            has("account_key") || has("sas_token"),
            "OPENDAL_AZBLOB_ACCOUNT_NAME and OPENDAL_AZBLOB_ACCOUNT_KEY (or OPENDAL_AZBLOB_SAS_TOKEN)",
        ),
    };
    if custom_endpoint && !credentials && !unsigned {
        return Err(Failure::usage(format!(
            "opendal+{scheme}:// needs explicit credentials here: set {what}, or \
             OPENDAL_{}_SKIP_SIGNATURE=true for a store that checks none",
            scheme.to_ascii_uppercase()
        )));
    }
    Ok(())
}

#[cfg(feature = "opendal")]
fn opendal_operator(
    scheme: &str,
    name: &str,
    config: Vec<(String, String)>,
) -> Result<opendal::Operator, Failure> {
    use opendal::services::{Azblob, Gcs, S3};
    use opendal::Operator;
    let named = |key: &str, mut config: Vec<(String, String)>| {
        config.push((key.to_string(), name.to_string()));
        config
    };
    let op = match scheme {
        "s3" => Operator::from_iter::<S3>(named("bucket", config)),
        "gcs" => Operator::from_iter::<Gcs>(named("bucket", config)),
        "azblob" => Operator::from_iter::<Azblob>(named("container", config)),
        other => {
            return Err(Failure::usage(format!(
                "OpenDAL service {} is not a fence store in this binary: opendal+s3, \
                 opendal+azblob and opendal+gcs are (services without compare-and-swap, such \
                 as fs, memory, oss, cos, webdav, cannot fence anything)",
                shown(other)
            )))
        }
    };
    op.map_err(|e| {
        Failure::usage(format!(
            "OpenDAL refused the opendal+{scheme}:// configuration ({}): {}",
            e.kind(),
            shown(e.message())
        ))
    })
}

/// Opens the demo's store: the given URL, or local files in a fresh directory
/// `<temp dir>/fence-demo-<ms>-<pid>` (kept afterwards, for `fence status`).
pub fn open_demo(url: Option<&str>, access: FileAccess) -> Result<OpenedStore, Failure> {
    match url {
        Some(url) => open_with(url, None, access),
        None => {
            let dir = fresh_demo_dir();
            std::fs::create_dir_all(&dir).map_err(|e| {
                Failure::new(STORE, format!("cannot create {}: {e}", dir.display()))
            })?;
            open_dir(&dir, access)
        }
    }
}

fn fresh_demo_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "fence-demo-{}-{}",
        fence_core::now_ms(),
        std::process::id()
    ))
}
