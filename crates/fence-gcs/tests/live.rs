//! Live tests of `GcsStore` against fake-gcs-server (started by `scripts/servers/gcs.sh`, which
//! writes `FENCE_GCS_ENDPOINT` and `FENCE_GCS_BUCKET`), plus a few against in-test TCP servers
//! (a response-dropping proxy, canned HTTP answers, a closed port).
//!
//! Without the variables the live tests print a notice and pass, unless
//! `FENCE_REQUIRE_SERVERS=1`, when they fail. Every run writes under a fresh random prefix.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, Commit, ConditionalStore, DeleteOutcome, Entropy, Error, ErrorKind,
    Key, PutOutcome, Stored, Version,
};
use fence_gcs::{GcsStore, StaticToken};
use fence_testkit::scenarios::runtime::SERVER_TTL;
use fence_testkit::{probe, run_all, ProbeConfig, SuiteConfig, Verdict};

use fence_testkit::canned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---------------------------------------------------------------------------------------------
// Environment

struct Server {
    endpoint: String,
    bucket: String,
}

fn server() -> Option<Server> {
    let endpoint = std::env::var("FENCE_GCS_ENDPOINT").ok();
    let bucket = std::env::var("FENCE_GCS_BUCKET").ok();
    match (endpoint, bucket) {
        (Some(endpoint), Some(bucket)) => Some(Server { endpoint, bucket }),
        _ if std::env::var("FENCE_REQUIRE_SERVERS").as_deref() == Ok("1") => {
            panic!("FENCE_REQUIRE_SERVERS=1 but FENCE_GCS_ENDPOINT/FENCE_GCS_BUCKET are unset")
        }
        _ => {
            eprintln!("skipped: no fake-gcs-server (run `bash scripts/servers/gcs.sh start` and source its gcs.env)");
            None
        }
    }
}

fn fresh_prefix() -> String {
    format!("fence-gcs-test/run-{:016x}", Entropy::from_os().next_u64())
}

fn store_at(endpoint: &str, bucket: &str, prefix: &str) -> GcsStore {
    GcsStore::builder()
        .with_url(format!("gs://{bucket}/{prefix}"))
        .with_endpoint(endpoint)
        .with_anonymous()
        .with_lease_ttl(Duration::from_secs(10))
        .build()
        .expect("valid configuration")
}

fn store(s: &Server) -> GcsStore {
    store_at(&s.endpoint, &s.bucket, &fresh_prefix())
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

fn applied(outcome: PutOutcome) -> Version {
    match outcome {
        PutOutcome::Applied(v) => v,
        PutOutcome::Rejected => panic!("expected Applied, got Rejected"),
    }
}

// ---------------------------------------------------------------------------------------------
// The shared suite and the contract probe

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_fake_gcs() {
    let Some(s) = server() else { return };
    let cfg = SuiteConfig {
        key_prefix: fresh_prefix(),
        runtime_ttl: SERVER_TTL,
        ..SuiteConfig::default()
    };
    let report = run_all(Arc::new(store(&s)), &cfg).await;
    println!("{report}");
    assert!(report.is_success(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_is_honest_on_multipart_uploads() {
    let Some(s) = server() else { return };
    let cfg = ProbeConfig {
        key_prefix: fresh_prefix(),
        racers: 16,
        ..ProbeConfig::default()
    };
    let report = probe(&store(&s), &cfg).await;
    println!("{report}");
    assert_eq!(report.verdict, Verdict::Honest);
}

/// A writer that sends `uploadType=media` uploads, whose `ifGenerationMatch` fake-gcs-server
/// does not check. Reads go through `GcsStore`.
#[derive(Debug)]
struct MediaUploadStore {
    reads: GcsStore,
    http: reqwest::Client,
    endpoint: String,
    bucket: String,
}

#[async_trait]
impl ConditionalStore for MediaUploadStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.reads.get(key).await
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let generation = match &guard {
            CasGuard::Absent => "0".to_owned(),
            CasGuard::Match(v) => v.as_str().to_owned(),
        };
        let name = self.reads.object_name(key)?;
        let url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=media&name={}&ifGenerationMatch={generation}",
            self.endpoint,
            self.bucket,
            percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC)
        );
        let resp = self.http.post(url).body(body).send().await;
        let resp = resp.map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
        if resp.status().as_u16() == 412 {
            return Ok(PutOutcome::Rejected);
        }
        let bytes = resp.bytes().await;
        let bytes = bytes.map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?;
        let json: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?;
        let generation = json["generation"].as_str().unwrap_or_default();
        Ok(PutOutcome::Applied(Version::new(generation)?))
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.reads.delete(key, version).await
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.reads.list(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        self.reads.capabilities()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_flags_a_media_upload_writer_as_violation() {
    let Some(s) = server() else { return };
    let media = MediaUploadStore {
        reads: store(&s),
        http: reqwest::Client::new(),
        endpoint: s.endpoint.clone(),
        bucket: s.bucket.clone(),
    };
    let cfg = ProbeConfig {
        key_prefix: fresh_prefix(),
        ..ProbeConfig::default()
    };
    let report = probe(&media, &cfg).await;
    println!("{report}");
    assert!(report.verdict.is_violation(), "{}", report.verdict);
}

// ---------------------------------------------------------------------------------------------
// Targeted checks of the generation protocol

#[tokio::test]
async fn create_applies_once_and_update_needs_the_current_generation() {
    let Some(s) = server() else { return };
    let store = store(&s);
    let k = key("cells/c1/own.json");
    let v1 = applied(store.put(&k, "one".into(), CasGuard::Absent).await.unwrap());
    let again = store.put(&k, "two".into(), CasGuard::Absent).await.unwrap();
    assert_eq!(again, PutOutcome::Rejected);
    let v2 = applied(
        store
            .put(&k, "two".into(), CasGuard::Match(v1.clone()))
            .await
            .unwrap(),
    );
    assert_ne!(v1, v2);
    let stale = store
        .put(&k, "three".into(), CasGuard::Match(v1))
        .await
        .unwrap();
    assert_eq!(stale, PutOutcome::Rejected);
    let got = store.get(&k).await.unwrap().expect("present");
    assert_eq!((got.body, got.version), (Bytes::from("two"), v2.clone()));
    let missing = key("cells/none/own.json");
    let on_missing = store
        .put(&missing, "x".into(), CasGuard::Match(v2))
        .await
        .unwrap();
    assert_eq!(on_missing, PutOutcome::Rejected);
    assert_eq!(store.get(&missing).await.unwrap(), None);
}

#[tokio::test]
async fn identical_bytes_get_a_new_generation() {
    let Some(s) = server() else { return };
    let store = store(&s);
    let k = key("same.json");
    let v1 = applied(
        store
            .put(&k, "same".into(), CasGuard::Absent)
            .await
            .unwrap(),
    );
    let v2 = applied(
        store
            .put(&k, "same".into(), CasGuard::Match(v1.clone()))
            .await
            .unwrap(),
    );
    assert_ne!(
        v1, v2,
        "the generation is the CAS token, not the content hash"
    );
    let stale = store
        .put(&k, "same".into(), CasGuard::Match(v1))
        .await
        .unwrap();
    assert_eq!(stale, PutOutcome::Rejected);
}

#[tokio::test]
async fn version_is_the_generation_of_the_object_resource() {
    let Some(s) = server() else { return };
    let store = store(&s);
    let k = key("gen.json");
    let v = applied(store.put(&k, "g".into(), CasGuard::Absent).await.unwrap());
    let name = store.object_name(&k).unwrap();
    let url = format!(
        "{}/storage/v1/b/{}/o/{}",
        s.endpoint,
        s.bucket,
        percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC)
    );
    let meta = reqwest::get(url).await.unwrap().bytes().await.unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(meta["generation"].as_str(), Some(v.as_str()));
    assert_ne!(meta["etag"].as_str(), Some(v.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_way_create_race_has_exactly_one_winner() {
    let Some(s) = server() else { return };
    let store = Arc::new(store(&s));
    for round in 0..5 {
        let k = key(&format!("race/{round}"));
        let barrier = Arc::new(tokio::sync::Barrier::new(50));
        let racers = (0..50).map(|i| {
            let (store, k, barrier) = (store.clone(), k.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .put(&k, format!("racer {i}").into(), CasGuard::Absent)
                    .await
            })
        });
        let mut winners = Vec::new();
        for (i, r) in futures_join(racers).await.into_iter().enumerate() {
            if let PutOutcome::Applied(v) = r.unwrap() {
                winners.push((i, v));
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let got = store.get(&k).await.unwrap().unwrap();
        assert_eq!(got.body, Bytes::from(format!("racer {}", winners[0].0)));
        assert_eq!(got.version, winners[0].1);
    }
}

async fn futures_join<T>(handles: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles.collect::<Vec<_>>() {
        out.push(h.await.expect("racer task"));
    }
    out
}

#[tokio::test]
async fn list_returns_keys_under_the_prefix_sorted() {
    let Some(s) = server() else { return };
    let store = store(&s);
    for k in [
        "cells/c2/own.json",
        "cells/c1/own.json",
        "cells/c10/own.json",
        "nodes/n1.json",
    ] {
        applied(
            store
                .put(&key(k), "x".into(), CasGuard::Absent)
                .await
                .unwrap(),
        );
    }
    let cells = store.list(Some(&key("cells/c1"))).await.unwrap();
    assert_eq!(cells, vec![key("cells/c1/own.json")]);
    let all = store.list(None).await.unwrap();
    assert_eq!(all.len(), 4);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test]
async fn odd_key_characters_round_trip() {
    let Some(s) = server() else { return };
    let store = store(&s);
    let k = key("cells/ñ c%2F+?&#=/own.json");
    let v = applied(store.put(&k, "odd".into(), CasGuard::Absent).await.unwrap());
    let got = store.get(&k).await.unwrap().unwrap();
    assert_eq!((got.body, got.version), (Bytes::from("odd"), v));
    assert_eq!(store.list(None).await.unwrap(), vec![k]);
}

// ---------------------------------------------------------------------------------------------
// Conditional delete: fake-gcs-server ignores ifGenerationMatch on DELETE

#[tokio::test]
async fn emulator_ignores_delete_preconditions_so_delete_is_unsupported() {
    let Some(s) = server() else { return };
    let store = store(&s);
    let k = key("del.json");
    let v = applied(store.put(&k, "d".into(), CasGuard::Absent).await.unwrap());
    let err = store.delete(&k, &v).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted)
    );

    // Why: with the capability switched on, a delete at a wrong generation still deletes.
    let unsafe_store = GcsStore::builder()
        .with_url(format!("gs://{}/{}", s.bucket, store.prefix().unwrap()))
        .with_endpoint(&s.endpoint)
        .with_anonymous()
        .with_conditional_delete(true)
        .build()
        .unwrap();
    let wrong = Version::new("1").unwrap();
    let outcome = unsafe_store.delete(&k, &wrong).await.unwrap();
    assert_eq!(
        outcome,
        DeleteOutcome::Deleted,
        "fake-gcs now checks DELETE preconditions: revisit docs/gcs.md"
    );
    assert_eq!(store.get(&k).await.unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// A lost answer: resolved by read-back; a retry gets 412 on our own write

/// A proxy that forwards each request to `upstream`, waits for the upstream's answer to begin
/// (so the write was applied), then closes the client's connection without any answer.
async fn answer_dropping_proxy(upstream: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let counter = dropped.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut client_rx, client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let forward = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_rx, &mut server_tx).await;
                });
                let mut first = [0u8; 1];
                if matches!(server_rx.read(&mut first).await, Ok(n) if n > 0) {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                forward.abort();
                drop(client_tx);
            });
        }
    });
    (addr, dropped)
}

fn socket_of(endpoint: &str) -> SocketAddr {
    endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("emulator endpoint is ip:port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answer_is_ambiguous_read_back_resolves_it_and_a_retry_gets_412() {
    let Some(s) = server() else { return };
    let prefix = fresh_prefix();
    let direct = store_at(&s.endpoint, &s.bucket, &prefix);
    let (proxy, dropped) = answer_dropping_proxy(socket_of(&s.endpoint)).await;
    let lossy = store_at(&format!("http://{proxy}"), &s.bucket, &prefix);

    for guard_kind in ["create", "replace"] {
        let k = key(&format!("lost/{guard_kind}.json"));
        let guard = match guard_kind {
            "create" => CasGuard::Absent,
            _ => CasGuard::Match(applied(
                direct
                    .put(&k, "prior".into(), CasGuard::Absent)
                    .await
                    .unwrap(),
            )),
        };
        let ours = Bytes::from(format!(
            "ours {guard_kind} {:x}",
            Entropy::from_os().next_u64()
        ));
        let err = lossy
            .put(&k, ours.clone(), guard.clone())
            .await
            .unwrap_err();
        assert_eq!(err.commit(), Commit::Ambiguous, "{err}");
        assert!(
            matches!(err.kind(), ErrorKind::Unavailable | ErrorKind::Timeout),
            "{err:?}"
        );

        // Resolution: the read-back shows our own body, so the write landed.
        let back = direct.get(&k).await.unwrap().expect("the write landed");
        assert_eq!(back.body, ours);

        // What a client-side retry would have produced: 412 on our own write.
        let retry = direct.put(&k, ours.clone(), guard).await.unwrap();
        assert_eq!(retry, PutOutcome::Rejected);
        assert_eq!(direct.get(&k).await.unwrap().unwrap().version, back.version);
    }
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "each write reached the emulator once"
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input and failure classification

#[tokio::test]
async fn unreachable_endpoint_is_unavailable_and_not_committed() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let store = store_at(&format!("http://127.0.0.1:{port}"), "fence-test", "x");
    let err = store
        .put(&key("a"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Unavailable, Commit::NotCommitted)
    );
    assert!(err.is_retryable());
    let err = store.get(&key("a")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);

    let cfg = ProbeConfig {
        key_prefix: "p".into(),
        op_timeout: Duration::from_secs(2),
        ..ProbeConfig::default()
    };
    let report = probe(&store, &cfg).await;
    assert!(
        matches!(report.verdict, Verdict::Error(_)),
        "{}",
        report.verdict
    );
}

#[tokio::test]
async fn missing_bucket_is_not_found() {
    let Some(s) = server() else { return };
    let store = store_at(&s.endpoint, "fence-no-such-bucket", "x");
    let err = store.get(&key("a")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.message().contains("fence-no-such-bucket"));
    let err = store
        .put(&key("a"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::NotFound, Commit::NotCommitted)
    );
}

#[tokio::test]
async fn oversized_record_is_refused_before_any_request() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let store = GcsStore::builder()
        .with_url("gs://fence-test/x")
        .with_endpoint(endpoint)
        .with_anonymous()
        .with_record_limit(1024)
        .build()
        .unwrap();
    assert_eq!(store.capabilities().max_body, Some(1024));
    let fits = vec![b'a'; 1024];
    let big = vec![b'a'; 1025];
    let err = store
        .put(&key("big"), big.into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::InvalidInput, Commit::NotCommitted)
    );
    let no_conn = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
    assert!(
        no_conn.is_err(),
        "no connection may be opened for an oversized record"
    );
    // Control: a record at the limit does reach the server.
    let put =
        tokio::spawn(async move { store.put(&key("fits"), fits.into(), CasGuard::Absent).await });
    let conn = tokio::time::timeout(Duration::from_secs(5), listener.accept()).await;
    assert!(conn.is_ok(), "a record at the limit is sent");
    put.abort();
}

/// A server answering every request with `status` (and a short JSON body); counts requests.
async fn canned_server(status: u16) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                counter.fetch_add(1, Ordering::SeqCst);
                let body = format!("{{\"error\":{{\"code\":{status}}}}}");
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    (endpoint, seen)
}

async fn put_against(status: u16) -> (Error, usize) {
    let (endpoint, seen) = canned_server(status).await;
    let store = GcsStore::builder()
        .with_url("gs://fence-test/x")
        .with_endpoint(endpoint)
        .with_token_provider(Arc::new(StaticToken::new("ya29.very-secret-token")))
        .build()
        .unwrap();
    let err = store
        .put(&key("k"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    (err, seen.load(Ordering::SeqCst))
}

#[tokio::test]
async fn statuses_are_classified_and_writes_never_retried() {
    let cases = [
        (401, ErrorKind::PermissionDenied, Commit::NotCommitted),
        (403, ErrorKind::PermissionDenied, Commit::NotCommitted),
        (429, ErrorKind::Unavailable, Commit::Ambiguous),
        (500, ErrorKind::Unavailable, Commit::Ambiguous),
        (503, ErrorKind::Unavailable, Commit::Ambiguous),
        (504, ErrorKind::Timeout, Commit::Ambiguous),
    ];
    for (status, kind, commit) in cases {
        let (err, requests) = put_against(status).await;
        assert_eq!((err.kind(), err.commit()), (kind, commit), "HTTP {status}");
        assert_eq!(
            requests, 1,
            "HTTP {status}: a conditional write is sent exactly once"
        );
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("very-secret"), "HTTP {status}: {shown}");
        if kind == ErrorKind::PermissionDenied {
            assert!(
                err.message().contains("fence-test"),
                "names the bucket: {err}"
            );
        }
    }
}

#[tokio::test]
async fn reads_are_retried_a_bounded_number_of_times() {
    let (endpoint, seen) = canned_server(503).await;
    let store = store_at(&endpoint, "fence-test", "x");
    let err = store.get(&key("k")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[test]
fn debug_never_shows_the_token() {
    let store = GcsStore::builder()
        .with_url("gs://fence-test/x")
        .with_token_provider(Arc::new(StaticToken::new("ya29.very-secret-token")))
        .build()
        .unwrap();
    let shown = format!("{store:?}");
    assert!(!shown.contains("very-secret"), "{shown}");
    assert!(shown.contains("fence-test"));
}

// ---------------------------------------------------------------------------------------------
// Throttling after the write landed; deleting write-once objects

/// A 429 after the upload was sent is ambiguous: a proxy lets the create land on the
/// emulator, then answers 429 in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_after_the_upload_landed_is_ambiguous() {
    let Some(s) = server() else { return };
    let upstream = socket_of(&s.endpoint);
    let throttled = canned::Reply::status(
        429,
        "application/json",
        r#"{"error":{"code":429,"message":"The rate of change requests to the object is too high."}}"#,
    );
    let proxy = canned::replacing_answers(upstream, "POST", throttled).await;
    let prefix = fresh_prefix();
    let direct = store_at(&s.endpoint, &s.bucket, &prefix);
    let via_proxy = store_at(&proxy.endpoint(), &s.bucket, &prefix);
    let k = key("cells/c1/own.json");
    canned::assert_create_lands_ambiguously(&via_proxy, &direct, &k, ErrorKind::Unavailable).await;
}

/// `delete_immutable` is one unconditional DELETE, also without declared conditional
/// delete (the emulator's default here); absent is Ok.
#[tokio::test]
async fn delete_immutable_removes_a_write_once_object() {
    let Some(s) = server() else { return };
    let store = store(&s);
    assert!(!store.capabilities().conditional_delete);
    let k = key("cells/c1/data/blob-0001");
    applied(
        store
            .put(&k, "payload".into(), CasGuard::Absent)
            .await
            .unwrap(),
    );
    store.delete_immutable(&k).await.unwrap();
    assert_eq!(store.get(&k).await.unwrap(), None);
    store.delete_immutable(&k).await.unwrap();
    store.delete_immutable(&key("never/written")).await.unwrap();
    let missing_bucket = store_at(&s.endpoint, "fence-no-such-bucket", "x");
    let err = missing_bucket.delete_immutable(&k).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}
