//! [`open`], [`open_with`] and [`OpenOptions`]: a store from its URL.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{ConditionalStore, Error, ErrorKind};

use crate::backends;
use crate::message::quoted;
use crate::scheme::Scheme;

/// An opened store and the URL that names it for other processes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Opened {
    /// The store.
    pub store: Arc<dyn ConditionalStore>,
    /// Its canonical URL: a `file://` URL's path made absolute and resolved, others as given.
    pub url: String,
    /// The backend.
    pub scheme: Scheme,
    /// The directory of a `file://` store.
    pub root: Option<PathBuf>,
    /// The mode a `file://` store creates its files with, if one was set
    /// ([`OpenOptions::file_mode`]).
    pub file_mode: Option<u32>,
}

impl Opened {
    /// A store without a directory.
    pub(crate) fn remote(scheme: Scheme, url: &str, store: Arc<dyn ConditionalStore>) -> Self {
        Opened {
            store,
            url: url.to_owned(),
            scheme,
            root: None,
            file_mode: None,
        }
    }
}

/// Opens the store `url` names, configured from the environment (see the [crate] docs).
/// Nothing is sent to the store, and no credentials are fetched, before its first operation.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::time::Duration;
/// let dir = tempfile::tempdir().unwrap();
/// let opened = fence::open(&format!("file://{}", dir.path().display()))?;
/// assert_eq!(opened.scheme, fence::Scheme::File);
///
/// let fence = fence::Fence::builder(opened.store, "node-a").ttl(Duration::from_secs(10)).build()?;
/// let lease = fence.acquire().await?;
/// let cell = lease.claim("orders").await?;
/// assert_eq!(cell.write("state v1").await?.epoch, 1);
/// cell.release().await?;
/// lease.release().await;
///
/// // A relative path would make one URL two lock domains, seen from two directories.
/// assert_eq!(fence::open("file://locks").unwrap_err().kind(), fence::ErrorKind::InvalidInput);
/// # Ok::<(), fence::Error>(())
/// # }).unwrap();
/// ```
pub fn open(url: &str) -> Result<Opened, Error> {
    OpenOptions::new().open(url)
}

/// Opens the store `url` names with `options` (the backend's configuration keys, as
/// object_store's `parse_url_opts` takes them) over what the environment says: an option wins
/// over the variable it stands for. A key the backend does not know, or one fence decides
/// itself, is refused.
///
/// ```
/// use fence::ErrorKind;
/// let memory = fence::open_with("memory://", [("no_such_key", "1")]).unwrap_err();
/// assert_eq!(memory.kind(), ErrorKind::InvalidInput);
/// ```
pub fn open_with<I, K, V>(url: &str, options: I) -> Result<Opened, Error>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: Into<String>,
{
    OpenOptions::new().options(options).open(url)
}

/// How a store is opened: its backend's options (over the environment, which can be left
/// out), the lease TTL its transport timeouts derive from, and how a `file://` store is
/// opened. `Debug` shows option keys, never their values.
///
/// ```
/// use std::time::Duration;
/// let dir = tempfile::tempdir().unwrap();
/// let opened = fence::OpenOptions::new()
///     .lease_ttl(Duration::from_secs(6))
///     .file_mode(0o660)
///     .open(&format!("file://{}", dir.path().display()))
///     .unwrap();
/// assert_eq!(opened.file_mode, Some(0o660));
/// ```
#[derive(Clone, Default)]
pub struct OpenOptions {
    lease_ttl: Option<Duration>,
    file_mode: Option<u32>,
    read_only: bool,
    without_environment: bool,
    pairs: Vec<(String, String)>,
}

impl OpenOptions {
    /// Environment on, no options.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease TTL the store's request timeouts derive from (each conditional request is
    /// bounded by a third of it); as `fence run --ttl`. Default: the backend's (10 s).
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// The mode of the files a `file://` store creates (default `0o600`; its directories get
    /// the matching execute bits, `0o660` → `0o770`): read and write for the owner, no
    /// execute bits. Other stores ignore it.
    #[must_use]
    pub fn file_mode(mut self, mode: u32) -> Self {
        self.file_mode = Some(mode);
        self
    }

    /// Opens a `file://` store for reading only: nothing is created or written, so a
    /// read-only mount or a snapshot can be inspected. Other stores ignore it.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Whether the backend reads its environment variables (default yes). Without them,
    /// the options are the whole configuration.
    #[must_use]
    pub fn environment(mut self, read: bool) -> Self {
        self.without_environment = !read;
        self
    }

    /// One backend option (`key` in any case), over the environment's value.
    #[must_use]
    pub fn option(mut self, key: impl AsRef<str>, value: impl Into<String>) -> Self {
        let key = key.as_ref().to_ascii_lowercase();
        self.pairs.retain(|(k, _)| *k != key);
        self.pairs.push((key, value.into()));
        self
    }

    /// Backend options, as [`option`](Self::option) one by one.
    #[must_use]
    pub fn options<I, K, V>(self, options: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        options
            .into_iter()
            .fold(self, |opts, (k, v)| opts.option(k, v))
    }

    /// Opens the store `url` names (see [`open`]).
    pub fn open(&self, url: &str) -> Result<Opened, Error> {
        let scheme = Scheme::of(url)?;
        if !scheme.is_built_in() {
            return Err(scheme.not_built_in());
        }
        backends::open(scheme, url, self)
    }
}

/// What the backends read; a build without some backends leaves some of it unused.
#[allow(dead_code)]
impl OpenOptions {
    /// The lease TTL, if set.
    pub(crate) fn ttl(&self) -> Option<Duration> {
        self.lease_ttl
    }

    /// The `file://` settings: the file mode and read-only.
    pub(crate) fn file_access(&self) -> (Option<u32>, bool) {
        (self.file_mode, self.read_only)
    }

    /// The environment variable `name`, if the environment is read and it is set and not
    /// empty.
    pub(crate) fn var(&self, name: &str) -> Option<String> {
        if self.without_environment {
            return None;
        }
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    /// Whether the environment is read.
    pub(crate) fn reads_environment(&self) -> bool {
        !self.without_environment
    }

    /// The options, keys lower-cased, each key once (the last value given).
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// For a backend that takes no options: refuses any.
    pub(crate) fn refuse_options(&self, scheme: Scheme) -> Result<(), Error> {
        match self.pairs.first() {
            None => Ok(()),
            Some((key, _)) => Err(unknown_option(scheme, key, "none")),
        }
    }
}

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self.pairs.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("OpenOptions")
            .field("lease_ttl", &self.lease_ttl)
            .field("file_mode", &self.file_mode.map(|m| format!("{m:o}")))
            .field("read_only", &self.read_only)
            .field("environment", &!self.without_environment)
            .field("option_keys", &keys)
            .finish()
    }
}

/// [`ErrorKind::InvalidInput`], not committed.
pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidInput, message).not_committed()
}

/// An option `key` the backend of `scheme` does not take; `known` says which it takes.
pub(crate) fn unknown_option(scheme: Scheme, key: &str, known: &str) -> Error {
    invalid(format!(
        "{} stores take no option {} (they take: {known})",
        scheme.prefix(),
        quoted(key)
    ))
}

/// An option `key` that fence sets itself, and `why`.
#[allow(dead_code)] // not in a build of fs alone
pub(crate) fn fence_decides(scheme: Scheme, key: &str, why: &str) -> Error {
    invalid(format!(
        "the option {} of {} stores is fence's to set: {why}",
        quoted(key),
        scheme.prefix()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_keep_one_value_per_key_lower_cased() {
        let options = OpenOptions::new()
            .option("Endpoint", "a")
            .options([("region", "r"), ("ENDPOINT", "b")]);
        let pairs: Vec<_> = options.pairs().collect();
        assert_eq!(pairs, [("region", "r"), ("endpoint", "b")]);
    }

    #[test]
    fn debug_shows_option_keys_never_values() {
        let options = OpenOptions::new().option("secret_access_key", "hunter2-secret");
        let text = format!("{options:?}");
        assert!(text.contains("secret_access_key"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[test]
    fn the_environment_can_be_left_out() {
        let options = OpenOptions::new().environment(false);
        assert_eq!(options.var("PATH"), None);
        assert!(OpenOptions::new().var("PATH").is_some());
    }
}
