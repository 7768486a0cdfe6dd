//! What an OpenDAL answer means in fence's vocabulary. Pure: no I/O.
//!
//! Two witnesses are read together: the OpenDAL [`ErrorKind`](opendal::ErrorKind) (which
//! carries the service's own reading of its error body: `ConditionNotMatch` for a condition
//! we gave, `Conflict`, `NotFound`, ...) and the [`Attempt`]s the transport recorded (was
//! anything sent, what status answered it). Only a precondition answer to the one request
//! that carried the write is a rejection; only a request that provably changed nothing is
//! "not committed"; everything else after sending is ambiguous. The table is in
//! `docs/opendal.md`.

use fence_core::{Commit, ErrorKind};
pub(crate) use fence_wire::outcome::{strong_etag, Failure};
use opendal::ErrorKind as Dal;

use crate::transport::{Attempt, Outcome};

/// The guard of a write, as far as classification cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// Create only if absent.
    Absent,
    /// Replace (or delete) only at this version.
    Match,
}

/// How an OpenDAL call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It returned; for a write, the version token of its metadata (`None`: missing).
    Done(Option<String>),
    /// It failed with this OpenDAL kind.
    Failed(Dal),
    /// fence's own deadline ran out first; the call was dropped.
    TimedOut,
}

/// What a conditional write (or delete) came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Applied; the version token exactly as returned (empty for a delete).
    Applied(String),
    /// The store proved the condition false, on the only request that carried the operation.
    Rejected,
    /// A failure of this kind and commit state.
    Failed(Failure),
}

const fn failure(kind: ErrorKind, commit: Commit, why: &'static str) -> Failure {
    Failure::new(kind, commit, why)
}

/// Classifies a conditional write or delete from how the call ended and what was sent.
/// `token_needed` is false for deletes (which return no version).
pub(crate) fn classify_write(
    guard: Guard,
    ended: &Ended,
    attempts: &[Attempt],
    token_needed: bool,
) -> Verdict {
    let verdict = match ended {
        Ended::Done(token) => return applied(token.as_deref(), token_needed),
        Ended::TimedOut => timed_out(attempts),
        Ended::Failed(kind) => failed(guard, *kind, attempts.last()),
    };
    let (earlier, _) = attempts.split_at(attempts.len().saturating_sub(1));
    match verdict {
        Verdict::Rejected
        | Verdict::Failed(Failure {
            commit: Commit::NotCommitted,
            ..
        }) if earlier.iter().any(Attempt::may_have_landed) => Verdict::Failed(failure(
            ErrorKind::Unavailable,
            Commit::Ambiguous,
            "an earlier request of this write may have landed (was it retried?)",
        )),
        verdict => verdict,
    }
}

fn applied(token: Option<&str>, token_needed: bool) -> Verdict {
    match token {
        _ if !token_needed => Verdict::Applied(String::new()),
        Some(tag) if strong_etag(tag) => Verdict::Applied(tag.to_string()),
        _ => Verdict::Failed(failure(
            ErrorKind::Unsupported,
            Commit::Ambiguous,
            "the store answered the write without a usable version token, so what it stored \
             is unknown",
        )),
    }
}

fn timed_out(attempts: &[Attempt]) -> Verdict {
    let commit = match attempts.iter().any(Attempt::may_have_landed) {
        true => Commit::Ambiguous,
        false => Commit::NotCommitted,
    };
    Verdict::Failed(failure(
        ErrorKind::Timeout,
        commit,
        "the write outlived its deadline",
    ))
}

/// The verdict of a failed call from its last request alone.
fn failed(guard: Guard, kind: Dal, last: Option<&Attempt>) -> Verdict {
    use Commit::{Ambiguous, NotCommitted};
    let fail = |k, c, why| Verdict::Failed(failure(k, c, why));
    let Some(last) = last else {
        return before_sending(kind);
    };
    match last.outcome {
        Outcome::Answer(status) => by_status(guard, kind, status),
        Outcome::NotSent => fail(
            ErrorKind::Other,
            NotCommitted,
            "the request could not be built",
        ),
        Outcome::Connect => fail(ErrorKind::Unavailable, NotCommitted, CONNECT),
        Outcome::Timeout => fail(ErrorKind::Timeout, Ambiguous, "the request timed out"),
        Outcome::Broken | Outcome::Pending => fail(ErrorKind::Unavailable, Ambiguous, BROKEN),
    }
}

const CONNECT: &str = "could not connect to the store";
const BROKEN: &str = "the connection failed or the answer was unreadable";
const DENIED: &str = "access denied (check the credentials and the permissions)";
const MISSING: &str = "the bucket or container does not exist";
const REDIRECT: &str =
    "the store redirected the request (never followed): wrong endpoint or region";

/// A failure with no request on record: OpenDAL refused the call before dispatch (an
/// unsupported condition, an invalid configuration). Any other kind without a request on
/// record is not proof of anything, so it stays ambiguous.
fn before_sending(kind: Dal) -> Verdict {
    let (kind, commit, why) = match kind {
        Dal::Unsupported => (
            ErrorKind::Unsupported,
            Commit::NotCommitted,
            "OpenDAL refused the operation: the service lacks a capability it needs",
        ),
        Dal::ConfigInvalid => (
            ErrorKind::InvalidInput,
            Commit::NotCommitted,
            "OpenDAL refused the configuration",
        ),
        Dal::IsADirectory | Dal::NotADirectory => (
            ErrorKind::InvalidKey,
            Commit::NotCommitted,
            "OpenDAL refused the path",
        ),
        _ => (
            ErrorKind::Other,
            Commit::Ambiguous,
            "the write failed and no request of it is on record",
        ),
    };
    Verdict::Failed(failure(kind, commit, why))
}

fn by_status(guard: Guard, kind: Dal, status: u16) -> Verdict {
    use Commit::{Ambiguous, NotCommitted};
    let fail = |k, c, why| Verdict::Failed(failure(k, c, why));
    match (status, kind) {
        (200..=299, _) => fail(
            ErrorKind::Unavailable,
            Ambiguous,
            "the store accepted the request but its answer could not be read",
        ),
        // 409 too: Azure answers a failed create-if-absent 409 BlobAlreadyExists, which
        // OpenDAL reads as our condition failing.
        (304 | 409 | 412, Dal::ConditionNotMatch) => Verdict::Rejected,
        // AWS (and moto) answer If-Match on a missing key 404 NoSuchKey: the condition is
        // false. OpenDAL reports it as NotFound or, following its spec, ConditionNotMatch.
        (404, Dal::NotFound | Dal::ConditionNotMatch) if guard == Guard::Match => Verdict::Rejected,
        (409, Dal::Conflict) => fail(
            ErrorKind::Conflict,
            NotCommitted,
            "409: a conflicting conditional write was in flight; nothing of ours landed",
        ),
        (404, _) => fail(ErrorKind::NotFound, NotCommitted, MISSING),
        (401 | 403, _) => fail(ErrorKind::PermissionDenied, NotCommitted, DENIED),
        (408, _) => fail(ErrorKind::Timeout, Ambiguous, "the store answered 408"),
        // No provider documents that a throttled write did not land.
        (429, _) => fail(ErrorKind::Unavailable, Ambiguous, "throttled (429)"),
        (300..=399, _) => fail(ErrorKind::InvalidInput, NotCommitted, REDIRECT),
        (400..=499, _) => fail(
            ErrorKind::Other,
            NotCommitted,
            "the store refused the request",
        ),
        _ => fail(
            ErrorKind::Unavailable,
            Ambiguous,
            "the store answered a server error",
        ),
    }
}

/// Classifies a failed read, stat or listing: `None` means the object is simply absent.
/// Reads change nothing, so every failure is not committed.
pub(crate) fn classify_read(kind: Dal, last: Option<&Attempt>) -> Option<Failure> {
    let f = |k, why| Some(failure(k, Commit::NotCommitted, why));
    let Some(last) = last else {
        return match before_sending(kind) {
            Verdict::Failed(x) => Some(x.read()),
            _ => f(ErrorKind::Other, "the read failed"),
        };
    };
    match (last.outcome, kind) {
        (Outcome::Answer(404), Dal::NotFound) => None,
        (Outcome::Answer(404), _) => f(ErrorKind::NotFound, MISSING),
        (Outcome::Answer(401 | 403), _) => f(ErrorKind::PermissionDenied, DENIED),
        (Outcome::Answer(408 | 429 | 500..=599), _) => {
            f(ErrorKind::Unavailable, "the store answered a server error")
        }
        (Outcome::Answer(300..=399), _) => f(ErrorKind::InvalidInput, REDIRECT),
        (Outcome::Answer(200..=299), _) => f(ErrorKind::Unavailable, BROKEN),
        (Outcome::Answer(_), _) => f(ErrorKind::Other, "the store refused the request"),
        (Outcome::Connect, _) => f(ErrorKind::Unavailable, CONNECT),
        (Outcome::Timeout, _) => f(ErrorKind::Timeout, "the request timed out"),
        (Outcome::NotSent, _) => f(ErrorKind::Other, "the request could not be built"),
        (Outcome::Broken | Outcome::Pending, _) => f(ErrorKind::Unavailable, BROKEN),
    }
}

/// Classifies a failed listing: like a read, except that nothing is "absent" (a prefix with
/// nothing under it lists as an empty page), so a 404 of any kind means the bucket or
/// container is missing. A listing error is never an empty list.
pub(crate) fn classify_list(kind: Dal, last: Option<&Attempt>) -> Failure {
    classify_read(kind, last)
        .unwrap_or_else(|| failure(ErrorKind::NotFound, Commit::NotCommitted, MISSING))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(outcome: Outcome) -> Attempt {
        Attempt {
            mutating: true,
            outcome,
        }
    }

    fn post_session(outcome: Outcome) -> Attempt {
        Attempt {
            mutating: false,
            outcome,
        }
    }

    fn write(guard: Guard, kind: Dal, attempts: &[Attempt]) -> Verdict {
        classify_write(guard, &Ended::Failed(kind), attempts, true)
    }

    fn kind_commit(v: Verdict) -> (ErrorKind, Commit) {
        match v {
            Verdict::Failed(f) => (f.kind, f.commit),
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn a_precondition_answer_to_the_only_request_is_a_rejection() {
        for guard in [Guard::Absent, Guard::Match] {
            for status in [304, 412, 409] {
                let got = write(
                    guard,
                    Dal::ConditionNotMatch,
                    &[put(Outcome::Answer(status))],
                );
                assert_eq!(got, Verdict::Rejected, "{status}");
            }
        }
        for kind in [Dal::NotFound, Dal::ConditionNotMatch] {
            let missing = write(Guard::Match, kind, &[put(Outcome::Answer(404))]);
            assert_eq!(missing, Verdict::Rejected, "AWS: If-Match on a missing key");
        }
        // A GCS resumable session refused at its start: nothing was uploaded.
        let session = write(
            Guard::Absent,
            Dal::ConditionNotMatch,
            &[post_session(Outcome::Answer(412))],
        );
        assert_eq!(session, Verdict::Rejected);
    }

    #[test]
    fn a_412_after_an_earlier_request_that_may_have_landed_is_ambiguous() {
        // What a RetryLayer does: the replay of a write whose answer was lost is answered 412
        // on our own write.
        for first in [
            Outcome::Broken,
            Outcome::Answer(503),
            Outcome::Timeout,
            Outcome::Pending,
        ] {
            let attempts = [put(first), put(Outcome::Answer(412))];
            let got = write(Guard::Match, Dal::ConditionNotMatch, &attempts);
            assert_eq!(kind_commit(got).1, Commit::Ambiguous, "{first:?}");
        }
        // An earlier refused request proves nothing landed: still a rejection.
        let attempts = [put(Outcome::Connect), put(Outcome::Answer(412))];
        assert_eq!(
            write(Guard::Match, Dal::ConditionNotMatch, &attempts),
            Verdict::Rejected
        );
    }

    #[test]
    fn a_404_on_create_is_a_missing_bucket_not_a_rejection() {
        let got = write(Guard::Absent, Dal::NotFound, &[put(Outcome::Answer(404))]);
        assert_eq!(
            kind_commit(got),
            (ErrorKind::NotFound, Commit::NotCommitted)
        );
        let bucket = write(
            Guard::Match,
            Dal::ConfigInvalid,
            &[put(Outcome::Answer(404))],
        );
        assert_eq!(
            kind_commit(bucket),
            (ErrorKind::NotFound, Commit::NotCommitted)
        );
    }

    #[test]
    fn refusals_are_not_committed() {
        let cases = [
            (403, Dal::PermissionDenied, ErrorKind::PermissionDenied),
            (401, Dal::Unexpected, ErrorKind::PermissionDenied),
            (409, Dal::Conflict, ErrorKind::Conflict),
            (409, Dal::Unexpected, ErrorKind::Other),
            (412, Dal::Unexpected, ErrorKind::Other),
            (400, Dal::Unexpected, ErrorKind::Other),
            (301, Dal::Unexpected, ErrorKind::InvalidInput),
            (303, Dal::Unexpected, ErrorKind::InvalidInput),
            (307, Dal::Unexpected, ErrorKind::InvalidInput),
            (308, Dal::Unexpected, ErrorKind::InvalidInput),
        ];
        for (status, kind, want) in cases {
            for guard in [Guard::Absent, Guard::Match] {
                let got = kind_commit(write(guard, kind, &[put(Outcome::Answer(status))]));
                assert_eq!(got, (want, Commit::NotCommitted), "{status} {kind:?}");
            }
        }
        let refused = write(Guard::Absent, Dal::Unexpected, &[put(Outcome::Connect)]);
        assert_eq!(
            kind_commit(refused),
            (ErrorKind::Unavailable, Commit::NotCommitted)
        );
        let unbuilt = write(Guard::Absent, Dal::Unexpected, &[put(Outcome::NotSent)]);
        assert_eq!(kind_commit(unbuilt).1, Commit::NotCommitted);
    }

    #[test]
    fn anything_after_sending_is_ambiguous() {
        for status in [500, 502, 503, 504, 408, 429, 200, 201] {
            let got = write(
                Guard::Absent,
                Dal::Unexpected,
                &[put(Outcome::Answer(status))],
            );
            assert_eq!(kind_commit(got).1, Commit::Ambiguous, "{status}");
        }
        for outcome in [Outcome::Timeout, Outcome::Broken, Outcome::Pending] {
            let got = write(Guard::Match, Dal::Unexpected, &[put(outcome)]);
            assert_eq!(kind_commit(got).1, Commit::Ambiguous, "{outcome:?}");
        }
        // A 5xx that OpenDAL calls ConditionNotMatch is still not proof.
        let odd = write(
            Guard::Match,
            Dal::ConditionNotMatch,
            &[put(Outcome::Answer(500))],
        );
        assert_eq!(kind_commit(odd).1, Commit::Ambiguous);
    }

    #[test]
    fn without_a_request_on_record_only_refusals_before_dispatch_are_not_committed() {
        let unsupported = write(Guard::Match, Dal::Unsupported, &[]);
        assert_eq!(
            kind_commit(unsupported),
            (ErrorKind::Unsupported, Commit::NotCommitted)
        );
        let config = write(Guard::Match, Dal::ConfigInvalid, &[]);
        assert_eq!(kind_commit(config).1, Commit::NotCommitted);
        // A precondition error with no request on record proves nothing.
        let odd = write(Guard::Match, Dal::ConditionNotMatch, &[]);
        assert_eq!(kind_commit(odd).1, Commit::Ambiguous);
        let unexpected = write(Guard::Match, Dal::Unexpected, &[]);
        assert_eq!(kind_commit(unexpected).1, Commit::Ambiguous);
    }

    #[test]
    fn a_deadline_is_ambiguous_once_the_write_was_sent() {
        let sent = classify_write(
            Guard::Absent,
            &Ended::TimedOut,
            &[put(Outcome::Pending)],
            true,
        );
        assert_eq!(kind_commit(sent), (ErrorKind::Timeout, Commit::Ambiguous));
        let session_only = [post_session(Outcome::Pending)];
        let unsent = classify_write(Guard::Absent, &Ended::TimedOut, &session_only, true);
        assert_eq!(
            kind_commit(unsent),
            (ErrorKind::Timeout, Commit::NotCommitted)
        );
    }

    #[test]
    fn an_applied_write_needs_a_usable_version_token() {
        let done = |t: Option<&str>| Ended::Done(t.map(str::to_string));
        let ok = classify_write(Guard::Absent, &done(Some("\"e1\"")), &[], true);
        assert_eq!(ok, Verdict::Applied("\"e1\"".into()));
        let generation = classify_write(Guard::Match, &done(Some("1733050000000001")), &[], true);
        assert_eq!(generation, Verdict::Applied("1733050000000001".into()));
        for bad in [None, Some(""), Some("\"\""), Some("W/\"e1\"")] {
            let got = classify_write(Guard::Absent, &done(bad), &[], true);
            assert_eq!(
                kind_commit(got),
                (ErrorKind::Unsupported, Commit::Ambiguous),
                "{bad:?}"
            );
        }
        let delete = classify_write(Guard::Match, &done(None), &[], false);
        assert_eq!(delete, Verdict::Applied(String::new()));
    }

    #[test]
    fn reads_map_missing_objects_to_absent_and_everything_else_to_not_committed() {
        let get = |status| Attempt {
            mutating: false,
            outcome: Outcome::Answer(status),
        };
        assert_eq!(classify_read(Dal::NotFound, Some(&get(404))), None);
        let bucket = classify_read(Dal::ConfigInvalid, Some(&get(404))).unwrap();
        assert_eq!(bucket.kind, ErrorKind::NotFound);
        let cases = [
            (403, ErrorKind::PermissionDenied),
            (503, ErrorKind::Unavailable),
            (429, ErrorKind::Unavailable),
            (302, ErrorKind::InvalidInput),
            (400, ErrorKind::Other),
            (200, ErrorKind::Unavailable),
        ];
        for (status, kind) in cases {
            let f = classify_read(Dal::Unexpected, Some(&get(status))).unwrap();
            assert_eq!((f.kind, f.commit), (kind, Commit::NotCommitted), "{status}");
        }
        let down = Attempt {
            mutating: false,
            outcome: Outcome::Connect,
        };
        let f = classify_read(Dal::Unexpected, Some(&down)).unwrap();
        assert_eq!(
            (f.kind, f.commit),
            (ErrorKind::Unavailable, Commit::NotCommitted)
        );
        let before = classify_read(Dal::Unsupported, None).unwrap();
        assert_eq!(
            (before.kind, before.commit),
            (ErrorKind::Unsupported, Commit::NotCommitted)
        );
    }
}
