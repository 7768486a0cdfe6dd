//! fence-s3 against live S3 servers started by `scripts/servers/s3.sh` (SeaweedFS and moto,
//! which honour conditions, and s3rver, which ignores them). Endpoints come from the
//! environment (`$FENCE_SERVERS_DIR/s3.env`); without them every test skips with a notice,
//! or fails when `FENCE_REQUIRE_SERVERS=1`. Each test writes under a fresh random prefix.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fence_testkit::canned;

use bytes::Bytes;
use fence_core::{
    CasGuard, Commit, ConditionalStore, Entropy, Error, ErrorKind, Key, NodeLeaseRecord, Ownership,
    PutOutcome, Version,
};
use fence_s3::S3Store;
use fence_testkit::scenarios::runtime::SERVER_TTL;
use fence_testkit::{probe, run_scenarios, scenarios, ProbeConfig, SuiteConfig, Verdict};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// The servers' coordinates, as written by `scripts/servers/s3.sh`.
struct Servers {
    seaweed: String,
    moto: String,
    liar: String,
    liar_access_key: String,
    liar_secret_key: String,
    bucket: String,
    access_key: String,
    secret_key: String,
    region: String,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The servers, or `None` (with a notice) when the environment does not name them.
fn servers(test: &str) -> Option<Servers> {
    let found = (|| {
        Some(Servers {
            seaweed: var("FENCE_S3_SEAWEED_ENDPOINT")?,
            moto: var("FENCE_S3_MOTO_ENDPOINT")?,
            liar: var("FENCE_S3_LIAR_ENDPOINT")?,
            liar_access_key: var("FENCE_S3_LIAR_ACCESS_KEY_ID")?,
            liar_secret_key: var("FENCE_S3_LIAR_SECRET_ACCESS_KEY")?,
            bucket: var("FENCE_S3_BUCKET")?,
            access_key: var("FENCE_S3_ACCESS_KEY_ID")?,
            secret_key: var("FENCE_S3_SECRET_ACCESS_KEY")?,
            region: var("FENCE_S3_REGION").unwrap_or_else(|| "us-east-1".into()),
        })
    })();
    if found.is_none() {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "{test}: FENCE_S3_* variables missing but FENCE_REQUIRE_SERVERS=1 \
             (run `bash scripts/servers/s3.sh start` and source $FENCE_SERVERS_DIR/s3.env)"
        );
        eprintln!("SKIPPED {test}: no S3 test servers (run scripts/servers/s3.sh start)");
    }
    found
}

impl Servers {
    fn honest(&self) -> [(&'static str, &str); 2] {
        [("seaweedfs", &self.seaweed), ("moto", &self.moto)]
    }

    /// A store on `endpoint` under a fresh prefix, always with explicit credentials (never
    /// the instance metadata service).
    fn store(&self, endpoint: &str, prefix: &str) -> S3Store {
        self.builder(endpoint, &self.bucket, &self.secret_key)
            .with_prefix(prefix)
            .build()
            .expect("valid configuration")
    }

    fn builder(&self, endpoint: &str, bucket: &str, secret: &str) -> fence_s3::S3StoreBuilder {
        S3Store::builder()
            .with_bucket(bucket)
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region(&self.region)
            .with_credentials(&self.access_key, secret)
            // Generous: SeaweedFS takes seconds per contended round while the tests run in
            // parallel; the CAS timeout is ttl / 3.
            .with_lease_ttl(Duration::from_secs(30))
    }
}

fn fresh_prefix(test: &str) -> String {
    format!(
        "fence-s3-tests/{test}-{:016x}",
        Entropy::from_os().next_u64()
    )
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

async fn applied(store: &S3Store, k: &Key, body: &str, guard: CasGuard) -> Version {
    match store.put(k, Bytes::from(body.to_string()), guard).await {
        Ok(PutOutcome::Applied(v)) => v,
        other => panic!("{k}: expected Applied, got {other:?}"),
    }
}

async fn rejected(store: &S3Store, k: &Key, body: &str, guard: CasGuard) {
    let got = store.put(k, Bytes::from(body.to_string()), guard).await;
    assert!(
        matches!(got, Ok(PutOutcome::Rejected)),
        "{k}: expected Rejected, got {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_on_honest_servers() {
    let Some(s) = servers("conditional_writes_on_honest_servers") else {
        return;
    };
    for (name, endpoint) in s.honest() {
        let store = s.store(endpoint, &fresh_prefix(name));
        let k = key("cells/c1/own.json");
        let v1 = applied(&store, &k, "one", CasGuard::Absent).await;
        rejected(&store, &k, "two", CasGuard::Absent).await;
        let got = store.get(&k).await.unwrap().expect("present");
        assert_eq!(
            (got.body.as_ref(), &got.version),
            (&b"one"[..], &v1),
            "{name}"
        );
        let v2 = applied(&store, &k, "two", CasGuard::Match(v1.clone())).await;
        assert_ne!(v1, v2, "{name}");
        rejected(&store, &k, "stale", CasGuard::Match(v1.clone())).await;
        // If-Match on a missing key: SeaweedFS answers 412, moto 404 like AWS: both Rejected.
        rejected(&store, &key("missing"), "x", CasGuard::Match(v2.clone())).await;
        assert_eq!(store.get(&key("missing")).await.unwrap(), None, "{name}");
        let del = store.delete(&k, &v2).await.unwrap_err();
        assert_eq!(del.kind(), ErrorKind::Unsupported);
        assert!(!store.capabilities().conditional_delete);
        println!("{name}: ETag after create {v1}, after update {v2}");
    }
}

/// S3 ETags are content hashes: the store declares it (`content_versions`) instead of
/// disguising bodies; fence makes every body it writes unique.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_bytes_repeat_the_version_as_declared() {
    let Some(s) = servers("identical_bytes_repeat_the_version_as_declared") else {
        return;
    };
    for (name, endpoint) in s.honest() {
        let store = s.store(endpoint, &fresh_prefix(name));
        assert!(store.capabilities().content_versions);
        let k = key("same");
        let v1 = applied(&store, &k, "same bytes", CasGuard::Absent).await;
        let v2 = applied(&store, &k, "same bytes", CasGuard::Match(v1.clone())).await;
        assert_eq!(v1, v2, "{name}: ETags are content hashes");
        let v3 = applied(&store, &k, "other bytes", CasGuard::Match(v1.clone())).await;
        assert_ne!(v2, v3, "{name}");
        rejected(&store, &k, "x", CasGuard::Match(v1)).await;
    }
}

/// A client of the bucket that is not fence: object_store with the same credentials.
fn raw_client(s: &Servers, endpoint: &str) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_bucket_name(&s.bucket)
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region(&s.region)
        .with_access_key_id(&s.access_key)
        .with_secret_access_key(&s.secret_key)
        .build()
        .unwrap()
}

/// Issue 14 item 1: records fence writes on S3 are plain JSON to any other client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_plain_json_to_other_clients() {
    let Some(s) = servers("records_are_plain_json_to_other_clients") else {
        return;
    };
    let prefix = fresh_prefix("plain");
    let store = Arc::new(s.store(&s.seaweed, &prefix));
    let ownership = Ownership::new(store.clone(), "n1");
    ownership
        .cas_owner("c1", CasGuard::Absent, 1)
        .await
        .unwrap();
    let lease = NodeLeaseRecord {
        node: "n1".into(),
        expires_ms: 1_800_000_000_000,
        addr: "127.0.0.1:7000".into(),
        peer_protocol: 1,
        generation: "g1".into(),
    };
    ownership
        .cas_node_lease(CasGuard::Absent, &lease)
        .await
        .unwrap();
    let raw = raw_client(&s, &s.seaweed);
    for (rel, field, want) in [
        ("cells/c1/own.json", "epoch", serde_json::json!(1)),
        (
            "nodes/n1.json",
            "expires_ms",
            serde_json::json!(1_800_000_000_000u64),
        ),
    ] {
        let path = Path::parse(format!("{prefix}/{rel}")).unwrap();
        let bytes = raw.get(&path).await.unwrap().bytes().await.unwrap();
        let json: serde_json::Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{rel} is not plain JSON ({e}): {bytes:?}"));
        assert_eq!(json[field], want, "{rel}: {json}");
    }
}

/// Issue 35: bytes are read back exactly as written, also a payload object that ends in the
/// nonce trailer development versions of fence-s3 appended (main stripped it on every read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_ending_in_the_old_nonce_trailer_round_trips() {
    let Some(s) = servers("a_body_ending_in_the_old_nonce_trailer_round_trips") else {
        return;
    };
    let store = s.store(&s.seaweed, &fresh_prefix("trailer"));
    let payload = "user bytes\n#fence-nonce:00112233445566778899aabbccddeeff\n";
    let k = key("cells/c1/blobs/1-trailer");
    applied(&store, &k, payload, CasGuard::Absent).await;
    let got = store.get(&k).await.unwrap().unwrap();
    assert_eq!(got.body, Bytes::from(payload));
}

/// Issue 18 item 6: object keys are the fence key's UTF-8 bytes, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_keys_are_utf8_to_other_clients() {
    let Some(s) = servers("object_keys_are_utf8_to_other_clients") else {
        return;
    };
    for (name, endpoint) in s.honest() {
        let prefix = fresh_prefix(name);
        let store = s.store(endpoint, &prefix);
        applied(&store, &key("uni/ñ ü/日本.json"), "u", CasGuard::Absent).await;
        let raw = raw_client(&s, endpoint);
        let foreign = Path::parse(format!("{prefix}/p%41")).unwrap();
        raw.put(&foreign, "foreign".into()).await.unwrap();
        let under = Path::parse(&prefix).unwrap();
        let mut names: Vec<String> =
            futures::TryStreamExt::try_collect::<Vec<_>>(raw.list(Some(&under)))
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.location.to_string())
                .collect();
        names.sort();
        assert_eq!(
            names,
            [
                format!("{prefix}/p%41"),
                format!("{prefix}/uni/ñ ü/日本.json")
            ],
            "{name}"
        );
        let keys = store.list(None).await.unwrap();
        assert_eq!(keys, [key("p%41"), key("uni/ñ ü/日本.json")], "{name}");
        let got = store.get(&key("p%41")).await.unwrap().unwrap();
        assert_eq!(got.body, Bytes::from("foreign"), "{name}");
    }
}

/// A key stored by earlier fence under its percent-encoded name is not read as absent (a
/// claim would restart its epochs): the read fails and names the object to rename.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_under_its_old_escaped_name_is_not_read_as_absent() {
    let Some(s) = servers("a_key_under_its_old_escaped_name_is_not_read_as_absent") else {
        return;
    };
    let prefix = fresh_prefix("escaped");
    let raw = raw_client(&s, &s.seaweed);
    let old_name = Path::parse(format!("{prefix}/cells/%C3%B1/own.json")).unwrap();
    raw.put(&old_name, "{\"epoch\":9}".into()).await.unwrap();
    let store = s.store(&s.seaweed, &prefix);
    let err = store.get(&key("cells/ñ/own.json")).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted),
        "{err:?}"
    );
    assert_eq!(store.get(&key("cells/plain/own.json")).await.unwrap(), None);
}

/// `delete_immutable` is one plain DELETE; absent is Ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_immutable_removes_a_write_once_object() {
    let Some(s) = servers("delete_immutable_removes_a_write_once_object") else {
        return;
    };
    for (name, endpoint) in s.honest() {
        let store = s.store(endpoint, &fresh_prefix(name));
        let k = key("cells/c1/data/blob-0001");
        applied(&store, &k, "payload", CasGuard::Absent).await;
        store.delete_immutable(&k).await.unwrap();
        assert_eq!(store.get(&k).await.unwrap(), None, "{name}");
        store.delete_immutable(&k).await.unwrap();
        store.delete_immutable(&key("never/written")).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_maps_back_to_keys() {
    let Some(s) = servers("list_maps_back_to_keys") else {
        return;
    };
    for (name, endpoint) in s.honest() {
        let store = s.store(endpoint, &fresh_prefix(name));
        for k in ["a", "a/b", "a/c/d", "ab", "odd key %#[]"] {
            applied(&store, &key(k), k, CasGuard::Absent).await;
        }
        let all: Vec<String> = store
            .list(None)
            .await
            .unwrap()
            .iter()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(all, ["a", "a/b", "a/c/d", "ab", "odd key %#[]"], "{name}");
        let under_a = store.list(Some(&key("a"))).await.unwrap();
        assert_eq!(under_a, [key("a"), key("a/b"), key("a/c/d")], "{name}");
        let got = store.get(&key("odd key %#[]")).await.unwrap().unwrap();
        assert_eq!(got.body.as_ref(), b"odd key %#[]");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_is_honest_on_real_servers_and_catches_the_liar() {
    let Some(s) = servers("probe_is_honest_on_real_servers_and_catches_the_liar") else {
        return;
    };
    for (name, endpoint) in s.honest() {
        let store = s.store(endpoint, "");
        let cfg = ProbeConfig {
            key_prefix: fresh_prefix("probe"),
            ..ProbeConfig::default()
        };
        let report = probe(&store, &cfg).await;
        assert_eq!(report.verdict, Verdict::Honest, "{name}: {report:?}");
    }
    let liar = S3Store::builder()
        .with_bucket(&s.bucket)
        .with_endpoint(&s.liar)
        .with_allow_http(true)
        .with_region(&s.region)
        .with_credentials(&s.liar_access_key, &s.liar_secret_key)
        .build()
        .unwrap();
    let cfg = ProbeConfig {
        key_prefix: fresh_prefix("probe"),
        ..ProbeConfig::default()
    };
    let report = probe(&liar, &cfg).await;
    assert!(
        report.verdict.is_violation(),
        "s3rver must be caught: {report:?}"
    );
}

fn suite_config(test: &str) -> SuiteConfig {
    // SeaweedFS is slow under contention: fewer racers and rounds (CI cost), same scenarios.
    SuiteConfig {
        key_prefix: fresh_prefix(test),
        linearizability_ops: 2_000,
        // A guard against a hung scenario, not a measure: a loaded CI machine (two test
        // lanes and the servers on two cores) once took Azurite's linearizability run past
        // 60 s.
        scenario_timeout: Duration::from_secs(180),
        runtime_ttl: SERVER_TTL,
        ..SuiteConfig::light()
    }
}

/// The whole shared suite. Its `identical_rewrite` scenario reads the store's declared
/// [`content_versions`](fence_core::Capabilities) itself: a repeated ETag for identical bytes
/// passes as declared (`identical_bytes_repeat_the_version_as_declared` checks the same here).
async fn run_suite(store: S3Store, test: &str) {
    assert!(store.capabilities().content_versions);
    let list = scenarios::all();
    let store: Arc<dyn ConditionalStore> = Arc::new(store);
    let report = run_scenarios(store, &suite_config(test), &list).await;
    println!("{report}");
    assert!(report.is_success(), "{report}");
    let ran = |name: &str| report.results.iter().any(|r| r.name == name && r.passed);
    assert!(ran("identical_rewrite"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_seaweedfs() {
    let Some(s) = servers("conformance_suite_passes_on_seaweedfs") else {
        return;
    };
    run_suite(s.store(&s.seaweed, ""), "suite-seaweedfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_moto() {
    let Some(s) = servers("conformance_suite_passes_on_moto") else {
        return;
    };
    run_suite(s.store(&s.moto, ""), "suite-moto").await;
}

/// A TCP proxy that forwards each request to `upstream`, waits until the answer starts (the
/// server has applied the write), then drops the connection: the answer is lost.
async fn answer_dropping_proxy(upstream: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(forward_then_drop(client, upstream));
        }
    });
    addr
}

async fn forward_then_drop(client: TcpStream, upstream: SocketAddr) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut from_client, to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let forward =
        tokio::spawn(async move { tokio::io::copy(&mut from_client, &mut to_server).await });
    let mut first = [0u8; 1];
    let _ = from_server.read(&mut first).await;
    forward.abort();
    drop(to_client);
}

fn socket_of(endpoint: &str) -> SocketAddr {
    endpoint.trim_start_matches("http://").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_ambiguous_and_resolved_by_read_back() {
    let Some(s) = servers("a_lost_answer_is_ambiguous_and_resolved_by_read_back") else {
        return;
    };
    let prefix = fresh_prefix("lost-answer");
    let direct = s.store(&s.seaweed, &prefix);
    let proxy = answer_dropping_proxy(socket_of(&s.seaweed)).await;
    let lossy = s.store(&format!("http://{proxy}"), &prefix);

    let k = key("nodes/n1.json");
    let v1 = applied(&direct, &k, "prior", CasGuard::Absent).await;
    for (k, guard) in [
        (k.clone(), CasGuard::Match(v1.clone())),
        (key("fresh"), CasGuard::Absent),
    ] {
        let ours = format!("ours {:x}", Entropy::from_os().next_u64());
        let err = lossy
            .put(&k, Bytes::from(ours.clone()), guard.clone())
            .await
            .unwrap_err();
        assert_eq!(err.commit(), Commit::Ambiguous, "{err:?}");
        assert_ne!(err.kind(), ErrorKind::Conflict);
        // Resolution: read back and recognise our own body.
        let now = direct.get(&k).await.unwrap().expect("the write landed");
        assert_eq!(now.body, Bytes::from(ours.clone()));
        // Naively re-sending the same conditional write is refused: 412 on our own write.
        rejected(&direct, &k, &ours, guard).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_permission_denied_and_never_shown() {
    let Some(s) = servers("a_wrong_secret_is_permission_denied_and_never_shown") else {
        return;
    };
    let secret = "wrong-secret-7f3a9c";
    let store = s
        .builder(&s.seaweed, &s.bucket, secret)
        .with_prefix(fresh_prefix("denied"))
        .build()
        .unwrap();
    let k = key("a");
    let put = store
        .put(&k, "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    let get = store.get(&k).await.unwrap_err();
    let list = store.list(None).await.unwrap_err();
    for err in [&put, &get, &list] {
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err:?}");
        assert_eq!(err.commit(), Commit::NotCommitted, "{err:?}");
        assert_no_secret(err, secret);
        assert!(
            err.to_string().contains(&s.bucket),
            "names the bucket: {err}"
        );
    }
    assert!(!format!("{store:?}").contains(secret));
}

fn assert_no_secret(err: &Error, secret: &str) {
    let mut texts = vec![err.to_string(), format!("{err:?}")];
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        texts.push(s.to_string());
        source = s.source();
    }
    for text in texts {
        assert!(!text.contains(secret), "secret leaked: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_is_not_found() {
    let Some(s) = servers("a_missing_bucket_is_not_found") else {
        return;
    };
    let bucket = format!("fence-missing-{:x}", Entropy::from_os().next_u64());
    let seaweed = s
        .builder(&s.seaweed, &bucket, &s.secret_key)
        .build()
        .unwrap();
    let moto = s.builder(&s.moto, &bucket, &s.secret_key).build().unwrap();
    let stale = CasGuard::Match(Version::new("\"e\"").unwrap());
    let errors = [
        seaweed.get(&key("a")).await.unwrap_err(),
        moto.get(&key("a")).await.unwrap_err(),
        moto.put(&key("a"), "x".into(), CasGuard::Absent)
            .await
            .unwrap_err(),
        moto.put(&key("a"), "x".into(), stale).await.unwrap_err(),
        moto.list(None).await.unwrap_err(),
    ];
    // SeaweedFS creates a missing bucket on the first PUT, so only its reads can show this.
    for err in &errors {
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err:?}");
        assert_eq!(err.commit(), Commit::NotCommitted, "{err:?}");
        assert!(err.to_string().contains(&bucket), "names the bucket: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_is_unavailable_not_a_verdict() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let store = S3Store::builder()
        .with_bucket("b")
        .with_endpoint(format!("http://{closed}"))
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_credentials("AKID", "dummy-secret")
        .build()
        .unwrap();
    let put = store
        .put(&key("a"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        (put.kind(), put.commit()),
        (ErrorKind::Unavailable, Commit::NotCommitted),
        "{put:?}"
    );
    let get = store.get(&key("a")).await.unwrap_err();
    assert_eq!(get.kind(), ErrorKind::Unavailable, "{get:?}");
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

/// Issue 18 item 5: a 429 after the request was sent is ambiguous. A proxy lets the create
/// land on SeaweedFS, then answers 429 in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_after_the_write_landed_is_ambiguous() {
    let Some(s) = servers("a_429_after_the_write_landed_is_ambiguous") else {
        return;
    };
    let upstream = socket_of(&s.seaweed);
    let slow_down = canned::Reply::status(
        429,
        "application/xml",
        "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
    );
    let proxy = canned::replacing_answers(upstream, "PUT", slow_down).await;
    let prefix = fresh_prefix("throttled");
    let direct = s.store(&s.seaweed, &prefix);
    let throttled = s.store(&proxy.endpoint(), &prefix);
    let k = key("cells/c1/own.json");
    canned::assert_create_lands_ambiguously(&throttled, &direct, &k, ErrorKind::Unavailable).await;
}

/// Issue 14 item 2: a bucket written by the seed's system moves to fence without resetting
/// epochs. Its records are written here with a plain client, as the seed would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_shaped_records_continue_their_epochs() {
    let Some(s) = servers("seed_shaped_records_continue_their_epochs") else {
        return;
    };
    let prefix = fresh_prefix("seed");
    let raw = raw_client(&s, &s.seaweed);
    let put_raw = |rel: &str, body: String| {
        let path = Path::parse(format!("{prefix}/{rel}")).unwrap();
        let raw = &raw;
        async move { raw.put(&path, body.into()).await.unwrap() }
    };
    let now = fence_core::now_ms();
    put_raw(
        "cells/released/own.json",
        r#"{"node":"","epoch":41}"#.into(),
    )
    .await;
    put_raw(
        "cells/orphan/own.json",
        r#"{"node":"ghost","epoch":7}"#.into(),
    )
    .await;
    put_raw("cells/gone/own.json", r#"{"node":"old","epoch":3}"#.into()).await;
    put_raw("cells/live/own.json", r#"{"node":"busy","epoch":5}"#.into()).await;
    let lease = |node: &str, expires_ms: u64| {
        format!(
            r#"{{"node":"{node}","expires_ms":{expires_ms},"addr":"10.0.0.9:7000","peer_protocol":1,"generation":"gen-1"}}"#
        )
    };
    put_raw("nodes/old.json", lease("old", now - 3_600_000)).await;
    put_raw("nodes/busy.json", lease("busy", now + 3_600_000)).await;

    let store: Arc<dyn ConditionalStore> = Arc::new(s.store(&s.seaweed, &prefix));
    let fence = fence_core::Fence::builder(store, "me")
        .ttl(SERVER_TTL)
        .build()
        .unwrap();
    let keeper = fence.acquire().await.unwrap();
    let released = keeper.claim("released").await.unwrap();
    assert_eq!(
        released.epoch(),
        42,
        "a released seed cell continues at epoch + 1"
    );
    // A seed lease that expired an hour ago is a process long gone: taken over at once.
    assert_eq!(keeper.claim("gone").await.unwrap().epoch(), 4);
    // A seed lease that looks alive is judged like any other: not ours.
    let busy = keeper.claim("live").await.unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Busy);
    // An owner with no lease record at all: taken over once its absence was seen for a TTL.
    assert_eq!(
        keeper.claim("orphan").await.unwrap_err().kind(),
        ErrorKind::Busy
    );
    let orphan = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        match keeper.claim("orphan").await {
            Ok(c) => break c,
            Err(e) => assert_eq!(e.kind(), ErrorKind::Busy, "{e}"),
        }
    };
    assert_eq!(orphan.epoch(), 8);
    // What fence wrote back is plain JSON that keeps the seed's fields.
    let path = Path::parse(format!("{prefix}/cells/released/own.json")).unwrap();
    let bytes = raw.get(&path).await.unwrap().bytes().await.unwrap();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        (json["node"].as_str(), json["epoch"].as_u64()),
        (Some("me"), Some(42))
    );
    released.release().await.unwrap();
    let bytes = raw.get(&path).await.unwrap().bytes().await.unwrap();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        (json["node"].as_str(), json["epoch"].as_u64()),
        (Some(""), Some(42))
    );
}

/// Issue 14 item 2: "an owner record without `v`/`nonce` is read (empty or **missing** `node`
/// = released)". The seed's `{"epoch": 41}` without a `node` field should claim at 42.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_owner_record_without_a_node_field_is_released() {
    let Some(s) = servers("a_seed_owner_record_without_a_node_field_is_released") else {
        return;
    };
    let prefix = fresh_prefix("seed-no-node");
    let path = Path::parse(format!("{prefix}/cells/c/own.json")).unwrap();
    let raw = raw_client(&s, &s.seaweed);
    raw.put(&path, r#"{"epoch":41}"#.into()).await.unwrap();
    let store: Arc<dyn ConditionalStore> = Arc::new(s.store(&s.seaweed, &prefix));
    let fence = fence_core::Fence::builder(store, "me")
        .ttl(SERVER_TTL)
        .build()
        .unwrap();
    let keeper = fence.acquire().await.unwrap();
    let claim = keeper.claim("c").await.unwrap();
    assert_eq!(claim.epoch(), 42);
}
