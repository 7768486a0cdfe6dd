//! fence-opendal against the live servers `scripts/servers/*.sh` start: OpenDAL's s3 service
//! on SeaweedFS and moto, its azblob service on Azurite, its gcs service on fake-gcs-server.
//! Coordinates come from the environment (`FENCE_S3_*`, `FENCE_AZURE_*`, `FENCE_GCS_*`);
//! without them each test skips with a notice, or fails when `FENCE_REQUIRE_SERVERS=1`. Every
//! test writes under a fresh random root; every client has explicit credentials.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{
    CasGuard, Commit, ConditionalStore, DeleteOutcome, Entropy, ErrorKind, Key, PutOutcome, Version,
};
use fence_opendal::emulator::{self, S3Server};
use fence_opendal::OpendalStore;
use fence_testkit::scenarios::runtime::SERVER_TTL;
use fence_testkit::{probe, run_all, ProbeConfig, SuiteConfig, Verdict};
use opendal::Operator;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The server `name` as an operator factory (root → operator), or `None` with a notice.
fn server(test: &str, name: &str) -> Option<impl Fn(&str) -> Operator> {
    let Some(open) = emulator::from_test_env(name) else {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "{test}: {name} is not in the environment but FENCE_REQUIRE_SERVERS=1"
        );
        eprintln!("SKIPPED {test}: no {name} (run scripts/servers/*.sh start)");
        return None;
    };
    Some(move |root: &str| open(root).expect("valid OpenDAL configuration"))
}

fn s3_server(name: &str) -> Option<S3Server> {
    let endpoint = match name {
        "seaweedfs" => var("FENCE_S3_SEAWEED_ENDPOINT")?,
        _ => var("FENCE_S3_MOTO_ENDPOINT")?,
    };
    Some(S3Server {
        endpoint,
        bucket: var("FENCE_S3_BUCKET")?,
        region: var("FENCE_S3_REGION").unwrap_or_else(|| "us-east-1".into()),
        access_key_id: var("FENCE_S3_ACCESS_KEY_ID")?,
        secret_access_key: var("FENCE_S3_SECRET_ACCESS_KEY")?,
    })
}

fn fresh_root(test: &str) -> String {
    format!(
        "/fence-opendal-tests/{test}-{:016x}",
        Entropy::from_os().next_u64()
    )
}

/// A store with a generous TTL: the tests run in parallel on two shared cores.
fn store(op: Operator) -> OpendalStore {
    OpendalStore::builder(op)
        .with_lease_ttl(Duration::from_secs(30))
        .build()
        .expect("a compare-and-swap service")
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

async fn applied(store: &OpendalStore, k: &Key, body: &str, guard: CasGuard) -> Version {
    match store.put(k, Bytes::from(body.to_string()), guard).await {
        Ok(PutOutcome::Applied(v)) => v,
        other => panic!("{k}: expected Applied, got {other:?}"),
    }
}

async fn rejected(store: &OpendalStore, k: &Key, body: &str, guard: CasGuard) {
    let got = store.put(k, Bytes::from(body.to_string()), guard).await;
    assert!(
        matches!(got, Ok(PutOutcome::Rejected)),
        "{k}: expected Rejected, got {got:?}"
    );
}

const HONEST: [&str; 3] = ["seaweedfs", "moto", "azurite"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_on_honest_servers() {
    for name in HONEST {
        let Some(open) = server("conditional_writes_on_honest_servers", name) else {
            continue;
        };
        let store = store(open(&fresh_root(name)));
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
        // If-Match on a missing key: 412 on SeaweedFS and Azurite, 404 on moto (as AWS).
        rejected(&store, &key("missing"), "x", CasGuard::Match(v2.clone())).await;
        assert_eq!(store.get(&key("missing")).await.unwrap(), None, "{name}");
        if store.capabilities().conditional_delete {
            let stale = store.delete(&k, &v1).await.unwrap();
            assert_eq!(stale, DeleteOutcome::Rejected, "{name}");
            assert_eq!(store.delete(&k, &v2).await.unwrap(), DeleteOutcome::Deleted);
        } else {
            assert_eq!(
                store.delete(&k, &v2).await.unwrap_err().kind(),
                ErrorKind::Unsupported
            );
        }
        println!(
            "opendal-{name}: {:?}, version after create {v1}, after update {v2}",
            store.dialect()
        );
    }
}

/// Bodies up to the record limit are read whole; a larger object reads as Corrupt and a
/// larger body is refused before sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_bounded_by_the_record_limit() {
    let Some(open) = server("bodies_are_bounded_by_the_record_limit", "seaweedfs") else {
        return;
    };
    let root = fresh_root("limit");
    let small = OpendalStore::builder(open(&root))
        .with_record_limit(1000)
        .build()
        .unwrap();
    let big = store(open(&root));
    let at_limit = "x".repeat(1000);
    applied(&small, &key("fits"), &at_limit, CasGuard::Absent).await;
    assert_eq!(
        small.get(&key("fits")).await.unwrap().unwrap().body.len(),
        1000
    );
    applied(&big, &key("over"), &"y".repeat(1001), CasGuard::Absent).await;
    let e = small.get(&key("over")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.commit()),
        (ErrorKind::Corrupt, Commit::NotCommitted)
    );
    let e = small
        .put(&key("new"), "z".repeat(1001).into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.commit()),
        (ErrorKind::InvalidInput, Commit::NotCommitted)
    );
    assert_eq!(
        big.get(&key("new")).await.unwrap(),
        None,
        "nothing was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_permission_denied_and_never_shown() {
    let Some(mut s) = s3_server("seaweedfs") else {
        let _ = server(
            "a_wrong_secret_is_permission_denied_and_never_shown",
            "seaweedfs",
        );
        return;
    };
    let secret = "wrong-secret-7f3a9c";
    s.secret_access_key = secret.into();
    let store = store(emulator::s3(&s, &fresh_root("denied")).unwrap());
    let k = key("a");
    let errors = [
        store
            .put(&k, "x".into(), CasGuard::Absent)
            .await
            .unwrap_err(),
        store.get(&k).await.unwrap_err(),
        store.list(None).await.unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(
            (err.kind(), err.commit()),
            (ErrorKind::PermissionDenied, Commit::NotCommitted),
            "{err:?}"
        );
        let mut texts = vec![err.to_string(), format!("{err:?}")];
        let mut source = std::error::Error::source(err);
        while let Some(s) = source {
            texts.push(s.to_string());
            source = s.source();
        }
        let texts = texts.join("\n");
        assert!(!texts.contains(secret), "{texts}");
        assert!(texts.contains(&s.bucket), "names the bucket: {texts}");
    }
    assert!(!format!("{store:?}").contains(secret));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_is_not_committed() {
    let s = S3Server {
        endpoint: "http://127.0.0.1:9".into(),
        bucket: "b".into(),
        region: "us-east-1".into(),
        access_key_id: "AKID".into(),
        secret_access_key: "secret".into(),
    };
    let store = store(emulator::s3(&s, "/").unwrap());
    let e = store
        .put(&key("k"), "x".into(), CasGuard::Absent)
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.commit()),
        (ErrorKind::Unavailable, Commit::NotCommitted),
        "{e:?}"
    );
    assert!(e.is_retryable());
    let e = store.get(&key("k")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.commit()),
        (ErrorKind::Unavailable, Commit::NotCommitted)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_maps_back_to_keys() {
    for name in HONEST {
        let Some(open) = server("list_maps_back_to_keys", name) else {
            continue;
        };
        let store = store(open(&fresh_root(name)));
        for k in [
            "a",
            "a/b",
            "a/c/d",
            "ab",
            "odd key %#[]",
            "uni/ñ ü/日本.json",
        ] {
            applied(&store, &key(k), k, CasGuard::Absent).await;
        }
        let all: Vec<String> = store
            .list(None)
            .await
            .unwrap()
            .iter()
            .map(Key::to_string)
            .collect();
        assert_eq!(
            all,
            [
                "a",
                "a/b",
                "a/c/d",
                "ab",
                "odd key %#[]",
                "uni/ñ ü/日本.json"
            ],
            "{name}"
        );
        let under_a = store.list(Some(&key("a"))).await.unwrap();
        assert_eq!(under_a, [key("a"), key("a/b"), key("a/c/d")], "{name}");
        store.delete_immutable(&key("ab")).await.unwrap();
        store.delete_immutable(&key("ab")).await.unwrap();
        assert_eq!(store.get(&key("ab")).await.unwrap(), None, "{name}");
    }
}

fn suite_config(test: &str) -> SuiteConfig {
    // SeaweedFS queues contended conditional writes per key: fewer racers, rounds and
    // linearizability operations (CI cost: three suites run one after another), the same
    // scenarios.
    SuiteConfig {
        key_prefix: format!("fence-opendal-suite/{test}"),
        linearizability_ops: 1_000,
        // A guard against a hung scenario, not a measure: a loaded CI machine (two test
        // lanes and the servers on two cores) once took Azurite's linearizability run past
        // 60 s.
        scenario_timeout: Duration::from_secs(180),
        runtime_ttl: SERVER_TTL,
        ..SuiteConfig::light()
    }
}

/// One suite at a time: its runtime scenarios hold leases of 1.5 s ([`SERVER_TTL`]), which
/// three suites at once on two loaded cores can starve.
static ONE_SUITE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn suite_passes(name: &str) {
    let _turn = ONE_SUITE_AT_A_TIME.lock().await;
    let test = format!("conformance_suite_passes_on_{name}");
    let Some(open) = server(&test, name) else {
        return;
    };
    let store: Arc<dyn ConditionalStore> = Arc::new(store(open("/")));
    let report = run_all(store, &suite_config(name)).await;
    println!("{report}");
    println!(
        "opendal-{name}: {} passed, {} failed",
        report.passed(),
        report.failed()
    );
    assert!(report.is_success(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_seaweedfs() {
    suite_passes("seaweedfs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_moto() {
    suite_passes("moto").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_azurite() {
    suite_passes("azurite").await;
}

/// OpenDAL's gcs service writes conditionally through resumable uploads, whose
/// `ifGenerationMatch` fake-gcs-server does not check: the probe must catch it, and the
/// suite must stop at the probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_refuses_fake_gcs_server_for_resumable_uploads() {
    let test = "the_probe_refuses_fake_gcs_server_for_resumable_uploads";
    let Some(open) = server(test, "fake-gcs-server") else {
        return;
    };
    let store = store(open("/"));
    assert_eq!(store.dialect().token, fence_opendal::Token::Version);
    let cfg = ProbeConfig {
        key_prefix: fresh_root("probe").trim_start_matches('/').to_string(),
        ..ProbeConfig::default()
    };
    let report = probe(&store, &cfg).await;
    println!("opendal-fake-gcs-server probe: {report}");
    assert!(report.verdict.is_violation(), "{report:?}");
    let suite = run_all(Arc::new(store), &suite_config("fake-gcs-server")).await;
    println!("{suite}");
    assert!(
        !suite.is_success() && suite.stopped_early.is_some(),
        "{suite}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_is_honest_on_honest_servers() {
    for name in HONEST {
        let Some(open) = server("probe_is_honest_on_honest_servers", name) else {
            continue;
        };
        let cfg = ProbeConfig {
            key_prefix: fresh_root("probe").trim_start_matches('/').to_string(),
            ..ProbeConfig::default()
        };
        let report = probe(&store(open("/")), &cfg).await;
        println!("opendal-{name} probe: {report}");
        assert_eq!(report.verdict, Verdict::Honest, "{name}: {report:?}");
    }
}
