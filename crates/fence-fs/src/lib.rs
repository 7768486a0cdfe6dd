//! # fence-fs
//!
//! [`FsStore`]: a [`ConditionalStore`] over a local directory, with a compare-and-swap that is
//! correct across threads **and across OS processes** of one machine, atomic for readers,
//! durable when `put` returns, and safe against crashed writers.
//!
//! How (see `docs/fs.md` for the whole argument):
//! - each object has an advisory lock (`flock`) on a file next to it,
//!   `<dir>/.fence/<object file>`, so the lock belongs to the object's directory entry
//!   whichever root reaches it; every write or delete checks its guard and commits while
//!   holding it. The kernel drops the lock when its holder dies, so a crashed writer never
//!   blocks anyone;
//! - a held lock is waited for without a thread (non-blocking tries with backoff, one
//!   in-process queue per key), at most [`FsStore::with_lock_wait`]; then the write fails
//!   with `Timeout`, not committed;
//! - a write whose caller gives up (drops the future, as a timeout does) either has landed when
//!   the drop returns or never lands: the thread checks under the lock, right before its
//!   commit point, that the caller still waits;
//! - the version lives in the object file's header, so body and version are read from one
//!   file, atomically;
//! - a write goes to `<dir>/.fence/tmp/<object file>`, is synced, renamed over the object
//!   (the commit point), and the directory is synced; each directory's entry in its parent is
//!   synced before the first write below it, also when another writer made it;
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
mod gate;
pub mod layout;
mod tree;

use std::fmt;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Entropy, Error, ErrorKind, Key,
    PutOutcome, Stored, Version,
};

use crate::commit::{CommitPoint, GiveUpOnDrop};
use crate::gate::Gates;
use crate::layout::{encode_header, next_version, object_path, ObjectPath};
use crate::tree::{Reach, Tree};

/// How long a write waits for its key's lock by default: well inside the runtime's shortest
/// lease-attempt timeout for the default 10 s TTL (2.5 s), and far above a healthy writer's
/// lock hold (two `fsync`s).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(1);

/// The first and the longest pause between two tries of a held lock.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(8);

/// A [`ConditionalStore`] over a root directory on a local file system.
///
/// Cheap to clone (clones share the open root). Safe to open many times, from many
/// processes, on one root: they all take the same per-object locks.
///
/// Writes wait at most [`with_lock_wait`](FsStore::with_lock_wait) for a key's lock, then
/// fail with [`ErrorKind::Timeout`], not committed; a write whose caller stops waiting (drops
/// the future) either has landed when the drop returns or never lands. Waiting for a held lock
/// needs a Tokio runtime with its time driver enabled (`enable_time`, `enable_all`, or
/// `#[tokio::main]`).
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
    lock_wait: Duration,
    gates: Arc<Gates>,
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
            .field("lock_wait", &self.inner.lock_wait)
            .finish()
    }
}

/// One try of a write: done, or the key's lock was held by another.
enum Attempt<T> {
    Done(T),
    Busy,
}

impl FsStore {
    /// Opens the store at `root`, an existing writable directory. Creates `<root>/.fence/`
    /// (mode 0700) and checks writability with a probe file there.
    ///
    /// Errors: [`ErrorKind::NotFound`] when `root` is missing, [`ErrorKind::InvalidInput`]
    /// when it is not a directory or lies inside another fence-fs tree (below another root,
    /// in one of its key directories or in a `.fence` directory),
    /// [`ErrorKind::PermissionDenied`] when it is not writable (or `.fence` is a symlink),
    /// [`ErrorKind::Unsupported`] when its file system folds case or normalises Unicode in
    /// names (keys differing only so would alias).
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
        let entropy = Entropy::from_os();
        let tree = Tree::open(root.as_ref())?;
        Ok(FsStore {
            inner: Arc::new(Inner {
                tree,
                entropy,
                lock_wait: DEFAULT_LOCK_WAIT,
                gates: Arc::default(),
            }),
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

    /// The same store waiting at most `wait` for a key's lock (default
    /// [`DEFAULT_LOCK_WAIT`]); past it a write fails with [`ErrorKind::Timeout`], not
    /// committed, having written nothing. Keep it below the shortest deadline callers put
    /// on a write (the runtime bounds lease writes by about half the remaining authority, at
    /// least 250 ms), so that they get this clean answer rather than an ambiguous timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = fence_fs::FsStore::open(dir.path()).unwrap()
    ///     .with_lock_wait(Duration::from_millis(200));
    /// assert!(format!("{store:?}").contains("200ms"));
    /// ```
    #[must_use]
    pub fn with_lock_wait(self, wait: Duration) -> Self {
        self.reconfigure(|inner| inner.lock_wait = wait)
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

    /// Runs `work` (a write of `key`) until it finds the key's lock free, waiting at most the
    /// lock wait. The writers of one key through this handle queue up in-process first, so
    /// only one at a time tries the file lock; the waiting ones hold no thread. Dropping the
    /// returned future gives the write up (see [`CommitPoint`]).
    async fn locked<T: Send + 'static>(
        &self,
        key: &Key,
        work: impl Fn(&Inner, &CommitPoint) -> Result<Attempt<T>, Error> + Send + Sync + 'static,
    ) -> Result<T, Error> {
        let point = Arc::new(CommitPoint::default());
        let _give_up = GiveUpOnDrop(Arc::clone(&point));
        let work = Arc::new(work);
        let mut wait = LockWait::new(key, self.inner.lock_wait);
        let gate = self.inner.gates.gate(key);
        let _turn = match gate.queue().try_lock() {
            Ok(turn) => turn,
            Err(_) => wait.bounded(gate.queue().lock()).await?,
        };
        loop {
            let (work, point) = (Arc::clone(&work), Arc::clone(&point));
            match self
                .blocking(Some(key), move |inner| work(inner, &point))
                .await?
            {
                Attempt::Done(t) => return Ok(t),
                Attempt::Busy => wait.pause().await?,
            }
        }
    }
}

/// The bounded wait for a key's lock. The deadline starts at the first sign of contention,
/// so an uncontended write never arms a timer.
struct LockWait<'a> {
    key: &'a Key,
    limit: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    pause: Duration,
}

impl<'a> LockWait<'a> {
    fn new(key: &'a Key, limit: Duration) -> Self {
        LockWait {
            key,
            limit,
            deadline: None,
            pause: FIRST_PAUSE,
        }
    }

    /// `op`'s output, or [`ErrorKind::Timeout`] (not committed) once the wait is used up.
    async fn bounded<F: std::future::Future>(&mut self, op: F) -> Result<F::Output, Error> {
        let limit = self.limit;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        tokio::select! {
            biased;
            out = op => Ok(out),
            () = deadline.as_mut() => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "the key's lock stayed held for {} ms (a slow, stuck or paused writer \
                     holds it); nothing was written",
                    limit.as_millis()
                ),
            )
            .with_key(self.key)
            .not_committed()),
        }
    }

    /// Pauses before the next try (doubling up to [`LONGEST_PAUSE`]), or fails as
    /// [`LockWait::bounded`] does.
    async fn pause(&mut self) -> Result<(), Error> {
        let pause = self.pause;
        self.pause = (pause * 2).min(LONGEST_PAUSE);
        self.bounded(tokio::time::sleep(pause)).await
    }
}

impl Inner {
    fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let path = object_path(key)?;
        let Some(dir) = self.tree.dir(key, &path.dirs, Reach::Read)? else {
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

    /// One try of a conditional put. A missing directory rejects a `Match` guard without a
    /// lock (the object cannot exist); everything else is decided under the object's lock,
    /// and the rename commits only if the caller still waits.
    fn put(
        &self,
        key: &Key,
        body: &[u8],
        guard: &CasGuard,
        point: &CommitPoint,
    ) -> Result<Attempt<PutOutcome>, Error> {
        point.check(key)?;
        let path = object_path(key)?;
        let reach = match guard {
            CasGuard::Absent => Reach::Create,
            CasGuard::Match(_) => Reach::Write,
        };
        let Some(dir) = self.tree.dir(key, &path.dirs, reach)? else {
            return Ok(Attempt::Done(PutOutcome::Rejected));
        };
        let Some(locked) = self.tree.try_lock(key, &dir, &path.file)? else {
            return Ok(Attempt::Busy);
        };
        let current = self.tree.read_header(key, &dir, &path.file)?;
        let holds = match (guard, &current) {
            (CasGuard::Absent, None) => true,
            (CasGuard::Match(want), Some(have)) => *want == have.version,
            _ => false,
        };
        if !holds {
            return Ok(Attempt::Done(PutOutcome::Rejected));
        }
        point.check(key)?;
        let version = self.fresh_version(current.as_ref().map(|h| &h.version));
        let mut record = encode_header(&version, body.len()).into_bytes();
        record.extend_from_slice(body);
        let tmp = self.tree.write_temp(key, &locked, &path.file, &record)?;
        let committing = point.enter(key)?;
        self.tree.rename_temp(key, &tmp, &path.file, &dir)?;
        drop(committing);
        self.tree.sync_dir(key, &dir)?;
        Ok(Attempt::Done(PutOutcome::Applied(version)))
    }

    /// One try of a conditional delete: as [`Inner::put`], the unlink being the commit point.
    fn delete(
        &self,
        key: &Key,
        version: &Version,
        point: &CommitPoint,
    ) -> Result<Attempt<DeleteOutcome>, Error> {
        point.check(key)?;
        let path = object_path(key)?;
        let Some(dir) = self.tree.dir(key, &path.dirs, Reach::Read)? else {
            return Ok(Attempt::Done(DeleteOutcome::Rejected));
        };
        let Some(_locked) = self.tree.try_lock(key, &dir, &path.file)? else {
            return Ok(Attempt::Busy);
        };
        match self.tree.read_header(key, &dir, &path.file)? {
            Some(h) if h.version == *version => {
                let committing = point.enter(key)?;
                self.tree.unlink(key, &dir, &path.file)?;
                drop(committing);
                self.tree.sync_dir(key, &dir)?;
                Ok(Attempt::Done(DeleteOutcome::Deleted))
            }
            _ => Ok(Attempt::Done(DeleteOutcome::Rejected)),
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
        self.locked(key, move |inner, point| inner.put(&k, &body, &guard, point))
            .await
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        let (k, v) = (key.clone(), version.clone());
        self.locked(key, move |inner, point| inner.delete(&k, &v, point))
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
