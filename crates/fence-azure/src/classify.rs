//! The Azure Blob dialect of outcomes, mapped onto fence's vocabulary. Pure: no I/O.
//!
//! Only a clean precondition answer is a rejection; only an answer that proves the store
//! refused the request is "not committed"; everything after the request may have been sent
//! and that is not such an answer is ambiguous.

use fence_core::{Commit, ErrorKind};

use crate::observe::{Observed, CONFLICTING_CODES};

/// What a conditional PUT came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PutVerdict {
    /// Applied; the store's ETag exactly as returned.
    Applied(String),
    /// The store proved the condition false.
    Rejected,
    /// A failure of this kind and commit state.
    Failed(Failure),
}

/// What a DELETE came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeleteVerdict {
    /// The blob is gone.
    Deleted,
    /// The blob was absent, or (with `If-Match`) at another version: nothing was deleted.
    Rejected,
    /// A failure of this kind and commit state.
    Failed(Failure),
}

pub(crate) use fence_wire::outcome::{strong_etag, transport, Failure};

const fn failure(kind: ErrorKind, commit: Commit, why: &'static str) -> Failure {
    Failure::new(kind, commit, why)
}

pub(crate) const CONTAINER: &str = "the container does not exist";
pub(crate) const DENIED: &str = "access denied (check the account, its key or token, and the role)";
const REDIRECT: &str = "the store answered with a redirect, which a conditional request never \
                        follows: wrong endpoint or account";
const NOT_SENT: &str = "the request failed before it was sent";
const CONFLICTING: &str = "the store answered 404 with several different error codes: whether \
                           the blob or the container is missing is unknown";

/// A 404 whose error codes disagree: neither "absent" nor "rejected" can be read from it.
fn conflicting_404() -> Failure {
    failure(ErrorKind::Unsupported, Commit::NotCommitted, CONFLICTING)
}

/// Classifies a conditional PUT from its last HTTP attempt (`observed`) and whether
/// object_store produced a result (`e_tag`: `Some(Some(tag))` on success with a tag,
/// `Some(None)` on success without one, `None` on error).
pub(crate) fn classify_put(
    is_create: bool,
    observed: Option<&Observed>,
    e_tag: Option<Option<&str>>,
) -> PutVerdict {
    match (e_tag, observed) {
        (Some(Some(tag)), _) if strong_etag(tag) => PutVerdict::Applied(tag.to_string()),
        (Some(_), _) => PutVerdict::Failed(no_etag()),
        (None, None) => {
            PutVerdict::Failed(failure(ErrorKind::Other, Commit::NotCommitted, NOT_SENT))
        }
        (None, Some(Observed::Transport(kind))) => PutVerdict::Failed(transport(*kind)),
        (None, Some(Observed::Answer { status, code })) => {
            put_status(is_create, *status, code.as_deref())
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

fn put_status(is_create: bool, status: u16, code: Option<&str>) -> PutVerdict {
    match (status, code) {
        (200..=299, _) => PutVerdict::Failed(no_etag()),
        // Real Azure answers a failed If-None-Match: * with 412, a failed If-Match with 412
        // ConditionNotMet, and If-Match on a missing blob with 412 too.
        (412, _) => PutVerdict::Rejected,
        // Azurite answers a failed create with 409 BlobAlreadyExists.
        (409, Some("BlobAlreadyExists")) if is_create => PutVerdict::Rejected,
        (404, Some("ContainerNotFound")) => PutVerdict::Failed(refusal(status, code)),
        (404, Some(CONFLICTING_CODES)) => PutVerdict::Failed(conflicting_404()),
        (404, _) if !is_create => PutVerdict::Rejected,
        (409, _) => PutVerdict::Failed(failure(
            ErrorKind::Conflict,
            Commit::NotCommitted,
            "the store refused the write as conflicting with the blob's state",
        )),
        _ => PutVerdict::Failed(refusal(status, code)),
    }
}

/// Classifies a DELETE (with `If-Match`, or unconditional) from the store's answer.
pub(crate) fn classify_delete(observed: &Observed) -> DeleteVerdict {
    match observed {
        Observed::Transport(kind) => DeleteVerdict::Failed(transport(*kind)),
        Observed::Answer { status, code } => match (*status, code.as_deref()) {
            (200..=299, _) => DeleteVerdict::Deleted,
            (412, _) => DeleteVerdict::Rejected,
            (404, Some("ContainerNotFound")) => {
                DeleteVerdict::Failed(refusal(404, code.as_deref()))
            }
            (404, Some(CONFLICTING_CODES)) => DeleteVerdict::Failed(conflicting_404()),
            (404, _) => DeleteVerdict::Rejected,
            // SnapshotsPresent, LeaseIdMissing, …: the blob's state forbids the delete.
            (409, _) => DeleteVerdict::Failed(failure(
                ErrorKind::Other,
                Commit::NotCommitted,
                "the store refused the delete in the blob's current state",
            )),
            (status, code) => DeleteVerdict::Failed(refusal(status, code)),
        },
    }
}

/// Any answer to a write that is neither success nor a precondition verdict.
fn refusal(status: u16, code: Option<&str>) -> Failure {
    use Commit::{Ambiguous, NotCommitted};
    match (status, code) {
        (404, Some("ContainerNotFound")) => failure(ErrorKind::NotFound, NotCommitted, CONTAINER),
        (404, _) => failure(ErrorKind::NotFound, NotCommitted, "the store answered 404"),
        (401 | 403, _) => failure(ErrorKind::PermissionDenied, NotCommitted, DENIED),
        (300..=399, _) => failure(ErrorKind::InvalidInput, NotCommitted, REDIRECT),
        // The store may have read the whole request before giving up or shedding load.
        (408, _) => failure(ErrorKind::Timeout, Ambiguous, "the store answered 408"),
        (429, _) => failure(
            ErrorKind::Unavailable,
            Ambiguous,
            "the store answered 429 (throttled) after the request was sent",
        ),
        (400..=499, _) => failure(
            ErrorKind::Other,
            NotCommitted,
            "the store refused the request",
        ),
        _ => failure(
            ErrorKind::Unavailable,
            Ambiguous,
            "the store answered a server error",
        ),
    }
}

/// Classifies a failed read (or list) from its last failed HTTP attempt. Reads change
/// nothing, so every read failure is `NotCommitted`; `None` means the blob is simply absent.
pub(crate) fn classify_read(observed: Option<&Observed>) -> Option<Failure> {
    use Commit::NotCommitted;
    let f = |kind, why| Some(failure(kind, NotCommitted, why));
    match observed {
        None => f(ErrorKind::Other, NOT_SENT),
        Some(Observed::Transport(kind)) => Some(transport(*kind).read()),
        Some(Observed::Answer { status, code }) => match (*status, code.as_deref()) {
            (404, Some("ContainerNotFound")) => f(ErrorKind::NotFound, CONTAINER),
            (404, Some(CONFLICTING_CODES)) => Some(conflicting_404()),
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
        let ok = classify_put(true, None, Some(Some("\"0x8DC0A1B2C3D4E5F\"")));
        assert_eq!(ok, PutVerdict::Applied("\"0x8DC0A1B2C3D4E5F\"".into()));
    }

    #[test]
    fn success_without_etag_is_ambiguous_never_an_empty_version() {
        for tag in [None, Some("")] {
            let v = classify_put(true, Some(&answer(201, None)), Some(tag));
            assert_eq!(kind_commit(v), (ErrorKind::Unsupported, Commit::Ambiguous));
        }
        let v = classify_put(false, Some(&answer(201, None)), None);
        assert_eq!(kind_commit(v), (ErrorKind::Unsupported, Commit::Ambiguous));
    }

    #[test]
    fn a_failed_create_is_rejected_on_azurite_and_on_real_azure() {
        // Azurite: 409 BlobAlreadyExists; real Azure: 412 (object_store calls it Precondition).
        assert_eq!(
            put(true, 409, Some("BlobAlreadyExists")),
            PutVerdict::Rejected
        );
        assert_eq!(put(true, 412, None), PutVerdict::Rejected);
        assert_eq!(
            put(true, 412, Some("ConditionNotMet")),
            PutVerdict::Rejected
        );
    }

    #[test]
    fn a_failed_replace_is_rejected_also_on_a_missing_blob() {
        assert_eq!(
            put(false, 412, Some("ConditionNotMet")),
            PutVerdict::Rejected
        );
        assert_eq!(put(false, 404, Some("BlobNotFound")), PutVerdict::Rejected);
    }

    #[test]
    fn other_conflicts_are_not_committed_and_never_rejections() {
        for (create, code) in [
            (true, None),
            (true, Some("LeaseIdMissing")),
            (false, Some("BlobAlreadyExists")),
        ] {
            assert_eq!(
                kind_commit(put(create, 409, code)),
                (ErrorKind::Conflict, Commit::NotCommitted),
                "{create} {code:?}"
            );
        }
    }

    #[test]
    fn refusals_are_not_committed() {
        let cases = [
            (
                403,
                Some("AuthenticationFailed"),
                ErrorKind::PermissionDenied,
            ),
            (
                403,
                Some("AuthorizationFailure"),
                ErrorKind::PermissionDenied,
            ),
            (401, None, ErrorKind::PermissionDenied),
            (404, Some("ContainerNotFound"), ErrorKind::NotFound),
            (400, Some("InvalidHeaderValue"), ErrorKind::Other),
            (307, None, ErrorKind::InvalidInput),
            (301, None, ErrorKind::InvalidInput),
        ];
        for (status, code, kind) in cases {
            for create in [true, false] {
                let got = kind_commit(put(create, status, code));
                assert_eq!(got, (kind, Commit::NotCommitted), "{status} {code:?}");
            }
        }
    }

    #[test]
    fn anything_after_sending_is_ambiguous_throttling_included() {
        for status in [500, 502, 503, 504, 408, 429] {
            for create in [true, false] {
                let v = put(create, status, Some("ServerBusy"));
                assert_eq!(kind_commit(v).1, Commit::Ambiguous, "{status}");
            }
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
        let refused = Observed::Transport(HttpErrorKind::Connect);
        let v = classify_put(true, Some(&refused), None);
        assert_eq!(
            kind_commit(v),
            (ErrorKind::Unavailable, Commit::NotCommitted)
        );
        assert_eq!(
            kind_commit(classify_put(true, None, None)).1,
            Commit::NotCommitted
        );
    }

    #[test]
    fn deletes_distinguish_rejection_from_failure() {
        assert_eq!(classify_delete(&answer(202, None)), DeleteVerdict::Deleted);
        for code in [Some("ConditionNotMet"), None] {
            assert_eq!(classify_delete(&answer(412, code)), DeleteVerdict::Rejected);
        }
        assert_eq!(
            classify_delete(&answer(404, Some("BlobNotFound"))),
            DeleteVerdict::Rejected
        );
        let failed = |o: Observed| match classify_delete(&o) {
            DeleteVerdict::Failed(f) => (f.kind, f.commit),
            other => panic!("expected a failure, got {other:?}"),
        };
        assert_eq!(
            failed(answer(404, Some("ContainerNotFound"))),
            (ErrorKind::NotFound, Commit::NotCommitted)
        );
        assert_eq!(
            failed(answer(409, Some("SnapshotsPresent"))),
            (ErrorKind::Other, Commit::NotCommitted)
        );
        assert_eq!(failed(answer(503, None)).1, Commit::Ambiguous);
        assert_eq!(
            failed(Observed::Transport(HttpErrorKind::Timeout)).1,
            Commit::Ambiguous
        );
    }

    #[test]
    fn a_404_with_conflicting_codes_is_neither_absent_nor_rejected() {
        let conflicting = answer(404, Some(CONFLICTING_CODES));
        let read = classify_read(Some(&conflicting)).expect("not absent");
        assert_eq!(
            (read.kind, read.commit),
            (ErrorKind::Unsupported, Commit::NotCommitted)
        );
        let put = classify_put(false, Some(&conflicting), None);
        assert_eq!(kind_commit(put).1, Commit::NotCommitted);
        assert!(matches!(
            classify_delete(&conflicting),
            DeleteVerdict::Failed(f) if f.commit == Commit::NotCommitted
        ));
        let conflict = answer(409, Some(CONFLICTING_CODES));
        assert_eq!(
            kind_commit(classify_put(true, Some(&conflict), None)),
            (ErrorKind::Conflict, Commit::NotCommitted),
            "a 409 is never a rejection unless it says BlobAlreadyExists"
        );
    }

    #[test]
    fn reads_map_missing_blobs_to_absent_and_missing_containers_to_not_found() {
        assert_eq!(
            classify_read(Some(&answer(404, Some("BlobNotFound")))),
            None
        );
        let container = classify_read(Some(&answer(404, Some("ContainerNotFound")))).unwrap();
        assert_eq!(container.kind, ErrorKind::NotFound);
        let denied = classify_read(Some(&answer(403, Some("AuthenticationFailed")))).unwrap();
        assert_eq!(denied.kind, ErrorKind::PermissionDenied);
        let down = classify_read(Some(&Observed::Transport(HttpErrorKind::Connect))).unwrap();
        assert_eq!(
            (down.kind, down.commit),
            (ErrorKind::Unavailable, Commit::NotCommitted)
        );
    }
}
