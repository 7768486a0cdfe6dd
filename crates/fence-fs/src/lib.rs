//! # fence-fs
//!
//! [`FsStore`]: a [`ConditionalStore`] over a local directory, with a compare-and-swap that is
//! correct across threads **and across OS processes** of one machine, atomic for readers,
//! durable when `put` returns, safe against crashed writers — and that **no other process
//! can hold up**: there is no lock. A stopped, paused or dead process never delays another
//! writer beyond that writer's own I/O.
//!
//! How (see `docs/fs.md` for the whole argument):
//! - every version of an object is its own file, named by its generation, in the object's
//!   incarnation directory `<dir>/<key segment>.fence/i<random>/`; the current version is the
//!   highest one, and only it and its predecessor are kept;
//! - a compare-and-swap from generation `g` writes the new version to an unnamed temp file,
//!   syncs it, and `link`s it as `g+1`: the kernel lets exactly one writer create that name
//!   (the commit point), and a check after the link tells a first successor from a late one;
//! - a create builds a whole object directory aside and `rename`s it onto the key's: the
//!   kernel replaces only a missing or empty directory;
//! - a write whose caller gives up (drops the future, as a timeout does) either has landed when
//!   the drop returns or never lands: the thread checks, right before its commit point, that
//!   the caller still waits;
//! - versions are `<generation>-<128 random bits>`: never repeated, also after delete and
//!   re-create, across restarts and for identical bytes.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
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

mod commit;
mod create;
pub mod layout;
mod object;
mod sys;
mod tree;

use std::collections::HashMap;
use std::fmt;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Entropy, Error, ErrorKind, Key,
    PutOutcome, Stored, Version,
};
use rustix::fs::FileType;

use crate::commit::{CommitPoint, GiveUpOnDrop};
use crate::layout::{object_path, random_hex, version_at, ObjectPath};
use crate::object::{Change, Found, Fresh, Object, Place, Record};
use crate::tree::{Modes, Reach, Tree};

/// A [`ConditionalStore`] over a root directory on a local file system.
///
/// Cheap to clone (clones share the open root). Safe to open many times, from many
/// processes, on one root: they all work on the same files, without locks.
///
/// A write whose caller stops waiting (drops the future) either has landed when the drop
/// returns or never lands.
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

struct Inner {
    tree: Tree,
    entropy: Entropy,
    places: Places,
}

/// Where the objects this handle wrote last were found, so that the next operation on them
/// skips the lookup (every use checks that the place still holds; see [`Place`]).
#[derive(Default)]
struct Places(Mutex<HashMap<Key, Arc<Place>>>);

/// The most places a handle remembers (two open descriptors each); past it, one is
/// forgotten for each new one.
const PLACES_LIMIT: usize = 32;

impl Places {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Place>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, key: &Key) -> Option<Arc<Place>> {
        self.lock().get(key).cloned()
    }

    fn remember(&self, key: &Key, place: Place) {
        let mut places = self.lock();
        if places.len() >= PLACES_LIMIT && !places.contains_key(key) {
            let any = places.keys().next().cloned();
            if let Some(any) = any {
                places.remove(&any);
            }
        }
        places.insert(key.clone(), Arc::new(place));
    }

    fn forget(&self, key: &Key) {
        self.lock().remove(key);
    }
}

impl fmt::Debug for FsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tree = &self.inner.tree;
        f.debug_struct("FsStore")
            .field("root", &tree.root_path())
            .field("file_mode", &format_args!("{:o}", tree.modes.file))
            .field("dir_mode", &format_args!("{:o}", tree.modes.dir))
            .field("read_only", &tree.read_only)
            .finish()
    }
}

/// How to open an [`FsStore`]: the modes of what it creates, or read-only.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// // A store a group shares, as /var/lock is shared (give the root to the group, mode 2770).
/// let store = fence_fs::FsStore::options().file_mode(0o660).dir_mode(0o770).open(dir.path()).unwrap();
/// assert!(format!("{store:?}").contains("660"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FsOptions {
    modes: Modes,
    read_only: bool,
}

impl FsOptions {
    /// The mode of version files (default `0o600`), set exactly whatever the umask.
    #[must_use]
    pub fn file_mode(mut self, mode: u32) -> Self {
        self.modes.file = mode & 0o777;
        self
    }

    /// The mode of every directory the store creates (default `0o700`): key directories,
    /// object and incarnation directories, `.fence` directories. Set exactly whatever the
    /// umask; a set-group-ID bit inherited from the parent is kept.
    #[must_use]
    pub fn dir_mode(mut self, mode: u32) -> Self {
        self.modes.dir = mode & 0o777;
        self
    }

    /// Opens for reading only: nothing is created or written below the root, not even at
    /// open, so a read-only mount, a snapshot or a directory this user can only read can be
    /// inspected. `get` and `list` work; `put` and `delete` fail with
    /// [`ErrorKind::PermissionDenied`], not committed.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Opens the store at `root` (see [`FsStore::open`]).
    pub fn open(self, root: impl AsRef<Path>) -> Result<FsStore, Error> {
        let tree = Tree::open(root.as_ref(), self.modes, self.read_only)?;
        Ok(FsStore {
            inner: Arc::new(Inner {
                tree,
                entropy: Entropy::from_os(),
                places: Places::default(),
            }),
        })
    }
}

impl FsStore {
    /// Opens the store at `root`, an existing writable directory, with the default modes.
    /// Creates `<root>/.fence/` and checks writability with a probe there.
    ///
    /// Errors: [`ErrorKind::NotFound`] when `root` is missing, [`ErrorKind::InvalidInput`]
    /// when it is not a directory, lies inside another fence-fs tree (below another root, in
    /// one of its key directories or in a `.fence` directory) or holds something fence-fs did
    /// not make where its own files belong, [`ErrorKind::PermissionDenied`] when it is not
    /// writable (or `.fence` is a symlink), [`ErrorKind::Unsupported`] when its file system
    /// folds case or normalises Unicode in names (keys differing only so would alias).
    ///
    /// ```
    /// use fence_core::ErrorKind;
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = fence_fs::FsStore::open(dir.path()).unwrap();
    /// std::fs::create_dir(dir.path().join("app")).unwrap();
    /// let nested = fence_fs::FsStore::open(dir.path().join("app")).unwrap_err();
    /// assert_eq!(nested.kind(), ErrorKind::InvalidInput);
    /// ```
    pub fn open(root: impl AsRef<Path>) -> Result<FsStore, Error> {
        FsOptions::default().open(root)
    }

    /// Opens the store at `root` for reading only (see [`FsOptions::read_only`]).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use fence_core::{CasGuard, ConditionalStore, ErrorKind, Key};
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = fence_fs::FsStore::open_read_only(dir.path()).unwrap();
    /// let key = Key::new("a").unwrap();
    /// assert_eq!(store.get(&key).await.unwrap(), None);
    /// let err = store.put(&key, "x".into(), CasGuard::Absent).await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    /// assert!(!dir.path().join(".fence").exists(), "nothing was created");
    /// # });
    /// ```
    pub fn open_read_only(root: impl AsRef<Path>) -> Result<FsStore, Error> {
        FsOptions::default().read_only(true).open(root)
    }

    /// Options to open a store with other modes, or read-only.
    pub fn options() -> FsOptions {
        FsOptions::default()
    }

    /// The same store drawing version randomness from `entropy` (default: seeded by the OS).
    /// Versions stay unique only if no two writers share a seed: use seeded entropy in tests.
    #[must_use]
    pub fn with_entropy(self, entropy: Entropy) -> Self {
        FsStore {
            inner: Arc::new(Inner {
                tree: self.inner.tree.clone(),
                entropy,
                places: Places::default(),
            }),
        }
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
                // Cancelled (runtime shutting down) means it never ran.
                let commit = if join.is_cancelled() {
                    fence_core::Commit::NotCommitted
                } else {
                    fence_core::Commit::Ambiguous
                };
                let e = Error::new(ErrorKind::Other, "fence-fs worker thread failed")
                    .with_source(join)
                    .with_commit(commit);
                Err(match key {
                    Some(k) => e.with_key(k),
                    None => e,
                })
            }
        }
    }

    /// Runs write `work` of `key` on a blocking thread. Dropping the returned future gives
    /// the write up (see [`CommitPoint`]).
    async fn write<T: Send + 'static>(
        &self,
        key: &Key,
        work: impl FnOnce(&Inner, &CommitPoint) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if self.inner.tree.read_only {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                "this fence-fs store was opened read-only",
            )
            .with_key(key)
            .not_committed());
        }
        let point = Arc::new(CommitPoint::default());
        let _give_up = GiveUpOnDrop(Arc::clone(&point));
        self.blocking(Some(key), move |inner| work(inner, &point))
            .await
    }
}

impl Fresh for Entropy {
    fn version(&self, generation: u64) -> Version {
        version_at(generation, [self.next_u64(), self.next_u64()])
    }

    fn name(&self) -> String {
        random_hex([self.next_u64(), self.next_u64()])
    }
}

impl Inner {
    /// Runs `work` on `key`'s object, its directory reached as `reach` says; `None` when a
    /// directory on the way is missing (and `reach` does not create).
    fn with_object<T>(
        &self,
        key: &Key,
        reach: Reach,
        work: impl FnOnce(&Object<'_>) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        let path: ObjectPath = object_path(key)?;
        let Some(dir) = self.tree.dir(key, &path.dirs, reach)? else {
            return Ok(None);
        };
        let object = Object {
            tree: &self.tree,
            key,
            parent: dir.as_fd(),
            name: &path.name,
        };
        work(&object).map(Some)
    }

    fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let stored = |r: Option<Record>| {
            r.map(|r| Stored {
                body: Bytes::from(r.body),
                version: r.header.version,
            })
        };
        if let Some(place) = self.places.get(key) {
            match Object::get_at(&place, key, &self.tree)? {
                Some(record) => return Ok(stored(record)),
                None => self.places.forget(key),
            }
        }
        let record = self.with_object(key, Reach::Read, |o| o.get())?.flatten();
        Ok(stored(record))
    }

    /// Replaces `expected` with `change`: through the remembered place if there is one
    /// (and `expected` is there), else after a lookup, remembering where it was found.
    fn replace(
        &self,
        key: &Key,
        expected: &Version,
        change: Change<'_>,
        point: &CommitPoint,
    ) -> Result<PutOutcome, Error> {
        if let Some(place) = self.places.get(key) {
            let object = Object {
                tree: &self.tree,
                key,
                parent: place.parent.as_fd(),
                name: &place.name,
            };
            let change = match &change {
                Change::Put(body) => Change::Put(body),
                Change::Delete => Change::Delete,
            };
            match object.replace_at(&place.inc, expected, change, point, &self.entropy) {
                Ok(Found::Here(outcome)) => return Ok(outcome),
                Ok(Found::Elsewhere) => self.places.forget(key),
                Err(e) => {
                    self.places.forget(key);
                    return Err(e);
                }
            }
        }
        let found = self.with_object(key, Reach::Write, |o| {
            let (outcome, place) = o.replace(expected, change, point, &self.entropy)?;
            let place = place.and_then(|inc| {
                let parent = rustix::io::fcntl_dupfd_cloexec(o.parent, 0).ok()?;
                let name = o.name.to_owned();
                Some(Place { parent, name, inc })
            });
            Ok((outcome, place))
        })?;
        let Some((outcome, place)) = found else {
            return Ok(PutOutcome::Rejected);
        };
        if let Some(place) = place {
            self.places.remember(key, place);
        }
        Ok(outcome)
    }

    fn put(
        &self,
        key: &Key,
        body: &[u8],
        guard: &CasGuard,
        point: &CommitPoint,
    ) -> Result<PutOutcome, Error> {
        point.check(key)?;
        match guard {
            CasGuard::Absent => {
                self.places.forget(key);
                let outcome =
                    self.with_object(key, Reach::Create, |o| o.create(body, point, &self.entropy))?;
                Ok(outcome.unwrap_or(PutOutcome::Rejected))
            }
            CasGuard::Match(v) => self.replace(key, v, Change::Put(body), point),
        }
    }

    fn delete(
        &self,
        key: &Key,
        version: &Version,
        point: &CommitPoint,
    ) -> Result<DeleteOutcome, Error> {
        point.check(key)?;
        let outcome = self.replace(key, version, Change::Delete, point)?;
        self.places.forget(key);
        if !matches!(outcome, PutOutcome::Applied(_)) {
            return Ok(DeleteOutcome::Rejected);
        }
        // Committed: tidying up is best effort (a later create or listing finishes it).
        let _ = self.with_object(key, Reach::Read, |o| {
            o.tidy_deleted();
            Ok(())
        });
        Ok(DeleteOutcome::Deleted)
    }

    fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let mut keys = Vec::new();
        self.tree
            .walk_objects(prefix, &mut |dir, name, key, file_type| {
                let listed = file_type != FileType::Directory
                    || Object {
                        tree: &self.tree,
                        key: &key,
                        parent: dir,
                        name,
                    }
                    .listed();
                if listed {
                    keys.push(key);
                }
            })?;
        keys.sort();
        Ok(keys)
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
        self.write(key, move |inner, point| inner.put(&k, &body, &guard, point))
            .await
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        let (k, v) = (key.clone(), version.clone());
        self.write(key, move |inner, point| inner.delete(&k, &v, point))
            .await
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let prefix = prefix.cloned();
        self.blocking(None, move |inner| inner.list(prefix.as_ref()))
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
