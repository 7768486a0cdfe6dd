//! Stores named by URL (`file:///path`, `memory://`, `s3://bucket/prefix`,
//! `gs://bucket/prefix`, `az://container/prefix`, `opendal+<service>://name/prefix`), opened
//! by the fence library ([`fence::OpenOptions`], which reads each backend's variables and
//! names the credentials to set). What the command adds: `memory://` refused where a store is
//! shared with other processes, `--file-mode` and read-only opens, the demo's own directory,
//! the directories a probe leaves, and the library's errors as exit codes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fence_core::{ConditionalStore, Error, ErrorKind};

use crate::exit::{shown, Failure, STORE, USAGE};

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
/// directory, missing configuration (what to set is in the message) or a backend not built
/// into this binary; exit 69 when the store cannot be opened.
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
    let mut options = fence::OpenOptions::new().read_only(access.read_only);
    if let Some(mode) = access.file_mode {
        options = options.file_mode(mode);
    }
    if let Some(ttl) = lease_ttl {
        options = options.lease_ttl(ttl);
    }
    let opened = options.open(url).map_err(open_failure)?;
    Ok(OpenedStore {
        store: opened.store,
        url: opened.url,
        root: opened.root,
        file_mode: opened.file_mode,
    })
}

/// A store that cannot be opened: as any error, but a backend this binary lacks, or an
/// OpenDAL service that cannot fence, is a usage error (exit 2) like a bad URL.
fn open_failure(e: Error) -> Failure {
    let unsupported = e.kind() == ErrorKind::Unsupported;
    let failure = Failure::from(e);
    match unsupported {
        true => Failure::new(USAGE, failure.message),
        false => failure,
    }
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
            open_with(&format!("file://{}", dir.display()), None, access)
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
