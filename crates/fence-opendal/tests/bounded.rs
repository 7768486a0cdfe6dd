//! fence-opendal against hostile canned servers on 127.0.0.1: answers of any size end within
//! their deadline, classified as the same answers of a normal size, having read no more than
//! their caps (a record at the record limit, a listing within fence-wire's `ListingLimits` in
//! names, bytes and pages, as on the other adapters).

#[path = "../../fence-wire/tests/support/canned.rs"]
mod canned;
#[path = "../../fence-wire/tests/support/s3_listing.rs"]
mod s3_listing;

use std::time::Duration;

use canned::{
    assert_listing_capped, assert_long_record_refused, assert_names_capped, assert_pages_capped,
    assert_read_no_further, kind_commit, serve, within_deadline, Canned, Reply, Request, GIB,
    TWENTY_PAGES,
};
use fence_core::{CasGuard, ConditionalStore, ErrorKind, Key, PutOutcome};
use fence_opendal::emulator::{self, S3Server};
use fence_opendal::{OpendalStore, OpendalStoreBuilder};
use s3_listing::{endless_listing, gibibyte_pages, is_listing};

fn builder(server: &Canned) -> OpendalStoreBuilder {
    let s3 = S3Server {
        endpoint: server.endpoint(),
        bucket: "b".into(),
        region: "us-east-1".into(),
        access_key_id: "AKIDCANNED".into(),
        secret_access_key: "canned-secret".into(),
    };
    OpendalStore::builder(emulator::s3(&s3, "/fleet").unwrap())
        .with_cas_timeout(Duration::from_secs(20))
}

fn store_at(server: &Canned) -> OpendalStore {
    builder(server).build().unwrap()
}

/// A listing whose pages never end stops at the limit of names (before, OpenDAL's
/// `list_options` read pages for ever, holding every name).
#[tokio::test]
async fn a_listing_that_never_ends_stops_at_its_limit_of_names() {
    let server = serve(endless_listing(1000)).await;
    assert_names_capped(&store_at(&server), &server, is_listing).await;
}

/// Empty pages that never end stop at the limit of pages.
#[tokio::test]
async fn empty_pages_that_never_end_stop_at_the_limit_of_pages() {
    let server = serve(endless_listing(0)).await;
    let store = builder(&server).with_listing_limits(TWENTY_PAGES);
    assert_pages_capped(&store.build().unwrap(), &server, is_listing).await;
}

/// One listing page of 1 GiB: read up to the page limit, then refused as a listing limit.
#[tokio::test]
async fn a_listing_page_of_a_gibibyte_is_read_no_further() {
    let server = serve(gibibyte_pages).await;
    assert_listing_capped(&store_at(&server), None).await;
    assert_read_no_further(&server);
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

/// The same without a `Content-Length` (the body ends when the connection does): OpenDAL's
/// s3 reader refuses an object answer without a length, an unreadable answer.
#[tokio::test]
async fn a_record_of_unannounced_length_is_read_no_further() {
    let long = Reply::stream(200, "application/json", 2 * GIB, b'{').unannounced();
    let server = serve(move |_| object(long.clone())).await;
    assert_long_record_refused(&store_at(&server), &server, ErrorKind::Unavailable).await;
}

/// An S3 error answer: its code, then `len` bytes of padding.
fn error_answer(status: u16, code: &str, len: u64) -> Reply {
    let start = format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message>");
    Reply::stream(status, "application/xml", len, b' ').with_body_start(&start)
}

/// An outcome, or an error's kind and commit state.
fn shown<T: std::fmt::Debug>(r: Result<T, fence_core::Error>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("{:?}", kind_commit(&e)),
    }
}

/// What a create and a read of `k` come to against a server answering everything with
/// `reply`, and whether the server was read no further than the caps allow.
async fn answers(reply: Reply) -> (String, String) {
    let server = serve(move |_| reply.clone()).await;
    let (store, k) = (store_at(&server), Key::new("k").unwrap());
    let create = within_deadline(store.put(&k, "ours".into(), CasGuard::Absent)).await;
    let read = within_deadline(store.get(&k)).await;
    assert_read_no_further(&server);
    (shown(create), shown(read.map(|s| s.map(|s| s.body))))
}

/// Error answers of 1 GiB are classified as the same answers of a few bytes: a 412 rejects,
/// a 404 reads absent, a 403 is permission denied, a 500 ambiguous — none is a broken
/// answer for being long.
#[tokio::test]
async fn error_answers_of_a_gibibyte_are_classified_as_short_ones() {
    let cases = [
        (412, "PreconditionFailed"),
        (404, "NoSuchKey"),
        (403, "AccessDenied"),
        (500, "InternalError"),
    ];
    for (status, code) in cases {
        let short = answers(error_answer(status, code, 200)).await;
        let long = answers(error_answer(status, code, GIB)).await;
        assert_eq!(long, short, "HTTP {status} {code}");
    }
    let rejected = answers(error_answer(412, "PreconditionFailed", GIB)).await;
    assert_eq!(rejected.0, format!("{:?}", PutOutcome::Rejected));
    let absent = answers(error_answer(404, "NoSuchKey", GIB)).await;
    assert_eq!(absent.1, "None");
}

/// A write answered 200 with its `ETag` and a body of 1 GiB: applied, by its headers; the
/// body is read no further than its cap.
#[tokio::test]
async fn a_write_answered_with_a_long_body_is_classified_by_its_headers() {
    let long =
        |_: &Request| Reply::stream(200, "text/xml", GIB, b' ').with_header("ETag", "\"e9\"");
    let server = serve(long).await;
    let (store, k) = (store_at(&server), Key::new("k").unwrap());
    let put = store.put(&k, "ours".into(), CasGuard::Absent);
    let applied = PutOutcome::Applied(fence_core::Version::new("\"e9\"").unwrap());
    assert_eq!(within_deadline(put).await.unwrap(), applied);
    assert_read_no_further(&server);
}
