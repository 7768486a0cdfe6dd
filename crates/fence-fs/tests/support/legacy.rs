//! fence-fs's first layout (commit 56f0a6d), written and read here exactly as its code did,
//! system call by system call, so that tests can make stores of the earlier version and play
//! one of its processes still running after an upgrade:
//!
//! - a key's record is the file `<dir>/<segment>.fence`: `fence-fs 1 <version> <body
//!   length>\n<body>`, version `<generation>-<32 hex digits>` (generation one above the
//!   previous version's, 1 for a create);
//! - a writer takes `flock` on `<dir>/.fence/<segment>.fence` (created `0600` if missing),
//!   reads the record's header, checks its guard, writes `<dir>/.fence/tmp/<segment>.fence`,
//!   syncs it, renames it over the record and syncs the directory; a delete unlinks the
//!   record; all under the lock;
//! - a reader opens the record `O_NOFOLLOW | O_NONBLOCK`, refuses anything but a regular
//!   file ("the object's path is not a regular file"), and checks the header's length.
#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use fence_core::Key;
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

/// How a first-layout operation failed, as the earlier version would have reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// `ErrorKind::Corrupt`: what is at the record's path is not a first-layout record.
    Corrupt(String),
    /// The key's lock was held (the earlier version retried until its lock wait ran out).
    Busy,
    /// Any other failure, by errno.
    Io(Errno),
}

/// The paths of `key` in the first layout: its directory, the record file's name.
pub fn paths(root: &Path, key: &Key) -> (PathBuf, String) {
    let mut segments: Vec<&str> = key.segments().collect();
    let last = segments.pop().unwrap();
    let dir = segments.iter().fold(root.to_path_buf(), |p, s| p.join(s));
    (dir, format!("{last}.fence"))
}

/// The record file of `key`.
pub fn record_file(root: &Path, key: &Key) -> PathBuf {
    let (dir, name) = paths(root, key);
    dir.join(name)
}

/// The lock file of `key`.
pub fn lock_file(root: &Path, key: &Key) -> PathBuf {
    let (dir, name) = paths(root, key);
    dir.join(".fence").join(name)
}

/// The first layout's version after `previous`.
pub fn next_version(previous: Option<&str>, random: u128) -> String {
    let generation = previous
        .and_then(|v| v.split_once('-'))
        .and_then(|(g, _)| g.parse::<u64>().ok())
        .map_or(1, |g| g.saturating_add(1));
    format!("{generation}-{:032x}", random)
}

/// The bytes of a first-layout record file.
pub fn record_bytes(version: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = format!("fence-fs 1 {version} {}\n", body.len()).into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn open_or_make_dir(parent: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    match rustix::fs::openat(parent, name, dir_flags(), Mode::empty()) {
        Err(Errno::NOENT) => {
            match rustix::fs::mkdirat(parent, name, Mode::from_bits_truncate(0o700)) {
                Ok(()) | Err(Errno::EXIST) => rustix::fs::fsync(parent)?,
                Err(e) => return Err(e),
            }
            rustix::fs::openat(parent, name, dir_flags(), Mode::empty())
        }
        other => other,
    }
}

/// The key's directory, created as the earlier version did for a write.
fn key_dir(root: &Path, key: &Key) -> Result<OwnedFd, Errno> {
    let mut dir = rustix::fs::open(
        root,
        dir_flags().difference(OFlags::NOFOLLOW),
        Mode::empty(),
    )?;
    let mut segments: Vec<&str> = key.segments().collect();
    segments.pop();
    for segment in segments {
        dir = open_or_make_dir(dir.as_fd(), segment)?;
    }
    Ok(dir)
}

/// A first-layout read of the record in `dir`: `None` if absent, else version and body.
fn read_in(dir: BorrowedFd<'_>, name: &str) -> Result<Option<(String, Vec<u8>)>, Refused> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::NOTDIR | Errno::ISDIR) => return Err(Refused::Corrupt("not a file".into())),
        Err(e) => return Err(Refused::Io(e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(Refused::Io)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(Refused::Corrupt(
            "the object's path is not a regular file".into(),
        ));
    }
    let mut bytes = Vec::new();
    File::from(fd)
        .read_to_end(&mut bytes)
        .map_err(|e| Refused::Io(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
    let corrupt = |why: &str| Refused::Corrupt(why.into());
    let end = bytes.iter().take(160).position(|b| *b == b'\n');
    let end = end.ok_or_else(|| corrupt("header missing"))?;
    let line = std::str::from_utf8(&bytes[..end]).map_err(|_| corrupt("not UTF-8"))?;
    let rest = line
        .strip_prefix("fence-fs 1 ")
        .ok_or_else(|| corrupt("unknown header magic"))?;
    let (version, len) = rest.split_once(' ').ok_or_else(|| corrupt("fields"))?;
    let len: usize = len.parse().map_err(|_| corrupt("length"))?;
    if end + 1 + len != bytes.len() {
        return Err(corrupt("length differs"));
    }
    Ok(Some((version.to_owned(), bytes[end + 1..].to_vec())))
}

/// A first-layout `get`.
pub fn get(root: &Path, key: &Key) -> Result<Option<(String, Vec<u8>)>, Refused> {
    let (dir, name) = paths(root, key);
    let dir = match rustix::fs::open(&dir, dir_flags(), Mode::empty()) {
        Ok(d) => d,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(Refused::Io(e)),
    };
    read_in(dir.as_fd(), &name)
}

/// The key's lock, taken as the earlier version took it (one try).
fn try_lock(dir: BorrowedFd<'_>, name: &str) -> Result<(OwnedFd, File), Refused> {
    let internal = open_or_make_dir(dir, ".fence").map_err(Refused::Io)?;
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&internal, name, flags, Mode::from_bits_truncate(0o600))
        .map_err(Refused::Io)?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok((internal, File::from(fd))),
        Err(Errno::WOULDBLOCK) => Err(Refused::Busy),
        Err(e) => Err(Refused::Io(e)),
    }
}

/// Holds `key`'s first-layout lock until dropped, as a writer of the earlier version in the
/// middle of a write (or stopped there) holds it.
pub fn hold_lock(root: &Path, key: &Key) -> File {
    let (_, name) = paths(root, key);
    let dir = key_dir(root, key).unwrap();
    try_lock(dir.as_fd(), &name).unwrap().1
}

/// A first-layout `put`: guarded on `guard` (`None`: create), with version randomness
/// `random`. `Ok(Some(version))` applied, `Ok(None)` rejected.
pub fn put(
    root: &Path,
    key: &Key,
    body: &[u8],
    guard: Option<&str>,
    random: u128,
) -> Result<Option<String>, Refused> {
    put_with(root, key, body, guard, random, &mut || {})
}

/// [`put`], calling `in_flight` between the synced temp file and the rename, with the lock
/// held: a writer of the earlier version in the middle of its write.
pub fn put_with(
    root: &Path,
    key: &Key,
    body: &[u8],
    guard: Option<&str>,
    random: u128,
    in_flight: &mut dyn FnMut(),
) -> Result<Option<String>, Refused> {
    let (_, name) = paths(root, key);
    let dir = key_dir(root, key).map_err(Refused::Io)?;
    let (internal, _lock) = try_lock(dir.as_fd(), &name)?;
    let current = read_in(dir.as_fd(), &name)?;
    let holds = match (guard, &current) {
        (None, None) => true,
        (Some(want), Some((have, _))) => want == have,
        _ => false,
    };
    if !holds {
        return Ok(None);
    }
    let version = next_version(current.as_ref().map(|(v, _)| v.as_str()), random);
    let tmp = open_or_make_dir(internal.as_fd(), "tmp").map_err(Refused::Io)?;
    let flags =
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&tmp, name.as_str(), flags, Mode::from_bits_truncate(0o600))
        .map_err(Refused::Io)?;
    rustix::fs::fchmod(&fd, Mode::from_bits_truncate(0o600)).map_err(Refused::Io)?;
    let mut file = File::from(fd);
    file.write_all(&record_bytes(&version, body)).unwrap();
    file.sync_all().unwrap();
    in_flight();
    match rustix::fs::renameat(&tmp, name.as_str(), &dir, name.as_str()) {
        Ok(()) => {}
        Err(Errno::ISDIR | Errno::NOTDIR) => {
            return Err(Refused::Corrupt("cannot rename over the object".into()))
        }
        Err(e) => return Err(Refused::Io(e)),
    }
    rustix::fs::fsync(&dir).map_err(Refused::Io)?;
    Ok(Some(version))
}

/// A first-layout `delete` of `version`: `Ok(true)` deleted, `Ok(false)` rejected.
pub fn delete(root: &Path, key: &Key, version: &str) -> Result<bool, Refused> {
    let (_, name) = paths(root, key);
    let dir = key_dir(root, key).map_err(Refused::Io)?;
    let _lock = try_lock(dir.as_fd(), &name)?;
    match read_in(dir.as_fd(), &name)? {
        Some((have, _)) if have == version => {}
        _ => return Ok(false),
    }
    match rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::empty()) {
        Ok(()) => {}
        Err(Errno::ISDIR) => return Err(Refused::Corrupt("not a file".into())),
        Err(e) => return Err(Refused::Io(e)),
    }
    rustix::fs::fsync(&dir).map_err(Refused::Io)?;
    Ok(true)
}

/// Makes `root` a store of the earlier version: its `.fence` as the earlier `open` made it.
pub fn open_root(root: &Path) {
    let internal = root.join(".fence");
    std::fs::create_dir_all(internal.join("tmp")).unwrap();
    File::create(internal.join("root")).unwrap();
}
