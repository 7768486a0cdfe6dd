//! Stores named by URL: `file:///path`, `memory://`, `s3://bucket/prefix`, `gs://bucket/prefix`,
//! `az://container/prefix` (or `azure://`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fence_core::{ConditionalStore, MemoryStore};
use fence_fs::FsStore;

use crate::exit::{Failure, STORE};

/// An opened store and the URL that names it for other processes (`FENCE_STORE`): a
/// `file://` URL is made absolute.
#[derive(Debug, Clone)]
pub struct OpenedStore {
    /// The store.
    pub store: Arc<dyn ConditionalStore>,
    /// Its canonical URL.
    pub url: String,
}

/// Opens the store named by `url`. `lease_ttl` tunes the transport timeouts of remote stores.
///
/// Errors: exit 2 for an unknown scheme, a malformed URL or a missing directory; exit 69 when
/// the store cannot be opened.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let url = format!("file://{}", dir.path().display());
/// let opened = fence_cli::stores::open(&url, None).unwrap();
/// assert!(opened.url.starts_with("file:///"));
/// assert_eq!(fence_cli::stores::open("ftp://x", None).unwrap_err().code, 2);
/// ```
pub fn open(url: &str, lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    if url == "memory://" {
        return Ok(OpenedStore {
            store: Arc::new(MemoryStore::new()),
            url: url.to_owned(),
        });
    }
    if let Some(path) = url.strip_prefix("file://") {
        return open_dir(Path::new(path));
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
    Err(Failure::usage(format!(
        "unsupported store URL {url:?}: use file:///path, memory://, s3://bucket/prefix, \
         gs://bucket/prefix or az://container/prefix"
    )))
}

/// Opens an existing directory as a [`FsStore`].
fn open_dir(path: &Path) -> Result<OpenedStore, Failure> {
    if path.as_os_str().is_empty() {
        return Err(Failure::usage(
            "file:// URL without a path (use file:///abs/path)",
        ));
    }
    if !path.is_dir() {
        return Err(Failure::usage(format!(
            "store directory {} does not exist or is not a directory (create it first: mkdir -p)",
            path.display()
        )));
    }
    let abs = std::fs::canonicalize(path).map_err(|e| {
        Failure::usage(format!(
            "cannot resolve store directory {}: {e}",
            path.display()
        ))
    })?;
    let store = FsStore::open(&abs)?;
    Ok(OpenedStore {
        store: Arc::new(store),
        url: format!("file://{}", abs.display()),
    })
}

#[cfg(feature = "s3")]
fn open_s3(url: &str, lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    let mut builder = fence_s3::S3Store::from_env().with_url(url);
    if let Some(ttl) = lease_ttl {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build()?;
    Ok(OpenedStore {
        store: Arc::new(store),
        url: url.to_owned(),
    })
}

#[cfg(not(feature = "s3"))]
fn open_s3(_url: &str, _lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    Err(Failure::usage(
        "s3:// stores are not built into this fence binary (rebuild with the `s3` feature)",
    ))
}

/// The GCS endpoint from `FENCE_GCS_ENDPOINT` or `STORAGE_EMULATOR_HOST` (an emulator, spoken
/// to anonymously), if set.
#[cfg(feature = "gcs")]
fn gcs_endpoint() -> Option<String> {
    let raw = std::env::var("FENCE_GCS_ENDPOINT")
        .or_else(|_| std::env::var("STORAGE_EMULATOR_HOST"))
        .ok()
        .filter(|e| !e.is_empty())?;
    if raw.contains("://") {
        Some(raw)
    } else {
        Some(format!("http://{raw}"))
    }
}

#[cfg(feature = "gcs")]
fn open_gcs(url: &str, lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    let mut builder = fence_gcs::GcsStore::builder().with_url(url);
    if let Some(endpoint) = gcs_endpoint() {
        builder = builder.with_endpoint(endpoint).with_anonymous();
    }
    if let Some(ttl) = lease_ttl {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build()?;
    Ok(OpenedStore {
        store: Arc::new(store),
        url: url.to_owned(),
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
    })
}

#[cfg(not(feature = "azure"))]
fn open_azure(_url: &str, _lease_ttl: Option<Duration>) -> Result<OpenedStore, Failure> {
    Err(Failure::usage(
        "az:// stores are not built into this fence binary (rebuild with the `azure` feature)",
    ))
}

/// Opens the demo's store: the given URL, or local files in a fresh directory
/// `<temp dir>/fence-demo-<ms>-<pid>` (kept afterwards, for `fence status`).
pub fn open_demo(url: Option<&str>) -> Result<OpenedStore, Failure> {
    match url {
        Some(url) => open(url, None),
        None => {
            let dir = fresh_demo_dir();
            std::fs::create_dir_all(&dir).map_err(|e| {
                Failure::new(STORE, format!("cannot create {}: {e}", dir.display()))
            })?;
            open_dir(&dir)
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
