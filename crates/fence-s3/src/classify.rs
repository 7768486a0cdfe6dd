//! The S3 dialect of outcomes, mapped onto fence's vocabulary. Pure: no I/O.
//!
//! Only a clean precondition answer is a rejection; only an answer that proves the store
//! refused the request is "not committed"; everything after the request may have been sent is
//! ambiguous.

use fence_core::{Commit, ErrorKind};

use fence_wire::exchange::Observed;

/// What a conditional PUT came to, before any follow-up request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PutVerdict {
    /// Applied; the store's ETag exactly as returned.
    Applied(String),
    /// The store proved the condition false.
    Rejected,
    /// 409: a conflicting conditional write was in flight and nothing of ours landed; a read
    /// decides whether the condition was false (rejected) or merely contended.
    Conflict,
    /// A failure of this kind and commit state.
    Failed(Failure),
}

pub(crate) use fence_wire::outcome::{strong_etag, transport, Failure};

const fn failure(kind: ErrorKind, commit: Commit, why: &'static str) -> Failure {
    Failure::new(kind, commit, why)
}

/// Classifies a conditional PUT from what reached the network (`observed`) and whether
/// object_store produced a result with an ETag (`e_tag`: `Some(Some(tag))` on success with a
/// tag, `Some(None)` on success without one, `None` on error).
pub(crate) fn classify_put(
    is_create: bool,
    observed: Option<&Observed>,
    e_tag: Option<Option<&str>>,
) -> PutVerdict {
    match (e_tag, observed) {
        (Some(Some(tag)), _) if strong_etag(tag) => PutVerdict::Applied(tag.to_string()),
        (Some(_), _) => PutVerdict::Failed(no_etag()),
        (None, None) => PutVerdict::Failed(failure(
            ErrorKind::Other,
            Commit::NotCommitted,
            "the request failed before it was sent",
        )),
        (None, Some(Observed::Transport(kind))) => PutVerdict::Failed(transport(*kind)),
        (None, Some(Observed::Answer { status, code })) => {
            classify_put_status(is_create, *status, code.as_deref())
        }
    }
}

fn no_etag() -> Failure {
    failure(
        ErrorKind::Unsupported,
        Commit::Ambiguous,
        "the store answered the write without a usable ETag (none, several, empty or weak), so its \
         version is unknown",
    )
}

fn classify_put_status(is_create: bool, status: u16, code: Option<&str>) -> PutVerdict {
    use Commit::{Ambiguous, NotCommitted};
    let failed = |kind, commit, why| PutVerdict::Failed(failure(kind, commit, why));
    match status {
        200..=299 => PutVerdict::Failed(no_etag()),
        304 | 412 => PutVerdict::Rejected,
        409 => PutVerdict::Conflict,
        404 if code == Some("NoSuchBucket") => failed(ErrorKind::NotFound, NotCommitted, BUCKET),
        // AWS answers If-Match on a missing key with 404 NoSuchKey: the condition is false.
        404 if !is_create => PutVerdict::Rejected,
        404 => failed(ErrorKind::NotFound, NotCommitted, "the store answered 404"),
        401 | 403 => failed(ErrorKind::PermissionDenied, NotCommitted, DENIED),
        // Neither AWS (which throttles with 503 SlowDown) nor the S3-compatible servers that
        // answer 429 document that a throttled PUT was not applied: see docs/s3.md.
        429 => failed(ErrorKind::Unavailable, Ambiguous, "throttled (429)"),
        // Redirects are never followed: the request was not carried out as sent.
        300..=399 => failed(ErrorKind::InvalidInput, NotCommitted, REDIRECT),
        // 408 included: the store may have read the whole request before timing out.
        408 => failed(ErrorKind::Timeout, Ambiguous, "the store answered 408"),
        400..=499 => failed(
            ErrorKind::Other,
            NotCommitted,
            "the store refused the request",
        ),
        _ => failed(
            ErrorKind::Unavailable,
            Ambiguous,
            "the store answered a server error",
        ),
    }
}

const BUCKET: &str = "the bucket does not exist";
const DENIED: &str = "access denied (check the credentials and the bucket policy)";
const REDIRECT: &str = "the store redirected the request: wrong region or endpoint";

/// Classifies a failed read (or list) from its last HTTP attempt. Reads change nothing, so
/// every read failure is `NotCommitted`; `None` means the key is simply absent.
pub(crate) fn classify_read(observed: Option<&Observed>) -> Option<Failure> {
    use Commit::NotCommitted;
    let f = |kind, why| Some(failure(kind, NotCommitted, why));
    match observed {
        None => f(ErrorKind::Other, "the request failed before it was sent"),
        Some(Observed::Transport(kind)) => Some(transport(*kind).read()),
        Some(Observed::Answer { status, code }) => match (*status, code.as_deref()) {
            (404, Some("NoSuchBucket")) => f(ErrorKind::NotFound, BUCKET),
            (404, _) => None,
            (401 | 403, _) => f(ErrorKind::PermissionDenied, DENIED),
            (408 | 429 | 500..=599, _) => {
                f(ErrorKind::Unavailable, "the store answered a server error")
            }
            (300..=399, _) => f(ErrorKind::InvalidInput, REDIRECT),
            (200..=299, _) => f(
                ErrorKind::Unsupported,
                "the store answered without the headers a read needs",
            ),
            _ => f(ErrorKind::Other, "the store refused the request"),
        },
    }
}

/// Classifies a failed listing: like a read, but a 404 can only mean the bucket.
pub(crate) fn classify_list(observed: Option<&Observed>) -> Failure {
    classify_read(observed)
        .unwrap_or_else(|| failure(ErrorKind::NotFound, Commit::NotCommitted, BUCKET))
}

/// Classifies a failed unconditional delete; `None` means the object was already absent.
pub(crate) fn classify_delete(observed: Option<&Observed>) -> Option<Failure> {
    if let Some(Observed::Answer { status: 404, code }) = observed {
        return (code.as_deref() == Some("NoSuchBucket"))
            .then(|| failure(ErrorKind::NotFound, Commit::NotCommitted, BUCKET));
    }
    match classify_put(false, observed, None) {
        PutVerdict::Failed(f) => Some(f),
        _ => Some(failure(
            ErrorKind::Other,
            Commit::NotCommitted,
            "the store refused the delete",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::client::HttpErrorKind;

    fn answer(status: u16, code: Option<&str>) -> Observed {
        Observed::Answer {
            status,
            code: code.map(str::to_string),
        }
    }

    fn put(is_create: bool, status: u16, code: Option<&str>) -> PutVerdict {
        classify_put(is_create, Some(&answer(status, code)), None)
    }

    fn kind_commit(v: PutVerdict) -> (ErrorKind, Commit) {
        match v {
            PutVerdict::Failed(f) => (f.kind, f.commit),
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn etag_is_passed_back_exactly() {
        let ok = classify_put(true, Some(&answer(200, None)), Some(Some("\"abc\"")));
        assert_eq!(ok, PutVerdict::Applied("\"abc\"".into()));
    }

    #[test]
    fn success_without_etag_is_ambiguous_never_an_empty_version() {
        for tag in [None, Some(""), Some("\"\""), Some("W/\"abc\""), Some(" ")] {
            let v = classify_put(true, Some(&answer(200, None)), Some(tag));
            assert_eq!(kind_commit(v), (ErrorKind::Unsupported, Commit::Ambiguous));
        }
        let v = classify_put(false, Some(&answer(200, None)), None);
        assert_eq!(kind_commit(v), (ErrorKind::Unsupported, Commit::Ambiguous));
    }

    #[test]
    fn precondition_answers_are_rejections() {
        for create in [true, false] {
            assert_eq!(put(create, 412, None), PutVerdict::Rejected);
            assert_eq!(put(create, 304, None), PutVerdict::Rejected);
            assert_eq!(put(create, 409, None), PutVerdict::Conflict);
        }
        assert_eq!(put(false, 404, Some("NoSuchKey")), PutVerdict::Rejected);
    }

    #[test]
    fn refusals_are_not_committed() {
        let cases = [
            (403, Some("AccessDenied"), ErrorKind::PermissionDenied),
            (
                403,
                Some("SignatureDoesNotMatch"),
                ErrorKind::PermissionDenied,
            ),
            (401, None, ErrorKind::PermissionDenied),
            (404, Some("NoSuchBucket"), ErrorKind::NotFound),
            (400, Some("InvalidArgument"), ErrorKind::Other),
            (301, None, ErrorKind::InvalidInput),
            (302, None, ErrorKind::InvalidInput),
            (303, None, ErrorKind::InvalidInput),
            (307, None, ErrorKind::InvalidInput),
            (308, None, ErrorKind::InvalidInput),
        ];
        for (status, code, kind) in cases {
            for create in [true, false] {
                let got = kind_commit(put(create, status, code));
                assert_eq!(got, (kind, Commit::NotCommitted), "{status} {code:?}");
            }
        }
    }

    #[test]
    fn anything_after_sending_is_ambiguous() {
        for status in [500, 502, 503, 504, 408, 429] {
            assert_eq!(kind_commit(put(true, status, None)).1, Commit::Ambiguous);
        }
        let v = classify_put(
            false,
            Some(&Observed::Transport(HttpErrorKind::Timeout)),
            None,
        );
        assert_eq!(kind_commit(v).1, Commit::Ambiguous);
    }

    #[test]
    fn a_refused_connection_or_nothing_sent_is_not_committed() {
        let v = classify_put(
            true,
            Some(&Observed::Transport(HttpErrorKind::Connect)),
            None,
        );
        assert_eq!(
            kind_commit(v),
            (ErrorKind::Unavailable, Commit::NotCommitted)
        );
        let v = classify_put(true, None, None);
        assert_eq!(kind_commit(v).1, Commit::NotCommitted);
    }

    #[test]
    fn reads_map_missing_keys_to_absent_and_missing_buckets_to_not_found() {
        assert_eq!(classify_read(Some(&answer(404, Some("NoSuchKey")))), None);
        let bucket = classify_read(Some(&answer(404, Some("NoSuchBucket")))).unwrap();
        assert_eq!(bucket.kind, ErrorKind::NotFound);
        let denied = classify_read(Some(&answer(403, None))).unwrap();
        assert_eq!(denied.kind, ErrorKind::PermissionDenied);
        let down = classify_read(Some(&Observed::Transport(HttpErrorKind::Connect))).unwrap();
        assert_eq!(down.kind, ErrorKind::Unavailable);
        for status in [408, 500, 503] {
            let slow = classify_read(Some(&answer(status, None))).unwrap();
            assert_eq!(slow.kind, ErrorKind::Unavailable, "{status}: retryable");
        }
        let busy = classify_read(Some(&answer(429, None))).unwrap();
        assert_eq!(
            (busy.kind, busy.commit),
            (ErrorKind::Unavailable, Commit::NotCommitted)
        );
    }

    #[test]
    fn listings_and_deletes_read_404_as_bucket_or_absent() {
        assert_eq!(
            classify_list(Some(&answer(404, None))).kind,
            ErrorKind::NotFound
        );
        assert_eq!(classify_delete(Some(&answer(404, Some("NoSuchKey")))), None);
        let bucket = classify_delete(Some(&answer(404, Some("NoSuchBucket")))).unwrap();
        assert_eq!(bucket.kind, ErrorKind::NotFound);
        let denied = classify_delete(Some(&answer(403, None))).unwrap();
        assert_eq!(denied.kind, ErrorKind::PermissionDenied);
        let lost = classify_delete(Some(&Observed::Transport(HttpErrorKind::Timeout))).unwrap();
        assert_eq!(lost.commit, Commit::Ambiguous);
    }
}
