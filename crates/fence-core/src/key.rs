//! Validated object keys.

use std::fmt;

use crate::error::{Error, ErrorKind};

/// The longest key accepted, in bytes (S3 and GCS both stop at 1024).
pub const MAX_KEY_LEN: usize = 1024;

/// A validated relative object key: `/`-separated segments, none empty, `.` or `..`; no
/// leading `/`, no NUL or other control character, no backslash, at most [`MAX_KEY_LEN`] bytes.
///
/// Validation happens when the key is made, so an invalid key is refused before any I/O.
///
/// ```
/// use fence_core::{Key, ErrorKind};
/// let k = Key::new("cells/c1/own.json").unwrap();
/// assert_eq!(k.as_str(), "cells/c1/own.json");
/// assert_eq!(Key::new("../etc/passwd").unwrap_err().kind(), ErrorKind::InvalidKey);
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(String);

impl Key {
    /// Validates `key`.
    pub fn new(key: impl Into<String>) -> Result<Key, Error> {
        let key = key.into();
        validate(&key)?;
        Ok(Key(key))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// `self/child`, validated.
    pub fn join(&self, child: &str) -> Result<Key, Error> {
        Key::new(format!("{}/{}", self.0, child))
    }

    /// Whether `self` equals `prefix` or lies under `prefix/`.
    pub fn starts_with(&self, prefix: &Key) -> bool {
        self.0 == prefix.0
            || (self.0.len() > prefix.0.len()
                && self.0.starts_with(&prefix.0)
                && self.0.as_bytes()[prefix.0.len()] == b'/')
    }
}

fn invalid(key: &str, why: &str) -> Error {
    let shown: String = key
        .chars()
        .take(80)
        .flat_map(char::escape_default)
        .collect();
    Error::new(ErrorKind::InvalidKey, format!("{shown:?}: {why}")).not_committed()
}

fn validate(key: &str) -> Result<(), Error> {
    if key.is_empty() {
        return Err(invalid(key, "empty key"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(invalid(key, "longer than 1024 bytes"));
    }
    if key.starts_with('/') {
        return Err(invalid(key, "absolute path (leading '/')"));
    }
    if key.chars().any(|c| c.is_control()) {
        return Err(invalid(key, "contains NUL or a control character"));
    }
    if key.contains('\\') {
        return Err(invalid(key, "contains a backslash"));
    }
    for segment in key.split('/') {
        match segment {
            "" => return Err(invalid(key, "empty segment ('//' or trailing '/')")),
            "." | ".." => return Err(invalid(key, "'.' or '..' segment")),
            _ => {}
        }
    }
    Ok(())
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", self.0)
    }
}

impl std::str::FromStr for Key {
    type Err = Error;
    fn from_str(s: &str) -> Result<Key, Error> {
        Key::new(s)
    }
}

impl TryFrom<&str> for Key {
    type Error = Error;
    fn try_from(s: &str) -> Result<Key, Error> {
        Key::new(s)
    }
}

impl TryFrom<String> for Key {
    type Error = Error;
    fn try_from(s: String) -> Result<Key, Error> {
        Key::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_each_bad_shape() {
        let long = "a".repeat(MAX_KEY_LEN + 1);
        for bad in [
            "",
            "/abs",
            "a/../b",
            "..",
            "a/./b",
            ".",
            "a//b",
            "a/",
            "a\0b",
            "a\nb",
            "a\\b",
            long.as_str(),
        ] {
            let err = Key::new(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidKey, "{bad:?}");
        }
    }

    #[test]
    fn accepts_ordinary_keys() {
        for good in [
            "a",
            "cells/c-1/own.json",
            "nodes/ñødé.json",
            "a/..b/c..",
            "x/.hidden",
        ] {
            assert_eq!(Key::new(good).unwrap().as_str(), good);
        }
        assert!(Key::new("a".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn prefix_is_segment_wise() {
        let p = Key::new("cells/c1").unwrap();
        assert!(Key::new("cells/c1/own.json").unwrap().starts_with(&p));
        assert!(Key::new("cells/c1").unwrap().starts_with(&p));
        assert!(!Key::new("cells/c10/own.json").unwrap().starts_with(&p));
    }
}
