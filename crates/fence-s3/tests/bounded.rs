//! fence-s3 against hostile canned answers: the suite every HTTP adapter runs
//! (`fence_testkit::canned::bounded`) in S3's dialect, and the ETags S3 alone sends.

use std::sync::Arc;
use std::time::Duration;

use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key, PutOutcome, Version};
use fence_s3::S3Store;
use fence_testkit::canned::bounded::{Dialect, Limits};
use fence_testkit::canned::{assert_error, s3, serve, Reply, Request};

fn store(endpoint: &str, limits: Limits) -> Arc<dyn ConditionalStore> {
    let mut builder = S3Store::builder()
        .with_bucket("b")
        .with_prefix("fleet")
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_credentials("AKIDCANNED", "canned-secret")
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

fn dialect() -> Dialect {
    Dialect::new(store, s3::records(), s3::listings(), s3::error, s3::ERRORS)
        .with_version_header(s3::ETAG)
}

fence_testkit::bounded_answers!(dialect());

fn with_etags(tags: &[&str]) -> Reply {
    let reply = Reply::status(200, "application/json", "{}")
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT");
    tags.iter().fold(reply, |r, tag| r.with_header("ETag", tag))
}

fn key() -> Key {
    Key::new("k").unwrap()
}

#[tokio::test]
async fn the_same_etag_twice_is_one_etag() {
    let server = serve(|_: &Request| with_etags(&["\"same\"", "\"same\""])).await;
    let store = store(&server.endpoint(), Limits::default());
    let created = store.put(&key(), "ours".into(), CasGuard::Absent).await;
    let applied = PutOutcome::Applied(Version::new("\"same\"").unwrap());
    assert_eq!(created.unwrap(), applied);
    let got = store.get(&key()).await.unwrap().unwrap();
    assert_eq!(got.version.as_str(), "\"same\"");
}

/// A list of tags in one `ETag` header would match either in a later `If-Match`.
#[tokio::test]
async fn a_list_of_tags_in_one_etag_is_not_a_version() {
    let server = serve(|_: &Request| with_etags(&["\"a\", \"b\""])).await;
    let store = store(&server.endpoint(), Limits::default());
    let err = store.put(&key(), "ours".into(), CasGuard::Absent).await;
    assert_error(&err.unwrap_err(), ErrorKind::Unsupported, Commit::Ambiguous);
}
