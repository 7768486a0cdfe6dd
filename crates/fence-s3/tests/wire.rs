//! fence-s3 against canned HTTP servers on 127.0.0.1: the wire faults a live server will not
//! produce on demand (redirects, a slow read after a 409, a body cut short, weak ETags, an
//! echoed signature, a connect that never completes). No test server needed.

use std::time::Duration;

use bytes::Bytes;
use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key, PutOutcome, Version};
use fence_s3::S3Store;
use fence_testkit::canned::{error_texts, kind_commit, serve, Reply};
use tokio::net::{TcpSocket, TcpStream};

const BUCKET: &str = "b";
const SECRET: &str = "canned-secret-key";

fn store_at(endpoint: &str, cas_timeout: Duration) -> S3Store {
    S3Store::builder()
        .with_bucket(BUCKET)
        .with_prefix("fleet")
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_credentials("AKIDCANNED", SECRET)
        .with_cas_timeout(cas_timeout)
        .with_read_policy(Duration::from_secs(30), 3)
        .build()
        .unwrap()
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

fn xml_error(status: u16, code: &str) -> Reply {
    let body =
        format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message></Error>");
    Reply::status(status, "application/xml", body)
}

fn object(etag: &str, body: &str) -> Reply {
    Reply::status(200, "application/octet-stream", body)
        .with_header("ETag", etag)
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT")
}

/// Item 1: a redirect answering a conditional write is not committed, and never followed
/// (today's reqwest default followed a 303 as a GET and took its 200 for the PUT's success).
#[tokio::test]
async fn a_redirect_answering_a_write_is_not_committed_and_never_followed() {
    for status in [301, 302, 303, 307, 308] {
        let server = serve(move |r| match r.method.as_str() {
            "PUT" => Reply::status(status, "text/plain", "moved")
                .with_header("Location", "/b/fleet/cells/c1/own.json"),
            _ => object("\"theirs\"", "someone else's record"),
        })
        .await;
        let store = store_at(&server.endpoint(), Duration::from_secs(3));
        let k = key("cells/c1/own.json");
        for guard in [
            CasGuard::Absent,
            CasGuard::Match(Version::new("\"v1\"").unwrap()),
        ] {
            let got = store.put(&k, "ours".into(), guard).await;
            let err = got.expect_err("a redirect is never Applied");
            assert_eq!(
                kind_commit(&err),
                (ErrorKind::InvalidInput, Commit::NotCommitted),
                "{status}: {err:?}"
            );
        }
        assert_eq!(
            server.requests().len(),
            2,
            "{status}: nothing but the two PUTs was sent"
        );
    }
}

#[tokio::test]
async fn a_redirect_answering_a_read_is_not_followed() {
    let server = serve(|r| match r.path() {
        "/b/fleet/k" => {
            Reply::status(302, "text/plain", "").with_header("Location", "/b/elsewhere")
        }
        _ => object("\"elsewhere\"", "another object"),
    })
    .await;
    let store = store_at(&server.endpoint(), Duration::from_secs(3));
    let err = store.get(&key("k")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    assert_eq!(server.count(|r| r.path() == "/b/elsewhere"), 0);
}

/// Item 2: after a 409, the resolving read is bounded by what is left of the CAS timeout
/// (today it went through the read client: 30 s timeout, retries).
#[tokio::test]
async fn a_409_is_resolved_within_the_cas_timeout() {
    let server = serve(|r| match r.method.as_str() {
        "PUT" => xml_error(409, "ConditionalRequestConflict"),
        _ => Reply::After(Duration::from_secs(30), Box::new(object("\"x\"", "x"))),
    })
    .await;
    let store = store_at(&server.endpoint(), Duration::from_secs(1));
    let k = key("nodes/n1.json");
    for guard in [
        CasGuard::Absent,
        CasGuard::Match(Version::new("\"v\"").unwrap()),
    ] {
        let put = store.put(&k, "x".into(), guard);
        let bounded = tokio::time::timeout(Duration::from_secs(5), put).await;
        let err = bounded
            .expect("the put outlived 5x its 1 s CAS timeout")
            .unwrap_err();
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::Conflict, Commit::NotCommitted)
        );
    }
    assert_eq!(
        server.count(|r| r.method == "GET"),
        2,
        "one read attempt per 409"
    );
}

/// Item 4: a body cut mid-stream is a failed read (retryable), not a corrupt record.
#[tokio::test]
async fn a_body_cut_short_is_unavailable_and_retryable() {
    let server = serve(|_| Reply::Cut {
        status: 200,
        headers: vec![
            ("ETag".into(), "\"abc\"".into()),
            (
                "Last-Modified".into(),
                "Tue, 01 Dec 2026 07:00:00 GMT".into(),
            ),
        ],
        declared: 100,
        body: b"{\"epoch\":".to_vec(),
    })
    .await;
    let store = store_at(&server.endpoint(), Duration::from_secs(3));
    let err = store.get(&key("cells/c1/own.json")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
}

/// Item 6: the object key on the wire is the fence key's UTF-8 bytes (percent-encoded only as
/// the URL requires), not object_store's escaped form of it.
#[tokio::test]
async fn object_keys_are_the_keys_utf8_bytes() {
    let server = serve(|r| match r.method.as_str() {
        "PUT" => Reply::status(200, "text/plain", "").with_header("ETag", "\"e1\""),
        _ => object("\"e1\"", "x"),
    })
    .await;
    let store = store_at(&server.endpoint(), Duration::from_secs(3));
    // 800 bytes of UTF-8: fits S3's 1024-byte keys, but not when escaped (2,400 bytes).
    let long = "ñ".repeat(400);
    for k in [
        "uni/ñ ü/日本.json",
        "odd %41 #[]{}^|~`\"<>.json",
        long.as_str(),
    ] {
        let applied = store
            .put(&key(k), "x".into(), CasGuard::Absent)
            .await
            .unwrap();
        assert!(matches!(applied, PutOutcome::Applied(_)));
        let sent = server.requests().pop().unwrap();
        let decoded = percent_decode(sent.path());
        assert_eq!(decoded, format!("/b/fleet/{k}"), "{k}");
    }
}

fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => {
                let hex = std::str::from_utf8(hex).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// Item 6: the stored length (prefix + key) is bounded before any I/O.
#[tokio::test]
async fn an_object_key_over_1024_bytes_is_refused_before_any_io() {
    let server = serve(|_| Reply::status(200, "text/plain", "").with_header("ETag", "\"e\"")).await;
    let store = store_at(&server.endpoint(), Duration::from_secs(3));
    // The key alone is valid (1,020 bytes); "fleet/" makes the object key 1,026.
    let k = key(&format!("cells/{}", "a".repeat(1014)));
    let stale = CasGuard::Match(Version::new("\"e\"").unwrap());
    let errors = [
        store
            .put(&k, "x".into(), CasGuard::Absent)
            .await
            .unwrap_err(),
        store.put(&k, "x".into(), stale).await.unwrap_err(),
        store.get(&k).await.unwrap_err(),
        store.delete_immutable(&k).await.unwrap_err(),
        store.list(Some(&k)).await.unwrap_err(),
    ];
    for err in errors {
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::InvalidKey, Commit::NotCommitted)
        );
    }
    assert_eq!(server.requests().len(), 0, "nothing was sent");
}

/// Item 7: a connect that times out sent nothing: not committed (object_store called it a
/// timeout, ambiguous). A listener with a full backlog never completes a handshake.
#[tokio::test]
async fn a_connect_timeout_is_not_committed() {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(c)) =
            tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
        {
            queued.push(c);
        }
    }
    // CAS timeout 3 s: its connect timeout is 1 s, well inside the request timeout.
    let store = store_at(&format!("http://{addr}"), Duration::from_secs(3));
    let err = store
        .put(&key("nodes/n1.json"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(err.commit(), Commit::NotCommitted, "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    drop((listener, queued));
}

/// Item 8: a 403 keeps its S3 code and message; the echoed request, string to sign,
/// signature and security token never reach `Display`, `Debug` or the source chain.
#[tokio::test]
async fn an_echoed_signature_never_reaches_error_text() {
    const TOKEN: &str = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN";
    const SIGNATURE: &str = "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7";
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code>\
         <Message>The request signature we calculated does not match the signature you \
         provided. Check your key and signing method.</Message>\
         <AWSAccessKeyId>AKIDCANNED</AWSAccessKeyId>\
         <StringToSign>AWS4-HMAC-SHA256\n20261201T070000Z\n20261201/us-east-1/s3/aws4_request\n\
         STRINGTOSIGNHASH</StringToSign><SignatureProvided>{SIGNATURE}</SignatureProvided>\
         <CanonicalRequest>PUT\n/b/fleet/k\n\nhost:127.0.0.1\nx-amz-security-token:{TOKEN}\n\
         </CanonicalRequest><RequestId>R</RequestId></Error>"
    );
    let server = serve(move |_| Reply::status(403, "application/xml", body.clone())).await;
    let store = store_at(&server.endpoint(), Duration::from_secs(3));
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
        for secret in [TOKEN, SIGNATURE, "STRINGTOSIGNHASH", "AKIDCANNED", SECRET] {
            assert!(!texts.contains(secret), "{secret} leaked: {texts}");
        }
        assert!(
            texts.contains("SignatureDoesNotMatch"),
            "the S3 code is kept: {texts}"
        );
    }
}

/// Item 9: `""` and weak ETags are not versions: an applied write without a usable ETag is
/// ambiguous (it landed, as what is unknown), a read with one is refused.
#[tokio::test]
async fn empty_and_weak_etags_are_refused_as_versions() {
    for etag in ["\"\"", "W/\"9b2cf535f27731c974343645a3985328\""] {
        let server = serve(move |r| match r.method.as_str() {
            "PUT" => Reply::status(200, "text/plain", "").with_header("ETag", etag),
            _ => object(etag, "x"),
        })
        .await;
        let store = store_at(&server.endpoint(), Duration::from_secs(3));
        let put = store.put(&key("k"), "x".into(), CasGuard::Absent).await;
        let err = put.expect_err("no version from a weak or empty ETag");
        assert_eq!(
            kind_commit(&err),
            (ErrorKind::Unsupported, Commit::Ambiguous),
            "{etag}"
        );
        let err = store.get(&key("k")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{etag}");
    }
}

/// Issue 35: a body is read exactly as stored, also one ending in the nonce trailer that
/// development versions of fence-s3 appended before any release (`\n#fence-nonce:<32
/// hex>\n`). Main stripped it from every body, so a payload object or log record ending in
/// those bytes read shorter on S3 than it was; a record still carrying it is not JSON, and
/// fence reads it as corrupt (never acts on it).
#[tokio::test]
async fn a_body_ending_in_the_old_nonce_trailer_is_read_as_stored() {
    let stored = "{\"epoch\":3}\n#fence-nonce:0123456789abcdef0123456789abcdef\n";
    let server = serve(move |_| object("\"e\"", stored)).await;
    let store = store_at(&server.endpoint(), Duration::from_secs(3));
    let k = key("cells/c/own.json");
    let got = store.get(&k).await.unwrap().unwrap();
    assert_eq!(got.body, Bytes::from(stored));
    let read = fence_core::CellHead::decode(&k, &got.body);
    assert_eq!(read.unwrap_err().kind(), ErrorKind::Corrupt);
}
