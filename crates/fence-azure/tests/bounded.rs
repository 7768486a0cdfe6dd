//! fence-azure against hostile canned answers: the suite every HTTP adapter runs
//! (`fence_testkit::canned::bounded`) in Blob Storage's dialect, and an answer never trusted
//! on one of two `x-ms-error-code`s.

use std::sync::Arc;
use std::time::Duration;

use fence_azure::AzureStore;
use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key};
use fence_testkit::canned::bounded::{
    Dialect, ErrorCase, Expect, Limits, Listings, Records, RefusedListing, VersionHeader,
};
use fence_testkit::canned::{assert_error, serve, Reply, Request};

fn store(endpoint: &str, limits: Limits) -> Arc<dyn ConditionalStore> {
    let mut builder = AzureStore::builder()
        .with_emulator(endpoint)
        .with_container("fence-test")
        .with_prefix("fleet")
        .with_cas_timeout(Duration::from_secs(20))
        .with_read_policy(Duration::from_secs(20), 1);
    if let Some(record) = limits.record {
        builder = builder.with_record_limit(record);
    }
    if let Some(listing) = limits.listing {
        builder = builder.with_listing_limits(listing);
    }
    Arc::new(builder.build().unwrap())
}

const LAST_MODIFIED: &str = "Tue, 01 Dec 2026 07:00:00 GMT";

/// A blob of `len` bytes, ETag `"0x8DC1"`.
fn blob(len: u64, announced: bool) -> Reply {
    let fill = if len > 1 << 30 { b'{' } else { b'x' };
    let reply = Reply::stream(200, "application/json", len, fill)
        .with_header("ETag", "\"0x8DC1\"")
        .with_header("Last-Modified", LAST_MODIFIED);
    match announced {
        true => reply,
        false => reply.unannounced(),
    }
}

/// A Put Blob's success, ETag `"0x8DC2"`, its body `len` bytes of spaces.
fn written(len: u64) -> Reply {
    Reply::stream(201, "text/xml", len, b' ').with_header("ETag", "\"0x8DC2\"")
}

/// An error answer whose code is only in its body (read from its start when no
/// `x-ms-error-code` says it), padded to `len` bytes.
fn error(status: u16, code: &str, len: u64) -> Reply {
    let start = format!("\u{feff}<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m");
    let whole = format!("{start}</Message></Error>");
    match len <= whole.len() as u64 {
        true => Reply::status(status, "application/xml", whole),
        false => Reply::stream(status, "application/xml", len, b' ').with_body_start(&start),
    }
}

fn absent() -> Reply {
    Reply::status(404, "text/xml", "").with_header("x-ms-error-code", "BlobNotFound")
}

fn listing(page: u64, names: u64, next: &str) -> Reply {
    let mut xml = String::from("\u{feff}<?xml version=\"1.0\"?><EnumerationResults><Blobs>");
    for i in 0..names {
        xml.push_str(&format!(
            "<Blob><Name>fleet/cells/c{page}-{i}/own.json</Name><Properties>\
             <Last-Modified>{LAST_MODIFIED}</Last-Modified>\
             <Content-Length>10</Content-Length><Content-Type>application/json</Content-Type>\
             </Properties></Blob>"
        ));
    }
    let end = format!("</Blobs><NextMarker>{next}</NextMarker></EnumerationResults>");
    Reply::status(200, "application/xml", xml + &end)
}

fn long_listing(len: u64) -> Reply {
    let head = "<?xml version=\"1.0\"?><EnumerationResults><Blobs><Blob><Name>";
    Reply::stream(200, "application/xml", len, b'a').with_body_start(head)
}

const ERRORS: &[ErrorCase] = {
    use Commit::{Ambiguous, NotCommitted};
    use ErrorKind::{PermissionDenied, Unavailable};
    use Expect::{Fails, Rejected, Unchecked};
    &[
        ErrorCase::new(
            500,
            "InternalError",
            Fails(Unavailable, Ambiguous),
            Fails(Unavailable, NotCommitted),
        ),
        ErrorCase::new(
            403,
            "AuthenticationFailed",
            Fails(PermissionDenied, NotCommitted),
            Fails(PermissionDenied, NotCommitted),
        ),
        // Azurite's answer to a create of an existing blob (real Azure answers 412).
        ErrorCase::new(409, "BlobAlreadyExists", Rejected, Unchecked),
        ErrorCase::new(412, "ConditionNotMet", Rejected, Unchecked),
    ]
};

const REFUSED_LISTINGS: &[RefusedListing] = &[
    RefusedListing::new(
        403,
        "AuthorizationPermissionMismatch",
        ErrorKind::PermissionDenied,
    ),
    RefusedListing::new(404, "ContainerNotFound", ErrorKind::NotFound),
    RefusedListing::new(400, "InvalidQueryParameterValue", ErrorKind::Other),
];

fn records() -> Records {
    Records {
        is_write: |r| r.method == "PUT",
        record: blob,
        // object_store needs the length of an object it reads.
        unannounced: ErrorKind::Unsupported,
        absent,
        written,
        // The ETag is the proof; the body is never read.
        long_write: Expect::Applied,
    }
}

fn listings() -> Listings {
    Listings {
        is_listing: |r| r.target.contains("comp=list"),
        page: listing,
        page_asked: |r| r.query_number("marker=t").unwrap_or(0),
        long_page: long_listing,
        sees_page_tokens: true,
        refused: REFUSED_LISTINGS,
    }
}

fn dialect() -> Dialect {
    Dialect::new(store, records(), listings(), error, ERRORS).with_version_header(VersionHeader {
        name: "ETag",
        other: "\"0x8DC9\"",
        write: Expect::Fails(ErrorKind::Unsupported, Commit::Ambiguous),
    })
}

fence_testkit::bounded_answers!(dialect());

fn two_codes(status: u16, first: &'static str, second: &'static str) -> impl Fn(&Request) -> Reply {
    move |_| {
        Reply::status(status, "application/xml", "")
            .with_header("x-ms-error-code", first)
            .with_header("x-ms-error-code", second)
    }
}

/// Two different `x-ms-error-code`s on one answer: neither is the verdict.
#[tokio::test]
async fn two_different_error_codes_are_never_trusted() {
    let key = Key::new("k").unwrap();
    let server = serve(two_codes(409, "BlobAlreadyExists", "LeaseIdMissing")).await;
    let exists = store(&server.endpoint(), Limits::default());
    let err = exists.put(&key, "ours".into(), CasGuard::Absent).await;
    assert_error(&err.unwrap_err(), ErrorKind::Conflict, Commit::NotCommitted);
    let server = serve(two_codes(404, "BlobNotFound", "ContainerNotFound")).await;
    let missing = store(&server.endpoint(), Limits::default());
    let read = missing.get(&key).await;
    assert_eq!(
        read.unwrap_err().commit(),
        Commit::NotCommitted,
        "not absent"
    );
    assert!(missing.delete_immutable(&key).await.is_err(), "not deleted");
}
