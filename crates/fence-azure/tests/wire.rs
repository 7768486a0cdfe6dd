//! fence-azure against canned HTTP servers on 127.0.0.1: the answers Azurite does not give
//! (real Azure's 412 on a failed create, throttling, server errors, redirects, silence) and
//! what the adapter sends (exactly one request, `If-Match` on deletes, the SAS kept out of
//! errors). No external server needed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use bytes::Bytes;
use common::assert_no_text;
use fence_azure::AzureStore;
use fence_core::{
    CasGuard, Commit, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key, PutOutcome, Version,
};
use fence_testkit::{probe, ProbeConfig, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server that answers every request with the same canned answer and records the request
/// heads it received.
struct Canned {
    url: String,
    heads: Arc<Mutex<Vec<String>>>,
}

/// What the canned server answers: a status line and extra headers, or nothing at all.
#[derive(Clone)]
enum Answer {
    Status(u16, Vec<(&'static str, String)>),
    Silence,
}

fn status(code: u16, error_code: Option<&str>) -> Answer {
    let mut headers = Vec::new();
    if let Some(c) = error_code {
        headers.push(("x-ms-error-code", c.to_string()));
    }
    Answer::Status(code, headers)
}

async fn canned(answer: Answer) -> Canned {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(serve(conn, answer.clone(), seen.clone()));
        }
    });
    Canned { url, heads }
}

async fn serve(mut conn: TcpStream, answer: Answer, seen: Arc<Mutex<Vec<String>>>) {
    let Some(head) = read_request(&mut conn).await else {
        return;
    };
    seen.lock().unwrap().push(head);
    let Answer::Status(code, headers) = answer else {
        // Hold the connection open without a word until the client gives up.
        let _ = conn.read(&mut [0u8; 1]).await;
        return;
    };
    let mut out = format!("HTTP/1.1 {code} Canned\r\nContent-Length: 0\r\nConnection: close\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let _ = conn.write_all(out.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// Reads one request (head and `Content-Length` body); returns its head.
async fn read_request(conn: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = buf.len() - end;
    while body < length {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body += n;
    }
    Some(head)
}

impl Canned {
    fn store(&self) -> AzureStore {
        store_at(&self.url)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn store_at(url: &str) -> AzureStore {
    AzureStore::builder()
        .with_emulator(url)
        .with_container("fence-test")
        .with_cas_timeout(Duration::from_millis(500))
        .with_read_policy(Duration::from_millis(500), 0)
        .build()
        .unwrap()
}

fn key() -> Key {
    Key::new("nodes/n1.json").unwrap()
}

fn etag() -> Version {
    Version::new("\"0x8DC0A1B2C3D4E5F\"").unwrap()
}

async fn create(store: &AzureStore) -> Result<PutOutcome, Error> {
    store
        .put(&key(), Bytes::from_static(b"{}"), CasGuard::Absent)
        .await
}

async fn replace(store: &AzureStore) -> Result<PutOutcome, Error> {
    store
        .put(&key(), Bytes::from_static(b"{}"), CasGuard::Match(etag()))
        .await
}

fn kind_commit(got: Result<impl std::fmt::Debug, Error>) -> (ErrorKind, Commit) {
    let e = got.expect_err("an error");
    (e.kind(), e.commit())
}

/// Both a create and a replace fail with `want`.
async fn both_writes_fail(store: &AzureStore, want: (ErrorKind, Commit), context: &str) {
    for got in [create(store).await, replace(store).await] {
        assert_eq!(kind_commit(got), want, "{context}");
    }
}

#[tokio::test]
async fn a_412_on_create_is_rejected_as_real_azure_answers_it() {
    let server = canned(status(412, Some("ConditionNotMet"))).await;
    assert_eq!(create(&server.store()).await.unwrap(), PutOutcome::Rejected);
    let heads = server.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].starts_with("PUT /devstoreaccount1/fence-test/nodes/n1.json "));
    assert!(heads[0].to_ascii_lowercase().contains("if-none-match: *"));
}

#[tokio::test]
async fn a_409_blob_already_exists_on_create_is_rejected_never_an_error() {
    let server = canned(status(409, Some("BlobAlreadyExists"))).await;
    assert_eq!(create(&server.store()).await.unwrap(), PutOutcome::Rejected);
}

#[tokio::test]
async fn a_412_on_replace_is_rejected_and_sends_the_etag_as_given() {
    let server = canned(status(412, Some("ConditionNotMet"))).await;
    assert_eq!(
        replace(&server.store()).await.unwrap(),
        PutOutcome::Rejected
    );
    let head = server.heads()[0].to_ascii_lowercase();
    assert!(head.contains("if-match: \"0x8dc0a1b2c3d4e5f\""), "{head}");
}

#[tokio::test]
async fn other_conflicts_are_not_committed_and_not_rejections() {
    let server = canned(status(409, Some("LeaseIdMissing"))).await;
    let want = (ErrorKind::Conflict, Commit::NotCommitted);
    both_writes_fail(&server.store(), want, "409 LeaseIdMissing").await;
}

#[tokio::test]
async fn throttling_and_server_errors_after_sending_are_ambiguous_and_never_retried() {
    for (code, error_code) in [(429, None), (503, Some("ServerBusy")), (500, None)] {
        let server = canned(status(code, error_code)).await;
        let store = server.store();
        let want = (ErrorKind::Unavailable, Commit::Ambiguous);
        both_writes_fail(&store, want, &code.to_string()).await;
        assert_eq!(
            server.heads().len(),
            2,
            "{code}: one request per write, no retry"
        );
    }
}

#[tokio::test]
async fn a_success_without_etag_is_ambiguous() {
    let server = canned(status(201, None)).await;
    assert_eq!(
        kind_commit(create(&server.store()).await),
        (ErrorKind::Unsupported, Commit::Ambiguous)
    );
}

#[tokio::test]
async fn a_redirect_is_never_followed_by_a_conditional_request() {
    // The target would answer like a blob that exists, so a followed redirect would look
    // like success (a 302 turns the PUT into a GET there).
    let target = canned(Answer::Status(
        200,
        vec![("ETag", "\"0x8DCFOLLOWED\"".into())],
    ))
    .await;
    let location = format!("{}/devstoreaccount1/fence-test/nodes/n1.json", target.url);
    for code in [301, 302, 303, 307, 308] {
        let redirect = canned(Answer::Status(code, vec![("Location", location.clone())])).await;
        let store = redirect.store();
        let want = (ErrorKind::InvalidInput, Commit::NotCommitted);
        both_writes_fail(&store, want, &code.to_string()).await;
        assert_eq!(
            kind_commit(store.delete(&key(), &etag()).await),
            (ErrorKind::InvalidInput, Commit::NotCommitted),
            "{code}"
        );
        assert_eq!(redirect.heads().len(), 3, "{code}");
    }
    assert!(target.heads().is_empty(), "followed: {:?}", target.heads());
}

#[tokio::test]
async fn a_silent_store_is_a_timeout_that_may_have_landed() {
    let server = canned(Answer::Silence).await;
    let store = server.store();
    assert_eq!(
        kind_commit(create(&store).await),
        (ErrorKind::Timeout, Commit::Ambiguous)
    );
    assert_eq!(
        kind_commit(store.delete(&key(), &etag()).await),
        (ErrorKind::Timeout, Commit::Ambiguous)
    );
}

#[tokio::test]
async fn a_conditional_delete_sends_if_match_under_a_sas_kept_out_of_errors() {
    let server = canned(status(503, Some("ServerBusy"))).await;
    let err = server
        .store()
        .delete(&key(), &etag())
        .await
        .expect_err("503");
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Unavailable, Commit::Ambiguous)
    );
    let head = server.heads()[0].clone();
    assert!(
        head.starts_with("DELETE /devstoreaccount1/fence-test/nodes/n1.json?"),
        "{head}"
    );
    assert!(head
        .to_ascii_lowercase()
        .contains("if-match: \"0x8dc0a1b2c3d4e5f\""));
    let sig = head
        .split(['?', '&', ' '])
        .find_map(|p| p.strip_prefix("sig="))
        .expect("the DELETE carries a SAS signature");
    assert_no_text(&err, sig);
    assert_no_text(&err, "sig=");
}

#[tokio::test]
async fn delete_answers_map_to_outcomes() {
    let cases = [
        (status(202, None), Ok(DeleteOutcome::Deleted)),
        (
            status(412, Some("ConditionNotMet")),
            Ok(DeleteOutcome::Rejected),
        ),
        (
            status(404, Some("BlobNotFound")),
            Ok(DeleteOutcome::Rejected),
        ),
        (
            status(404, Some("ContainerNotFound")),
            Err((ErrorKind::NotFound, Commit::NotCommitted)),
        ),
        (
            status(403, Some("AuthenticationFailed")),
            Err((ErrorKind::PermissionDenied, Commit::NotCommitted)),
        ),
    ];
    for (answer, want) in cases {
        let server = canned(answer).await;
        let got = server
            .store()
            .delete(&key(), &etag())
            .await
            .map_err(|e| (e.kind(), e.commit()));
        assert_eq!(got, want);
    }
    let absent = canned(status(404, Some("BlobNotFound"))).await;
    absent.store().delete_immutable(&key()).await.unwrap();
    let head = absent.heads()[0].to_ascii_lowercase();
    assert!(
        !head.contains("if-match"),
        "an immutable delete is unconditional: {head}"
    );
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable_not_committed_and_not_a_verdict() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let store = store_at(&format!("http://{closed}"));
    let refused = (ErrorKind::Unavailable, Commit::NotCommitted);
    both_writes_fail(&store, refused, "refused").await;
    assert_eq!(
        kind_commit(store.delete(&key(), &etag()).await),
        (ErrorKind::Unavailable, Commit::NotCommitted)
    );
    assert_eq!(
        kind_commit(store.get(&key()).await).0,
        ErrorKind::Unavailable
    );
    assert_eq!(
        kind_commit(store.list(None).await).0,
        ErrorKind::Unavailable
    );
    let cfg = ProbeConfig {
        op_timeout: Duration::from_secs(5),
        ..ProbeConfig::default()
    };
    let report = probe(&store, &cfg).await;
    assert!(
        matches!(report.verdict, Verdict::Error(_)),
        "not a verdict on honesty: {report:?}"
    );
}

/// A listener whose accept queue is full and never drained: a further connect hangs in the
/// handshake, so the client's connect timeout fires before anything is sent.
async fn unanswered_handshakes() -> (String, TcpListener, Vec<TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    // Fill the accept queue; connects beyond it wait for a SYN-ACK that never comes.
    for _ in 0..4 {
        let connect = TcpStream::connect(addr);
        match tokio::time::timeout(Duration::from_millis(200), connect).await {
            Ok(Ok(stream)) => fillers.push(stream),
            _ => break,
        }
    }
    (format!("http://{addr}"), listener, fillers)
}

#[tokio::test]
async fn a_connect_timeout_is_not_committed() {
    let (url, _listener, _fillers) = unanswered_handshakes().await;
    // The connect timeout (1 s) fires before the request timeout (2 s).
    let store = AzureStore::builder()
        .with_emulator(&url)
        .with_container("fence-test")
        .with_cas_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let refused = (ErrorKind::Unavailable, Commit::NotCommitted);
    both_writes_fail(&store, refused, "connect timeout").await;
    assert_eq!(kind_commit(store.delete(&key(), &etag()).await), refused);
}

#[tokio::test]
async fn without_a_signable_credential_delete_is_unsupported_without_io() {
    let server = canned(status(202, None)).await;
    let store = AzureStore::builder()
        .with_emulator(&server.url)
        .with_container("fence-test")
        .with_config(
            object_store::azure::AzureConfigKey::SasKey,
            "sv=2023-11-03&sp=rw&sig=c2FzLXNlY3JldA%3D%3D",
        )
        .build()
        .unwrap();
    assert!(!store.capabilities().conditional_delete);
    let delete = store.delete(&key(), &etag()).await.unwrap_err();
    let immutable = store.delete_immutable(&key()).await.unwrap_err();
    for err in [delete, immutable] {
        assert_eq!(
            (err.kind(), err.commit()),
            (ErrorKind::Unsupported, Commit::NotCommitted)
        );
    }
    assert!(
        server.heads().is_empty(),
        "no request: {:?}",
        server.heads()
    );
}

/// The canned server of every HTTP adapter's wire tests: answers chosen per request, with
/// bodies, cut bodies and delays.
use fence_testkit::canned::{self as shared, error_texts, Reply};

/// A store under the prefix `fleet` at a per-request canned server.
fn fleet_store(server: &shared::Canned) -> AzureStore {
    AzureStore::builder()
        .with_emulator(server.endpoint())
        .with_container("fence-test")
        .with_prefix("fleet")
        .with_cas_timeout(Duration::from_secs(3))
        .with_read_policy(Duration::from_secs(3), 0)
        .build()
        .unwrap()
}

fn blob(etag: &str, body: &str) -> Reply {
    Reply::status(200, "application/octet-stream", body)
        .with_header("ETag", etag)
        .with_header("Last-Modified", "Tue, 01 Dec 2026 07:00:00 GMT")
}

const BLOBS: &str = "/devstoreaccount1/fence-test/fleet";

/// The length bound applies to the stored name, before any I/O; a name that fits is sent as
/// its own characters (400 × `ñ` fits Azure's 1024 characters, but not once escaped: 2,400).
#[tokio::test]
async fn a_blob_name_over_1024_characters_is_refused_before_any_io() {
    let server = shared::serve(|r| match r.method.as_str() {
        "PUT" => Reply::status(201, "text/plain", "").with_header("ETag", "\"0x8DC1\""),
        _ => blob("\"0x8DC1\"", "x"),
    })
    .await;
    let store = fleet_store(&server);
    // The key alone is valid (1,020 characters); "fleet/" makes the blob name 1,026.
    let k = Key::new(format!("cells/{}", "a".repeat(1014))).unwrap();
    let errors = [
        store
            .put(&k, "x".into(), CasGuard::Absent)
            .await
            .unwrap_err(),
        store
            .put(&k, "x".into(), CasGuard::Match(etag()))
            .await
            .unwrap_err(),
        store.get(&k).await.unwrap_err(),
        store.delete(&k, &etag()).await.unwrap_err(),
        store.delete_immutable(&k).await.unwrap_err(),
    ];
    for err in errors {
        assert_eq!(
            (err.kind(), err.commit()),
            (ErrorKind::InvalidKey, Commit::NotCommitted)
        );
    }
    assert_eq!(server.requests().len(), 0, "nothing was sent");
    let long = Key::new("ñ".repeat(400)).unwrap();
    let got = store
        .put(&long, "x".into(), CasGuard::Absent)
        .await
        .unwrap();
    assert!(matches!(got, PutOutcome::Applied(_)), "{got:?}");
    let sent = server.requests().pop().unwrap();
    assert_eq!(sent.path(), format!("{BLOBS}/{}", "%C3%B1".repeat(400)));
}

/// A redirect answering a read is not followed: the target's blob is not this key's.
#[tokio::test]
async fn a_redirect_answering_a_read_is_not_followed() {
    let server = shared::serve(|r| match r.path() {
        p if p == format!("{BLOBS}/k") => Reply::status(302, "text/plain", "")
            .with_header("Location", "/devstoreaccount1/fence-test/elsewhere"),
        _ => blob("\"0x8DCELSEWHERE\"", "another blob"),
    })
    .await;
    let store = fleet_store(&server);
    let err = store.get(&Key::new("k").unwrap()).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::InvalidInput, Commit::NotCommitted)
    );
    assert_eq!(server.count(|r| r.path().ends_with("/elsewhere")), 0);
}

/// `""` and weak ETags are not versions: a write answered with one is ambiguous (it landed,
/// as what is unknown), a read answered with one is refused.
#[tokio::test]
async fn empty_and_weak_etags_are_refused_as_versions() {
    for tag in ["\"\"", "W/\"0x8DC1\""] {
        let server = shared::serve(move |r| match r.method.as_str() {
            "PUT" => Reply::status(201, "text/plain", "").with_header("ETag", tag),
            _ => blob(tag, "x"),
        })
        .await;
        let store = fleet_store(&server);
        let err = create(&store).await.expect_err("no version from this ETag");
        assert_eq!(
            (err.kind(), err.commit()),
            (ErrorKind::Unsupported, Commit::Ambiguous),
            "{tag}"
        );
        let err = store.get(&key()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{tag}");
    }
}

/// An Azure `AuthenticationFailed` body echoes the request's signature (replayable for a
/// while) and the string the server signed; only the error code and message reach error text.
#[tokio::test]
async fn an_echoed_signature_never_reaches_error_text() {
    const SIGNATURE: &str = "jT3lR0hVp6FCLtd8hM4dT1z2bnF6XJ7sZcMSiSIGNATURE=";
    const SIGNED: &str = "STRINGTHESERVERSIGNED";
    let body = format!(
        "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code>\
         <Message>Server failed to authenticate the request.</Message>\
         <AuthenticationErrorDetail>The MAC signature found in the HTTP request '{SIGNATURE}' is \
         not the same as any computed signature. Server used following string to sign: \
         'PUT\n\n\n2\n\n\n{SIGNED}'.</AuthenticationErrorDetail></Error>"
    );
    for with_header in [true, false] {
        let body = body.clone();
        let server = shared::serve(move |_| {
            let reply = Reply::status(403, "application/xml", body.clone());
            match with_header {
                true => reply.with_header("x-ms-error-code", "AuthenticationFailed"),
                false => reply,
            }
        })
        .await;
        let store = fleet_store(&server);
        let errors = [
            create(&store).await.unwrap_err(),
            replace(&store).await.unwrap_err(),
            store.get(&key()).await.unwrap_err(),
            store.list(None).await.unwrap_err(),
        ];
        for err in &errors {
            assert_eq!(
                (err.kind(), err.commit()),
                (ErrorKind::PermissionDenied, Commit::NotCommitted)
            );
            let texts = error_texts(err);
            for secret in [SIGNATURE, SIGNED] {
                assert!(!texts.contains(secret), "{secret} leaked: {texts}");
            }
        }
    }
}

/// A 200 without the headers a read needs (here `Last-Modified`) is the store's answer being
/// unusable, not a corrupt record: `Unsupported`, not committed, as on S3.
#[tokio::test]
async fn a_read_answer_without_its_headers_is_unsupported_not_corrupt() {
    let server = shared::serve(|_| {
        Reply::status(200, "application/octet-stream", "x").with_header("ETag", "\"0x8DC1\"")
    })
    .await;
    let err = fleet_store(&server).get(&key()).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted),
        "{err:?}"
    );
}
