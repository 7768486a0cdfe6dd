//! fence-opendal against canned HTTP servers on 127.0.0.1: the wire faults a live server will
//! not produce on demand (redirects, an echoed signature, answers of any size, weak ETags, a
//! connect that never completes). No test server needed.

use std::time::Duration;

use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key, Version};
use fence_opendal::emulator::{self, S3Server};
use fence_opendal::OpendalStore;
use fence_testkit::canned::{error_texts, kind_commit, serve, Reply};
use tokio::net::{TcpSocket, TcpStream};

const SECRET: &str = "canned-secret-key";

fn store_at(endpoint: &str) -> OpendalStore {
    let server = S3Server {
        endpoint: endpoint.into(),
        bucket: "b".into(),
        region: "us-east-1".into(),
        access_key_id: "AKIDCANNED".into(),
        secret_access_key: SECRET.into(),
    };
    OpendalStore::builder(emulator::s3(&server, "/fleet").unwrap())
        .with_cas_timeout(Duration::from_secs(3))
        .with_record_limit(1000)
        .build()
        .unwrap()
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

fn guards() -> [CasGuard; 2] {
    [
        CasGuard::Absent,
        CasGuard::Match(Version::new("\"v1\"").unwrap()),
    ]
}

fn object(etag: &str, body: &str) -> Reply {
    Reply::status(200, "application/octet-stream", body)
        .with_header("ETag", etag)
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT")
}

/// A redirect answering a conditional write is not committed, and never followed: followed
/// (reqwest's default), a 303 turns the PUT into a GET whose 200 and ETag OpenDAL would take
/// for the write's.
#[tokio::test]
async fn a_redirect_answering_a_write_is_not_committed_and_never_followed() {
    for status in [301, 302, 303, 307, 308] {
        let server = serve(move |r| match r.method.as_str() {
            "PUT" => {
                Reply::status(status, "text/plain", "moved").with_header("Location", "/b/elsewhere")
            }
            _ => object("\"theirs\"", "someone else's record"),
        })
        .await;
        let store = store_at(&server.endpoint());
        for guard in guards() {
            let got = store
                .put(&key("cells/c1/own.json"), "ours".into(), guard)
                .await;
            let err = got.expect_err("a redirect is never Applied");
            assert_eq!(
                kind_commit(&err),
                (ErrorKind::InvalidInput, Commit::NotCommitted),
                "{status}: {err:?}"
            );
        }
        assert_eq!(
            server.count(|r| r.path() == "/b/elsewhere"),
            0,
            "{status}: followed"
        );
    }
}

/// A 403 whose body echoes the request's signature and secrets: permission denied, and none of
/// it in `Display`, `Debug` or the source chain (OpenDAL's own error carries the raw body).
#[tokio::test]
async fn an_echoed_signature_never_reaches_error_text() {
    const SIGNATURE: &str = "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7";
    let body = format!(
        "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>no</Message>\
         <AWSAccessKeyId>AKIDCANNED</AWSAccessKeyId><StringToSign>STRINGTOSIGNHASH</StringToSign>\
         <SignatureProvided>{SIGNATURE}</SignatureProvided><Secret>{SECRET}</Secret></Error>"
    );
    let server = serve(move |_| Reply::status(403, "application/xml", body.clone())).await;
    let store = store_at(&server.endpoint());
    let k = key("k");
    let errors = [
        store
            .put(&k, "x".into(), CasGuard::Absent)
            .await
            .unwrap_err(),
        store.get(&k).await.unwrap_err(),
        store.list(None).await.unwrap_err(),
        store.delete_immutable(&k).await.unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(
            kind_commit(err),
            (ErrorKind::PermissionDenied, Commit::NotCommitted)
        );
        let texts = error_texts(err);
        for secret in [SIGNATURE, "STRINGTOSIGNHASH", "AKIDCANNED", SECRET] {
            assert!(!texts.contains(secret), "{secret} leaked: {texts}");
        }
        assert!(texts.contains("403"), "the status is kept: {texts}");
    }
}

/// An object over the record limit reads as Corrupt; an answer of any size is cut off at the
/// limit (plus slack), an error answer too.
#[tokio::test]
async fn answers_of_any_size_are_bounded() {
    let big = "x".repeat(1001);
    let server = serve(move |r| match r.method.as_str() {
        "GET" => object("\"e\"", &big),
        _ => Reply::status(500, "text/plain", "y".repeat(8 * 1024 * 1024)),
    })
    .await;
    let store = store_at(&server.endpoint());
    let err = store.get(&key("big")).await.unwrap_err();
    assert_eq!(
        kind_commit(&err),
        (ErrorKind::Corrupt, Commit::NotCommitted),
        "{err:?}"
    );
    let err = store
        .put(&key("k"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        err.commit(),
        Commit::Ambiguous,
        "a 500 after sending: {err:?}"
    );
}

/// Weak and empty ETags are not versions: an applied write without a usable one is ambiguous
/// (it landed, as what is unknown); a read with one is refused.
#[tokio::test]
async fn empty_and_weak_etags_are_refused_as_versions() {
    for etag in ["\"\"", "W/\"9b2cf535f27731c974343645a3985328\""] {
        let server = serve(move |r| match r.method.as_str() {
            "PUT" => Reply::status(200, "text/plain", "").with_header("ETag", etag),
            _ => object(etag, "x"),
        })
        .await;
        let store = store_at(&server.endpoint());
        let err = store
            .put(&key("k"), "x".into(), CasGuard::Absent)
            .await
            .unwrap_err();
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::Unsupported, Commit::Ambiguous),
            "{etag}"
        );
        let err = store.get(&key("k")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{etag}");
    }
}

/// A 409 ConditionalRequestConflict: nothing of ours landed, retryable.
#[tokio::test]
async fn a_409_conditional_conflict_is_not_committed_and_retryable() {
    let body = "<Error><Code>ConditionalRequestConflict</Code><Message>m</Message></Error>";
    let server = serve(move |_| Reply::status(409, "application/xml", body)).await;
    let store = store_at(&server.endpoint());
    for guard in guards() {
        let err = store.put(&key("k"), "x".into(), guard).await.unwrap_err();
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::Conflict, Commit::NotCommitted)
        );
        assert!(err.is_retryable());
    }
    assert_eq!(
        server.requests().len(),
        2,
        "each write sent once, never retried"
    );
}

/// A connect that times out sent nothing: not committed. A listener with a full backlog
/// never completes a handshake.
#[tokio::test]
async fn a_connect_timeout_is_not_committed() {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    for _ in 0..4 {
        let connect = TcpStream::connect(addr);
        if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
            queued.push(c);
        }
    }
    let store = store_at(&format!("http://{addr}"));
    let err = store
        .put(&key("n"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(err.commit(), Commit::NotCommitted, "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    drop((listener, queued));
}

/// An answer OpenDAL's transport cannot read past its status (a `Content-Encoding` that is not
/// ASCII) came after the write was sent, and the write may have landed: ambiguous, never "not
/// committed" (OpenDAL's error then has no reqwest source, as when nothing was sent).
#[tokio::test]
async fn an_unreadable_answer_to_a_sent_write_is_ambiguous() {
    let server = serve(|_| {
        Reply::status(200, "application/octet-stream", "")
            .with_header("ETag", "\"v2\"")
            .with_header("Content-Encoding", "gz\u{ef}p")
    })
    .await;
    let store = store_at(&server.endpoint());
    for guard in guards() {
        let err = store
            .put(&key("cells/c1/own.json"), "ours".into(), guard)
            .await
            .expect_err("an unreadable answer is never Applied");
        assert_eq!(err.commit(), Commit::Ambiguous, "{err:?}");
    }
    assert_eq!(
        server.count(|r| r.method == "PUT"),
        2,
        "both writes were sent"
    );
}
