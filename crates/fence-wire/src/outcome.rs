//! The outcome vocabulary of a failed request, shared by the adapters' classifiers. Pure.

use fence_core::{Commit, ErrorKind};
use object_store::client::HttpErrorKind;

/// A classified failure: its kind, whether anything may have landed, and why (for the
/// error's message).
///
/// ```
/// use fence_core::{Commit, ErrorKind};
/// let f = fence_wire::outcome::Failure::new(ErrorKind::Timeout, Commit::Ambiguous, "timed out");
/// assert_eq!(f.read().commit, Commit::NotCommitted);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// The error kind callers see.
    pub kind: ErrorKind,
    /// Whether the request may have changed the store.
    pub commit: Commit,
    /// A short reason.
    pub why: &'static str,
}

impl Failure {
    /// A failure of this kind and commit state.
    pub const fn new(kind: ErrorKind, commit: Commit, why: &'static str) -> Failure {
        Failure { kind, commit, why }
    }

    /// The same failure of a read, which changes nothing: not committed.
    pub const fn read(self) -> Failure {
        Failure {
            commit: Commit::NotCommitted,
            ..self
        }
    }
}

/// A transport failure: only a failed connect proves the request was never sent.
///
/// ```
/// use fence_core::Commit;
/// use object_store::client::HttpErrorKind;
/// use fence_wire::outcome::transport;
/// assert_eq!(transport(HttpErrorKind::Connect).commit, Commit::NotCommitted);
/// assert_eq!(transport(HttpErrorKind::Timeout).commit, Commit::Ambiguous);
/// ```
pub fn transport(kind: HttpErrorKind) -> Failure {
    match kind {
        HttpErrorKind::Connect => Failure::new(
            ErrorKind::Unavailable,
            Commit::NotCommitted,
            "could not connect to the store",
        ),
        HttpErrorKind::Timeout => Failure::new(
            ErrorKind::Timeout,
            Commit::Ambiguous,
            "the request timed out",
        ),
        _ => Failure::new(
            ErrorKind::Unavailable,
            Commit::Ambiguous,
            "the connection failed or the answer was unreadable",
        ),
    }
}

/// Whether `tag` can be a version: one strong ETag with content. `""` names no content and a
/// weak `W/"…"` ETag only promises equivalence, not the same bytes, so neither is a CAS token;
/// nor is a list of tags (`"a", "b"`), which an `If-Match` sent back would match against
/// either. Unquoted tags (some S3-compatible servers) are accepted without quotes or commas.
///
/// ```
/// use fence_wire::outcome::strong_etag;
/// assert!(strong_etag("\"9b2c\""));
/// assert!(!strong_etag("\"\"") && !strong_etag("W/\"9b2c\""));
/// assert!(!strong_etag("\"a\", \"b\""));
/// ```
pub fn strong_etag(tag: &str) -> bool {
    let tag = tag.trim();
    let inner = match tag.strip_prefix('"') {
        Some(quoted) => quoted.strip_suffix('"'),
        None => (!tag.contains(',')).then_some(tag),
    };
    inner.is_some_and(|t| !t.is_empty() && !t.contains('"'))
        && !tag.starts_with("W/")
        && !tag.starts_with("w/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connect_failures_prove_nothing_was_sent() {
        for kind in [
            HttpErrorKind::Timeout,
            HttpErrorKind::Request,
            HttpErrorKind::Interrupted,
            HttpErrorKind::Decode,
            HttpErrorKind::Unknown,
        ] {
            assert_eq!(transport(kind).commit, Commit::Ambiguous, "{kind:?}");
        }
        let refused = transport(HttpErrorKind::Connect);
        assert_eq!(
            (refused.kind, refused.commit),
            (ErrorKind::Unavailable, Commit::NotCommitted)
        );
    }

    #[test]
    fn strong_etags_only() {
        for good in ["\"9b2c\"", "9b2c", "\"a-1\"", "\"0x8DC0A1B2C3D4E5F\""] {
            assert!(strong_etag(good), "{good}");
        }
        for bad in [
            "",
            "\"\"",
            "W/\"9b2c\"",
            "w/\"x\"",
            "  ",
            "\"a\", \"b\"",
            "\"a\",\"b\"",
            "a, b",
            "\"open",
            "close\"",
        ] {
            assert!(!strong_etag(bad), "{bad:?}");
        }
    }
}
