//! fence-azure against hostile canned servers on 127.0.0.1: answers of any size end within
//! their deadline, with the right classification, having read no more than their caps (a
//! record at the record limit, an error body at a few KiB, a listing within its limits), and
//! an answer is never trusted on one header (`ETag`, `x-ms-error-code`) picked out of several.

#[path = "../../fence-wire/tests/support/canned.rs"]
mod canned;

use std::time::Duration;

use canned::{
    assert_error, assert_listing_capped, assert_long_record_refused, assert_names_capped,
    assert_pages_capped, assert_read_no_further, assert_record_limit, serve, within_deadline,
    Canned, Reply, Request, GIB, TWENTY_PAGES,
};
use fence_azure::{AzureStore, AzureStoreBuilder};
use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key, PutOutcome, Version};

fn builder(server: &Canned) -> AzureStoreBuilder {
    AzureStore::builder()
        .with_emulator(server.endpoint())
        .with_container("fence-test")
        .with_prefix("fleet")
        .with_cas_timeout(Duration::from_secs(20))
        .with_read_policy(Duration::from_secs(20), 1)
}

fn store_at(server: &Canned) -> AzureStore {
    builder(server).build().unwrap()
}

fn key() -> Key {
    Key::new("k").unwrap()
}

async fn put(store: &AzureStore, guard: CasGuard) -> Result<PutOutcome, fence_core::Error> {
    within_deadline(store.put(&key(), "ours".into(), guard)).await
}

fn stale() -> CasGuard {
    CasGuard::Match(Version::new("\"0x8DC0\"").unwrap())
}

fn blob(reply: Reply) -> Reply {
    reply
        .with_header("ETag", "\"0x8DC1\"")
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT")
}

/// A 200 whose body is 2 GiB, streamed: a record can be no longer than the record limit.
#[tokio::test]
async fn a_record_far_over_the_limit_is_corrupt_and_read_no_further() {
    let server = serve(|_| blob(Reply::stream(200, "application/json", 2 * GIB, b'{'))).await;
    assert_long_record_refused(&store_at(&server), &server, ErrorKind::Corrupt).await;
}

/// The same without a `Content-Length` (the body ends when the connection does): object_store needs the length of an object it reads.
#[tokio::test]
async fn a_record_of_unannounced_length_is_read_no_further() {
    let long = Reply::stream(200, "application/json", 2 * GIB, b'{').unannounced();
    let server = serve(move |_| blob(long.clone())).await;
    assert_long_record_refused(&store_at(&server), &server, ErrorKind::Unsupported).await;
}

#[tokio::test]
async fn the_record_limit_is_one_setting_that_bounds_puts_and_gets() {
    let server = serve(|r: &Request| match r.method.as_str() {
        "PUT" => Reply::status(201, "text/plain", "").with_header("ETag", "\"0x8DC2\""),
        _ => blob(Reply::stream(200, "application/json", 1001, b'x')),
    })
    .await;
    let limited = builder(&server).with_record_limit(1000).build().unwrap();
    assert_record_limit(&limited, &store_at(&server), &server, "PUT").await;
}

fn gib_error(status: u16, code: &str) -> Reply {
    let start = format!("\u{feff}<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m");
    Reply::stream(status, "application/xml", GIB, b' ').with_body_start(&start)
}

/// Error answers of 1 GiB: only their start is read, and they are classified as usual (the
/// code read from that start when no `x-ms-error-code` says it).
#[tokio::test]
async fn error_answers_of_a_gibibyte_are_read_no_further_and_classified_as_usual() {
    use Commit::{Ambiguous, NotCommitted};
    let cases = [
        (500, "InternalError", ErrorKind::Unavailable, Ambiguous),
        (
            403,
            "AuthenticationFailed",
            ErrorKind::PermissionDenied,
            NotCommitted,
        ),
    ];
    for (status, code, kind, commit) in cases {
        let server = serve(move |_| gib_error(status, code)).await;
        let store = store_at(&server);
        assert_error(
            &put(&store, CasGuard::Absent).await.unwrap_err(),
            kind,
            commit,
        );
        let read = within_deadline(store.get(&key())).await;
        assert_error(&read.unwrap_err(), kind, NotCommitted);
        assert_read_no_further(&server);
    }
    let exists = store_at(&serve(|_| gib_error(409, "BlobAlreadyExists")).await);
    let why = "the code is read from the start";
    assert_eq!(
        put(&exists, CasGuard::Absent).await.unwrap(),
        PutOutcome::Rejected,
        "{why}"
    );
    let rejected = store_at(&serve(|_| gib_error(412, "ConditionNotMet")).await);
    assert_eq!(put(&rejected, stale()).await.unwrap(), PutOutcome::Rejected);
}

/// A write answered 201 with a strong ETag and a body of 1 GiB: the ETag is the proof, and
/// the body is never read.
#[tokio::test]
async fn a_write_answered_with_a_long_body_is_classified_by_its_headers() {
    let long =
        |_: &Request| Reply::stream(201, "text/xml", GIB, b' ').with_header("ETag", "\"0x8DC9\"");
    let server = serve(long).await;
    let applied = PutOutcome::Applied(Version::new("\"0x8DC9\"").unwrap());
    assert_eq!(
        put(&store_at(&server), CasGuard::Absent).await.unwrap(),
        applied
    );
    assert_read_no_further(&server);
}

fn listing_page(page: u64, names: u64) -> String {
    let mut xml = String::from("\u{feff}<?xml version=\"1.0\"?><EnumerationResults><Blobs>");
    for i in 0..names {
        xml.push_str(&format!(
            "<Blob><Name>fleet/cells/c{page}-{i}/own.json</Name><Properties>\
             <Last-Modified>Tue, 01 Dec 2026 07:00:00 GMT</Last-Modified>\
             <Content-Length>10</Content-Length><Content-Type>application/json</Content-Type>\
             </Properties></Blob>"
        ));
    }
    xml + &format!(
        "</Blobs><NextMarker>t{}</NextMarker></EnumerationResults>",
        page + 1
    )
}

fn is_listing(r: &Request) -> bool {
    r.target.contains("comp=list")
}

/// Every listing page continues with the next (`marker=t<N>`), without end.
fn endless_listing(names_per_page: u64) -> impl Fn(&Request) -> Reply + Send + Sync {
    move |r: &Request| match is_listing(r) {
        true => {
            let page = r.query_number("marker=t").unwrap_or(0);
            Reply::status(200, "application/xml", listing_page(page, names_per_page))
        }
        false => Reply::status(404, "text/xml", "").with_header("x-ms-error-code", "BlobNotFound"),
    }
}

/// A listing whose pages never end stops at the limit of names, with an error that says so.
#[tokio::test]
async fn a_listing_that_never_ends_stops_at_its_limit_of_names() {
    let server = serve(endless_listing(1000)).await;
    assert_names_capped(&store_at(&server), &server, is_listing).await;
}

#[tokio::test]
async fn empty_pages_that_never_end_stop_at_the_limit_of_pages() {
    let server = serve(endless_listing(0)).await;
    let store = builder(&server).with_listing_limits(TWENTY_PAGES);
    assert_pages_capped(&store.build().unwrap(), &server, is_listing).await;
}

/// One listing page of 1 GiB: read up to the page limit, then refused.
#[tokio::test]
async fn a_listing_page_of_a_gibibyte_is_read_no_further() {
    let head = "<?xml version=\"1.0\"?><EnumerationResults><Blobs><Blob><Name>";
    let server = serve(move |r: &Request| match is_listing(r) {
        true => Reply::stream(200, "application/xml", GIB, b'a').with_body_start(head),
        false => Reply::status(404, "application/xml", ""),
    })
    .await;
    assert_listing_capped(&store_at(&server), None).await;
    assert_read_no_further(&server);
}

fn two_etags(status: u16) -> Reply {
    Reply::status(status, "application/json", "{}")
        .with_header("ETag", "\"0x8DC1\"")
        .with_header("ETag", "\"0x8DC2\"")
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT")
}

/// Two different ETags on one answer: neither is the version of anything.
#[tokio::test]
async fn two_different_etags_are_never_trusted() {
    let store = store_at(&serve(|_| two_etags(201)).await);
    for guard in [CasGuard::Absent, stale()] {
        let err = put(&store, guard).await.unwrap_err();
        assert_error(&err, ErrorKind::Unsupported, Commit::Ambiguous);
    }
    let store = store_at(&serve(|_| two_etags(200)).await);
    let err = store.get(&key()).await.unwrap_err();
    assert_error(&err, ErrorKind::Unsupported, Commit::NotCommitted);
}

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
    let store = store_at(&serve(two_codes(409, "BlobAlreadyExists", "LeaseIdMissing")).await);
    let err = put(&store, CasGuard::Absent).await.unwrap_err();
    assert_error(&err, ErrorKind::Conflict, Commit::NotCommitted);
    let store = store_at(&serve(two_codes(404, "BlobNotFound", "ContainerNotFound")).await);
    let read = store.get(&key()).await;
    assert_eq!(
        read.unwrap_err().commit(),
        Commit::NotCommitted,
        "not absent"
    );
    assert!(store.delete_immutable(&key()).await.is_err(), "not deleted");
}
