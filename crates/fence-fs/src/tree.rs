//! The blocking file work: every path is opened one component at a time relative to the
//! root's descriptor with `O_NOFOLLOW`, so a symlink anywhere below the root is refused and
//! nothing outside the root is ever read or written.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fence_core::{Error, ErrorKind, Key};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::layout::{Header, INTERNAL_DIR, MAX_HEADER_LEN};

/// The root directory and the internal directories, held open.
#[derive(Debug, Clone)]
pub struct Tree {
    root_path: PathBuf,
    root: Arc<OwnedFd>,
    locks: Arc<OwnedFd>,
    tmp: Arc<OwnedFd>,
    /// Mode of object, lock and temp files.
    pub file_mode: u32,
    /// Mode of directories created for keys.
    pub dir_mode: u32,
}

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

fn root_error(root: &Path, what: &str, kind: ErrorKind, source: std::io::Error) -> Error {
    Error::new(kind, format!("fence-fs root {}: {what}", root.display()))
        .with_source(source)
        .not_committed()
}

impl Tree {
    /// Opens `root`, creates the internal directories and checks that it is writable.
    pub fn open(root: &Path) -> Result<Tree, Error> {
        let meta = std::fs::metadata(root).map_err(|e| {
            let kind = match e.kind() {
                std::io::ErrorKind::NotFound => ErrorKind::NotFound,
                std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::InvalidInput,
            };
            root_error(root, "cannot be read", kind, e)
        })?;
        if !meta.is_dir() {
            let e = std::io::Error::from(Errno::NOTDIR);
            return Err(root_error(
                root,
                "is not a directory",
                ErrorKind::InvalidInput,
                e,
            ));
        }
        let fail = |what: &str, errno: Errno| {
            let kind = match kind_of(errno) {
                ErrorKind::NotFound => ErrorKind::NotFound,
                ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::InvalidInput,
            };
            root_error(root, what, kind, errno.into())
        };
        let root_fd = rustix::fs::open(root, DIR_FLAGS.difference(OFlags::NOFOLLOW), Mode::empty())
            .map_err(|e| fail("cannot be opened", e))?;
        let internal = ensure_dir(root_fd.as_fd(), INTERNAL_DIR, 0o700)
            .map_err(|e| fail("cannot create or open .fence (read-only?)", e))?;
        let locks = ensure_dir(internal.as_fd(), "locks", 0o700)
            .map_err(|e| fail("cannot create or open .fence/locks", e))?;
        let tmp = ensure_dir(internal.as_fd(), "tmp", 0o700)
            .map_err(|e| fail("cannot create or open .fence/tmp", e))?;
        probe_writable(tmp.as_fd()).map_err(|e| fail("is not writable", e))?;
        Ok(Tree {
            root_path: root.to_path_buf(),
            root: Arc::new(root_fd),
            locks: Arc::new(locks),
            tmp: Arc::new(tmp),
            file_mode: 0o600,
            dir_mode: 0o700,
        })
    }

    /// The root as given to `open`.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// Takes the exclusive lock of `stem`, blocking; released when the file is dropped (and
    /// by the kernel when the process dies).
    pub fn lock(&self, key: &Key, stem: &str) -> Result<File, Error> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&*self.locks, stem, flags, mode(self.file_mode))
            .map_err(|e| fs_error(key, "cannot open the key's lock file", e))?;
        let file = File::from(fd);
        file.lock().map_err(|e| {
            Error::new(ErrorKind::Other, "cannot lock the key's lock file")
                .with_key(key)
                .with_source(e)
                .not_committed()
        })?;
        Ok(file)
    }

    /// Opens the directory holding `key`'s object, creating missing directories if `create`.
    /// `None` when it is missing and `create` is false.
    pub fn dir(&self, key: &Key, dirs: &[String], create: bool) -> Result<Option<Dir<'_>>, Error> {
        let mut dir = Dir::Root(self.root.as_fd());
        for name in dirs {
            let next = match open_dir_at(dir.as_fd(), name) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if !create => return Ok(None),
                Err(Errno::NOENT) => self.make_dir(key, &dir, name)?,
                Err(e) => return Err(fs_error(key, "cannot open a directory of the key", e)),
            };
            dir = Dir::Below(next);
        }
        Ok(Some(dir))
    }

    fn make_dir(&self, key: &Key, parent: &Dir<'_>, name: &str) -> Result<OwnedFd, Error> {
        match rustix::fs::mkdirat(parent, name, mode(self.dir_mode)) {
            // A new entry must be durable before an object below it is.
            Ok(()) => rustix::fs::fsync(parent)
                .map_err(|e| fs_error(key, "cannot sync a new directory's parent", e))?,
            Err(Errno::EXIST) => {}
            Err(e) => return Err(fs_error(key, "cannot create a directory of the key", e)),
        }
        open_dir_at(parent.as_fd(), name)
            .map_err(|e| fs_error(key, "cannot open a directory of the key", e))
    }

    /// Opens an object file for reading: `None` if absent; a symlink or a non-file is refused.
    fn open_object(&self, key: &Key, dir: &Dir<'_>, file: &str) -> Result<Option<File>, Error> {
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
        Ok(Some(File::from(fd)))
    }

    /// Reads the whole object: header and body.
    pub fn read_object(
        &self,
        key: &Key,
        dir: &Dir<'_>,
        file: &str,
    ) -> Result<Option<(Header, Vec<u8>)>, Error> {
        let Some(mut f) = self.open_object(key, dir, file)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).map_err(|e| read_error(key, e))?;
        let header = crate::layout::parse_header(key, &bytes)?;
        crate::layout::check_length(key, &header, bytes.len() as u64)?;
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
        let Some(f) = self.open_object(key, dir, file)? else {
            return Ok(None);
        };
        let len = f.metadata().map_err(|e| read_error(key, e))?.len();
        let mut head = Vec::with_capacity(MAX_HEADER_LEN);
        f.take(MAX_HEADER_LEN as u64)
            .read_to_end(&mut head)
            .map_err(|e| read_error(key, e))?;
        let header = crate::layout::parse_header(key, &head)?;
        crate::layout::check_length(key, &header, len)?;
        Ok(Some(header))
    }

    /// Writes `parts` to the key's temp file and syncs it. Nothing is visible yet.
    pub fn write_temp(&self, key: &Key, stem: &str, parts: &[&[u8]]) -> Result<(), Error> {
        let name = temp_name(stem);
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&*self.tmp, name.as_str(), flags, mode(self.file_mode))
            .map_err(|e| fs_error(key, "cannot create the temp file", e))?;
        // Exact mode whatever the umask or a crashed writer's leftover had.
        rustix::fs::fchmod(&fd, mode(self.file_mode))
            .map_err(|e| fs_error(key, "cannot set the temp file's mode", e))?;
        let mut f = File::from(fd);
        for part in parts {
            f.write_all(part).map_err(|e| write_error(key, e))?;
        }
        f.sync_all().map_err(|e| write_error(key, e))
    }

    /// Renames the key's temp file over its object: the commit point. Then syncs the
    /// directory; a failure there is ambiguous (the new object is visible, maybe not durable).
    pub fn commit_temp(
        &self,
        key: &Key,
        stem: &str,
        dir: &Dir<'_>,
        file: &str,
    ) -> Result<(), Error> {
        rustix::fs::renameat(&*self.tmp, temp_name(stem).as_str(), dir, file)
            .map_err(|e| fs_error(key, "cannot rename the temp file over the object", e))?;
        rustix::fs::fsync(dir).map_err(|e| {
            fs_error(key, "renamed, but cannot sync the directory", e)
                .with_commit(fence_core::Commit::Ambiguous)
        })
    }

    /// Removes the object file and syncs its directory (a sync failure is ambiguous).
    pub fn remove(&self, key: &Key, dir: &Dir<'_>, file: &str) -> Result<(), Error> {
        rustix::fs::unlinkat(dir, file, AtFlags::empty())
            .map_err(|e| fs_error(key, "cannot remove the object file", e))?;
        rustix::fs::fsync(dir).map_err(|e| {
            fs_error(key, "removed, but cannot sync the directory", e)
                .with_commit(fence_core::Commit::Ambiguous)
        })
    }
}

fn temp_name(stem: &str) -> String {
    format!("{stem}.tmp")
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

fn ensure_dir(parent: BorrowedFd<'_>, name: &str, bits: u32) -> Result<OwnedFd, Errno> {
    match rustix::fs::mkdirat(parent, name, mode(bits)) {
        Ok(()) => rustix::fs::fsync(parent)?,
        Err(Errno::EXIST) => {}
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
        if name == "." || name == ".." || (path.is_empty() && name == INTERNAL_DIR) {
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
        FileType::Directory => {
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
        FileType::RegularFile => {
            let key =
                crate::layout::segment_of_file(name).and_then(|s| Key::new(join(path, s)).ok());
            if let Some(key) = key.filter(|k| crate::layout::object_path(k).is_ok()) {
                keys.push(key);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
