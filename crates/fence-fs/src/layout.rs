//! Where a key lives on disk, and the record format: pure functions, no I/O.
//!
//! ```text
//! <dir>/<segment>.fence/                 the key's object directory (D)
//! <dir>/<segment>.fence/i<32 hex>/       its incarnation (I): one per create, unique name
//! <dir>/<segment>.fence/i<32 hex>/<gen>  version files: the current one and its predecessor
//! <dir>/.fence/                          scratch of the directory's objects: creates being
//!                                        built (new-…), retired incarnations (old-…)
//! ```

use std::path::PathBuf;

use fence_core::{Error, ErrorKind, Key, Version};

/// The internal directory of every directory of the tree that holds objects: scratch space
/// for creates being built and retired incarnations being removed. Never listed, never a key.
pub const INTERNAL_DIR: &str = ".fence";
/// The suffix of every object directory. Key segments ending in it are refused, so an object
/// can never collide with a directory of a longer key or with [`INTERNAL_DIR`].
pub const OBJECT_SUFFIX: &str = ".fence";
/// The longest key segment accepted: `NAME_MAX` (255) less the object suffix.
pub const MAX_SEGMENT_LEN: usize = 255 - OBJECT_SUFFIX.len();
/// The magic that opens every version file.
const MAGIC: &str = "fence-fs 2";
/// The magic of a record file of the earlier layout (one file per key, under a lock).
const LEGACY_MAGIC: &str = "fence-fs 1";
/// The longest header accepted when parsing.
pub const MAX_HEADER_LEN: usize = 200;
/// The prefix of an incarnation directory's name.
pub const INCARNATION_PREFIX: &str = "i";
/// The prefix, in [`INTERNAL_DIR`], of a create being built (an object directory that is
/// renamed into place when complete).
pub const NEW_PREFIX: &str = "new-";
/// The prefix, in [`INTERNAL_DIR`], of a retired incarnation being removed.
pub const OLD_PREFIX: &str = "old-";
/// The prefix, in [`INTERNAL_DIR`], of a named temp file (only where the file system has no
/// unnamed temp files).
pub const TMP_PREFIX: &str = "tmp-";

/// A key's place in the tree: the directories leading to it and its object directory's name.
///
/// Everything a key needs lives in its own directory (the object directory and the
/// directory's [`INTERNAL_DIR`]), so whichever root (or alias of a root) reaches the key, every
/// writer works on the same files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPath {
    /// Directory names from the root down, each one key segment.
    pub dirs: Vec<String>,
    /// The object directory's name: the last segment plus [`OBJECT_SUFFIX`].
    pub name: String,
}

impl ObjectPath {
    /// The object directory, relative to the root.
    pub fn object_dir(&self) -> PathBuf {
        self.dir_path().join(&self.name)
    }

    /// The scratch directory of the key's directory, relative to the root.
    pub fn internal_dir(&self) -> PathBuf {
        self.dir_path().join(INTERNAL_DIR)
    }

    fn dir_path(&self) -> PathBuf {
        self.dirs.iter().collect()
    }
}

/// Maps a validated key onto the tree, refusing segments this backend cannot store.
///
/// ```
/// use fence_core::{ErrorKind, Key};
/// use fence_fs::layout::object_path;
/// let p = object_path(&Key::new("cells/c1/own.json").unwrap()).unwrap();
/// assert_eq!((p.dirs.join("/"), p.name.as_str()), ("cells/c1".to_string(), "own.json.fence"));
/// assert_eq!(p.object_dir(), std::path::Path::new("cells/c1/own.json.fence"));
/// let err = object_path(&Key::new(".fence/x").unwrap()).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidKey);
/// ```
pub fn object_path(key: &Key) -> Result<ObjectPath, Error> {
    let mut segments: Vec<String> = Vec::new();
    for segment in key.segments() {
        check_segment(key, segment)?;
        segments.push(segment.to_owned());
    }
    let last = segments.pop().unwrap_or_default();
    Ok(ObjectPath {
        dirs: segments,
        name: format!("{last}{OBJECT_SUFFIX}"),
    })
}

fn check_segment(key: &Key, segment: &str) -> Result<(), Error> {
    let why = if segment.ends_with(OBJECT_SUFFIX) {
        "a segment ending in \".fence\" is reserved by fence-fs"
    } else if segment.len() > MAX_SEGMENT_LEN {
        "a segment longer than 249 bytes does not fit a file name"
    } else {
        return Ok(());
    };
    Err(Error::new(ErrorKind::InvalidKey, why)
        .with_key(key)
        .not_committed())
}

/// The key segment an object directory's name stands for, if it is one.
pub fn segment_of(name: &str) -> Option<&str> {
    name.strip_suffix(OBJECT_SUFFIX).filter(|s| !s.is_empty())
}

/// The name of version file `generation` in an incarnation.
pub fn version_file(generation: u64) -> String {
    generation.to_string()
}

/// The generation a version file's name stands for (decimal, no leading zero), if any.
pub fn generation_of_file(name: &str) -> Option<u64> {
    let canonical = !name.is_empty() && (name == "0" || !name.starts_with('0'));
    (canonical && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// The generation of a version token (`<generation>-<hex>`), if it has one.
pub fn generation_of(version: &Version) -> Option<u64> {
    let (generation, _) = version.as_str().split_once('-')?;
    generation_of_file(generation).filter(|g| *g >= 1)
}

/// A 128-bit random name part.
pub fn random_hex(random: [u64; 2]) -> String {
    format!("{:016x}{:016x}", random[0], random[1])
}

/// The version of generation `generation`: `<generation>-<32 hex digits of randomness>`.
pub fn version_at(generation: u64, random: [u64; 2]) -> Version {
    let token = format!("{generation}-{}", random_hex(random));
    Version::new(token).expect("a formatted version is never empty")
}

/// What a version file holds: a body, or the mark of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A record with a body of this many bytes.
    Put(u64),
    /// A delete: the key is absent from this version on.
    Deleted,
}

/// A parsed version-file header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// This version.
    pub version: Version,
    /// The version it replaced (`None` for the first version of an incarnation).
    pub prev: Option<Version>,
    /// A body, or a delete.
    pub kind: Kind,
    /// Marked as the first successor of `prev` (see [`CONFIRMED`]).
    pub confirmed: bool,
    /// The header's own length, newline included.
    pub header_len: usize,
}

/// The last header field of a version file as written: not yet confirmed.
pub const UNCONFIRMED: u8 = b'u';
/// The last header field once confirmed: whoever removes a version first marks its successor
/// so (one byte written in place), so a writer that finds its predecessor gone can tell from
/// its own file whether it was the first successor.
pub const CONFIRMED: u8 = b'c';

impl Header {
    /// Where the confirmation byte is in the file.
    pub fn mark_offset(&self) -> u64 {
        self.header_len as u64 - 2
    }

    /// The body's length (0 for a delete).
    pub fn body_len(&self) -> u64 {
        match self.kind {
            Kind::Put(n) => n,
            Kind::Deleted => 0,
        }
    }
}

/// The header line of a version file.
pub fn encode_header(version: &Version, prev: Option<&Version>, kind: Kind) -> String {
    let prev = prev.map_or("-", Version::as_str);
    let mark = UNCONFIRMED as char;
    match kind {
        Kind::Put(len) => format!("{MAGIC} {version} {prev} put {len} {mark}\n"),
        Kind::Deleted => format!("{MAGIC} {version} {prev} del 0 {mark}\n"),
    }
}

/// Parses the version-file header at the start of `bytes` (which may hold more).
pub fn parse_header(key: &Key, bytes: &[u8]) -> Result<Header, Error> {
    let (line, header_len) = header_line(key, bytes)?;
    let corrupt = |why: &str| Error::corrupt(key, format!("fence-fs version file: {why}"));
    if line.starts_with(LEGACY_MAGIC) {
        return Err(corrupt(
            "a record of the earlier layout where a version belongs",
        ));
    }
    let rest = line
        .strip_prefix(MAGIC)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| corrupt("unknown header magic"))?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let [version, prev, kind, len, mark] = fields[..] else {
        return Err(corrupt("header fields missing"));
    };
    let confirmed = match mark.as_bytes() {
        [CONFIRMED] => true,
        [UNCONFIRMED] => false,
        _ => return Err(corrupt("bad confirmation mark")),
    };
    let version = version_token(version).ok_or_else(|| corrupt("bad version token"))?;
    let prev = match prev {
        "-" => None,
        p => Some(version_token(p).ok_or_else(|| corrupt("bad previous version"))?),
    };
    let len: u64 = len.parse().map_err(|_| corrupt("bad body length"))?;
    let kind = match kind {
        "put" => Kind::Put(len),
        "del" if len == 0 => Kind::Deleted,
        _ => return Err(corrupt("bad record kind")),
    };
    Ok(Header {
        version,
        prev,
        kind,
        confirmed,
        header_len,
    })
}

/// Parses the header of a record file of the earlier layout (`fence-fs 1 <version> <len>`):
/// such records are read, never written.
pub fn parse_legacy_header(key: &Key, bytes: &[u8]) -> Result<Header, Error> {
    let (line, header_len) = header_line(key, bytes)?;
    let corrupt = |why: &str| Error::corrupt(key, format!("fence-fs record file: {why}"));
    let rest = line
        .strip_prefix(LEGACY_MAGIC)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| corrupt("unknown header magic"))?;
    let (version, len) = rest
        .split_once(' ')
        .ok_or_else(|| corrupt("header fields missing"))?;
    let version = version_token(version).ok_or_else(|| corrupt("bad version token"))?;
    let len = len.parse().map_err(|_| corrupt("bad body length"))?;
    Ok(Header {
        version,
        prev: None,
        kind: Kind::Put(len),
        confirmed: true,
        header_len,
    })
}

/// The header line (without its newline) and the header's length.
fn header_line<'b>(key: &Key, bytes: &'b [u8]) -> Result<(&'b str, usize), Error> {
    let window = &bytes[..bytes.len().min(MAX_HEADER_LEN)];
    let end = window
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| Error::corrupt(key, "fence-fs version file: header missing or truncated"))?;
    let line = std::str::from_utf8(&window[..end])
        .map_err(|_| Error::corrupt(key, "fence-fs version file: header not UTF-8"))?;
    Ok((line, end + 1))
}

/// Checks that the file holds exactly the header and the body it announces.
pub fn check_length(key: &Key, header: &Header, file_len: u64) -> Result<(), Error> {
    if header.header_len as u64 + header.body_len() == file_len {
        Ok(())
    } else {
        Err(Error::corrupt(
            key,
            "fence-fs version file: body length differs from the header (truncated?)",
        ))
    }
}

fn version_token(s: &str) -> Option<Version> {
    let ok = !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then(|| Version::new(s).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::new(s).unwrap()
    }

    #[test]
    fn headers_round_trip() {
        let (v1, v2) = (version_at(1, [1, 2]), version_at(2, [3, 4]));
        for (prev, kind) in [(None, Kind::Put(3)), (Some(&v1), Kind::Deleted)] {
            let mut file = encode_header(&v2, prev, kind).into_bytes();
            let body_len = if kind == Kind::Put(3) { 3 } else { 0 };
            file.extend_from_slice(&b"abc"[..body_len]);
            let h = parse_header(&key("k"), &file).unwrap();
            assert_eq!((&h.version, h.prev.as_ref(), h.kind), (&v2, prev, kind));
            assert!(!h.confirmed);
            file[h.mark_offset() as usize] = CONFIRMED;
            assert!(parse_header(&key("k"), &file).unwrap().confirmed);
            check_length(&key("k"), &h, file.len() as u64).unwrap();
            let err = check_length(&key("k"), &h, file.len() as u64 + 1).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt);
        }
    }

    #[test]
    fn corrupt_headers_name_the_key() {
        for bad in [
            &b""[..],
            b"fence-fs 2 1-ab - put 0 u",
            b"junk\n",
            b"fence-fs 2 1-zz - put 3 u\n",
            b"fence-fs 2 1-ab - put x u\n",
            b"fence-fs 2 1-ab - del 3 u\n",
            b"fence-fs 2 1-ab - eh 0 u\n",
            b"fence-fs 2 1-ab q put 0 u\n",
            b"fence-fs 2 1-ab - put 0\n",
            b"fence-fs 2 1-ab - put 0 x\n",
            b"fence-fs 1 1-ab 3\n",
        ] {
            let err = parse_header(&key("a/b"), bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{bad:?}");
            assert_eq!(err.key(), Some(&key("a/b")));
        }
    }

    #[test]
    fn legacy_headers_are_read() {
        let h = parse_legacy_header(&key("k"), b"fence-fs 1 7-ab 2\nhi").unwrap();
        assert_eq!((h.version.as_str(), h.kind), ("7-ab", Kind::Put(2)));
        assert!(parse_legacy_header(&key("k"), b"fence-fs 2 7-ab - put 2 u\nhi").is_err());
    }

    #[test]
    fn generations_are_canonical_decimals() {
        assert_eq!(generation_of_file("17"), Some(17));
        for bad in ["", "017", "1a", "-1", "99999999999999999999", "i1"] {
            assert_eq!(generation_of_file(bad), None, "{bad}");
        }
        assert_eq!(generation_of(&version_at(5, [0, 0])), Some(5));
        assert_eq!(generation_of(&Version::new("0-ab").unwrap()), None);
        assert_eq!(generation_of(&Version::new("abc").unwrap()), None);
        assert_ne!(version_at(1, [1, 0]), version_at(1, [2, 0]));
    }

    #[test]
    fn reserved_and_long_segments_are_refused() {
        for bad in [".fence", ".fence/x", "a/b.fence", "a.fence/b"] {
            assert_eq!(
                object_path(&key(bad)).unwrap_err().kind(),
                ErrorKind::InvalidKey
            );
        }
        let long = "x".repeat(MAX_SEGMENT_LEN + 1);
        assert_eq!(
            object_path(&key(&long)).unwrap_err().kind(),
            ErrorKind::InvalidKey
        );
        assert!(object_path(&key(&"x".repeat(MAX_SEGMENT_LEN))).is_ok());
        assert!(object_path(&key(".fencex/a.fenced")).is_ok());
    }
}
