//! The DynamoDB dialect of outcomes, mapped onto fence's vocabulary. Pure: no I/O.
//!
//! DynamoDB answers every refusal as HTTP 400 with the exception's name in `__type`
//! (`com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException`). The rule for writes:
//!
//! - `ConditionalCheckFailedException` proves the condition false: rejected;
//! - any other 400 is a request DynamoDB refused before carrying it out — throttling
//!   (`ProvisionedThroughputExceededException`, `ThrottlingException`,
//!   `RequestLimitExceeded`), a transaction in progress on the item, validation, a missing
//!   table, credentials: not committed;
//! - 401/403 and redirects (never followed): not committed;
//! - everything else after the request may have left this process — 5xx, 408, 429 (not a
//!   DynamoDB answer, so whoever gave it may have forwarded the request first), a timeout, a
//!   reset, an answer that cannot be read: ambiguous.

use fence_core::{Commit, ErrorKind};
pub(crate) use fence_wire::outcome::Failure;

use Commit::{Ambiguous, NotCommitted};

/// The exception name of an error answer: the part of `__type` after `#` (DynamoDB Local and
/// older endpoints send the bare name).
pub(crate) fn exception(type_field: &str) -> &str {
    type_field.rsplit('#').next().unwrap_or(type_field)
}

/// Whether `code` is DynamoDB's "the condition was false".
pub(crate) fn condition_failed(code: Option<&str>) -> bool {
    code == Some("ConditionalCheckFailedException")
}

/// The codes of a request refused for the rate it came at: nothing of it was carried out.
pub(crate) const THROTTLING: [&str; 3] = [
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
];

const DENIED: [&str; 9] = [
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "IncompleteSignatureException",
    "MissingAuthenticationTokenException",
    "MissingAuthenticationToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
];

/// A failed answer with `status` and the exception `code` (if one could be read), of a
/// request that may change the store. `ConditionalCheckFailedException` is the caller's to
/// handle first.
pub(crate) fn failed(status: u16, code: Option<&str>) -> Failure {
    let f = Failure::new;
    match (status, code) {
        (400, Some(c)) if THROTTLING.contains(&c) => f(
            ErrorKind::Unavailable,
            NotCommitted,
            "throttled: DynamoDB refused the request for its rate, nothing was written",
        ),
        (400, Some("TransactionConflictException")) => f(
            ErrorKind::Conflict,
            NotCommitted,
            "a transaction on the item was in progress; nothing of ours landed",
        ),
        (400, Some("ResourceNotFoundException")) => {
            f(ErrorKind::NotFound, NotCommitted, TABLE_MISSING)
        }
        (400, Some(c)) if DENIED.contains(&c) => f(ErrorKind::PermissionDenied, NotCommitted, DENY),
        (400, Some("ValidationException" | "SerializationException")) => f(
            ErrorKind::InvalidInput,
            NotCommitted,
            "DynamoDB refused the request as invalid",
        ),
        (400, _) => f(
            ErrorKind::Other,
            NotCommitted,
            "DynamoDB refused the request",
        ),
        (401 | 403, _) => f(ErrorKind::PermissionDenied, NotCommitted, DENY),
        (300..=399, _) => f(
            ErrorKind::InvalidInput,
            NotCommitted,
            "the endpoint redirected the request (redirects are not followed): check the \
             endpoint and region",
        ),
        (408 | 504, _) => f(
            ErrorKind::Timeout,
            Ambiguous,
            "the endpoint answered a timeout",
        ),
        (429, _) => f(ErrorKind::Unavailable, Ambiguous, "throttled (429)"),
        (200..=299, _) => unreadable(),
        (402..=499, _) => f(
            ErrorKind::Other,
            NotCommitted,
            "the endpoint refused the request",
        ),
        _ => f(
            ErrorKind::Unavailable,
            Ambiguous,
            "DynamoDB answered a server error",
        ),
    }
}

/// An answer whose body could not be read whole or made no sense: the request was carried
/// out or not.
pub(crate) fn unreadable() -> Failure {
    Failure::new(
        ErrorKind::Unavailable,
        Ambiguous,
        "the answer broke off or could not be read",
    )
}

/// A transport failure without an HTTP status: only a failed connect proves the request was
/// never sent.
pub(crate) fn transport(connect: bool, timeout: bool) -> Failure {
    let kind = match timeout {
        true => ErrorKind::Timeout,
        false => ErrorKind::Unavailable,
    };
    match connect {
        true => Failure::new(kind, NotCommitted, "could not connect to DynamoDB"),
        false => Failure::new(
            kind,
            Ambiguous,
            "the request failed after it may have been sent",
        ),
    }
}

/// Whether a read that failed this way may be repeated.
pub(crate) fn read_retryable(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Unavailable | ErrorKind::Timeout)
}

pub(crate) const TABLE_MISSING: &str = "the table does not exist in this region \
    (create it: `aws dynamodb create-table`, see docs/dynamodb.md)";
const DENY: &str = "access denied (check the credentials, the region and the IAM policy)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_names_drop_their_namespace() {
        let full = "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException";
        assert!(condition_failed(Some(exception(full))));
        assert_eq!(exception("ValidationException"), "ValidationException");
    }

    #[test]
    fn throttling_and_refusals_are_not_committed() {
        for code in THROTTLING {
            let f = failed(400, Some(code));
            assert_eq!((f.kind, f.commit), (ErrorKind::Unavailable, NotCommitted));
        }
        for (code, kind) in [
            ("ResourceNotFoundException", ErrorKind::NotFound),
            ("AccessDeniedException", ErrorKind::PermissionDenied),
            ("UnrecognizedClientException", ErrorKind::PermissionDenied),
            ("ValidationException", ErrorKind::InvalidInput),
            ("TransactionConflictException", ErrorKind::Conflict),
            ("SomethingNew", ErrorKind::Other),
        ] {
            let f = failed(400, Some(code));
            assert_eq!((f.kind, f.commit), (kind, NotCommitted), "{code}");
        }
        assert_eq!(failed(400, None).commit, NotCommitted);
        assert_eq!(failed(403, None).kind, ErrorKind::PermissionDenied);
        assert_eq!(failed(307, None).commit, NotCommitted);
    }

    #[test]
    fn server_errors_timeouts_and_429_are_ambiguous() {
        for status in [500, 502, 503, 504, 408, 429] {
            assert_eq!(failed(status, None).commit, Ambiguous, "{status}");
        }
        let throttled_5xx = failed(503, Some("ThrottlingException"));
        assert_eq!(throttled_5xx.commit, Ambiguous, "the status comes first");
        assert_eq!(failed(200, None).commit, Ambiguous);
        assert_eq!(transport(false, true).commit, Ambiguous);
        assert_eq!(transport(true, false).commit, NotCommitted);
    }
}
