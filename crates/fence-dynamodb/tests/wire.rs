//! fence-dynamodb against canned DynamoDB answers on 127.0.0.1: a failed condition with the
//! item (ours or another's) and without, 5xx, a body cut short, a timeout, each throttling
//! code, a record over the limit, a redirect, and the tables it refuses (a global table in
//! eventual consistency, another key schema, none). No server needed.

use std::time::Duration;

use bytes::Bytes;
use fence_core::{
    CasGuard, Commit, ConditionalStore, Current, ErrorKind, Key, PutOutcome, Version,
};
use fence_dynamodb::{DynamoDbStore, DynamoDbStoreBuilder, MAX_RECORD};
use fence_testkit::canned::{error_texts, kind_commit, serve, Canned, Reply, Request};
use support::{described, json_reply, op};

mod support;
use serde_json::{json, Value};

const SECRET: &str = "canned-secret-access-key";

fn builder(server: &Canned) -> DynamoDbStoreBuilder {
    DynamoDbStore::builder()
        .with_url("dynamodb://fence-test/x")
        .with_endpoint(server.endpoint())
        .with_allow_http(true)
        .with_credentials("AKIDCANNED", SECRET)
        .with_read_policy(Duration::from_secs(5), 2)
}

fn store_at(server: &Canned) -> DynamoDbStore {
    builder(server).build().unwrap()
}

fn key() -> Key {
    Key::new("cells/c/own.json").unwrap()
}

fn exception(code: &str) -> Value {
    json!({ "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"), "message": "canned" })
}

/// A server that describes a fit table and answers every other request with `answer`.
async fn answering(answer: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Canned {
    serve(move |r| match op(r) {
        "DescribeTable" => described(json!({})),
        _ => answer(r),
    })
    .await
}

fn item(body: &str, version: &str) -> Value {
    json!({
        "pk": { "S": "x" },
        "sk": { "S": "cells/c/own.json" },
        "v": { "S": version },
        "b": { "S": body },
    })
}

/// A write of "ours" under `guard` that must reach a verdict, with what its rejection told.
async fn telling(server: &Canned, guard: CasGuard) -> (PutOutcome, Current) {
    let store = store_at(server);
    store
        .put_with_current(&key(), "ours".into(), guard)
        .await
        .unwrap()
}

fn puts(server: &Canned) -> usize {
    server.count(|r| op(r) == "PutItem")
}

#[tokio::test]
async fn every_write_names_its_operation_and_asks_for_the_old_item_on_failure() {
    let server = answering(|_| json_reply(200, json!({}))).await;
    let store = store_at(&server);
    let got = store
        .put(&key(), "ours".into(), CasGuard::Absent)
        .await
        .unwrap();
    assert!(matches!(got, PutOutcome::Applied(_)));
    let sent = server.requests();
    let put = sent.iter().find(|r| op(r) == "PutItem").expect("a PutItem");
    assert_eq!(
        put.header("content-type"),
        Some("application/x-amz-json-1.0")
    );
    assert!(put
        .header("authorization")
        .is_some_and(|a| a.contains("/dynamodb/aws4_request")));
    let body: Value = serde_json::from_slice(&put.body).unwrap();
    assert_eq!(body["ReturnValuesOnConditionCheckFailure"], "ALL_OLD");
    assert_eq!(body["ConditionExpression"], "attribute_not_exists(sk)");
    assert_eq!(body["Item"]["b"], json!({ "S": "ours" }));
}

/// A failed condition carries the item: ours (a write of ours that landed earlier) or
/// another's, exactly as stored; without an item under `Match`, the key is absent.
#[tokio::test]
async fn a_failed_condition_carries_the_item_ours_or_another() {
    for (body, version) in [("ours", "3-aa"), ("theirs", "4-bb")] {
        let mut refusal = exception("ConditionalCheckFailedException");
        refusal["Item"] = item(body, version);
        let server = answering(move |_| json_reply(400, refusal.clone())).await;
        let guard = CasGuard::Match(Version::new("2-00").unwrap());
        let (outcome, current) = telling(&server, guard).await;
        assert_eq!(outcome, PutOutcome::Rejected);
        let Current::Found(found) = current else {
            panic!("{body}: {current:?}");
        };
        assert_eq!(
            (&found.body[..], found.version.as_str()),
            (body.as_bytes(), version)
        );
        assert_eq!(puts(&server), 1, "nothing read after the rejection");
    }
    let bare = answering(|_| json_reply(400, exception("ConditionalCheckFailedException"))).await;
    let guard = CasGuard::Match(Version::new("2-00").unwrap());
    let rejected = PutOutcome::Rejected;
    assert_eq!(
        telling(&bare, guard).await,
        (rejected.clone(), Current::Absent)
    );
    assert_eq!(
        telling(&bare, CasGuard::Absent).await,
        (rejected, Current::Untold)
    );
}

/// An item that is not one of fence's records (no version) is not evidence.
#[tokio::test]
async fn a_foreign_item_on_a_failed_condition_is_not_evidence() {
    let mut refusal = exception("ConditionalCheckFailedException");
    refusal["Item"] = json!({ "pk": { "S": "x" }, "sk": { "S": "k" }, "b": { "N": "1" } });
    let server = answering(move |_| json_reply(400, refusal.clone())).await;
    let got = telling(&server, CasGuard::Absent).await;
    assert_eq!(got, (PutOutcome::Rejected, Current::Untold));
}

#[tokio::test]
async fn each_throttling_code_is_not_committed_and_retryable() {
    for code in [
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
    ] {
        let server = answering(move |_| json_reply(400, exception(code))).await;
        let err = store_at(&server)
            .put(&key(), "x".into(), CasGuard::Absent)
            .await
            .unwrap_err();
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::Unavailable, Commit::NotCommitted),
            "{code}"
        );
        assert!(err.is_retryable(), "{code}");
        assert_eq!(puts(&server), 1, "{code}: a write is never repeated");
    }
}

#[tokio::test]
async fn server_errors_are_ambiguous_and_never_repeated() {
    for (status, code) in [(500, "InternalServerError"), (503, "ServiceUnavailable")] {
        let server = answering(move |_| json_reply(status, exception(code))).await;
        let store = store_at(&server);
        let err = store
            .put(&key(), "x".into(), CasGuard::Absent)
            .await
            .unwrap_err();
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::Unavailable, Commit::Ambiguous),
            "{status}"
        );
        assert_eq!(puts(&server), 1, "{status}");
        let read = store.get(&key()).await.unwrap_err();
        assert_eq!(
            kind_commit(&read),
            (ErrorKind::Unavailable, Commit::NotCommitted)
        );
        assert_eq!(
            server.count(|r| op(r) == "GetItem"),
            3,
            "a read is tried three times"
        );
    }
}

/// A write's answer cut short (its `Content-Length` promised more) may follow a landed
/// write: ambiguous. A read's is not committed.
#[tokio::test]
async fn a_body_cut_short_is_ambiguous_for_a_write_and_retried_for_a_read() {
    let cut = |_: &Request| Reply::Cut {
        status: 200,
        headers: vec![("Content-Type".into(), "application/x-amz-json-1.0".into())],
        declared: 200,
        body: br#"{"Item":{"v":{"S":"1-"#.to_vec(),
    };
    let server = answering(cut).await;
    let store = store_at(&server);
    let err = store
        .put(&key(), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(err.commit(), Commit::Ambiguous, "{err:?}");
    let read = store.get(&key()).await.unwrap_err();
    assert_eq!(
        kind_commit(&read),
        (ErrorKind::Unavailable, Commit::NotCommitted)
    );
}

/// A write whose answer does not come within the CAS timeout: ambiguous, bounded by it.
#[tokio::test]
async fn a_write_that_times_out_is_ambiguous_within_its_bound() {
    let slow =
        |_: &Request| Reply::After(Duration::from_secs(5), Box::new(json_reply(200, json!({}))));
    let server = answering(slow).await;
    let store = builder(&server)
        .with_cas_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    store.check_table().await.unwrap();
    let clock = fence_core::Clock::system();
    let started = clock.mono_ms();
    let err = store
        .put(&key(), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::Timeout, Commit::Ambiguous),
        "{err:?}"
    );
    assert!(
        clock.mono_ms() - started < 3_000,
        "bounded by the CAS timeout"
    );
    assert_eq!(puts(&server), 1);
}

#[tokio::test]
async fn a_redirect_is_not_committed_and_never_followed() {
    for status in [301, 307, 308] {
        let server = answering(move |_| {
            Reply::status(status, "text/plain", "").with_header("Location", "/elsewhere")
        })
        .await;
        let err = store_at(&server)
            .put(&key(), "x".into(), CasGuard::Absent)
            .await
            .unwrap_err();
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::InvalidInput, Commit::NotCommitted)
        );
        assert_eq!(puts(&server), 1, "{status}: not followed");
    }
}

/// A record over the store's limit is refused before anything is sent, naming the limit;
/// one at the limit (`MAX_RECORD` by default, a DynamoDB item's 400 KB less the key) is sent.
#[tokio::test]
async fn a_record_over_the_limit_is_refused_before_it_is_sent() {
    let server = answering(|_| json_reply(200, json!({}))).await;
    let store = store_at(&server);
    assert_eq!(store.capabilities().max_body, Some(MAX_RECORD));
    let over = Bytes::from(vec![b'x'; MAX_RECORD + 1]);
    let err = store.put(&key(), over, CasGuard::Absent).await.unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::InvalidInput, Commit::NotCommitted)
    );
    assert!(err.to_string().contains(&MAX_RECORD.to_string()), "{err}");
    assert_eq!(
        server.requests().len(),
        0,
        "nothing was sent, not even the description"
    );
    let at = Bytes::from(vec![b'x'; MAX_RECORD]);
    assert!(matches!(
        store.put(&key(), at, CasGuard::Absent).await,
        Ok(PutOutcome::Applied(_))
    ));
    assert_eq!(puts(&server), 1);
    let too_high = builder(&server).with_record_limit(MAX_RECORD + 1).build();
    assert_eq!(too_high.unwrap_err().kind(), ErrorKind::InvalidInput);
}

/// An item whose record is longer than the limit is corrupt, not a record.
#[tokio::test]
async fn an_item_over_the_record_limit_is_corrupt() {
    let long = "y".repeat(1001);
    let server = answering(move |_| json_reply(200, json!({ "Item": item(&long, "1-a") }))).await;
    let store = builder(&server).with_record_limit(1000).build().unwrap();
    let err = store.get(&key()).await.unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::Corrupt, Commit::NotCommitted)
    );
    assert_eq!(err.key(), Some(&key()));
}

/// A global table in multi-Region eventual consistency is refused before anything is
/// written: there the last writer wins across Regions. In strong consistency it is fit.
#[tokio::test]
async fn a_global_table_is_refused_unless_strongly_consistent() {
    let replicas = json!([{ "RegionName": "us-east-1" }, { "RegionName": "eu-west-1" }]);
    let eventual = json!({ "Replicas": replicas });
    let server = serve(move |r| match op(r) {
        "DescribeTable" => described(eventual.clone()),
        _ => json_reply(200, json!({})),
    })
    .await;
    let store = store_at(&server);
    let err = store
        .put(&key(), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::Unsupported, Commit::NotCommitted)
    );
    assert!(err.to_string().contains("eu-west-1"), "{err}");
    assert_eq!(
        store.get(&key()).await.unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(puts(&server), 0);
    let verdict = fence_testkit::probe(&store, &fence_testkit::ProbeConfig::default()).await;
    assert!(verdict.verdict.is_unsupported(), "{verdict}");

    let strong = json!({ "Replicas": replicas, "MultiRegionConsistency": "STRONG" });
    let server = serve(move |r| match op(r) {
        "DescribeTable" => described(strong.clone()),
        _ => json_reply(200, json!({})),
    })
    .await;
    let put = store_at(&server)
        .put(&key(), "x".into(), CasGuard::Absent)
        .await;
    assert!(matches!(put, Ok(PutOutcome::Applied(_))), "{put:?}");
}

#[tokio::test]
async fn a_missing_table_or_another_key_schema_is_refused_before_any_write() {
    let missing = serve(|_| json_reply(400, exception("ResourceNotFoundException"))).await;
    let err = store_at(&missing)
        .put(&key(), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::NotFound, Commit::NotCommitted)
    );
    assert!(
        err.to_string().contains("fence-test"),
        "names the table: {err}"
    );
    assert_eq!(puts(&missing), 0);
    let other = json!({ "KeySchema": [{ "AttributeName": "id", "KeyType": "HASH" }] });
    let server = serve(move |r| match op(r) {
        "DescribeTable" => described(other.clone()),
        _ => json_reply(200, json!({})),
    })
    .await;
    let err = store_at(&server).get(&key()).await.unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::InvalidInput, Commit::NotCommitted)
    );
    assert_eq!(server.count(|r| op(r) == "GetItem"), 0);
}

/// The table is described once per store, not before every request.
#[tokio::test]
async fn the_table_is_described_once() {
    let server = answering(|_| json_reply(200, json!({}))).await;
    let store = store_at(&server);
    for _ in 0..3 {
        assert_eq!(store.get(&key()).await.unwrap(), None);
    }
    assert_eq!(server.count(|r| op(r) == "DescribeTable"), 1);
    assert_eq!(store.requests_sent(), 4);
}

/// What an error answer says reaches the error's sources (escaped, cut short), never a secret.
#[tokio::test]
async fn a_refusal_says_why_and_never_shows_the_secret() {
    let denied = json!({
        "__type": "com.amazonaws.dynamodb.v20120810#AccessDeniedException",
        "message": "User: arn:aws:iam::1:user/x is not authorized to perform: dynamodb:PutItem\u{1b}[31m",
    });
    let server = answering(move |_| json_reply(400, denied.clone())).await;
    let err = store_at(&server)
        .put(&key(), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::PermissionDenied, Commit::NotCommitted)
    );
    let texts = error_texts(&err);
    assert!(texts.contains("AccessDeniedException") && texts.contains("not authorized"));
    assert!(
        !texts.contains('\u{1b}'),
        "escaped for the terminal: {texts}"
    );
    assert!(!texts.contains(SECRET), "{texts}");
}
