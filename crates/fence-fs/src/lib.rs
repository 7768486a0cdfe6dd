//! # fence-fs
//!
//! [`FsStore`]: a [`ConditionalStore`] over a local directory, with a compare-and-swap that is
//! correct across threads **and across OS processes** of one machine, atomic for readers,
//! durable when `put` returns, and safe against crashed writers.
//!
//! How (see `docs/fs.md` for the whole argument):
//! - each key has an advisory lock (`flock`) on a file in `<root>/.fence/locks/`; every
//!   write or delete of the key checks its guard and commits while holding it. The kernel
//!   drops the lock when its holder dies, so a crashed writer never blocks anyone;
//! - the version lives in the object file's header, so body and version are read from one
//!   file, atomically;
//! - a write goes to `<root>/.fence/tmp/<key-hash>.tmp`, is synced, renamed over the object
//!   (the commit point), and the directory is synced;
//! - versions are `<generation>-<128 random bits>`: never repeated, also after delete and
//!   re-create, across restarts and for identical bytes.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use fence_core::{CasGuard, ConditionalStore, Key, PutOutcome};
//! let dir = tempfile::tempdir().unwrap();
//! let store = fence_fs::FsStore::open(dir.path()).unwrap();
//! let key = Key::new("cells/c1/own.json").unwrap();
//! let PutOutcome::Applied(v1) = store.put(&key, "a".into(), CasGuard::Absent).await.unwrap()
//!     else { panic!("a fresh key must be created") };
//! assert_eq!(store.put(&key, "b".into(), CasGuard::Absent).await.unwrap(), PutOutcome::Rejected);
//! let stored = store.get(&key).await.unwrap().unwrap();
//! assert_eq!((&stored.body[..], &stored.version), (&b"a"[..], &v1));
//! # });
//! ```
#![deny(missing_docs)]

pub mod layout;
mod tree;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Entropy, Error, ErrorKind, Key,
    PutOutcome, Stored, Version,
};

use crate::layout::{encode_header, next_version, object_path, ObjectPath};
use crate::tree::Tree;

/// A [`ConditionalStore`] over a root directory on a local file system.
///
/// Cheap to clone (clones share the open root). Safe to open many times, from many
/// processes, on one root: they all take the same per-key locks.
///
/// ```
/// use fence_core::ErrorKind;
/// let missing = fence_fs::FsStore::open("/definitely/not/here").unwrap_err();
/// assert_eq!(missing.kind(), ErrorKind::NotFound);
/// ```
#[derive(Clone)]
pub struct FsStore {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    tree: Tree,
    entropy: Entropy,
}

impl fmt::Debug for FsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsStore")
            .field("root", &self.inner.tree.root_path())
            .field(
                "file_mode",
                &format_args!("{:o}", self.inner.tree.file_mode),
            )
            .field("dir_mode", &format_args!("{:o}", self.inner.tree.dir_mode))
            .finish()
    }
}

impl FsStore {
    /// Opens the store at `root`, an existing writable directory. Creates `<root>/.fence/`
    /// (mode 0700) and checks writability with a probe file there.
    ///
    /// Errors: [`ErrorKind::NotFound`] when `root` is missing, [`ErrorKind::InvalidInput`]
    /// when it is not a directory, [`ErrorKind::PermissionDenied`] when it is not writable
    /// (or `.fence` is a symlink).
    pub fn open(root: impl AsRef<Path>) -> Result<FsStore, Error> {
        let entropy = Entropy::from_os();
        let tree = Tree::open(root.as_ref())?;
        Ok(FsStore {
            inner: Arc::new(Inner { tree, entropy }),
        })
    }

    /// The same store creating object, lock and temp files with `mode` (default `0o600`).
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = fence_fs::FsStore::open(dir.path()).unwrap().with_file_mode(0o640);
    /// assert!(format!("{store:?}").contains("640"));
    /// ```
    #[must_use]
    pub fn with_file_mode(self, mode: u32) -> Self {
        self.reconfigure(|inner| inner.tree.file_mode = mode & 0o7777)
    }

    /// The same store creating key directories with `mode` (default `0o700`).
    #[must_use]
    pub fn with_dir_mode(self, mode: u32) -> Self {
        self.reconfigure(|inner| inner.tree.dir_mode = mode & 0o7777)
    }

    /// The same store drawing version randomness from `entropy` (default: seeded by the OS).
    /// Versions stay unique only if no two writers share a seed: use seeded entropy in tests.
    #[must_use]
    pub fn with_entropy(self, entropy: Entropy) -> Self {
        self.reconfigure(|inner| inner.entropy = entropy)
    }

    fn reconfigure(mut self, change: impl FnOnce(&mut Inner)) -> Self {
        change(Arc::make_mut(&mut self.inner));
        self
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        self.inner.tree.root_path()
    }

    async fn blocking<T: Send + 'static>(
        &self,
        key: Option<&Key>,
        work: impl FnOnce(&Inner) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let inner = Arc::clone(&self.inner);
        match tokio::task::spawn_blocking(move || work(&inner)).await {
            Ok(result) => result,
            Err(join) => {
                let e =
                    Error::new(ErrorKind::Other, "fence-fs worker thread failed").with_source(join);
                Err(match key {
                    Some(k) => e.with_key(k),
                    None => e,
                })
            }
        }
    }
}

impl Inner {
    fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let path = object_path(key)?;
        let Some(dir) = self.tree.dir(key, &path.dirs, false)? else {
            return Ok(None);
        };
        Ok(self
            .tree
            .read_object(key, &dir, &path.file)?
            .map(|(header, body)| Stored {
                body: Bytes::from(body),
                version: header.version,
            }))
    }

    fn put(&self, key: &Key, body: &[u8], guard: &CasGuard) -> Result<PutOutcome, Error> {
        let path = object_path(key)?;
        let _lock = self.tree.lock(key, &path.stem)?;
        let create = matches!(guard, CasGuard::Absent);
        let Some(dir) = self.tree.dir(key, &path.dirs, create)? else {
            return Ok(PutOutcome::Rejected);
        };
        let current = self.tree.read_header(key, &dir, &path.file)?;
        let holds = match (guard, &current) {
            (CasGuard::Absent, None) => true,
            (CasGuard::Match(want), Some(have)) => *want == have.version,
            _ => false,
        };
        if !holds {
            return Ok(PutOutcome::Rejected);
        }
        let version = self.fresh_version(current.as_ref().map(|h| &h.version));
        let header = encode_header(&version, body.len());
        self.tree
            .write_temp(key, &path.stem, &[header.as_bytes(), body])?;
        self.tree.commit_temp(key, &path.stem, &dir, &path.file)?;
        Ok(PutOutcome::Applied(version))
    }

    fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        let path = object_path(key)?;
        let _lock = self.tree.lock(key, &path.stem)?;
        let Some(dir) = self.tree.dir(key, &path.dirs, false)? else {
            return Ok(DeleteOutcome::Rejected);
        };
        match self.tree.read_header(key, &dir, &path.file)? {
            Some(h) if h.version == *version => {
                self.tree.remove(key, &dir, &path.file)?;
                Ok(DeleteOutcome::Deleted)
            }
            _ => Ok(DeleteOutcome::Rejected),
        }
    }

    fn fresh_version(&self, previous: Option<&Version>) -> Version {
        next_version(previous, [self.entropy.next_u64(), self.entropy.next_u64()])
    }
}

#[async_trait]
impl ConditionalStore for FsStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let k = key.clone();
        self.blocking(Some(key), move |inner| inner.get(&k)).await
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let k = key.clone();
        self.blocking(Some(key), move |inner| inner.put(&k, &body, &guard))
            .await
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        let (k, v) = (key.clone(), version.clone());
        self.blocking(Some(key), move |inner| inner.delete(&k, &v))
            .await
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let prefix = prefix.cloned();
        self.blocking(None, move |inner| inner.tree.list(prefix.as_ref()))
            .await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::full()
    }
}

/// Whether `key` maps onto a file of this backend (see [`layout::object_path`]).
pub fn check_key(key: &Key) -> Result<(), Error> {
    object_path(key).map(|_: ObjectPath| ())
}
