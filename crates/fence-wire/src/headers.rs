//! Headers an answer is trusted on: one value, or none at all.
//!
//! HTTP lets a header appear several times, and clients differ in which copy they read
//! (`HeaderMap::get` and object_store read the first). An answer with two different `ETag`s
//! (or `x-goog-generation`s, or `x-ms-error-code`s) does not say which version it created or
//! what went wrong, so such a header is [`Header::Unusable`], never one copy picked out of
//! several.

use http::header::AsHeaderName;
use http::HeaderMap;

/// What an answer says in one header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header<'a> {
    /// Not there.
    Absent,
    /// Exactly one value (copies with the same value count as one), trimmed.
    One(&'a str),
    /// Different values, or a value that is not visible ASCII: the answer says nothing
    /// usable here.
    Unusable,
}

/// The single value of header `name` in `headers`.
///
/// ```
/// use fence_wire::headers::{single, Header};
/// let mut headers = http::HeaderMap::new();
/// assert_eq!(single(&headers, "etag"), Header::Absent);
/// headers.append("etag", "\"a\"".parse().unwrap());
/// headers.append("etag", "\"a\"".parse().unwrap());
/// assert_eq!(single(&headers, "etag"), Header::One("\"a\""));
/// headers.append("etag", "\"b\"".parse().unwrap());
/// assert_eq!(single(&headers, "etag"), Header::Unusable);
/// ```
pub fn single<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Header<'_> {
    let mut found = Header::Absent;
    for value in headers.get_all(name) {
        let Ok(value) = value.to_str().map(str::trim) else {
            return Header::Unusable;
        };
        found = match found {
            Header::One(seen) if seen != value => return Header::Unusable,
            _ => Header::One(value),
        };
    }
    found
}

/// Removes every copy of header `name` if its copies disagree (or one is unreadable), so that
/// a client reading the first copy finds none; returns whether it did.
///
/// ```
/// let mut headers = http::HeaderMap::new();
/// headers.append("etag", "\"a\"".parse().unwrap());
/// assert!(!fence_wire::headers::drop_unusable(&mut headers, "etag"));
/// headers.append("etag", "\"b\"".parse().unwrap());
/// assert!(fence_wire::headers::drop_unusable(&mut headers, "etag"));
/// assert!(headers.get("etag").is_none());
/// ```
pub fn drop_unusable(headers: &mut HeaderMap, name: &str) -> bool {
    if single(headers, name) != Header::Unusable {
        return false;
    }
    headers.remove(name);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn map(values: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("x-goog-generation", HeaderValue::from_bytes(v).unwrap());
        }
        headers
    }

    #[test]
    fn one_value_or_none_is_usable() {
        assert_eq!(single(&map(&[]), "x-goog-generation"), Header::Absent);
        assert_eq!(
            single(&map(&[b" 7 "]), "x-goog-generation"),
            Header::One("7")
        );
        assert_eq!(
            single(&map(&[b"7", b"7 "]), "X-Goog-Generation"),
            Header::One("7")
        );
    }

    #[test]
    fn disagreeing_or_unreadable_copies_are_unusable() {
        for values in [&[&b"7"[..], b"8"][..], &[b"\xff"], &[b"7", b"\xff"]] {
            assert_eq!(
                single(&map(values), "x-goog-generation"),
                Header::Unusable,
                "{values:?}"
            );
            let mut headers = map(values);
            assert!(drop_unusable(&mut headers, "x-goog-generation"));
            assert!(headers.is_empty());
        }
    }
}
