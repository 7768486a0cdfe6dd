//! One key's object: how its current version is found and how it is replaced. No lock
//! anywhere: every decision is one system call the kernel makes atomically, so a stopped or
//! dead process never holds anyone up.
//!
//! - A key's object directory `D` holds one incarnation directory `I` (unique name), or none.
//! - `I` holds version files named by generation. The current version is the highest one;
//!   its predecessor is kept, older ones are removed, oldest first, each only after its
//!   successor is marked confirmed (one byte in the successor's header).
//! - **Replace** (`Match(v)`, `v` at generation `g`): check that `I/g` holds `v`, write the
//!   new version to an unnamed temp file, sync it, then `link` it as `I/g+1`: the kernel lets
//!   exactly one writer create that name (the commit point). Then confirm: if `I/g` is still
//!   the file checked, no successor of `v` was ever removed, so the link was the first; if it
//!   is gone, whoever removed it first marked the first successor — the writer's own file
//!   says whether that was it.
//! - **Create** and **delete**: see [`crate::create`].
//!
//! docs/fs.md gives the whole argument (linearizable, crash-safe, no ABA).

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;

use fence_core::{Commit, Error, ErrorKind, Key, PutOutcome, Version};
use rustix::fs::{AtFlags, FileType, FlockOperation, OFlags};
use rustix::io::Errno;

use crate::commit::CommitPoint;
use crate::layout::{
    check_length, encode_header, generation_of, generation_of_file, parse_header,
    parse_legacy_header, version_file, Header, Kind, CONFIRMED, INCARNATION_PREFIX, MAX_HEADER_LEN,
    TMP_PREFIX,
};
use crate::sys::{
    entries, foreign, fs_error, id_at, id_of, mode, open_dir_at, open_file_at, read_exact, remove,
    sync_committed, type_at, write_synced, FileId, ReadFile,
};
use crate::tree::Tree;

/// Tries of a read before it gives up on a version chain that keeps moving.
const READ_TRIES: usize = 100;
/// The first read of a whole version file: records up to this size take one read.
const FIRST_READ: u64 = 4096;

/// What new randomness a write draws: version tokens and unique names.
pub trait Fresh {
    /// The version at `generation`, never seen before.
    fn version(&self, generation: u64) -> Version;
    /// A unique 32-hex-digit name part.
    fn name(&self) -> String;
}

/// A version file, read, and held open.
#[derive(Debug)]
pub struct Record {
    /// Its header.
    pub header: Header,
    /// Its body (empty when only the header was read).
    pub body: Vec<u8>,
    /// Its identity, to see later whether the same file is still there.
    pub id: FileId,
    /// The open file (writable if `writable`), to mark it confirmed.
    file: File,
    writable: bool,
}

/// What the key's object directory entry holds.
pub(crate) enum Holder {
    Absent,
    /// A record file of the first layout (one file per key): read, never rewritten.
    Legacy(ReadFile),
    Dir(OwnedFd),
}

/// The incarnation directory found in an object directory.
#[derive(Debug)]
pub struct Incarnation {
    pub name: String,
    pub fd: OwnedFd,
}

/// Where a key's object was found by a write: its directory and its incarnation, held open
/// (two descriptors). A store handle keeps it, so that the next operation on the key needs
/// no lookup; each use checks that it still holds ([`Object::replace_at`],
/// [`Object::get_at`]).
#[derive(Debug)]
pub struct Place {
    /// The directory holding the object directory.
    pub parent: OwnedFd,
    /// The object directory's name.
    pub name: String,
    /// Its incarnation.
    pub inc: Incarnation,
}

/// What a replace found at a place.
pub enum Found<T> {
    /// The guard's version is in this incarnation: the answer.
    Here(T),
    /// It is not: rejected, unless the place was a remembered one (then look again).
    Elsewhere,
}

/// The new version of a replace.
pub enum Change<'b> {
    /// A body.
    Put(&'b [u8]),
    /// The delete mark.
    Delete,
}

/// One key's object: its directory `parent` (held open by the caller) and name there.
pub struct Object<'a> {
    /// The tree, for modes and durability.
    pub tree: &'a Tree,
    /// The key, for errors.
    pub key: &'a Key,
    /// The directory holding the object directory.
    pub parent: BorrowedFd<'a>,
    /// The object directory's name.
    pub name: &'a str,
}

impl Object<'_> {
    pub(crate) fn corrupt(&self, why: &str) -> Error {
        Error::corrupt(self.key, format!("fence-fs object: {why}"))
    }

    /// The current record, or `None` when absent (never created, or deleted).
    pub fn get(&self) -> Result<Option<Record>, Error> {
        match self.holder()? {
            Holder::Absent => Ok(None),
            Holder::Legacy(file) => read_legacy(self.key, file).map(Some),
            Holder::Dir(d) => match self.incarnation(&d)? {
                None => Ok(None),
                Some(inc) => {
                    let record = self.current(&inc)?;
                    Ok((record.header.kind != Kind::Deleted).then_some(record))
                }
            },
        }
    }

    /// The current record through a remembered place, or `None` if the place no longer
    /// holds the key's incarnation (deleted, re-created): then look again.
    pub fn get_at(place: &Place, key: &Key, tree: &Tree) -> Result<Option<Option<Record>>, Error> {
        // Through the object directory now at its name: a replaced or removed one, or
        // anything else there, does not hold it.
        let Ok(d) = open_dir_at(place.parent.as_fd(), &place.name) else {
            return Ok(None);
        };
        let present = id_at(d.as_fd(), &place.inc.name)
            .map_err(|e| fs_error(key, "cannot stat the incarnation", e))?;
        if present.is_none() {
            return Ok(None);
        }
        let object = Object {
            tree,
            key,
            parent: place.parent.as_fd(),
            name: &place.name,
        };
        let record = object.current(&place.inc)?;
        Ok(Some(
            (record.header.kind != Kind::Deleted).then_some(record),
        ))
    }

    /// Whether the object holds a record (for listing): errors count as present, so that
    /// reading the key says what is wrong instead of the key vanishing from listings. On a
    /// writable store, a deleted object whose deleter died before tidying it up (its deleted
    /// incarnation still in place, or its emptied object directory) is tidied on the way.
    pub fn listed(&self) -> bool {
        if self.tree.read_only {
            return self.get().map_or(true, |r| r.is_some());
        }
        match self.holder() {
            Ok(Holder::Dir(d)) => self.listed_dir(&d),
            Ok(Holder::Absent) => false,
            Ok(Holder::Legacy(_)) | Err(_) => true,
        }
    }

    fn listed_dir(&self, d: &OwnedFd) -> bool {
        match self.incarnation(d) {
            Ok(None) => {
                let _ = remove(self.parent, self.name, true);
                false
            }
            Ok(Some(inc)) => match self.current(&inc) {
                Ok(r) if r.header.kind == Kind::Deleted => {
                    let _ = self.retire(d, &inc);
                    false
                }
                _ => true,
            },
            Err(_) => true,
        }
    }

    pub(crate) fn holder(&self) -> Result<Holder, Error> {
        match open_dir_at(self.parent, self.name) {
            Ok(fd) => Ok(Holder::Dir(fd)),
            Err(Errno::NOENT) => Ok(Holder::Absent),
            Err(Errno::NOTDIR) => self.legacy(),
            Err(e) => Err(fs_error(self.key, "cannot open the object directory", e)),
        }
    }

    /// The entry is not a directory: a record file of the first layout, or something
    /// fence-fs did not make.
    fn legacy(&self) -> Result<Holder, Error> {
        let what = "the object's entry";
        match type_at(self.parent, self.name) {
            Ok(FileType::RegularFile) => {
                match open_file_at(self.key, self.parent, self.name, what, false)? {
                    Some(file) => Ok(Holder::Legacy(file)),
                    None => Ok(Holder::Absent),
                }
            }
            Ok(other) => Err(foreign(self.key, what, other)),
            Err(Errno::NOENT) => Ok(Holder::Absent),
            Err(e) => Err(fs_error(self.key, "cannot stat the object's entry", e)),
        }
    }

    /// The incarnation in object directory `d`, if any. One that is moved away between the
    /// listing and its open was retired (its object deleted) meanwhile: none.
    pub(crate) fn incarnation(&self, d: &OwnedFd) -> Result<Option<Incarnation>, Error> {
        let names =
            entries(d.as_fd()).map_err(|e| fs_error(self.key, "cannot list the object", e))?;
        let mut found = None;
        for (name, _) in names {
            if !name.starts_with(INCARNATION_PREFIX) || found.is_some() {
                return Err(self.corrupt("an entry fence-fs did not make in the object directory"));
            }
            found = Some(name);
        }
        let Some(name) = found else { return Ok(None) };
        match open_dir_at(d.as_fd(), &name) {
            Ok(fd) => Ok(Some(Incarnation { name, fd })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(fs_error(self.key, "cannot open the incarnation", e)),
        }
    }

    /// The generations in an incarnation, ascending.
    fn generations(&self, inc: BorrowedFd<'_>) -> Result<Vec<u64>, Error> {
        generations(inc).map_err(|e| fs_error(self.key, "cannot list versions", e))
    }

    /// Version `generation`'s file, its header and (if `whole`) body read; `None` if absent.
    /// `writable` opens it for writing too where permitted, so it can be marked confirmed.
    fn read_version(
        &self,
        inc: BorrowedFd<'_>,
        generation: u64,
        whole: bool,
        writable: bool,
    ) -> Result<Option<Record>, Error> {
        let name = version_file(generation);
        match open_file_at(self.key, inc, &name, "a version file", writable)? {
            Some(file) => read_record(self.key, file, whole).map(Some),
            None => Ok(None),
        }
    }

    /// The current version of a live incarnation: the highest generation, checked to be the
    /// one that counts. Retried while writers move the chain on; a chain that stays broken
    /// (files removed by hand) is `Corrupt`.
    pub(crate) fn current(&self, inc: &Incarnation) -> Result<Record, Error> {
        let (mut previous, mut unchanged) = (Vec::new(), 0);
        for _ in 0..READ_TRIES {
            let generations = self.generations(inc.fd.as_fd())?;
            let Some(&top) = generations.last() else {
                return Err(self.corrupt("an incarnation without versions"));
            };
            if let Some(record) = self.checked(inc.fd.as_fd(), top)? {
                return Ok(record);
            }
            unchanged = if generations == previous {
                unchanged + 1
            } else {
                0
            };
            if unchanged == 2 {
                return Err(self.corrupt("its version chain is broken (files removed by hand?)"));
            }
            previous = generations;
        }
        Err(Error::new(
            ErrorKind::Conflict,
            "fence-fs: the object kept changing while it was read",
        )
        .with_key(self.key)
        .not_committed())
    }

    /// Version `top`, if it was the current one at some instant of this call: a first
    /// successor (marked so, or its predecessor still holds the version it names, or it is
    /// the first version), with no version after it while it was still in place.
    fn checked(&self, inc: BorrowedFd<'_>, top: u64) -> Result<Option<Record>, Error> {
        let Some(record) = self.read_version(inc, top, true, false)? else {
            return Ok(None);
        };
        let stat = |name: String| {
            id_at(inc, &name).map_err(|e| fs_error(self.key, "cannot stat a version file", e))
        };
        if stat(version_file(top + 1))?.is_some() || stat(version_file(top))? != Some(record.id) {
            return Ok(None);
        }
        let first_successor = match &record.header.prev {
            None => top == 1,
            Some(_) if record.header.confirmed => true,
            Some(prev) => {
                top > 1
                    && self
                        .read_version(inc, top - 1, false, false)?
                        .is_some_and(|p| p.header.version == *prev)
            }
        };
        Ok(first_successor.then_some(record))
    }

    /// Replaces version `expected` with `change`: applied with the new version, or rejected;
    /// with the place the object was found, to remember.
    pub fn replace(
        &self,
        expected: &Version,
        change: Change<'_>,
        point: &CommitPoint,
        fresh: &dyn Fresh,
    ) -> Result<(PutOutcome, Option<Incarnation>), Error> {
        let d = match self.holder()? {
            Holder::Absent => return Ok((PutOutcome::Rejected, None)),
            Holder::Legacy(file) => return self.legacy_write(file, expected).map(|o| (o, None)),
            Holder::Dir(d) => d,
        };
        let Some(inc) = self.incarnation(&d)? else {
            return Ok((PutOutcome::Rejected, None));
        };
        self.tree
            .make_durable(self.key, self.parent, d.as_fd(), false)?;
        self.tree
            .make_durable(self.key, d.as_fd(), inc.fd.as_fd(), false)?;
        match self.replace_at(&inc, expected, change, point, fresh)? {
            Found::Here(outcome) => Ok((outcome, Some(inc))),
            Found::Elsewhere => Ok((PutOutcome::Rejected, None)),
        }
    }

    /// Replaces version `expected` in incarnation `inc` (its directories made durable):
    /// `Elsewhere` if `expected` is not there. An incarnation, wherever it is (retired ones
    /// too), only ever takes first successors of its own versions, so a remembered one needs
    /// no other check.
    pub fn replace_at(
        &self,
        inc: &Incarnation,
        expected: &Version,
        change: Change<'_>,
        point: &CommitPoint,
        fresh: &dyn Fresh,
    ) -> Result<Found<PutOutcome>, Error> {
        let Some(generation) = generation_of(expected) else {
            return Ok(Found::Elsewhere);
        };
        let Some(pred) = self.read_version(inc.fd.as_fd(), generation, false, true)? else {
            return Ok(Found::Elsewhere);
        };
        if pred.header.version != *expected || pred.header.kind == Kind::Deleted {
            return Ok(Found::Elsewhere);
        }
        let next = version_file(generation + 1);
        let taken = id_at(inc.fd.as_fd(), &next)
            .map_err(|e| fs_error(self.key, "cannot stat a version file", e))?;
        if taken.is_some() {
            // Taken already: spare the temp file and its sync (the link would fail).
            return self.taken(inc.fd.as_fd(), &next).map(Found::Here);
        }
        point.check(self.key)?;
        let version = fresh.version(generation + 1);
        let (bytes, mark) = record_bytes(&version, Some(expected), &change);
        let temp = Temp::write(self, inc.fd.as_fd(), &bytes, mark)?;
        self.commit_link(inc, generation, &pred, &version, &temp, point)
            .map(Found::Here)
    }

    /// Links `temp` as version `generation + 1` (the commit point), then confirms it.
    fn commit_link(
        &self,
        inc: &Incarnation,
        generation: u64,
        pred: &Record,
        version: &Version,
        temp: &Temp,
        point: &CommitPoint,
    ) -> Result<PutOutcome, Error> {
        let next = version_file(generation + 1);
        let committing = point.enter(self.key)?;
        let linked = temp.link(inc.fd.as_fd(), &next);
        drop(committing);
        match linked {
            Ok(()) => {}
            Err(Errno::EXIST) => return self.taken(inc.fd.as_fd(), &next),
            // The incarnation was removed (its object deleted): the version is gone.
            Err(Errno::NOENT) => return Ok(PutOutcome::Rejected),
            Err(e) => return Err(fs_error(self.key, "cannot link the new version", e)),
        }
        let first = self
            .first_successor(inc.fd.as_fd(), generation, pred.id, temp)
            .map_err(|e| e.with_commit(Commit::Ambiguous))?;
        if !first {
            let own = rustix::fs::fstat(&temp.file).map(|s| id_of(&s)).ok();
            if own.is_some() && id_at(inc.fd.as_fd(), &next).ok().flatten() == own {
                let _ = remove(inc.fd.as_fd(), &next, false);
            }
            return Ok(PutOutcome::Rejected);
        }
        sync_committed(self.key, inc.fd.as_fd())?;
        collect_after(self.key, inc.fd.as_fd(), generation, pred);
        Ok(PutOutcome::Applied(version.clone()))
    }

    /// The successor's name was taken: by another writer's version (rejected), or by
    /// something fence-fs did not make (refused).
    fn taken(&self, inc: BorrowedFd<'_>, name: &str) -> Result<PutOutcome, Error> {
        match type_at(inc, name) {
            Ok(FileType::RegularFile) | Err(Errno::NOENT) => Ok(PutOutcome::Rejected),
            Ok(other) => Err(foreign(self.key, "the next version file", other)),
            Err(e) => Err(fs_error(self.key, "cannot stat a version file", e)),
        }
    }

    /// After linking `generation + 1`: was it the first successor of `generation`? Yes if
    /// `generation` is still the file that was checked (a version is removed only after its
    /// first successor is marked, and a successor only after its predecessor, so no successor
    /// was taken and removed before the link). If it is gone, its first successor was marked
    /// before it went: our own file says whether that was ours.
    fn first_successor(
        &self,
        inc: BorrowedFd<'_>,
        generation: u64,
        pred: FileId,
        temp: &Temp,
    ) -> Result<bool, Error> {
        let still = id_at(inc, &version_file(generation))
            .map_err(|e| fs_error(self.key, "cannot stat a version file", e))?;
        if still == Some(pred) {
            return Ok(true);
        }
        let mut mark = [0u8];
        temp.file
            .read_exact_at(&mut mark, temp.mark_offset)
            .map_err(|e| {
                Error::new(ErrorKind::Unavailable, "cannot read back the new version")
                    .with_key(self.key)
                    .with_source(e)
            })?;
        Ok(mark[0] == CONFIRMED)
    }

    fn legacy_write(&self, file: ReadFile, expected: &Version) -> Result<PutOutcome, Error> {
        if read_legacy(self.key, file)?.header.version != *expected {
            return Ok(PutOutcome::Rejected);
        }
        Err(Error::new(
            ErrorKind::Unsupported,
            "this record was written by fence-fs's first layout (a file per key under a lock); \
             it is read but not rewritten: stop the processes of the old version and start \
             again in a fresh directory",
        )
        .with_key(self.key)
        .not_committed())
    }
}

/// The generations in an incarnation, ascending.
fn generations(inc: BorrowedFd<'_>) -> Result<Vec<u64>, Errno> {
    let mut generations: Vec<u64> = entries(inc)?
        .iter()
        .filter_map(|(name, _)| generation_of_file(name))
        .collect();
    generations.sort_unstable();
    Ok(generations)
}

/// After version `generation + 1` was committed: removes version `generation - 1`, marking
/// its first successor (`pred`, version `generation`) first — or, if anything older is
/// still there (left by a writer killed before its cleanup), every version older than
/// `generation`, oldest first ([`collect`]).
fn collect_after(key: &Key, inc: BorrowedFd<'_>, generation: u64, pred: &Record) {
    if generation < 2 {
        return;
    }
    let older = generation
        .checked_sub(2)
        .filter(|g| *g >= 1)
        .map(|g| id_at(inc, &version_file(g)));
    match older {
        // Nothing below `generation - 1`: only it goes, after its successor is marked.
        None | Some(Ok(None)) => {
            if mark(inc, generation, pred) {
                let _ = remove(inc, &version_file(generation - 1), false);
            }
        }
        Some(_) => collect(key, inc, generation, Some(pred)),
    }
}

/// Removes the versions older than `generation` (the predecessor of a version just
/// committed; `u64::MAX`: all of them), oldest first, each only after marking its first
/// successor confirmed. `pred` is version `generation`, known to be a first successor.
/// Best effort: what is left (a successor that cannot be marked, an error) is removed by a
/// later write.
pub(crate) fn collect(key: &Key, inc: BorrowedFd<'_>, generation: u64, pred: Option<&Record>) {
    let Ok(generations) = generations(inc) else {
        return;
    };
    for old in generations.into_iter().take_while(|g| *g < generation) {
        let marked = match pred.filter(|_| old + 1 == generation) {
            Some(pred) => mark(inc, old + 1, pred),
            None => mark_successor(key, inc, old),
        };
        if !marked || remove(inc, &version_file(old), false).is_err() {
            return;
        }
    }
}

/// Before version `old` is removed: marks its first successor, the file at `old + 1` that
/// names it (while `old` is in place, whatever is at `old + 1` is its first successor).
/// `true` if marked or there is nothing to mark (`old` is a late writer's leftover, or the
/// last version).
fn mark_successor(key: &Key, inc: BorrowedFd<'_>, old: u64) -> bool {
    let header = |generation: u64| -> Option<Record> {
        let name = version_file(generation);
        let file = open_file_at(key, inc, &name, "a version file", true).ok()??;
        read_record(key, file, false).ok()
    };
    let (Some(this), Some(next)) = (header(old), header(old + 1)) else {
        return true;
    };
    next.header.prev.as_ref() != Some(&this.header.version) || mark(inc, old + 1, &next)
}

/// Marks `record` (the file at `generation`) confirmed; `true` if it is (now) marked.
fn mark(inc: BorrowedFd<'_>, generation: u64, record: &Record) -> bool {
    if record.header.confirmed {
        return true;
    }
    let offset = record.header.mark_offset();
    if record.writable {
        return record.file.write_all_at(&[CONFIRMED], offset).is_ok();
    }
    // Opened read-only: open the same file for writing, by name, and check it is the same.
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let name = version_file(generation);
    let Ok(fd) = rustix::fs::openat(inc, name.as_str(), flags, rustix::fs::Mode::empty()) else {
        return false;
    };
    let same = rustix::fs::fstat(&fd).is_ok_and(|s| id_of(&s) == record.id);
    same && File::from(fd).write_all_at(&[CONFIRMED], offset).is_ok()
}

/// A complete version file not yet linked: unnamed (`O_TMPFILE`) where the file system has
/// them, else named in the directory's `.fence` (flocked while in use, so that a sweep can
/// tell a dead writer's leftover).
struct Temp {
    file: File,
    mark_offset: u64,
    named: Option<(OwnedFd, String)>,
}

impl Temp {
    fn write(
        object: &Object<'_>,
        inc: BorrowedFd<'_>,
        bytes: &[u8],
        mark_offset: u64,
    ) -> Result<Temp, Error> {
        let bits = object.tree.modes.file;
        let unnamed = OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC;
        let (fd, named) = match object.tree.unnamed_temps() {
            true => match rustix::fs::openat(inc, ".", unnamed, mode(bits)) {
                Ok(fd) => (fd, None),
                Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => Temp::named(object)?,
                Err(e) => return Err(fs_error(object.key, "cannot create a temp file", e)),
            },
            false => Temp::named(object)?,
        };
        rustix::fs::fchmod(&fd, mode(bits))
            .map_err(|e| fs_error(object.key, "cannot set the temp file's mode", e))?;
        let mut file = File::from(fd);
        write_synced(object.key, &mut file, bytes)?;
        Ok(Temp {
            file,
            mark_offset,
            named,
        })
    }

    /// A named temp file in the object's `.fence`, flocked.
    fn named(object: &Object<'_>) -> Result<(OwnedFd, Option<(OwnedFd, String)>), Error> {
        let key = object.key;
        let internal = object.tree.internal(key, object.parent)?;
        let name = format!("{TMP_PREFIX}{}", random_name());
        let flags = OFlags::RDWR
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&internal, name.as_str(), flags, mode(0o600))
            .map_err(|e| fs_error(key, "cannot create a temp file", e))?;
        // A sweep that locks it first takes it for a dead writer's: this write fails, not
        // committed, and its caller retries.
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| fs_error(key, "cannot mark the temp file in use", e))?;
        Ok((fd, Some((internal, name))))
    }

    /// Links the temp file as `name` in `inc`: fails with `EEXIST` if that name exists.
    fn link(&self, inc: BorrowedFd<'_>, name: &str) -> Result<(), Errno> {
        match &self.named {
            Some((internal, temp)) => {
                rustix::fs::linkat(internal, temp.as_str(), inc, name, AtFlags::empty())
            }
            None => {
                let path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
                rustix::fs::linkat(rustix::fs::CWD, path, inc, name, AtFlags::SYMLINK_FOLLOW)
            }
        }
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some((internal, name)) = &self.named {
            let _ = remove(internal.as_fd(), name, false);
        }
    }
}

/// A random 32-hex-digit name part for scratch names no one else uses.
fn random_name() -> String {
    let entropy = fence_core::Entropy::from_os();
    crate::layout::random_hex([entropy.next_u64(), entropy.next_u64()])
}

/// The bytes of a version file, and where its confirmation mark is.
pub(crate) fn record_bytes(
    version: &Version,
    prev: Option<&Version>,
    change: &Change<'_>,
) -> (Vec<u8>, u64) {
    let (kind, body) = match change {
        Change::Put(body) => (Kind::Put(body.len() as u64), *body),
        Change::Delete => (Kind::Deleted, &[][..]),
    };
    let mut bytes = encode_header(version, prev, kind).into_bytes();
    let mark = bytes.len() as u64 - 2;
    bytes.extend_from_slice(body);
    (bytes, mark)
}

/// Reads a version file: its header (checked against the file's length) and, if `whole`,
/// its body. The body never changes once linked, so the length read at open holds.
fn read_record(key: &Key, file: ReadFile, whole: bool) -> Result<Record, Error> {
    read_with(key, file, whole, parse_header)
}

/// Reads a record file of the first layout, whole.
fn read_legacy(key: &Key, file: ReadFile) -> Result<Record, Error> {
    read_with(key, file, true, parse_legacy_header)
}

fn read_with(
    key: &Key,
    mut file: ReadFile,
    whole: bool,
    parse: fn(&Key, &[u8]) -> Result<Header, Error>,
) -> Result<Record, Error> {
    let first = if whole {
        FIRST_READ
    } else {
        MAX_HEADER_LEN as u64
    };
    // A stray huge file costs a page, not its size: the rest is read only once the header
    // vouches for the length.
    let mut bytes = vec![0; file.len.min(first) as usize];
    read_exact(key, &mut file.file, &mut bytes)?;
    let header = parse(key, &bytes)?;
    check_length(key, &header, file.len)?;
    if whole {
        let start = bytes.len();
        bytes.resize(file.len as usize, 0);
        read_exact(key, &mut file.file, &mut bytes[start..])?;
        bytes.drain(..header.header_len);
    } else {
        bytes.clear();
    }
    Ok(Record {
        header,
        body: bytes,
        id: file.id,
        file: file.file,
        writable: file.writable,
    })
}
