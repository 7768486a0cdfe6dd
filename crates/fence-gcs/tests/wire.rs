//! fence-gcs against canned HTTP servers on 127.0.0.1: redirects, least-privilege 404s, a
//! body cut short, an echoed token, a slow token provider. No emulator needed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_core::{CasGuard, Commit, ConditionalStore, Error, ErrorKind, Key, PutOutcome};
use fence_gcs::{AccessToken, GcsStore, StaticToken, TokenProvider};
use fence_testkit::canned::{error_texts, kind_commit, serve, Reply};

const TOKEN: &str = "ya29.canned-secret-token";
const BUCKET_PATH: &str = "/storage/v1/b/fence-test";

fn store_with(endpoint: &str, ttl: Duration, tokens: Arc<dyn TokenProvider>) -> GcsStore {
    GcsStore::builder()
        .with_url("gs://fence-test/x")
        .with_endpoint(endpoint)
        .with_token_provider(tokens)
        .with_lease_ttl(ttl)
        .build()
        .unwrap()
}

fn store_at(endpoint: &str) -> GcsStore {
    store_with(
        endpoint,
        Duration::from_secs(10),
        Arc::new(StaticToken::new(TOKEN)),
    )
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

fn json(status: u16, body: &str) -> Reply {
    Reply::status(status, "application/json", body)
}

fn not_found(message: &str) -> Reply {
    json(
        404,
        &format!(r#"{{"error":{{"code":404,"message":"{message}"}}}}"#),
    )
}

fn media(generation: &str, body: &str) -> Reply {
    Reply::status(200, "application/octet-stream", body)
        .with_header("x-goog-generation", generation)
}

/// Item 1: a redirect answering an upload is not committed and never followed (reqwest's
/// default followed a 303 as a GET and took the other writer's generation for ours).
#[tokio::test]
async fn a_redirect_answering_an_upload_is_not_committed_and_never_followed() {
    for status in [301, 302, 303, 307, 308] {
        let server = serve(move |r| match r.method.as_str() {
            "POST" => Reply::status(status, "text/plain", "")
                .with_header("Location", "/storage/v1/b/fence-test/o/x%2Fk"),
            _ => json(200, r#"{"name":"x/k","generation":"77"}"#)
                .with_header("x-goog-generation", "77"),
        })
        .await;
        let store = store_at(&server.endpoint());
        let got = store.put(&key("k"), "ours".into(), CasGuard::Absent).await;
        let err = got.expect_err("a redirect is never Applied");
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::InvalidInput, Commit::NotCommitted),
            "{status}: {err:?}"
        );
        assert_eq!(
            server.requests().len(),
            1,
            "{status}: only the upload was sent"
        );
    }
}

#[tokio::test]
async fn a_redirect_answering_a_read_is_not_followed() {
    let server = serve(|r| match r.path() {
        "/storage/v1/b/fence-test/o/x%2Fk" => {
            Reply::status(302, "text/plain", "").with_header("Location", "/elsewhere")
        }
        _ => media("5", "another object"),
    })
    .await;
    let err = store_at(&server.endpoint())
        .get(&key("k"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    assert_eq!(server.count(|r| r.path() == "/elsewhere"), 0);
}

/// Item 3: with an object-only role (no `storage.buckets.get`), a missing object reads as
/// absent: the 404's body says what is missing, and the bucket is not asked.
#[tokio::test]
async fn a_missing_object_reads_as_absent_without_bucket_permission() {
    let server = serve(|r| match r.path() {
        BUCKET_PATH => json(
            403,
            r#"{"error":{"code":403,"message":"no storage.buckets.get"}}"#,
        ),
        _ => Reply::status(404, "text/html", "No such object: fence-test/x/k"),
    })
    .await;
    let store = store_at(&server.endpoint());
    assert_eq!(store.get(&key("k")).await.unwrap(), None);
    store.delete_immutable(&key("k")).await.unwrap();
    assert_eq!(server.count(|r| r.path() == BUCKET_PATH), 0);
}

#[tokio::test]
async fn a_missing_bucket_is_told_by_the_404_body() {
    let server = serve(|r| match r.path() {
        BUCKET_PATH => json(403, "{}"),
        _ => not_found("The specified bucket does not exist."),
    })
    .await;
    let store = store_at(&server.endpoint());
    let err = store.get(&key("k")).await.unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::NotFound, Commit::NotCommitted)
    );
    let err = store.delete_immutable(&key("k")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(server.count(|r| r.path() == BUCKET_PATH), 0);
}

/// A 404 that does not say (emulators) falls back to a bucket check; a role that may not
/// read the bucket's metadata leaves the object's 404 standing.
#[tokio::test]
async fn an_uninformative_404_with_bucket_access_denied_reads_as_absent() {
    let server = serve(|r| match r.path() {
        BUCKET_PATH => json(403, "{}"),
        _ => Reply::status(404, "text/plain", "Not Found"),
    })
    .await;
    assert_eq!(
        store_at(&server.endpoint()).get(&key("k")).await.unwrap(),
        None
    );
}

/// Item 3: a bucket seen once is not remembered forever: deleted later, it is reported.
#[tokio::test]
async fn a_bucket_deleted_later_is_not_found() {
    let deleted = Arc::new(AtomicBool::new(false));
    let gone = deleted.clone();
    let server = serve(move |r| match (r.path(), gone.load(Ordering::SeqCst)) {
        (BUCKET_PATH, false) => json(200, r#"{"name":"fence-test"}"#),
        (_, false) => Reply::status(404, "text/plain", "Not Found"),
        (_, true) => not_found("The specified bucket does not exist."),
    })
    .await;
    let store = store_at(&server.endpoint());
    assert_eq!(store.get(&key("k")).await.unwrap(), None);
    deleted.store(true, Ordering::SeqCst);
    let err = store.get(&key("k")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err:?}");
}

/// Item 4: a body cut mid-stream is a failed read, retryable, retried.
#[tokio::test]
async fn a_body_cut_short_is_unavailable_and_retryable() {
    let server = serve(|_| Reply::Cut {
        status: 200,
        headers: vec![("x-goog-generation".into(), "5".into())],
        declared: 100,
        body: b"{\"epoch\":".to_vec(),
    })
    .await;
    let err = store_at(&server.endpoint())
        .get(&key("k"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    assert_eq!(server.requests().len(), 3, "reads are retried");
}

/// Item 8: neither the bearer token nor anything a server echoes reaches error text.
#[tokio::test]
async fn an_echoed_token_never_reaches_error_text() {
    let body = format!(
        r#"{{"error":{{"code":403,"message":"denied for Authorization: Bearer {TOKEN}"}}}}"#
    );
    let server = serve(move |_| json(403, &body)).await;
    let store = store_at(&server.endpoint());
    let errors = [
        store
            .put(&key("k"), "x".into(), CasGuard::Absent)
            .await
            .unwrap_err(),
        store.get(&key("k")).await.unwrap_err(),
        store.list(None).await.unwrap_err(),
        store.delete_immutable(&key("k")).await.unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(
            kind_commit(err),
            (ErrorKind::PermissionDenied, Commit::NotCommitted)
        );
        let texts = error_texts(err);
        assert!(!texts.contains("canned-secret"), "{texts}");
    }
}

/// A token provider that answers after `delay`.
struct SlowToken(Duration);

#[async_trait]
impl TokenProvider for SlowToken {
    async fn token(&self) -> Result<AccessToken, Error> {
        tokio::time::sleep(self.0).await;
        Ok(AccessToken::new(TOKEN))
    }
}

/// Item 10: one attempt — token lookup and request together — is bounded by the request
/// timeout (lease TTL 3 s → 1 s): a 0.7 s token and a 0.7 s answer no longer fit.
#[tokio::test]
async fn the_token_lookup_spends_from_the_attempt_timeout() {
    let server = serve(|_| {
        let applied = json(200, r#"{"name":"x/k","generation":"9"}"#);
        Reply::After(Duration::from_millis(700), Box::new(applied))
    })
    .await;
    let slow = Arc::new(SlowToken(Duration::from_millis(700)));
    let store = store_with(&server.endpoint(), Duration::from_secs(3), slow);
    assert_eq!(store.timeouts().request, Duration::from_secs(1));
    let got = store.put(&key("k"), "x".into(), CasGuard::Absent).await;
    let err = got.expect_err("1.4 s of token and answer in a 1 s attempt");
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::Timeout, Commit::Ambiguous),
        "{err:?}"
    );

    // A token slower than the whole bound: nothing is sent.
    let slower = Arc::new(SlowToken(Duration::from_millis(1500)));
    let store = store_with(&server.endpoint(), Duration::from_secs(3), slower);
    let err = store
        .put(&key("k"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::Timeout, Commit::NotCommitted)
    );
    assert_eq!(server.requests().len(), 1, "only the first upload was sent");
}

/// Control for the bound above: a token and an answer that fit are applied.
#[tokio::test]
async fn a_token_and_answer_within_the_bound_are_applied() {
    let server = serve(|_| json(200, r#"{"name":"x/k","generation":"9"}"#)).await;
    let quick = Arc::new(SlowToken(Duration::from_millis(100)));
    let store = store_with(&server.endpoint(), Duration::from_secs(3), quick);
    let got = store
        .put(&key("k"), "x".into(), CasGuard::Absent)
        .await
        .unwrap();
    assert!(matches!(got, PutOutcome::Applied(v) if v.as_str() == "9"));
}
