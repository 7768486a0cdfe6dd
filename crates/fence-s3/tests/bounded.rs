//! fence-s3 against hostile canned servers on 127.0.0.1: answers of any size end within
//! their deadline, with the right classification, having read no more than their caps (a
//! record at the record limit, an error body at a few KiB, a listing within its limits), and
//! an answer is never trusted on one `ETag` picked out of several.

#[path = "../../fence-wire/tests/support/canned.rs"]
mod canned;

use std::time::Duration;

use canned::{
    assert_error, assert_listing_capped, assert_long_record_refused, assert_names_capped,
    assert_pages_capped, assert_read_no_further, assert_record_limit, serve, within_deadline,
    Canned, Reply, Request, GIB, TWENTY_PAGES,
};
use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key, PutOutcome, Version};
use fence_s3::{S3Store, S3StoreBuilder};

fn builder(server: &Canned) -> S3StoreBuilder {
    S3Store::builder()
        .with_bucket("b")
        .with_prefix("fleet")
        .with_endpoint(server.endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_credentials("AKIDCANNED", "canned-secret")
        .with_cas_timeout(Duration::from_secs(20))
        .with_read_policy(Duration::from_secs(20), 1)
}

fn store_at(server: &Canned) -> S3Store {
    builder(server).build().unwrap()
}

fn key() -> Key {
    Key::new("k").unwrap()
}

async fn create(store: &S3Store) -> Result<PutOutcome, fence_core::Error> {
    within_deadline(store.put(&key(), "ours".into(), CasGuard::Absent)).await
}

fn object(reply: Reply) -> Reply {
    reply
        .with_header("ETag", "\"e1\"")
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT")
}

/// A 200 whose body is 2 GiB, streamed: a record can be no longer than the record limit.
#[tokio::test]
async fn a_record_far_over_the_limit_is_corrupt_and_read_no_further() {
    let server = serve(|_| object(Reply::stream(200, "application/json", 2 * GIB, b'{'))).await;
    assert_long_record_refused(&store_at(&server), &server, ErrorKind::Corrupt).await;
}

/// The same without a `Content-Length` (the body ends when the connection does): object_store needs the length of an object it reads.
#[tokio::test]
async fn a_record_of_unannounced_length_is_read_no_further() {
    let long = Reply::stream(200, "application/json", 2 * GIB, b'{').unannounced();
    let server = serve(move |_| object(long.clone())).await;
    assert_long_record_refused(&store_at(&server), &server, ErrorKind::Unsupported).await;
}

#[tokio::test]
async fn the_record_limit_is_one_setting_that_bounds_puts_and_gets() {
    let server = serve(|r: &Request| match r.method.as_str() {
        "PUT" => Reply::status(200, "text/plain", "").with_header("ETag", "\"e2\""),
        _ => object(Reply::stream(200, "application/json", 1001, b'x')),
    })
    .await;
    let limited = builder(&server).with_record_limit(1000).build().unwrap();
    assert_record_limit(&limited, &store_at(&server), &server, "PUT").await;
}

#[tokio::test]
async fn a_record_at_the_limit_reads_whole() {
    let server = serve(|_| object(Reply::stream(200, "application/json", 5000, b'x'))).await;
    let store = builder(&server).with_record_limit(5000).build().unwrap();
    assert_eq!(store.get(&key()).await.unwrap().unwrap().body.len(), 5000);
}

fn gib_error(status: u16, code: &str) -> Reply {
    let start = format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message>");
    Reply::stream(status, "application/xml", GIB, b' ').with_body_start(&start)
}

/// Error answers of 1 GiB: only their start is read, and they are classified as usual.
#[tokio::test]
async fn error_answers_of_a_gibibyte_are_read_no_further_and_classified_as_usual() {
    use Commit::{Ambiguous, NotCommitted};
    let cases = [
        (500, "InternalError", ErrorKind::Unavailable, Ambiguous),
        (
            403,
            "AccessDenied",
            ErrorKind::PermissionDenied,
            NotCommitted,
        ),
    ];
    for (status, code, kind, commit) in cases {
        let server = serve(move |_| gib_error(status, code)).await;
        let store = store_at(&server);
        assert_error(&create(&store).await.unwrap_err(), kind, commit);
        let read = within_deadline(store.get(&key())).await;
        assert_error(&read.unwrap_err(), kind, NotCommitted);
        assert_read_no_further(&server);
    }
    let rejected = serve(|_| gib_error(412, "PreconditionFailed")).await;
    assert_eq!(
        create(&store_at(&rejected)).await.unwrap(),
        PutOutcome::Rejected
    );
    let no_bucket = serve(|_| gib_error(404, "NoSuchBucket")).await;
    let read = within_deadline(store_at(&no_bucket).get(&key())).await;
    let why = "the code is read from the start";
    assert_eq!(read.unwrap_err().kind(), ErrorKind::NotFound, "{why}");
}

/// A write answered 200 with a strong ETag and a body of 1 GiB: the ETag is the proof, and the
/// body is never read.
#[tokio::test]
async fn a_write_answered_with_a_long_body_is_classified_by_its_headers() {
    let long =
        |_: &Request| Reply::stream(200, "text/xml", GIB, b' ').with_header("ETag", "\"e9\"");
    let server = serve(long).await;
    let applied = PutOutcome::Applied(Version::new("\"e9\"").unwrap());
    assert_eq!(create(&store_at(&server)).await.unwrap(), applied);
    assert_read_no_further(&server);
}

fn listing_page(page: u64, names: u64) -> String {
    let mut xml = format!(
        "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>\
         <NextContinuationToken>t{}</NextContinuationToken>",
        page + 1
    );
    for i in 0..names {
        xml.push_str(&format!(
            "<Contents><Key>fleet/cells/c{page}-{i}/own.json</Key><Size>10</Size>\
             <LastModified>2026-12-01T07:00:00.000Z</LastModified></Contents>"
        ));
    }
    xml + "</ListBucketResult>"
}

fn is_listing(r: &Request) -> bool {
    r.target.contains("list-type=2")
}

/// Every listing page continues with the next (`continuation-token=t<N>`), without end.
fn endless_listing(names_per_page: u64) -> impl Fn(&Request) -> Reply + Send + Sync {
    move |r: &Request| match is_listing(r) {
        true => {
            let page = r.query_number("continuation-token=t").unwrap_or(0);
            Reply::status(200, "application/xml", listing_page(page, names_per_page))
        }
        false => Reply::status(
            404,
            "application/xml",
            "<Error><Code>NoSuchKey</Code></Error>",
        ),
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
    let head = "<?xml version=\"1.0\"?><ListBucketResult><Contents><Key>";
    let server = serve(move |r: &Request| match is_listing(r) {
        true => Reply::stream(200, "application/xml", GIB, b'a').with_body_start(head),
        false => Reply::status(404, "application/xml", ""),
    })
    .await;
    assert_listing_capped(&store_at(&server), None).await;
    assert_read_no_further(&server);
}

fn with_etags(tags: &[&str]) -> Reply {
    let reply = Reply::status(200, "application/json", "{}")
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT");
    tags.iter().fold(reply, |r, tag| r.with_header("ETag", tag))
}

/// Two different ETags on one answer: neither is the version of anything.
#[tokio::test]
async fn two_different_etags_are_never_trusted() {
    let server = serve(|_| with_etags(&["\"first\"", "\"second\""])).await;
    let store = store_at(&server);
    let stale = CasGuard::Match(Version::new("\"v\"").unwrap());
    for guard in [CasGuard::Absent, stale] {
        let err = store.put(&key(), "ours".into(), guard).await.unwrap_err();
        assert_error(&err, ErrorKind::Unsupported, Commit::Ambiguous);
    }
    let err = store.get(&key()).await.unwrap_err();
    assert_error(&err, ErrorKind::Unsupported, Commit::NotCommitted);
}

#[tokio::test]
async fn the_same_etag_twice_is_one_etag() {
    let server = serve(|_| with_etags(&["\"same\"", "\"same\""])).await;
    let store = store_at(&server);
    let applied = PutOutcome::Applied(Version::new("\"same\"").unwrap());
    assert_eq!(create(&store).await.unwrap(), applied);
    let got = store.get(&key()).await.unwrap().unwrap();
    assert_eq!(got.version.as_str(), "\"same\"");
}

/// A list of tags in one `ETag` header would match either in a later `If-Match`.
#[tokio::test]
async fn a_list_of_tags_in_one_etag_is_not_a_version() {
    let server = serve(|_| with_etags(&["\"a\", \"b\""])).await;
    let err = create(&store_at(&server)).await.unwrap_err();
    assert_error(&err, ErrorKind::Unsupported, Commit::Ambiguous);
}
