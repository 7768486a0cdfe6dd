//! Records of the first layout, moved to the current one by their first write.
//!
//! The first layout kept a key's record in one file at the very path that is now the key's
//! object directory, `<dir>/<segment>.fence`, with the header `fence-fs 1 <version> <body
//! length>`, and serialised its writers with `flock` on `<dir>/.fence/<segment>.fence`, held
//! across read, check, temp write (`<dir>/.fence/tmp/<segment>.fence`) and rename.
//!
//! A write guarded on the record's version migrates it first, under that same lock, so that
//! a writer of the earlier version in flight finishes before and none starts during:
//!
//! 1. take the lock, waiting at most [`LOCK_WAIT`] (a stopped process of the earlier version
//!    may hold it for ever: then `Timeout`, not committed), and read the record again;
//! 2. build a complete object directory aside in `.fence`, as a create does, whose
//!    incarnation holds the record as version file `<g>` — `g` the generation of its version
//!    `<g>-<random>`, the same version token and the same body, marked confirmed;
//! 3. **exchange** it with the record file: `renameat2(RENAME_EXCHANGE)` swaps the two names
//!    in one step, so every reader sees the record (as a file or as a version) and never an
//!    absent key, and the file lands in `.fence` under the built directory's name;
//! 4. sync the key's directory and `.fence`; remove the record file and the earlier version's
//!    temp file.
//!
//! The record's version and bytes are kept, so the migration changes nothing any reader can
//! tell: a caller holding `Match(v)` from the first layout applies exactly once afterwards
//! (the write that migrated is an ordinary replace of `v`). A directory at the record's path
//! is what the earlier version can neither read (`Corrupt`: "not a regular file") nor
//! replace (`rename` of a file onto a directory fails), so a process of the earlier version
//! that keeps running is refused on every migrated key, never silently split from it.
//! The lock file stays: processes of the earlier version still exclude each other with it
//! on keys that are absent.
//!
//! A migrator killed at any step leaves the record file in place (before the exchange; its
//! half-built directory is swept by the next create or migration there) or the migrated
//! object (after; the record file left in `.fence` is swept likewise).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use fence_core::{Error, ErrorKind, Key, Version};
use rustix::fs::{FileType, FlockOperation, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::commit::CommitPoint;
use crate::create::{Base, Built};
use crate::layout::{encode_header, generation_of, Kind, MAX_HEADER_LEN};
use crate::object::{read_legacy, Extent, Fresh, Holder, Object, Record};
use crate::sys::{foreign, fs_error, id_at, mode, remove, FileId, ReadFile};

/// The longest a migration waits for the first layout's lock of its key: what the first
/// layout's writers waited by default. A writer of the earlier version holds it for two
/// `fsync`s; longer means a stopped or stuck process of the earlier version.
pub const LOCK_WAIT: Duration = Duration::from_secs(1);
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(8);
/// The first layout's temp directory inside each `.fence`.
const OLD_TEMP_DIR: &str = "tmp";

impl Object<'_> {
    /// For a replace guarded on `expected` that found first-layout record `file`: `None` if
    /// the record is at another version (rejected, nothing migrated), else the key's object
    /// directory once the record is migrated (by this call or another writer).
    pub(crate) fn migrated(
        &self,
        file: ReadFile,
        expected: &Version,
        point: &CommitPoint,
        fresh: &dyn Fresh,
    ) -> Result<Option<OwnedFd>, Error> {
        if read_legacy(self.key, file, Extent::Header)?.header.version != *expected {
            return Ok(None);
        }
        self.migrate(point, fresh)?;
        match self.holder()? {
            Holder::Dir(d) => Ok(Some(d)),
            Holder::Absent => Ok(None),
            // Only a file put there by hand, under the lock: nothing migrates it.
            Holder::Legacy(_) => Err(Error::new(
                ErrorKind::Conflict,
                "fence-fs: a record of the first layout changed in the middle of its migration",
            )
            .with_key(self.key)
            .not_committed()),
        }
    }

    /// Migrates the key's first-layout record, if it still is one once the first layout's
    /// lock is held (see the module docs).
    fn migrate(&self, point: &CommitPoint, fresh: &dyn Fresh) -> Result<(), Error> {
        let internal = self.tree.internal(self.key, self.parent)?;
        let Some(_lock) = self.old_lock(internal.as_fd(), point)? else {
            return Ok(());
        };
        let Holder::Legacy(file) = self.holder()? else {
            return Ok(());
        };
        let record = read_legacy(self.key, file, self.whole())?;
        let base = base_of(self.key, &record)?;
        let mut built = self.build(&base, fresh)?;
        let exchanged = self.exchange(&mut built, record.id, point);
        if !built.placed {
            built.discard();
        }
        exchanged?;
        remove_old_temp(internal.as_fd(), self.name);
        Ok(())
    }

    /// Takes the first layout's lock of this key as its writers take it (the same file,
    /// created if missing), polling without blocking and stopping early if the caller gives
    /// up. `None` once the key's entry is a directory: another writer migrated it meanwhile
    /// (still holding the lock for its last syncs), and no writer of the earlier version can
    /// change a directory, so the write goes on without the lock.
    fn old_lock(
        &self,
        internal: BorrowedFd<'_>,
        point: &CommitPoint,
    ) -> Result<Option<OwnedFd>, Error> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK;
        let bits = mode(self.tree.modes.file);
        let lock = rustix::fs::openat(internal, self.name, flags | OFlags::CLOEXEC, bits)
            .map_err(|e| fs_error(self.key, "cannot open the first layout's lock file", e))?;
        let stat = rustix::fs::fstat(&lock).map_err(|e| fs_error(self.key, "cannot stat", e))?;
        let found = FileType::from_raw_mode(stat.st_mode);
        if found != FileType::RegularFile {
            return Err(foreign(self.key, "the first layout's lock file", found));
        }
        let (mut pause, mut waited) = (FIRST_PAUSE, Duration::ZERO);
        loop {
            match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Some(lock)),
                Err(Errno::WOULDBLOCK) if self.is_dir_now() => return Ok(None),
                Err(Errno::WOULDBLOCK) if waited < LOCK_WAIT => {}
                Err(Errno::WOULDBLOCK) => return Err(lock_held(self.key)),
                Err(e) => return Err(fs_error(self.key, "cannot lock the record", e)),
            }
            point.check(self.key)?;
            std::thread::sleep(pause);
            waited += pause;
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }

    /// Whether the key's entry is a directory now: migrated (or deleted and created again).
    fn is_dir_now(&self) -> bool {
        crate::sys::type_at(self.parent, self.name) == Ok(FileType::Directory)
    }

    /// Exchanges `built` with the record file `legacy` at the key's path, if it is still
    /// there, and makes the exchange durable. Not the caller's commit point: the record reads
    /// the same before and after.
    fn exchange(
        &self,
        built: &mut Built,
        legacy: FileId,
        point: &CommitPoint,
    ) -> Result<(), Error> {
        let at_path = id_at(self.parent, self.name)
            .map_err(|e| fs_error(self.key, "cannot stat the object's entry", e))?;
        if at_path != Some(legacy) {
            return Ok(());
        }
        point.check(self.key)?;
        rustix::fs::renameat_with(
            &built.internal,
            built.name.as_str(),
            self.parent,
            self.name,
            RenameFlags::EXCHANGE,
        )
        .map_err(|e| match e {
            Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP => Error::new(
                ErrorKind::Unsupported,
                "cannot migrate a record of the first layout: the file system cannot exchange \
                 two names atomically (renameat2 RENAME_EXCHANGE)",
            )
            .with_key(self.key)
            .not_committed(),
            e => fs_error(
                self.key,
                "cannot exchange the record for its object directory",
                e,
            ),
        })?;
        built.placed = true;
        for dir in [self.parent, built.internal.as_fd()] {
            rustix::fs::fsync(dir)
                .map_err(|e| fs_error(self.key, "cannot sync a migrated record's directory", e))?;
        }
        let _ = remove(built.internal.as_fd(), &built.name, false);
        Ok(())
    }
}

/// The first version of the incarnation that takes over first-layout `record`: its own
/// version at its own generation, its body, marked confirmed.
fn base_of<'r>(key: &Key, record: &'r Record) -> Result<Base<'r>, Error> {
    let version = &record.header.version;
    let corrupt = |why: &str| {
        Error::corrupt(
            key,
            format!("a record of the first layout cannot be migrated: {why}"),
        )
    };
    let generation =
        generation_of(version).ok_or_else(|| corrupt("its version is not <generation>-<hex>"))?;
    let header = encode_header(version, None, Kind::Put(record.body.len() as u64));
    if header.len() > MAX_HEADER_LEN {
        return Err(corrupt("its version is too long"));
    }
    Ok(Base {
        generation,
        version: version.clone(),
        body: &record.body,
        confirmed: true,
    })
}

/// The error of a first-layout lock that stayed held for the whole [`LOCK_WAIT`].
fn lock_held(key: &Key) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "this record of fence-fs's first layout must be migrated by its first write, but \
             its lock stayed held for {} ms: a process of the earlier fence version holds it \
             (stopped?). Stop the processes of the earlier version; nothing was written",
            LOCK_WAIT.as_millis()
        ),
    )
    .with_key(key)
    .not_committed()
}

/// Removes the first layout's temp file of the object (a dead writer's leftover: only the
/// holder of the lock touches it).
fn remove_old_temp(internal: BorrowedFd<'_>, name: &str) {
    if let Ok(tmp) = crate::sys::open_dir_at(internal, OLD_TEMP_DIR) {
        let _ = remove(tmp.as_fd(), name, false);
    }
}
