//! Outcome classification: which HTTP answers prove what. Pure functions, no I/O.
//!
//! The rule for writes: only a clean answer is a verdict. `412` proves the precondition false
//! (nothing of ours landed); answers GCS gives *instead of* processing a request (`400`,
//! `401`, `403`, `404`) prove nothing was written, and so does a redirect, which is never
//! followed (the request was not carried out as sent); everything else after the request may
//! have left this process — `429`, `5xx`, `408`, a timeout, a reset, an unreadable `200` — may
//! have been applied and is [`Commit::Ambiguous`].

use fence_core::{Commit, ErrorKind};

/// What a failed request means, before it is dressed as a [`fence_core::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Class {
    pub kind: ErrorKind,
    pub commit: Commit,
}

impl Class {
    const fn new(kind: ErrorKind, commit: Commit) -> Self {
        Class { kind, commit }
    }
}

/// A non-success status other than `412` (and other than `404` on reads and deletes, which
/// callers resolve first).
pub(crate) fn status(code: u16) -> Class {
    use Commit::{Ambiguous, NotCommitted};
    match code {
        // Malformed request: refused before any write.
        400 | 411 | 413 | 414 => Class::new(ErrorKind::InvalidInput, NotCommitted),
        401 | 403 => Class::new(ErrorKind::PermissionDenied, NotCommitted),
        404 => Class::new(ErrorKind::NotFound, NotCommitted),
        // Redirects are not followed: the request was not carried out as sent.
        300..=399 => Class::new(ErrorKind::InvalidInput, NotCommitted),
        // Google lists 429 with 408 and 5xx as "retry if the request is idempotent"; nothing
        // says a throttled write was not applied (see docs/gcs.md).
        429 => Class::new(ErrorKind::Unavailable, Ambiguous),
        408 | 504 => Class::new(ErrorKind::Timeout, Ambiguous),
        // 503 included: GCS documents that a 5xx write may or may not have been applied.
        _ => Class::new(ErrorKind::Unavailable, Ambiguous),
    }
}

/// A transport failure without an HTTP status.
///
/// `connect` failures (refused, unreachable, TLS handshake, connect timeout) happen before a
/// byte of the request is written, so nothing can have landed. Any other failure happened
/// after the request may have been sent.
pub(crate) fn transport(connect: bool, timeout: bool) -> Class {
    let kind = if timeout {
        ErrorKind::Timeout
    } else {
        ErrorKind::Unavailable
    };
    let commit = if connect {
        Commit::NotCommitted
    } else {
        Commit::Ambiguous
    };
    Class::new(kind, commit)
}

/// What a `404` is about, told by its body: real GCS answers `No such object: <bucket>/<name>`
/// for a missing object and `The specified bucket does not exist.` for a missing bucket (JSON
/// or plain text). Emulators may answer neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// The object is missing; the bucket exists.
    Object,
    /// The bucket is missing.
    Bucket,
    /// The body does not say.
    Unsure,
}

/// Reads a 404's body.
pub(crate) fn missing(body: &[u8]) -> Missing {
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    if text.contains("bucket does not exist") || text.contains("nosuchbucket") {
        Missing::Bucket
    } else if text.contains("no such object") || text.contains("nosuchkey") {
        Missing::Object
    } else {
        Missing::Unsure
    }
}

/// Whether a read that failed this way may be repeated.
pub(crate) fn read_retryable(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Unavailable | ErrorKind::Timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_and_missing_bucket_are_not_committed() {
        for (code, kind) in [
            (401, ErrorKind::PermissionDenied),
            (403, ErrorKind::PermissionDenied),
            (404, ErrorKind::NotFound),
            (400, ErrorKind::InvalidInput),
        ] {
            assert_eq!(
                status(code),
                Class::new(kind, Commit::NotCommitted),
                "{code}"
            );
        }
    }

    #[test]
    fn server_errors_are_ambiguous() {
        for code in [500, 502, 503, 504, 408, 418] {
            assert_eq!(status(code).commit, Commit::Ambiguous, "{code}");
        }
        assert_eq!(status(504).kind, ErrorKind::Timeout);
        assert_eq!(status(503).kind, ErrorKind::Unavailable);
    }

    #[test]
    fn rate_limit_after_sending_is_ambiguous() {
        assert_eq!(
            status(429),
            Class::new(ErrorKind::Unavailable, Commit::Ambiguous)
        );
        assert!(read_retryable(status(429).kind));
    }

    #[test]
    fn redirects_are_not_committed() {
        for code in [301, 302, 303, 307, 308] {
            assert_eq!(
                status(code),
                Class::new(ErrorKind::InvalidInput, Commit::NotCommitted),
                "{code}"
            );
        }
    }

    #[test]
    fn a_404_body_tells_object_from_bucket() {
        let object = br#"{"error":{"code":404,"message":"No such object: b/x/k"}}"#;
        assert_eq!(missing(object), Missing::Object);
        assert_eq!(missing(b"No such object: b/x/k"), Missing::Object);
        let bucket = br#"{"error":{"code":404,"message":"The specified bucket does not exist."}}"#;
        assert_eq!(missing(bucket), Missing::Bucket);
        assert_eq!(
            missing(b"<Error><Code>NoSuchBucket</Code></Error>"),
            Missing::Bucket
        );
        assert_eq!(missing(b"Not Found"), Missing::Unsure);
        assert_eq!(missing(&[0xff, 0x00]), Missing::Unsure);
    }

    #[test]
    fn only_connect_failures_prove_nothing_was_sent() {
        assert_eq!(
            transport(true, false),
            Class::new(ErrorKind::Unavailable, Commit::NotCommitted)
        );
        assert_eq!(
            transport(true, true),
            Class::new(ErrorKind::Timeout, Commit::NotCommitted)
        );
        assert_eq!(
            transport(false, true),
            Class::new(ErrorKind::Timeout, Commit::Ambiguous)
        );
        assert_eq!(
            transport(false, false),
            Class::new(ErrorKind::Unavailable, Commit::Ambiguous)
        );
    }
}
