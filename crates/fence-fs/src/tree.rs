//! The root and the directories of keys: every path is opened one component at a time
//! relative to the root's descriptor with `O_NOFOLLOW`, so a symlink anywhere below the root
//! is refused and nothing outside the root is ever read or written.

use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fence_core::{Error, ErrorKind, Key};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::layout::{object_path, segment_of, INTERNAL_DIR, OBJECT_SUFFIX};
use crate::sys::{
    entries, fs_error, id_of, kind_of, make_dir, mode, open_dir_at, open_or_make_dir, path_shown,
    FileId, DIR_FLAGS,
};

/// The modes of what a store creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// Mode of version files (and the root's marker and probe files).
    pub file: u32,
    /// Mode of key, object, incarnation and internal directories.
    pub dir: u32,
}

impl Default for Modes {
    fn default() -> Self {
        Modes {
            file: 0o600,
            dir: 0o700,
        }
    }
}

/// The root directory, held open, and what this handle knows to be durable below it.
#[derive(Debug, Clone)]
pub struct Tree {
    root_path: PathBuf,
    root: Arc<OwnedFd>,
    durable: Arc<Mutex<HashSet<FileId>>>,
    /// The modes of what this handle creates.
    pub modes: Modes,
    /// Opened for reading only: nothing below the root is created or written.
    pub read_only: bool,
    /// The largest body written or read ([`fence_core::DEFAULT_RECORD_LIMIT`] unless set).
    pub record_limit: usize,
    /// New versions are written to unnamed files (`O_TMPFILE`) and linked through
    /// `/proc/self/fd`: nothing is left behind by a writer that dies. Else named temp files.
    unnamed_temps: bool,
}

/// Past this many directories the durable set is forgotten (and rebuilt, one `fsync` per
/// directory), so a handle writing ever new directories stays bounded in memory.
const DURABLE_SET_LIMIT: usize = 65_536;

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
    /// To read: nothing is created or synced; a missing directory is `None`.
    Read,
    /// To write an existing object: each directory's entry is made durable first.
    Write,
    /// To create an object: missing directories are created, and each entry made durable.
    Create,
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

/// The file in a root's `.fence` that marks it as a root (made by every writable open, never
/// removed).
const ROOT_MARKER: &str = "root";
/// The lock directory of roots of the first layout: marks them as roots too.
const OLD_LOCKS: &str = "locks";

/// Refuses a root inside a fence-fs tree: below another root (one whose `.fence` holds the
/// root marker), so also in its key directories and `.fence` directories. Such a root would
/// reach the outer tree's objects under other keys: two names for one record is a
/// configuration error, even though every writer still works on the same files. A tree
/// opened later *above* an existing root cannot be seen from here; its writes stay correct
/// for the same reason. A `.fence` directory of some other program is not a root.
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

/// Opens (creating it with exactly mode `bits` if missing) the regular file `name` in `dir`
/// without blocking on something else there: a FIFO, socket, device or directory is `ENXIO`.
fn touch(dir: BorrowedFd<'_>, name: &str, bits: u32) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags | OFlags::CREATE | OFlags::EXCL, mode(bits))
    {
        Ok(fd) => {
            rustix::fs::fchmod(&fd, mode(bits))?;
            fd
        }
        Err(Errno::EXIST) => rustix::fs::openat(dir, name, flags, Mode::empty())?,
        Err(e) => return Err(e),
    };
    match FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) {
        FileType::RegularFile => Ok(fd),
        _ => Err(Errno::NXIO),
    }
}

/// Checks that `internal` is writable without leaving a file behind, even if killed: an
/// unnamed `O_TMPFILE` file where the file system has them, else one fixed-name probe that
/// the next open reuses.
fn probe_writable(internal: BorrowedFd<'_>, bits: u32) -> Result<(), Errno> {
    let unnamed = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
    match rustix::fs::openat(internal, ".", unnamed, mode(bits)) {
        Ok(_unnamed) => return Ok(()),
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {}
        Err(e) => return Err(e),
    }
    drop(touch(internal, PROBE, bits)?);
    match rustix::fs::unlinkat(internal, PROBE, AtFlags::empty()) {
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

/// Which probe pair names one file in `internal`, if any. The first name of each pair is a
/// permanent file there (created once, never removed: nothing accumulates and no concurrent
/// open can remove it under another's probe); the second is only looked up.
fn aliased_names(internal: BorrowedFd<'_>, bits: u32) -> Result<Option<String>, Errno> {
    for (name, alias) in ALIAS_PROBES {
        let file = rustix::fs::fstat(touch(internal, name, bits)?)?;
        match rustix::fs::statat(internal, alias, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(other) if id_of(&other) == id_of(&file) => {
                return Ok(Some(format!("{name:?} and {alias:?}")));
            }
            Ok(_) | Err(Errno::NOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

impl Tree {
    /// Opens `root`: refuses a root inside another fence-fs tree; unless `read_only`, creates
    /// the internal directory and the root marker, checks that the root is writable and that
    /// its file system tells apart names that differ only in case or Unicode normalisation.
    /// A read-only open creates nothing.
    pub fn open(root: &Path, modes: Modes, read_only: bool) -> Result<Tree, Error> {
        check_root_dir(root)?;
        refuse_nested(root)?;
        let root_fd = rustix::fs::open(root, DIR_FLAGS.difference(OFlags::NOFOLLOW), Mode::empty())
            .map_err(|e| root_error(root, "cannot be opened", root_kind(e), Some(e.into())))?;
        if !read_only {
            prepare(root, root_fd.as_fd(), modes)?;
        }
        Ok(Tree {
            root_path: root.to_path_buf(),
            root: Arc::new(root_fd),
            durable: Arc::default(),
            modes,
            read_only,
            record_limit: fence_core::DEFAULT_RECORD_LIMIT,
            unnamed_temps: Path::new("/proc/self/fd").is_dir(),
        })
    }

    /// Whether new versions go to unnamed temp files (see [`Tree`]).
    pub fn unnamed_temps(&self) -> bool {
        self.unnamed_temps
    }

    /// The root as given to `open`.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// Opens the directory holding `key`'s object, reached as `reach` says. `None` when a
    /// directory is missing and `reach` does not create.
    pub fn dir(&self, key: &Key, dirs: &[String], reach: Reach) -> Result<Option<Dir<'_>>, Error> {
        let mut dir = Dir::Root(self.root.as_fd());
        for name in dirs {
            let (next, synced) = match open_dir_at(dir.as_fd(), name) {
                Ok(fd) => (fd, false),
                Err(Errno::NOENT) if reach != Reach::Create => return Ok(None),
                Err(Errno::NOENT) => make_dir(dir.as_fd(), name, self.modes.dir)
                    .map(|fd| (fd, true))
                    .map_err(|e| fs_error(key, "cannot create a directory of the key", e))?,
                Err(e) => return Err(fs_error(key, "cannot open a directory of the key", e)),
            };
            if reach != Reach::Read {
                self.make_durable(key, dir.as_fd(), next.as_fd(), synced)?;
            }
            dir = Dir::Below(next);
        }
        Ok(Some(dir))
    }

    /// Makes `child`'s entry in `parent` durable: `fsync(parent)`, once per directory and
    /// handle. Whether this handle created `child` or found it does not matter: a writer that
    /// crashed between making it and syncing its parent leaves a directory that is visible
    /// but would not survive a power loss, and nothing below it would either.
    /// `synced`: the parent was synced since `child` was made.
    pub fn make_durable(
        &self,
        key: &Key,
        parent: BorrowedFd<'_>,
        child: BorrowedFd<'_>,
        synced: bool,
    ) -> Result<(), Error> {
        let stat =
            rustix::fs::fstat(child).map_err(|e| fs_error(key, "cannot stat a directory", e))?;
        let id = id_of(&stat);
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

    fn durable(&self) -> std::sync::MutexGuard<'_, HashSet<FileId>> {
        self.durable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens (creating it if missing) the internal directory of `parent`, a directory of the
    /// tree: where creates are built and retired incarnations removed.
    pub fn internal(&self, key: &Key, parent: BorrowedFd<'_>) -> Result<OwnedFd, Error> {
        open_or_make_dir(parent, INTERNAL_DIR, self.modes.dir)
            .map_err(|e| fs_error(key, "cannot open the directory's .fence", e))
    }

    /// Every object entry under `prefix` (all for `None`): calls `visit` with the directory
    /// holding it, its name and its key, in no particular order. Walks the tree without
    /// following symlinks, skipping `.fence` and anything that cannot be an object. A
    /// directory that cannot be read (no permission, an I/O error) fails the walk, naming
    /// it: a listing never leaves out what it could not see; only entries that vanished or
    /// became symlinks since they were listed are skipped.
    pub fn walk_objects(
        &self,
        prefix: Option<&Key>,
        visit: &mut dyn FnMut(BorrowedFd<'_>, &str, Key, FileType),
    ) -> Result<(), Error> {
        walk(self.root.as_fd(), "", prefix.map(Key::as_str), visit)
            .map_err(|(path, errno)| list_error(&self.root_path, &path, errno))
    }
}

/// A writable open's preparation: the internal directory, the root marker, the probes.
fn prepare(root: &Path, root_fd: BorrowedFd<'_>, modes: Modes) -> Result<(), Error> {
    let fail =
        |what: &str, errno: Errno| root_error(root, what, root_kind(errno), Some(errno.into()));
    let internal = open_or_make_dir(root_fd, INTERNAL_DIR, modes.dir)
        .map_err(|e| fail("cannot create or open .fence (read-only?)", e))?;
    touch(internal.as_fd(), ROOT_MARKER, modes.file)
        .map_err(|e| fail("cannot mark .fence as a root's (.fence/root)", e))?;
    probe_writable(internal.as_fd(), modes.file).map_err(|e| fail("is not writable", e))?;
    let aliased = aliased_names(internal.as_fd(), modes.file)
        .map_err(|e| fail("cannot probe file names in .fence", e))?;
    if let Some(names) = aliased {
        let what = format!(
            "its file system treats {names} as one name (case-insensitive or normalising): \
             keys differing so would alias; use a case-sensitive file system"
        );
        return Err(root_error(root, &what, ErrorKind::Unsupported, None));
    }
    Ok(())
}

/// The error of a listing that could not read `path` (relative to the root; `""`: the root).
fn list_error(root: &Path, path: &str, errno: Errno) -> Error {
    let shown = path_shown(&root.join(path));
    let e = Error::new(kind_of(errno), format!("cannot list the directory {shown}"))
        .with_source(std::io::Error::from(errno))
        .not_committed();
    match Key::new(path) {
        Ok(key) => e.with_key(&key),
        Err(_) => e,
    }
}

/// Whether a walk may skip an entry that failed with `errno`: it is gone, or was swapped for
/// a symlink or a file since it was listed (not ours to follow). Anything else (no
/// permission, an I/O error) means the walk cannot see what is there.
fn vanished(errno: Errno) -> bool {
    matches!(errno, Errno::NOENT | Errno::LOOP | Errno::NOTDIR)
}

/// Whether key path `a` is `b` or below it.
fn under(a: &str, b: &str) -> bool {
    a == b || (a.starts_with(b) && a.as_bytes()[b.len()] == b'/')
}

/// Whether the subtree at key path `dir` can hold keys under `prefix`.
fn relevant(dir: &str, prefix: Option<&str>) -> bool {
    let Some(p) = prefix else { return true };
    dir.is_empty() || under(dir, p) || under(p, dir)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// The walk of [`Tree::walk_objects`] below `dir` (key path `path`); fails with the key path
/// of what it could not read and why.
fn walk(
    dir: BorrowedFd<'_>,
    path: &str,
    prefix: Option<&str>,
    visit: &mut dyn FnMut(BorrowedFd<'_>, &str, Key, FileType),
) -> Result<(), (String, Errno)> {
    for (name, file_type) in entries(dir).map_err(|e| (path.to_owned(), e))? {
        if name == INTERNAL_DIR {
            continue;
        }
        let file_type = match file_type {
            FileType::Unknown => match rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                Err(e) if vanished(e) => continue,
                Err(e) => return Err((join(path, &name), e)),
            },
            known => known,
        };
        if file_type == FileType::Directory && !name.ends_with(OBJECT_SUFFIX) {
            let sub = join(path, &name);
            if !relevant(&sub, prefix) {
                continue;
            }
            let fd = match rustix::fs::openat(dir, &name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(e) if vanished(e) => continue,
                Err(e) => return Err((sub, e)),
            };
            walk(fd.as_fd(), &sub, prefix, visit)?;
            continue;
        }
        let key = segment_of(&name).and_then(|s| Key::new(join(path, s)).ok());
        if let Some(key) = key.filter(|k| object_path(k).is_ok()) {
            if prefix.is_none_or(|p| under(key.as_str(), p)) {
                visit(dir, &name, key, file_type);
            }
        }
    }
    Ok(())
}
