//! The blocking file work: every path is opened one component at a time relative to the
//! root's descriptor with `O_NOFOLLOW`, so a symlink anywhere below the root is refused and
//! nothing outside the root is ever read or written.
//!
//! Every directory of the tree that holds objects has a `.fence` directory next to them: the
//! objects' lock files, named like the object files, and in `.fence/tmp` their temp files.

use std::collections::HashSet;
use std::fs::{File, TryLockError};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fence_core::{Commit, Error, ErrorKind, Key};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::layout::{Header, INTERNAL_DIR, MAX_HEADER_LEN, TEMP_DIR};

/// The root directory, held open, and what this handle knows to be durable below it.
#[derive(Debug, Clone)]
pub struct Tree {
    root_path: PathBuf,
    root: Arc<OwnedFd>,
    durable: Arc<Mutex<HashSet<DirId>>>,
    /// Mode of object, lock and temp files.
    pub file_mode: u32,
    /// Mode of directories created for keys.
    pub dir_mode: u32,
}

/// A directory's identity: device and inode.
type DirId = (u64, u64);

/// Past this many directories the durable set is forgotten (and rebuilt, one `fsync` per
/// directory), so a handle writing ever new directories stays bounded in memory.
const DURABLE_SET_LIMIT: usize = 65_536;

/// The first read of a whole object: records up to this size take one read.
const FIRST_READ: u64 = 4096;

/// Mode of every internal directory (`.fence`, `.fence/tmp`).
const INTERNAL_MODE: u32 = 0o700;

/// A directory of the tree: the root itself or one opened below it.
#[derive(Debug)]
pub enum Dir<'a> {
    /// The root.
    Root(BorrowedFd<'a>),
    /// A directory below the root.
    Below(OwnedFd),
}

impl AsFd for Dir<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Root(fd) => *fd,
            Dir::Below(fd) => fd.as_fd(),
        }
    }
}

/// How a key's directories are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// To read or delete: nothing is created or synced; a missing directory is `None`.
    Read,
    /// To write an existing object: each directory's entry is made durable first.
    Write,
    /// To create an object: missing directories are created, and each entry made durable.
    Create,
}

/// A key's file lock, held: released when dropped (and by the kernel when the process dies).
/// Carries the `.fence` directory it lives in, where the key's temp file goes too.
#[derive(Debug)]
pub struct Locked {
    internal: OwnedFd,
    _lock: File,
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// The kind an errno maps to.
pub fn kind_of(errno: Errno) -> ErrorKind {
    match errno {
        Errno::ACCESS | Errno::PERM | Errno::ROFS => ErrorKind::PermissionDenied,
        // O_NOFOLLOW met a symlink: refused, whatever it points at.
        Errno::LOOP => ErrorKind::PermissionDenied,
        Errno::NOENT => ErrorKind::NotFound,
        Errno::NOTDIR | Errno::ISDIR => ErrorKind::Corrupt,
        Errno::NOSPC | Errno::DQUOT | Errno::IO => ErrorKind::Unavailable,
        _ => ErrorKind::Other,
    }
}

/// An error of `what` failing with `errno`, about `key`; not committed.
pub fn fs_error(key: &Key, what: &str, errno: Errno) -> Error {
    let hint = if errno == Errno::LOOP {
        " (a symlink below the fence-fs root is refused)"
    } else {
        ""
    };
    Error::new(kind_of(errno), format!("{what}{hint}"))
        .with_key(key)
        .with_source(std::io::Error::from(errno))
        .not_committed()
}

/// Longest part of a path that an error message repeats.
const SHOWN_PATH_BYTES: usize = 100;

/// `path` for an error message: whole up to [`SHOWN_PATH_BYTES`], else its last that many
/// bytes (the end names the directory), saying how long the whole path was. Paths come from
/// users and can be up to 4 KiB long.
pub fn path_shown(path: &Path) -> String {
    let text = path.display().to_string();
    if text.len() <= SHOWN_PATH_BYTES {
        return text;
    }
    let mut start = text.len() - SHOWN_PATH_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{} ({} bytes)", &text[start..], text.len())
}

fn root_error(root: &Path, what: &str, kind: ErrorKind, source: Option<std::io::Error>) -> Error {
    let e = Error::new(kind, format!("fence-fs root {}: {what}", path_shown(root))).not_committed();
    match source {
        Some(s) => e.with_source(s),
        None => e,
    }
}

/// The kind of a failure to open a root: missing, forbidden, or else unusable.
fn root_kind(errno: Errno) -> ErrorKind {
    match kind_of(errno) {
        ErrorKind::NotFound => ErrorKind::NotFound,
        ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
        _ => ErrorKind::InvalidInput,
    }
}

/// Checks that `root` exists and is a directory.
fn check_root_dir(root: &Path) -> Result<(), Error> {
    let meta = std::fs::metadata(root).map_err(|e| {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
            _ => ErrorKind::InvalidInput,
        };
        root_error(root, "cannot be read", kind, Some(e))
    })?;
    if meta.is_dir() {
        Ok(())
    } else {
        let e = std::io::Error::from(Errno::NOTDIR);
        Err(root_error(
            root,
            "is not a directory",
            ErrorKind::InvalidInput,
            Some(e),
        ))
    }
}

/// The file in a root's `.fence` that marks it as a root (made by every open, never removed).
const ROOT_MARKER: &str = "root";
/// The lock directory of roots of the earlier layout: marks them as roots too.
const OLD_LOCKS: &str = "locks";

/// Refuses a root inside a fence-fs tree: below another root (one whose `.fence` holds the
/// root marker), so also in its key directories and `.fence` directories. Such a root would
/// reach the outer tree's objects under other keys. (The locks would still agree, being per
/// object file, but two names for one record is a configuration error.) A tree opened later
/// *above* an existing root cannot be seen from here; its writes stay correct for the same
/// reason. A `.fence` directory of some other program is not a root and refuses nothing.
fn refuse_nested(root: &Path) -> Result<(), Error> {
    let real = std::fs::canonicalize(root)
        .map_err(|e| root_error(root, "cannot be resolved", ErrorKind::InvalidInput, Some(e)))?;
    for outer in real.ancestors().skip(1) {
        let internal = outer.join(INTERNAL_DIR);
        let marked = |name: &str, dir: bool| {
            std::fs::symlink_metadata(internal.join(name)).is_ok_and(|m| m.is_dir() == dir)
        };
        if marked(ROOT_MARKER, false) || marked(OLD_LOCKS, true) {
            let what = format!(
                "lies inside the fence-fs root {}: open that root instead",
                path_shown(outer)
            );
            return Err(root_error(root, &what, ErrorKind::InvalidInput, None));
        }
    }
    Ok(())
}

/// Marks `internal` (a root's `.fence`) as a root's.
fn mark_root(internal: BorrowedFd<'_>) -> Result<(), Errno> {
    let flags = OFlags::RDONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(internal, ROOT_MARKER, flags, mode(0o600)).map(drop)
}

impl Tree {
    /// Opens `root`: refuses a root inside another fence-fs tree, creates the internal
    /// directories, checks that it is writable and that its file system tells names apart
    /// that differ only in case or Unicode normalisation.
    pub fn open(root: &Path) -> Result<Tree, Error> {
        check_root_dir(root)?;
        refuse_nested(root)?;
        let fail =
            |what: &str, errno: Errno| root_error(root, what, root_kind(errno), Some(errno.into()));
        let root_fd = rustix::fs::open(root, DIR_FLAGS.difference(OFlags::NOFOLLOW), Mode::empty())
            .map_err(|e| fail("cannot be opened", e))?;
        let internal = open_or_make_dir(root_fd.as_fd(), INTERNAL_DIR, INTERNAL_MODE)
            .map_err(|e| fail("cannot create or open .fence (read-only?)", e))?;
        mark_root(internal.as_fd()).map_err(|e| fail("cannot mark .fence as a root's", e))?;
        let tmp = open_or_make_dir(internal.as_fd(), TEMP_DIR, INTERNAL_MODE)
            .map_err(|e| fail("cannot create or open .fence/tmp", e))?;
        probe_writable(tmp.as_fd()).map_err(|e| fail("is not writable", e))?;
        if let Some(names) =
            aliased_names(tmp.as_fd()).map_err(|e| fail("cannot probe file names", e))?
        {
            return Err(root_error(
                root,
                &format!(
                    "its file system treats {names} as one name (case-insensitive or \
                     normalising): keys differing so would alias; use a case-sensitive file system"
                ),
                ErrorKind::Unsupported,
                None,
            ));
        }
        Ok(Tree {
            root_path: root.to_path_buf(),
            root: Arc::new(root_fd),
            durable: Arc::default(),
            file_mode: 0o600,
            dir_mode: 0o700,
        })
    }

    /// The root as given to `open`.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// Tries the exclusive lock of object `file` in `dir` once, without waiting: `None` when
    /// another holds it. The lock file is `dir/.fence/<file>`, so every root through which
    /// the object is reached takes the same lock.
    pub fn try_lock(&self, key: &Key, dir: &Dir<'_>, file: &str) -> Result<Option<Locked>, Error> {
        let internal = open_or_make_dir(dir.as_fd(), INTERNAL_DIR, INTERNAL_MODE)
            .map_err(|e| fs_error(key, "cannot open the key's .fence directory", e))?;
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&internal, file, flags, mode(self.file_mode))
            .map_err(|e| fs_error(key, "cannot open the key's lock file", e))?;
        let lock = File::from(fd);
        match lock.try_lock() {
            Ok(()) => Ok(Some(Locked {
                internal,
                _lock: lock,
            })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(Error::new(
                ErrorKind::Other,
                "cannot lock the key's lock file",
            )
            .with_key(key)
            .with_source(e)
            .not_committed()),
        }
    }

    /// Opens the directory holding `key`'s object, reached as `reach` says. `None` when a
    /// directory is missing and `reach` does not create.
    pub fn dir(&self, key: &Key, dirs: &[String], reach: Reach) -> Result<Option<Dir<'_>>, Error> {
        let mut dir = Dir::Root(self.root.as_fd());
        for name in dirs {
            let (next, synced) = match open_dir_at(dir.as_fd(), name) {
                Ok(fd) => (fd, false),
                Err(Errno::NOENT) if reach != Reach::Create => return Ok(None),
                Err(Errno::NOENT) => make_dir(dir.as_fd(), name, self.dir_mode)
                    .map(|fd| (fd, true))
                    .map_err(|e| fs_error(key, "cannot create a directory of the key", e))?,
                Err(e) => return Err(fs_error(key, "cannot open a directory of the key", e)),
            };
            if reach != Reach::Read {
                self.make_durable(key, &dir, &next, synced)?;
            }
            dir = Dir::Below(next);
        }
        Ok(Some(dir))
    }

    /// Makes `child`'s entry in `parent` durable: `fsync(parent)`, once per directory and
    /// handle. Whether this handle created `child` or found it does not matter: a writer that
    /// crashed between its `mkdir` and its `fsync` leaves a directory that is visible but
    /// would not survive a power loss, and no object below it would either.
    /// `synced`: the parent was synced since `child` was made (by [`make_dir`]).
    fn make_durable(
        &self,
        key: &Key,
        parent: &Dir<'_>,
        child: &OwnedFd,
        synced: bool,
    ) -> Result<(), Error> {
        let stat =
            rustix::fs::fstat(child).map_err(|e| fs_error(key, "cannot stat a directory", e))?;
        let id = (stat.st_dev as u64, stat.st_ino as u64);
        if !synced {
            if self.durable().contains(&id) {
                return Ok(());
            }
            rustix::fs::fsync(parent)
                .map_err(|e| fs_error(key, "cannot sync a directory's parent", e))?;
        }
        let mut durable = self.durable();
        if durable.len() >= DURABLE_SET_LIMIT {
            durable.clear();
        }
        durable.insert(id);
        Ok(())
    }

    fn durable(&self) -> std::sync::MutexGuard<'_, HashSet<DirId>> {
        self.durable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens an object file for reading, with its length: `None` if absent; a symlink or a
    /// non-file is refused.
    fn open_object(
        &self,
        key: &Key,
        dir: &Dir<'_>,
        file: &str,
    ) -> Result<Option<(File, u64)>, Error> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(dir, file, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(fs_error(key, "cannot open the object file", e)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| fs_error(key, "cannot stat", e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(Error::corrupt(
                key,
                "the object's path is not a regular file",
            ));
        }
        Ok(Some((File::from(fd), stat.st_size as u64)))
    }

    /// Reads the whole object: header and body. Object files never change once renamed into
    /// place (a write renames a new file over them), so the length read at open holds.
    pub fn read_object(
        &self,
        key: &Key,
        dir: &Dir<'_>,
        file: &str,
    ) -> Result<Option<(Header, Vec<u8>)>, Error> {
        let Some((mut f, len)) = self.open_object(key, dir, file)? else {
            return Ok(None);
        };
        // One read for a record up to a page; a larger file is only read in full once its
        // header vouches for its length (a stray huge file costs a page, not its size).
        let mut bytes = vec![0; len.min(FIRST_READ) as usize];
        f.read_exact(&mut bytes).map_err(|e| read_error(key, e))?;
        let header = crate::layout::parse_header(key, &bytes)?;
        crate::layout::check_length(key, &header, len)?;
        let first = bytes.len();
        bytes.resize(len as usize, 0);
        f.read_exact(&mut bytes[first..])
            .map_err(|e| read_error(key, e))?;
        bytes.drain(..header.header_len);
        Ok(Some((header, bytes)))
    }

    /// Reads only the object's header (and checks the file's length against it).
    pub fn read_header(
        &self,
        key: &Key,
        dir: &Dir<'_>,
        file: &str,
    ) -> Result<Option<Header>, Error> {
        let Some((mut f, len)) = self.open_object(key, dir, file)? else {
            return Ok(None);
        };
        let mut head = vec![0; len.min(MAX_HEADER_LEN as u64) as usize];
        f.read_exact(&mut head).map_err(|e| read_error(key, e))?;
        let header = crate::layout::parse_header(key, &head)?;
        crate::layout::check_length(key, &header, len)?;
        Ok(Some(header))
    }

    /// Writes `bytes` to the temp file of object `file`, `.fence/tmp/<file>` next to its lock,
    /// and syncs it. Nothing is visible yet. Returns the temp directory.
    pub fn write_temp(
        &self,
        key: &Key,
        locked: &Locked,
        file: &str,
        bytes: &[u8],
    ) -> Result<OwnedFd, Error> {
        let tmp = open_or_make_dir(locked.internal.as_fd(), TEMP_DIR, INTERNAL_MODE)
            .map_err(|e| fs_error(key, "cannot open the key's temp directory", e))?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&tmp, file, flags, mode(self.file_mode))
            .map_err(|e| fs_error(key, "cannot create the temp file", e))?;
        // Exact mode whatever the umask or a crashed writer's leftover had.
        rustix::fs::fchmod(&fd, mode(self.file_mode))
            .map_err(|e| fs_error(key, "cannot set the temp file's mode", e))?;
        let mut f = File::from(fd);
        f.write_all(bytes).map_err(|e| write_error(key, e))?;
        f.sync_all().map_err(|e| write_error(key, e))?;
        Ok(tmp)
    }

    /// Renames the temp file over the object: the commit point.
    pub fn rename_temp(
        &self,
        key: &Key,
        tmp: &OwnedFd,
        file: &str,
        dir: &Dir<'_>,
    ) -> Result<(), Error> {
        rustix::fs::renameat(tmp, file, dir, file)
            .map_err(|e| fs_error(key, "cannot rename the temp file over the object", e))
    }

    /// Removes the object file: the commit point of a delete.
    pub fn unlink(&self, key: &Key, dir: &Dir<'_>, file: &str) -> Result<(), Error> {
        rustix::fs::unlinkat(dir, file, AtFlags::empty())
            .map_err(|e| fs_error(key, "cannot remove the object file", e))
    }

    /// Syncs `dir` after a commit in it: a failure is ambiguous (the change is visible, but
    /// may not survive a power loss).
    pub fn sync_dir(&self, key: &Key, dir: &Dir<'_>) -> Result<(), Error> {
        rustix::fs::fsync(dir).map_err(|e| {
            fs_error(key, "committed, but cannot sync the directory", e)
                .with_commit(Commit::Ambiguous)
        })
    }
}

fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits as _)
}

fn read_error(key: &Key, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Unavailable, "cannot read the object file")
        .with_key(key)
        .with_source(e)
        .not_committed()
}

fn write_error(key: &Key, e: std::io::Error) -> Error {
    let kind = match e.raw_os_error().map(Errno::from_raw_os_error) {
        Some(errno) => kind_of(errno),
        None => ErrorKind::Other,
    };
    Error::new(kind, "cannot write the temp file")
        .with_key(key)
        .with_source(e)
        .not_committed()
}

/// Opens directory `name` below `parent`, creating it (see [`make_dir`]) when missing.
fn open_or_make_dir(parent: BorrowedFd<'_>, name: &str, bits: u32) -> Result<OwnedFd, Errno> {
    match open_dir_at(parent, name) {
        Err(Errno::NOENT) => make_dir(parent, name, bits),
        other => other,
    }
}

/// Creates directory `name` below `parent` (or finds it made by a racer), syncs `parent` so
/// the entry is durable, and opens it. The sync happens whether this call or a racer made
/// it: a racer may have crashed before its own sync.
fn make_dir(parent: BorrowedFd<'_>, name: &str, bits: u32) -> Result<OwnedFd, Errno> {
    match rustix::fs::mkdirat(parent, name, mode(bits)) {
        Ok(()) | Err(Errno::EXIST) => rustix::fs::fsync(parent)?,
        Err(e) => return Err(e),
    }
    open_dir_at(parent, name)
}

/// Opens directory `name` below `parent` without following a symlink. Linux answers
/// `ENOTDIR` for a symlink opened with `O_DIRECTORY | O_NOFOLLOW`; that case is reported as
/// `ELOOP`, so every refused symlink maps to one kind.
fn open_dir_at(parent: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    match rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty()) {
        Err(Errno::NOTDIR) => match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => Err(Errno::LOOP),
            _ => Err(Errno::NOTDIR),
        },
        other => other,
    }
}

/// Checks that `tmp` is writable without leaving a file behind, even if killed: an unnamed
/// `O_TMPFILE` file where the file system has them, else one fixed-name probe that the next
/// open reuses.
fn probe_writable(tmp: BorrowedFd<'_>) -> Result<(), Errno> {
    let unnamed = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
    match rustix::fs::openat(tmp, ".", unnamed, mode(0o600)) {
        Ok(_unnamed) => return Ok(()),
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {}
        Err(e) => return Err(e),
    }
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    drop(rustix::fs::openat(tmp, PROBE, flags, mode(0o600))?);
    match rustix::fs::unlinkat(tmp, PROBE, AtFlags::empty()) {
        // Another process opening the same root removed it first.
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

const PROBE: &str = "probe";

/// Pairs of names that a case-folding or normalising file system takes for one: lower and
/// upper case; a precomposed "é" and "e" with a combining acute accent.
const ALIAS_PROBES: [(&str, &str); 2] = [
    ("case-probe", "CASE-PROBE"),
    ("norm-probe-\u{e9}", "norm-probe-e\u{301}"),
];

/// Which probe pair names one file in `tmp`, if any. The first name of each pair is a
/// permanent file there (created once, never removed: nothing accumulates and no concurrent
/// open can remove it under another's probe); the second is only looked up.
fn aliased_names(tmp: BorrowedFd<'_>) -> Result<Option<String>, Errno> {
    let flags = OFlags::RDONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for (name, alias) in ALIAS_PROBES {
        let file = rustix::fs::fstat(rustix::fs::openat(tmp, name, flags, mode(0o600))?)?;
        match rustix::fs::statat(tmp, alias, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(other) if (other.st_dev, other.st_ino) == (file.st_dev, file.st_ino) => {
                return Ok(Some(format!("{name:?} and {alias:?}")));
            }
            Ok(_) | Err(Errno::NOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

impl Tree {
    /// The keys equal to or under `prefix` (all for `None`), sorted. Walks the tree without
    /// following symlinks, skipping `.fence/`, temp files and anything not an object file.
    pub fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let mut keys = Vec::new();
        walk(self.root.as_fd(), "", prefix.map(Key::as_str), &mut keys)?;
        keys.retain(|k| prefix.is_none_or(|p| k.starts_with(p)));
        keys.sort();
        Ok(keys)
    }
}

fn list_error(errno: Errno) -> Error {
    Error::new(kind_of(errno), "cannot list the fence-fs root")
        .with_source(std::io::Error::from(errno))
        .not_committed()
}

/// Whether the subtree at key path `dir` can hold keys under `prefix`.
fn relevant(dir: &str, prefix: Option<&str>) -> bool {
    let Some(p) = prefix else { return true };
    let under = |a: &str, b: &str| a == b || (a.starts_with(b) && a.as_bytes()[b.len()] == b'/');
    dir.is_empty() || under(dir, p) || under(p, dir)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

fn walk(
    dir: BorrowedFd<'_>,
    path: &str,
    prefix: Option<&str>,
    keys: &mut Vec<Key>,
) -> Result<(), Error> {
    let entries = rustix::fs::Dir::read_from(dir).map_err(list_error)?;
    for entry in entries {
        let entry = entry.map_err(list_error)?;
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if name == "." || name == ".." || name == INTERNAL_DIR {
            continue;
        }
        let file_type = match entry.file_type() {
            FileType::Unknown => match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                Err(_) => continue,
            },
            known => known,
        };
        visit(dir, path, name, file_type, prefix, keys)?;
    }
    Ok(())
}

fn visit(
    dir: BorrowedFd<'_>,
    path: &str,
    name: &str,
    file_type: FileType,
    prefix: Option<&str>,
    keys: &mut Vec<Key>,
) -> Result<(), Error> {
    match file_type {
        FileType::Directory if !name.ends_with(crate::layout::OBJECT_SUFFIX) => {
            let sub = join(path, name);
            if !relevant(&sub, prefix) {
                return Ok(());
            }
            // Gone or swapped for a symlink since it was listed: not ours to follow.
            let Ok(fd) = rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) else {
                return Ok(());
            };
            walk(fd.as_fd(), &sub, prefix, keys)
        }
        // An object's entry that is not a regular file (a directory or a symlink put there
        // by hand) is listed too: reading it then says what is wrong, instead of the key
        // vanishing from every listing. Key segments never end in the object suffix, so such
        // a name is never a directory of a longer key.
        _ => {
            let key =
                crate::layout::segment_of_file(name).and_then(|s| Key::new(join(path, s)).ok());
            if let Some(key) = key.filter(|k| crate::layout::object_path(k).is_ok()) {
                keys.push(key);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_are_cut_to_their_end_in_messages() {
        assert_eq!(path_shown(Path::new("/tmp/locks")), "/tmp/locks");
        let long = format!("/{}/é{}", "a".repeat(3000), "z".repeat(98));
        let shown = path_shown(Path::new(&long));
        assert!(shown.len() < 130, "{shown}");
        assert!(shown.ends_with(&format!("{} ({} bytes)", "z".repeat(98), long.len())));
    }
}
