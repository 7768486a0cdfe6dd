//! Object names: the key's own characters under a prefix, both ways.
//!
//! object_store's `Path::from`/`PathPart::from` escape non-ASCII bytes and
//! `%#[]{}^|<>~"`\` (`ñ` becomes the name `%C3%B1`), which every other tool then sees; a
//! [`Path::parse`](https://docs.rs/object_store/0.14/object_store/path/struct.Path.html#method.parse)d name is sent as its own characters (the URL escapes it once, as HTTP
//! requires).

use fence_core::{Error, ErrorKind, Key};
use object_store::path::{Path, PathPart};

/// How a store's object names are made from fence keys: `prefix/key`, exactly these
/// characters.
///
/// ```
/// use fence_core::Key;
/// let names = fence_wire::names::ObjectNames::new(Some("fleet/a")).unwrap();
/// let key = Key::new("cells/ñ 1/own.json").unwrap();
/// assert_eq!(names.name(&key), "fleet/a/cells/ñ 1/own.json");
/// assert_eq!(names.key_of("fleet/a/cells/ñ 1/own.json"), Some(key));
/// assert_eq!(names.key_of("elsewhere/x"), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectNames {
    prefix: Vec<String>,
}

impl ObjectNames {
    /// Names under `prefix` (validated like a [`Key`]; surrounding `/` ignored; `None` or
    /// empty: the bucket's root).
    pub fn new(prefix: Option<&str>) -> Result<ObjectNames, Error> {
        match prefix.map(|p| p.trim_matches('/')) {
            None | Some("") => Ok(ObjectNames::default()),
            Some(p) => {
                let key = Key::new(p).map_err(|e| {
                    Error::new(ErrorKind::InvalidInput, format!("prefix: {e}")).not_committed()
                })?;
                let prefix = key.segments().map(str::to_string).collect();
                Ok(ObjectNames { prefix })
            }
        }
    }

    /// The prefix (empty for none).
    pub fn prefix(&self) -> String {
        self.prefix.join("/")
    }

    /// The object name of `key`: `prefix/key`.
    pub fn name(&self, key: &Key) -> String {
        self.joined(key.segments())
    }

    /// The object name of `prefix/under` as a path (`None`: the bucket's root, no prefix).
    pub fn under(&self, under: Option<&Key>) -> Result<Option<Path>, Error> {
        let name = match under {
            Some(key) => self.name(key),
            None => self.prefix(),
        };
        if name.is_empty() {
            return Ok(None);
        }
        Path::parse(&name).map(Some).map_err(|e| {
            Error::new(ErrorKind::InvalidKey, "not a valid object name prefix")
                .with_source(e)
                .not_committed()
        })
    }

    /// The path of `key`, refused before any I/O unless `fits` accepts the name (each store
    /// bounds its names in its own unit); `store_bound` says which bound, for the error.
    pub fn path(
        &self,
        key: &Key,
        fits: impl Fn(&str) -> bool,
        store_bound: &str,
    ) -> Result<Path, Error> {
        let name = self.name(key);
        if !fits(&name) {
            return Err(invalid_key(key, store_bound));
        }
        Path::parse(&name).map_err(|e| invalid_key(key, "not a valid object name").with_source(e))
    }

    /// Where fence before 0.1 stored `key`: under object_store's escaped form of it. `None`
    /// when that name is the same as today's.
    ///
    /// ```
    /// use fence_core::Key;
    /// let names = fence_wire::names::ObjectNames::new(None).unwrap();
    /// let legacy = names.legacy(&Key::new("cells/ñ/own.json").unwrap()).unwrap();
    /// assert_eq!(legacy.as_ref(), "cells/%C3%B1/own.json");
    /// assert_eq!(names.legacy(&Key::new("cells/plain/own.json").unwrap()), None);
    /// ```
    pub fn legacy(&self, key: &Key) -> Option<Path> {
        let segments = self.prefix.iter().map(String::as_str).chain(key.segments());
        let legacy = Path::from_iter(segments.map(PathPart::from));
        (legacy.as_ref() != self.name(key)).then_some(legacy)
    }

    /// The fence key of a listed object name, if it lies under the prefix and is a valid key.
    pub fn key_of(&self, name: &str) -> Option<Key> {
        let rel = match self.prefix.is_empty() {
            true => name,
            false => name.strip_prefix(&self.prefix())?.strip_prefix('/')?,
        };
        Key::new(rel).ok()
    }

    fn joined<'a>(&'a self, rest: impl Iterator<Item = &'a str>) -> String {
        let segments = self.prefix.iter().map(String::as_str).chain(rest);
        segments.collect::<Vec<_>>().join("/")
    }
}

fn invalid_key(key: &Key, why: &str) -> Error {
    Error::new(ErrorKind::InvalidKey, why)
        .with_key(key)
        .not_committed()
}

/// Where a store's objects live: a bucket (or container) and a key prefix, from a
/// `scheme://bucket/prefix` URL or set one by one. A malformed URL is kept, to be reported by
/// the builder's `build` before anything else.
///
/// ```
/// let mut location = fence_wire::names::Location::default();
/// location.set_url("s3://b/fleet/a", &["s3"]);
/// assert_eq!(location.bucket.as_deref(), Some("b"));
/// assert_eq!(location.names().unwrap().prefix(), "fleet/a");
/// location.set_url("gs://b", &["s3"]);
/// assert!(location.names().is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The bucket or container, if given.
    pub bucket: Option<String>,
    /// The key prefix, if given.
    pub prefix: Option<String>,
    invalid: Option<String>,
}

impl Location {
    /// Bucket and prefix from `url`, one of `schemes`; a malformed URL fails
    /// [`names`](Self::names).
    pub fn set_url(&mut self, url: &str, schemes: &[&str]) {
        match parse_url(url, schemes) {
            Ok((bucket, prefix)) => {
                self.bucket = Some(bucket);
                self.prefix = prefix;
                self.invalid = None;
            }
            Err(why) => self.invalid = Some(why),
        }
    }

    /// The object names under the prefix; [`ErrorKind::InvalidInput`] (not committed) for a
    /// malformed URL or an invalid prefix.
    pub fn names(&self) -> Result<ObjectNames, Error> {
        if let Some(why) = &self.invalid {
            return Err(Error::new(ErrorKind::InvalidInput, why.clone()).not_committed());
        }
        ObjectNames::new(self.prefix.as_deref())
    }
}

/// `scheme://bucket/prefix` → (bucket, prefix), for any of `schemes` (e.g. `["s3"]`).
///
/// ```
/// use fence_wire::names::parse_url;
/// assert_eq!(parse_url("az://c/x/y/", &["az", "azure"]).unwrap(), ("c".into(), Some("x/y".into())));
/// assert!(parse_url("gs://b", &["s3"]).is_err());
/// ```
pub fn parse_url(url: &str, schemes: &[&str]) -> Result<(String, Option<String>), String> {
    let rest = schemes
        .iter()
        .find_map(|s| url.strip_prefix(s)?.strip_prefix("://"))
        .ok_or_else(|| {
            let wanted: Vec<String> = schemes.iter().map(|s| format!("{s}://")).collect();
            format!("{url:?} is not a {} URL", wanted.join(" or "))
        })?;
    let (bucket, prefix) = match rest.split_once('/') {
        Some((bucket, prefix)) => (bucket, Some(prefix.trim_matches('/'))),
        None => (rest, None),
    };
    if bucket.is_empty() {
        return Err(format!("{url:?} names no bucket"));
    }
    let prefix = prefix.filter(|p| !p.is_empty()).map(str::to_string);
    Ok((bucket.to_string(), prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Key {
        Key::new(k).unwrap()
    }

    #[test]
    fn parses_urls() {
        assert_eq!(parse_url("s3://b", &["s3"]).unwrap(), ("b".into(), None));
        assert_eq!(parse_url("s3://b/", &["s3"]).unwrap(), ("b".into(), None));
        assert_eq!(
            parse_url("azure://c/x/y/", &["az", "azure"]).unwrap(),
            ("c".into(), Some("x/y".into()))
        );
        assert!(parse_url("s3:///x", &["s3"]).is_err());
        assert!(parse_url("s3x://b", &["s3"]).is_err());
    }

    #[test]
    fn prefixes_are_validated_like_keys() {
        assert_eq!(ObjectNames::new(Some("/a/b/")).unwrap().prefix(), "a/b");
        assert_eq!(ObjectNames::new(Some("")).unwrap(), ObjectNames::default());
        let bad = ObjectNames::new(Some("a/../b")).unwrap_err();
        assert_eq!(bad.kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn names_are_the_keys_own_characters_both_ways() {
        let names = ObjectNames::new(Some("p")).unwrap();
        for k in ["uni/ñ ü/日本.json", "odd %41 #[]{}^|~`\"<>.json", "p%41"] {
            let path = names.path(&key(k), |_| true, "").unwrap();
            assert_eq!(path.as_ref(), format!("p/{k}"));
            assert_eq!(names.key_of(path.as_ref()), Some(key(k)));
        }
        assert_eq!(names.key_of("pq/x"), None);
        assert_eq!(
            names.under(Some(&key("a"))).unwrap().unwrap().as_ref(),
            "p/a"
        );
        assert_eq!(ObjectNames::default().under(None).unwrap(), None);
    }

    #[test]
    fn a_name_the_store_cannot_hold_is_invalid_before_any_io() {
        let names = ObjectNames::new(Some("p")).unwrap();
        let err = names
            .path(&key("abc"), |n| n.len() < 5, "too long")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidKey);
        assert_eq!(err.commit(), fence_core::Commit::NotCommitted);
    }
}
