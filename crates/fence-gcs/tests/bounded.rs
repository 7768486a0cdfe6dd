//! fence-gcs against hostile canned servers on 127.0.0.1: answers of any size end within
//! their deadline, with the right classification, having read no more than their caps (a
//! record at the record limit, an error body at a few KiB, an upload's answer at a few tens of
//! KiB, a listing within its limits), and an answer is never trusted on one
//! `x-goog-generation` picked out of several.

#[path = "../../fence-wire/tests/support/canned.rs"]
mod canned;

use canned::{
    assert_error, assert_listing_capped, assert_long_record_refused, assert_names_capped,
    assert_pages_capped, assert_read_no_further, assert_record_limit, serve, within_deadline,
    Canned, Reply, Request, GIB, TWENTY_PAGES,
};
use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key, PutOutcome, Version};
use fence_gcs::{GcsStore, GcsStoreBuilder};

fn builder(server: &Canned) -> GcsStoreBuilder {
    GcsStore::builder()
        .with_url("gs://fence-test/x")
        .with_endpoint(server.endpoint())
        .with_anonymous()
        .with_lease_ttl(std::time::Duration::from_secs(60))
}

fn store_at(server: &Canned) -> GcsStore {
    builder(server).build().unwrap()
}

fn key() -> Key {
    Key::new("k").unwrap()
}

async fn create(store: &GcsStore) -> Result<PutOutcome, fence_core::Error> {
    within_deadline(store.put(&key(), "ours".into(), CasGuard::Absent)).await
}

fn media(reply: Reply) -> Reply {
    reply.with_header("x-goog-generation", "7")
}

/// A 200 download whose body is 2 GiB, streamed: a record can be no longer than the limit.
#[tokio::test]
async fn a_record_far_over_the_limit_is_corrupt_and_read_no_further() {
    let server = serve(|_| media(Reply::stream(200, "application/json", 2 * GIB, b'{'))).await;
    assert_long_record_refused(&store_at(&server), &server, ErrorKind::Corrupt).await;
}

/// The same without a `Content-Length` (the body ends when the connection does): read only up to the record limit.
#[tokio::test]
async fn a_record_of_unannounced_length_is_read_no_further() {
    let long = Reply::stream(200, "application/json", 2 * GIB, b'{').unannounced();
    let server = serve(move |_| media(long.clone())).await;
    assert_long_record_refused(&store_at(&server), &server, ErrorKind::Corrupt).await;
}

#[tokio::test]
async fn the_record_limit_is_one_setting_that_bounds_puts_and_gets() {
    let server = serve(|r: &Request| match r.method.as_str() {
        "POST" => Reply::status(200, "application/json", r#"{"generation":"8"}"#),
        _ => media(Reply::stream(200, "application/json", 1001, b'x')),
    })
    .await;
    let limited = builder(&server).with_record_limit(1000).build().unwrap();
    assert_record_limit(&limited, &store_at(&server), &server, "POST").await;
}

fn gib_answer(status: u16, start: &str) -> Reply {
    Reply::stream(status, "application/json", GIB, b' ').with_body_start(start)
}

/// Error answers of 1 GiB: only the start of a 404 is read (to tell a missing object from a
/// missing bucket), the others not at all; all are classified as usual.
#[tokio::test]
async fn error_answers_of_a_gibibyte_are_read_no_further_and_classified_as_usual() {
    let object = r#"{"error":{"code":404,"message":"No such object: fence-test/x/k"}}"#;
    let absent = serve(move |_| gib_answer(404, object)).await;
    let store = store_at(&absent);
    assert_eq!(within_deadline(store.get(&key())).await.unwrap(), None);
    within_deadline(store.delete_immutable(&key()))
        .await
        .unwrap();
    assert_read_no_further(&absent);

    let failing = serve(|_| gib_answer(500, r#"{"error":{"code":500}}"#)).await;
    let store = store_at(&failing);
    let err = create(&store).await.unwrap_err();
    assert_error(&err, ErrorKind::Unavailable, Commit::Ambiguous);
    let read = within_deadline(store.get(&key())).await;
    assert_error(
        &read.unwrap_err(),
        ErrorKind::Unavailable,
        Commit::NotCommitted,
    );
    assert_read_no_further(&failing);

    let rejected = serve(|_| gib_answer(412, "{}")).await;
    assert_eq!(
        create(&store_at(&rejected)).await.unwrap(),
        PutOutcome::Rejected
    );
}

/// An upload answered 200 with 1 GiB: the generation it would name is never read, so the
/// write landed as an unknown version.
#[tokio::test]
async fn an_upload_answered_with_a_gibibyte_is_ambiguous_never_applied() {
    let start = r#"{"generation":"5","padding":""#;
    let server = serve(move |_| gib_answer(200, start).with_header("x-goog-generation", "5")).await;
    let err = create(&store_at(&server)).await.unwrap_err();
    assert_eq!(err.commit(), Commit::Ambiguous, "{err:?}");
    assert_read_no_further(&server);
}

fn listing_page(page: u64, names: u64) -> String {
    let items: Vec<String> = (0..names)
        .map(|i| format!(r#"{{"name":"x/cells/c{page}-{i}/own.json"}}"#))
        .collect();
    let items = items.join(",");
    format!(r#"{{"items":[{items}],"nextPageToken":"t{}"}}"#, page + 1)
}

fn is_listing(r: &Request) -> bool {
    r.target.contains("/o?prefix=")
}

fn listing_or_absent(page: impl Fn(&Request) -> Reply) -> impl Fn(&Request) -> Reply {
    move |r: &Request| match is_listing(r) {
        true => page(r),
        false => Reply::status(404, "text/plain", "No such object: fence-test/x/cells"),
    }
}

/// Every listing page continues with the next (`pageToken=t<N>`), without end.
fn endless_listing(names_per_page: u64) -> impl Fn(&Request) -> Reply {
    listing_or_absent(move |r: &Request| {
        let page = r.query_number("pageToken=t").unwrap_or(0);
        Reply::status(200, "application/json", listing_page(page, names_per_page))
    })
}

/// Listing pages that never end stop at the limit of names, with an error that says so.
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

#[tokio::test]
async fn a_page_token_that_repeats_is_an_error_not_the_end() {
    let same = r#"{"items":[{"name":"x/a"}],"nextPageToken":"same"}"#;
    let server = serve(listing_or_absent(move |_| {
        Reply::status(200, "application/json", same)
    }))
    .await;
    assert_listing_capped(&store_at(&server), None).await;
    assert_eq!(server.count(is_listing), 2);
}

/// One listing page of 1 GiB: read up to the page limit, then refused.
#[tokio::test]
async fn a_listing_page_of_a_gibibyte_is_read_no_further() {
    let server = serve(listing_or_absent(|_| {
        gib_answer(200, r#"{"items":[{"name":"x/"#)
    }))
    .await;
    assert_listing_capped(&store_at(&server), None).await;
    assert_read_no_further(&server);
}

/// Two different generations on a download: neither is the object's version.
#[tokio::test]
async fn two_different_generations_on_a_download_are_never_trusted() {
    let server = serve(|_| {
        Reply::status(200, "application/json", "{}")
            .with_header("x-goog-generation", "5")
            .with_header("x-goog-generation", "6")
    })
    .await;
    let err = store_at(&server).get(&key()).await.unwrap_err();
    assert_error(&err, ErrorKind::Unsupported, Commit::NotCommitted);
}

fn uploaded(body: &str, generations: &[&str]) -> Reply {
    let reply = Reply::status(200, "application/json", body);
    generations
        .iter()
        .fold(reply, |r, g| r.with_header("x-goog-generation", g))
}

/// An upload's answer is trusted only when everything it says of the generation agrees.
#[tokio::test]
async fn an_upload_answer_that_names_two_generations_is_ambiguous() {
    let five = r#"{"generation":"5"}"#;
    let answers = [
        uploaded(five, &["5", "6"]),
        uploaded(five, &["6"]),
        uploaded(five, &["junk"]),
        uploaded(r#"{"generation":"5","generation":"6"}"#, &[]),
    ];
    for answer in answers {
        let server = serve(move |_| answer.clone()).await;
        let err = create(&store_at(&server)).await.unwrap_err();
        assert_eq!(err.commit(), Commit::Ambiguous, "{err:?}");
    }
    let agreeing = serve(move |_| uploaded(five, &["5"])).await;
    let applied = PutOutcome::Applied(Version::new("5").unwrap());
    assert_eq!(create(&store_at(&agreeing)).await.unwrap(), applied);
}
