//! Creating and deleting objects, and the scratch space of each directory (`.fence`).
//!
//! - **Create**: build a complete object directory (an incarnation holding version 1, all
//!   synced) under the directory's `.fence`, then `rename` it onto the key's object directory:
//!   the kernel replaces only a missing or *empty* directory (the commit point), so of racing
//!   creators exactly one wins, and nothing is ever replaced that holds a record.
//! - **Delete**: a replace whose new version is the delete mark (see [`crate::object`]); then
//!   the incarnation is moved into `.fence` by its unique name (so a late mover can only move
//!   that same one), its versions are removed oldest first, and the object directory is
//!   removed if empty. A create that finds a deleted incarnation still in place does the same
//!   first.
//! - Leftovers of writers that died (objects being built, retired incarnations, named temp
//!   files) are reclaimed by the next create in the directory: an entry still in use is
//!   flocked by its writer, and the sweep takes only unlocked ones.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use fence_core::{Error, ErrorKind, PutOutcome, Version};
use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use crate::commit::CommitPoint;
use crate::layout::{version_file, Kind, INCARNATION_PREFIX, NEW_PREFIX, OLD_PREFIX, TMP_PREFIX};
use crate::object::{collect, record_bytes, Change, Fresh, Holder, Incarnation, Object};
use crate::sys::{
    entries, fs_error, mode, open_dir_at, remove, set_mode, sync_committed, write_synced,
};

/// Tries of a create before it gives up on an object that keeps being created and deleted.
const CREATE_TRIES: usize = 16;
/// Tries to build a new object directory that other creators' sweeps keep taking (each
/// takes one only in the instant between its `mkdir` and its `flock`).
const BUILD_TRIES: usize = 16;

impl Object<'_> {
    /// Creates the object if absent: applied with the first version, or rejected.
    pub fn create(
        &self,
        body: &[u8],
        point: &CommitPoint,
        fresh: &dyn Fresh,
    ) -> Result<PutOutcome, Error> {
        let mut built: Option<Built> = None;
        let result = self.create_with(&mut built, body, point, fresh);
        if let Some(built) = built.filter(|b| !b.placed) {
            built.discard();
        }
        result
    }

    fn create_with(
        &self,
        built: &mut Option<Built>,
        body: &[u8],
        point: &CommitPoint,
        fresh: &dyn Fresh,
    ) -> Result<PutOutcome, Error> {
        for _ in 0..CREATE_TRIES {
            if self.holds_record()? {
                return Ok(PutOutcome::Rejected);
            }
            if built.is_none() {
                *built = Some(self.build(body, fresh)?);
            }
            let placing = built.as_mut().expect("built above");
            let committing = point.enter(self.key)?;
            let placed = rustix::fs::renameat(
                &placing.internal,
                placing.name.as_str(),
                self.parent,
                self.name,
            );
            drop(committing);
            match placed {
                Ok(()) => {
                    placing.placed = true;
                    sync_committed(self.key, self.parent)?;
                    return Ok(PutOutcome::Applied(placing.version.clone()));
                }
                // Not empty: created meanwhile (or a deleted one not yet retired); look again.
                Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR | Errno::ISDIR) => {}
                Err(e) => return Err(fs_error(self.key, "cannot place the new object", e)),
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            "fence-fs: the key kept being created and deleted by others",
        )
        .with_key(self.key)
        .not_committed())
    }

    /// Whether the key holds a record now. A deleted incarnation still in place is retired
    /// on the way (moved away by its unique name), so that the object directory can be
    /// replaced.
    fn holds_record(&self) -> Result<bool, Error> {
        let d = match self.holder()? {
            Holder::Absent => return Ok(false),
            Holder::Legacy(_) => return Ok(true),
            Holder::Dir(d) => d,
        };
        let Some(inc) = self.incarnation(&d)? else {
            return Ok(false);
        };
        if self.current(&inc)?.header.kind != Kind::Deleted {
            return Ok(true);
        }
        self.retire(&d, &inc)?;
        Ok(false)
    }

    /// Builds a complete object directory in the directory's `.fence`: an incarnation
    /// holding version 1, every entry synced. Nobody else looks at it until it is placed.
    /// Between making its directory and locking it, a sweep of another writer may take it
    /// for a dead writer's: then it is built again under a new name.
    fn build(&self, body: &[u8], fresh: &dyn Fresh) -> Result<Built, Error> {
        let internal = self.tree.internal(self.key, self.parent)?;
        sweep(self, internal.as_fd());
        let version = fresh.version(1);
        let mut tries = 0;
        loop {
            let name = format!("{NEW_PREFIX}{}", fresh.name());
            match self.fill(internal.as_fd(), &name, &version, body, fresh) {
                Ok(fd) => {
                    return Ok(Built {
                        internal,
                        name,
                        _in_use: fd,
                        version,
                        placed: false,
                    })
                }
                Err(e) => {
                    remove_built(internal.as_fd(), &name);
                    tries += 1;
                    if e.kind() != ErrorKind::NotFound || tries == BUILD_TRIES {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Makes new object directory `name` in `internal` with its incarnation and version 1;
    /// returns it open and flocked (in use: a sweep takes only a dead writer's leftover).
    fn fill(
        &self,
        internal: BorrowedFd<'_>,
        name: &str,
        version: &Version,
        body: &[u8],
        fresh: &dyn Fresh,
    ) -> Result<OwnedFd, Error> {
        let d = self.new_dir(internal, name)?;
        rustix::fs::flock(&d, FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            // A sweep took it first (and removes it): as if it had gone.
            let e = if e == Errno::WOULDBLOCK {
                Errno::NOENT
            } else {
                e
            };
            fs_error(self.key, "cannot mark a new object directory in use", e)
        })?;
        let inc = self.new_dir(d.as_fd(), &format!("{INCARNATION_PREFIX}{}", fresh.name()))?;
        self.first_version(inc.as_fd(), version, body)?;
        for dir in [&inc, &d] {
            rustix::fs::fsync(dir)
                .map_err(|e| fs_error(self.key, "cannot sync a new directory", e))?;
        }
        Ok(d)
    }

    /// Makes directory `name` in `parent` with exactly the store's directory mode.
    fn new_dir(&self, parent: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Error> {
        let bits = self.tree.modes.dir;
        let fail = |e| fs_error(self.key, "cannot make a new directory", e);
        rustix::fs::mkdirat(parent, name, mode(bits)).map_err(fail)?;
        let dir = open_dir_at(parent, name).map_err(fail)?;
        set_mode(dir.as_fd(), bits).map_err(fail)?;
        Ok(dir)
    }

    fn first_version(
        &self,
        inc: BorrowedFd<'_>,
        version: &Version,
        body: &[u8],
    ) -> Result<(), Error> {
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC;
        let bits = self.tree.modes.file;
        let fd = rustix::fs::openat(inc, version_file(1).as_str(), flags, mode(bits))
            .map_err(|e| fs_error(self.key, "cannot create the first version", e))?;
        rustix::fs::fchmod(&fd, mode(bits))
            .map_err(|e| fs_error(self.key, "cannot set a version file's mode", e))?;
        let (bytes, _) = record_bytes(version, None, &Change::Put(body));
        write_synced(self.key, &mut File::from(fd), &bytes)
    }

    /// Moves deleted incarnation `inc` out of object directory `d` (by its unique name, so
    /// a late retire can only move this one), removes it, and removes `d` if it is empty.
    pub(crate) fn retire(&self, d: &OwnedFd, inc: &Incarnation) -> Result<(), Error> {
        let internal = self.tree.internal(self.key, self.parent)?;
        let old = format!("{OLD_PREFIX}{}", inc.name);
        match rustix::fs::renameat(d, inc.name.as_str(), &internal, old.as_str()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(fs_error(self.key, "cannot retire a deleted incarnation", e)),
        }
        remove_retired(self, internal.as_fd(), &old);
        let _ = remove(self.parent, self.name, true);
        Ok(())
    }

    /// After a delete: retires the incarnation if the delete is still its current version.
    pub fn tidy_deleted(&self) {
        let Ok(Holder::Dir(d)) = self.holder() else {
            return;
        };
        let Ok(Some(inc)) = self.incarnation(&d) else {
            return;
        };
        if self
            .current(&inc)
            .is_ok_and(|r| r.header.kind == Kind::Deleted)
        {
            let _ = self.retire(&d, &inc);
        }
    }
}

/// A new object directory being built in `.fence`, until it is placed (renamed onto the
/// key's object directory) or discarded.
struct Built {
    internal: OwnedFd,
    name: String,
    /// Held open (and flocked) while it is being built and placed.
    _in_use: OwnedFd,
    version: Version,
    placed: bool,
}

impl Built {
    fn discard(self) {
        remove_built(self.internal.as_fd(), &self.name);
    }
}

/// Reclaims what dead writers left in a `.fence` directory: object directories that were
/// being built (`new-…`) and named temp files (`tmp-…`) that nobody holds locked, and
/// retired incarnations (`old-…`). Best effort. A writer locks its entry right after making
/// it; one that finds its entry locked by a sweep makes a new one.
fn sweep(object: &Object<'_>, internal: BorrowedFd<'_>) {
    let Ok(names) = entries(internal) else {
        return;
    };
    for (name, _) in names {
        if name.starts_with(OLD_PREFIX) {
            remove_retired(object, internal, &name);
        } else if name.starts_with(NEW_PREFIX) {
            if let Some(_held) = abandoned(internal, &name) {
                remove_built(internal, &name);
            }
        } else if name.starts_with(TMP_PREFIX) {
            if let Some(_held) = abandoned(internal, &name) {
                let _ = remove(internal, &name, false);
            }
        }
    }
}

/// Scratch entry `name`, locked by this call, if nobody else holds it: a dead writer's (or
/// one just made and not yet locked, whose writer then makes another). Held while removed.
fn abandoned(internal: BorrowedFd<'_>, name: &str) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(internal, name, flags, Mode::empty()).ok()?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd).ok()?.st_mode);
    let ours = matches!(kind, FileType::RegularFile | FileType::Directory);
    let locked = ours && rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_ok();
    locked.then_some(fd)
}

/// Removes retired incarnation `name` from `internal`: its versions oldest first, each after
/// marking its first successor (as everywhere: a late writer that linked into it must still
/// learn whether it was first), then the directory. What a late writer adds meanwhile stays
/// for the next sweep.
fn remove_retired(object: &Object<'_>, internal: BorrowedFd<'_>, name: &str) {
    if let Ok(inc) = open_dir_at(internal, name) {
        collect(object.key, inc.as_fd(), u64::MAX, None);
    }
    let _ = remove(internal, name, true);
}

/// Removes object directory `name` that was being built (never visible): the files of its
/// incarnation, the incarnation, the directory.
fn remove_built(internal: BorrowedFd<'_>, name: &str) {
    let Ok(d) = open_dir_at(internal, name) else {
        return;
    };
    for (inc, _) in entries(d.as_fd()).unwrap_or_default() {
        if let Ok(fd) = open_dir_at(d.as_fd(), &inc) {
            for (file, _) in entries(fd.as_fd()).unwrap_or_default() {
                let _ = remove(fd.as_fd(), &file, false);
            }
        }
        let _ = remove(d.as_fd(), &inc, true);
    }
    let _ = remove(internal, name, true);
}
