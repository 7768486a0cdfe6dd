//! System calls as fence-fs uses them: every path opened one component at a time relative to
//! a directory descriptor, never following a symlink, never blocking on a file the store did
//! not make (a FIFO, a socket, a device), and every errno mapped to one error kind.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use fence_core::{Commit, Error, ErrorKind, Key};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// How every directory is opened: never through a symlink (Linux answers a symlink opened
/// with these flags with `ENOTDIR`, and a FIFO or device likewise, without blocking).
pub const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How every file is opened: never through a symlink, never blocking (a FIFO opened for
/// reading would wait for a writer), then checked to be a regular file.
const FILE_OPEN: OFlags = OFlags::NOFOLLOW
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC);

/// A directory's or file's identity: device and inode.
pub type FileId = (u64, u64);

/// The identity in `stat`.
#[allow(clippy::unnecessary_cast)] // the field types differ between platforms
pub fn id_of(stat: &Stat) -> FileId {
    (stat.st_dev as u64, stat.st_ino as u64)
}

/// The kind an errno maps to.
pub fn kind_of(errno: Errno) -> ErrorKind {
    match errno {
        Errno::ACCESS | Errno::PERM | Errno::ROFS => ErrorKind::PermissionDenied,
        // O_NOFOLLOW met a symlink: refused, whatever it points at.
        Errno::LOOP => ErrorKind::PermissionDenied,
        Errno::NOENT => ErrorKind::NotFound,
        // Something the store did not make where it needs a directory or a file.
        Errno::NOTDIR | Errno::ISDIR | Errno::NXIO | Errno::OPNOTSUPP => ErrorKind::Corrupt,
        Errno::NOSPC | Errno::DQUOT | Errno::IO => ErrorKind::Unavailable,
        _ => ErrorKind::Other,
    }
}

/// An error of `what` failing with `errno`, about `key`; not committed.
pub fn fs_error(key: &Key, what: &str, errno: Errno) -> Error {
    let hint = match errno {
        Errno::LOOP => " (a symlink below the fence-fs root is refused)",
        Errno::NOTDIR | Errno::NXIO => {
            " (something fence-fs did not make is in the way: a file, FIFO, socket or device)"
        }
        _ => "",
    };
    Error::new(kind_of(errno), format!("{what}{hint}"))
        .with_key(key)
        .with_source(std::io::Error::from(errno))
        .not_committed()
}

/// The error of a path holding something other than what fence-fs makes there.
pub fn foreign(key: &Key, what: &str, found: FileType) -> Error {
    let found = match found {
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Symlink => "a symlink",
        FileType::Directory => "a directory",
        FileType::RegularFile => "a regular file",
        FileType::Unknown => "an unknown file type",
    };
    Error::corrupt(
        key,
        format!("{what} is {found}, which fence-fs did not make: refused"),
    )
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

/// `bits` as a mode.
pub fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits as _)
}

/// Sets `fd`'s mode to exactly `bits` whatever the umask did, keeping a set-group-ID bit the
/// directory inherited (so a group-shared tree stays shared).
pub fn set_mode(fd: BorrowedFd<'_>, bits: u32) -> Result<(), Errno> {
    let inherited = rustix::fs::fstat(fd)?.st_mode as u32 & 0o2000;
    rustix::fs::fchmod(fd, mode(bits | inherited))
}

/// Opens directory `name` below `parent` without following a symlink. A symlink is reported
/// as `ELOOP` (Linux answers `ENOTDIR`), so every refused symlink maps to one kind.
pub fn open_dir_at(parent: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    match rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty()) {
        Err(Errno::NOTDIR) => match type_at(parent, name) {
            Ok(FileType::Symlink) => Err(Errno::LOOP),
            _ => Err(Errno::NOTDIR),
        },
        other => other,
    }
}

/// The type of `name` below `parent`, not following a symlink.
pub fn type_at(parent: BorrowedFd<'_>, name: &str) -> Result<FileType, Errno> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(FileType::from_raw_mode(st.st_mode))
}

/// The identity of `name` below `parent` (not following a symlink); `None` if absent.
pub fn id_at(parent: BorrowedFd<'_>, name: &str) -> Result<Option<FileId>, Errno> {
    match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(id_of(&st))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Opens directory `name` below `parent`, creating it (see [`make_dir`]) when missing.
pub fn open_or_make_dir(parent: BorrowedFd<'_>, name: &str, bits: u32) -> Result<OwnedFd, Errno> {
    match open_dir_at(parent, name) {
        Err(Errno::NOENT) => make_dir(parent, name, bits),
        other => other,
    }
}

/// Creates directory `name` below `parent` (or finds it made by a racer), syncs `parent` so
/// the entry is durable, and opens it. The sync happens whether this call or a racer made
/// it: a racer may have crashed before its own sync. A directory this call made gets exactly
/// `bits`.
pub fn make_dir(parent: BorrowedFd<'_>, name: &str, bits: u32) -> Result<OwnedFd, Errno> {
    let made = match rustix::fs::mkdirat(parent, name, mode(bits)) {
        Ok(()) => true,
        Err(Errno::EXIST) => false,
        Err(e) => return Err(e),
    };
    let dir = open_dir_at(parent, name)?;
    if made {
        set_mode(dir.as_fd(), bits)?;
    }
    rustix::fs::fsync(parent)?;
    Ok(dir)
}

/// A regular file opened for reading, with its length and identity.
pub struct ReadFile {
    /// The open file.
    pub file: File,
    /// Its length when opened.
    pub len: u64,
    /// Its identity.
    pub id: FileId,
    /// Opened for writing too.
    pub writable: bool,
}

/// Opens regular file `name` below `parent` for reading (and writing, if `writable` and
/// permitted): `None` if absent; a symlink is `ELOOP`; anything but a regular file is refused
/// (`what` names it in the error) without ever blocking.
pub fn open_file_at(
    key: &Key,
    parent: BorrowedFd<'_>,
    name: &str,
    what: &str,
    writable: bool,
) -> Result<Option<ReadFile>, Error> {
    let access = if writable {
        OFlags::RDWR
    } else {
        OFlags::RDONLY
    };
    let opened = match rustix::fs::openat(parent, name, FILE_OPEN | access, Mode::empty()) {
        Err(Errno::ACCESS | Errno::PERM | Errno::ROFS) if writable => {
            return open_file_at(key, parent, name, what, false)
        }
        // A directory cannot be opened for writing: say what it is, as for reading.
        Err(Errno::ISDIR) => return Err(foreign(key, what, FileType::Directory)),
        other => other,
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::NXIO) => {
            let found = type_at(parent, name).unwrap_or(FileType::Socket);
            return Err(foreign(key, what, found));
        }
        Err(e) => return Err(fs_error(key, &format!("cannot open {what}"), e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| fs_error(key, "cannot stat", e))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(Some(ReadFile {
            file: File::from(fd),
            len: stat.st_size as u64,
            id: id_of(&stat),
            writable,
        })),
        other => Err(foreign(key, what, other)),
    }
}

/// Reads exactly `buf.len()` bytes.
pub fn read_exact(key: &Key, file: &mut File, buf: &mut [u8]) -> Result<(), Error> {
    file.read_exact(buf).map_err(|e| {
        Error::new(ErrorKind::Unavailable, "cannot read a version file")
            .with_key(key)
            .with_source(e)
            .not_committed()
    })
}

/// Writes `bytes` to `file` and syncs it.
pub fn write_synced(key: &Key, file: &mut File, bytes: &[u8]) -> Result<(), Error> {
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| {
            let kind = match e.raw_os_error().map(Errno::from_raw_os_error) {
                Some(errno) => kind_of(errno),
                None => ErrorKind::Other,
            };
            Error::new(kind, "cannot write a new version")
                .with_key(key)
                .with_source(e)
                .not_committed()
        })
}

/// Syncs `dir` after a commit in it: a failure is ambiguous (the change is visible, but may
/// not survive a power loss).
pub fn sync_committed(key: &Key, dir: BorrowedFd<'_>) -> Result<(), Error> {
    rustix::fs::fsync(dir).map_err(|e| {
        fs_error(key, "committed, but cannot sync the directory", e).with_commit(Commit::Ambiguous)
    })
}

/// Unlinks `name` below `dir` (a file, or an empty directory with `dir_entry`); absent is
/// fine. For garbage only: the caller knows nothing live can have this name.
pub fn remove(dir: BorrowedFd<'_>, name: &str, dir_entry: bool) -> Result<(), Errno> {
    let flags = if dir_entry {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    match rustix::fs::unlinkat(dir, name, flags) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The names in directory `dir` (without `.` and `..`), with their types as the directory
/// reports them (`Unknown` on file systems that do not say).
pub fn entries(dir: BorrowedFd<'_>) -> Result<Vec<(String, FileType)>, Errno> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if name != "." && name != ".." {
            names.push((name.to_owned(), entry.file_type()));
        }
    }
    Ok(names)
}
