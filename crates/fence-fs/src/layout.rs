//! Where a key lives on disk, and the object file's header: pure functions, no I/O.

use std::path::PathBuf;

use fence_core::{Error, ErrorKind, Key, Version};

/// The internal directory of every directory of the tree (the root and each key directory):
/// it holds the lock files of the objects next to it, and their temp files in
/// [`TEMP_DIR`]. Never listed, never a key.
pub const INTERNAL_DIR: &str = ".fence";
/// The temp-file directory inside each [`INTERNAL_DIR`].
pub const TEMP_DIR: &str = "tmp";
/// The suffix of every object file. Key segments ending in it are refused, so an object
/// file can never collide with a directory of a longer key or with [`INTERNAL_DIR`].
pub const OBJECT_SUFFIX: &str = ".fence";
/// The longest key segment accepted: `NAME_MAX` (255) less the object suffix.
pub const MAX_SEGMENT_LEN: usize = 255 - OBJECT_SUFFIX.len();
/// The magic that opens every object file.
const MAGIC: &str = "fence-fs 1";
/// The longest header accepted when parsing.
pub const MAX_HEADER_LEN: usize = 160;

/// A key's place in the tree: the directories leading to it and the object file's name.
///
/// The object's lock file and temp file carry the object file's name too, in the
/// [`INTERNAL_DIR`] of the object's own directory: so the lock belongs to the directory entry
/// of the object, whichever root (or alias of a root) it is reached through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPath {
    /// Directory names from the root down, each one key segment.
    pub dirs: Vec<String>,
    /// The object file's name: the last segment plus [`OBJECT_SUFFIX`]. The lock file is
    /// `<dir>/.fence/<file>`, the temp file `<dir>/.fence/tmp/<file>`.
    pub file: String,
}

impl ObjectPath {
    /// The object file, relative to the root.
    pub fn object_file(&self) -> PathBuf {
        self.dir_path().join(&self.file)
    }

    /// The object's lock file, relative to the root.
    pub fn lock_file(&self) -> PathBuf {
        self.dir_path().join(INTERNAL_DIR).join(&self.file)
    }

    /// The object's temp file, relative to the root.
    pub fn temp_file(&self) -> PathBuf {
        self.dir_path()
            .join(INTERNAL_DIR)
            .join(TEMP_DIR)
            .join(&self.file)
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
/// assert_eq!((p.dirs.join("/"), p.file.as_str()), ("cells/c1".to_string(), "own.json.fence"));
/// assert_eq!(p.lock_file(), std::path::Path::new("cells/c1/.fence/own.json.fence"));
/// let err = object_path(&Key::new(".fence/locks").unwrap()).unwrap_err();
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
        file: format!("{last}{OBJECT_SUFFIX}"),
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

/// The key an object file name stands for, if it is one.
pub fn segment_of_file(name: &str) -> Option<&str> {
    name.strip_suffix(OBJECT_SUFFIX).filter(|s| !s.is_empty())
}

/// FNV-1a, 64 bit: stable across processes, builds and Rust versions (std's hasher is not).
/// Names a key's in-process writer queue.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The header line written before a body.
pub fn encode_header(version: &Version, body_len: usize) -> String {
    format!("{MAGIC} {version} {body_len}\n")
}

/// A parsed header: the version and the body length it announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The object's version.
    pub version: Version,
    /// The body's length in bytes.
    pub body_len: u64,
    /// The header's own length, newline included.
    pub header_len: usize,
}

/// Parses the header at the start of `bytes` (which may hold more than the header).
pub fn parse_header(key: &Key, bytes: &[u8]) -> Result<Header, Error> {
    let window = &bytes[..bytes.len().min(MAX_HEADER_LEN)];
    let corrupt = |why: &str| Error::corrupt(key, format!("fence-fs object file: {why}"));
    let end = window
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt("header missing or truncated"))?;
    let line = std::str::from_utf8(&window[..end]).map_err(|_| corrupt("header not UTF-8"))?;
    let rest = line
        .strip_prefix(MAGIC)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| corrupt("unknown header magic"))?;
    let (version, len) = rest
        .split_once(' ')
        .ok_or_else(|| corrupt("header fields missing"))?;
    if !is_version_token(version) {
        return Err(corrupt("bad version token"));
    }
    let body_len = len.parse().map_err(|_| corrupt("bad body length"))?;
    let version = Version::new(version).map_err(|_| corrupt("empty version"))?;
    Ok(Header {
        version,
        body_len,
        header_len: end + 1,
    })
}

/// Checks that the file holds exactly the header and the body it announces.
pub fn check_length(key: &Key, header: &Header, file_len: u64) -> Result<(), Error> {
    if header.header_len as u64 + header.body_len == file_len {
        Ok(())
    } else {
        Err(Error::corrupt(
            key,
            "fence-fs object file: body length differs from the header (truncated?)",
        ))
    }
}

fn is_version_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The version after `previous`: `<generation>-<32 hex digits of randomness>`, the
/// generation one above the previous one's (1 for a new object).
pub fn next_version(previous: Option<&Version>, random: [u64; 2]) -> Version {
    let generation = previous
        .and_then(|v| v.as_str().split_once('-'))
        .and_then(|(g, _)| g.parse::<u64>().ok())
        .map_or(1, |g| g.saturating_add(1));
    let token = format!("{generation}-{:016x}{:016x}", random[0], random[1]);
    Version::new(token).expect("a formatted version is never empty")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::new(s).unwrap()
    }

    #[test]
    fn header_round_trips() {
        let v = next_version(None, [1, 2]);
        let mut file = encode_header(&v, 3).into_bytes();
        file.extend_from_slice(b"abc");
        let h = parse_header(&key("k"), &file).unwrap();
        assert_eq!((&h.version, h.body_len), (&v, 3));
        check_length(&key("k"), &h, file.len() as u64).unwrap();
        let err = check_length(&key("k"), &h, file.len() as u64 - 1).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
    }

    #[test]
    fn corrupt_headers_name_the_key() {
        for bad in [
            &b""[..],
            b"fence-fs 1 1-ab",
            b"junk\n",
            b"fence-fs 1 1-zz 3\n",
            b"fence-fs 1 1-ab x\n",
        ] {
            let err = parse_header(&key("a/b"), bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{bad:?}");
            assert_eq!(err.key(), Some(&key("a/b")));
        }
    }

    #[test]
    fn generations_count_up_and_randomness_differs() {
        let v1 = next_version(None, [0, 0]);
        let v2 = next_version(Some(&v1), [0, 0]);
        assert!(v1.as_str().starts_with("1-") && v2.as_str().starts_with("2-"));
        assert_ne!(next_version(None, [1, 0]), next_version(None, [2, 0]));
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
