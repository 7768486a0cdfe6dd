//! fence-dynamodb against moto's DynamoDB (moto 5.2.5, one request at a time), started by
//! `scripts/servers/dynamodb.sh`. Its address comes from the environment
//! (`$FENCE_SERVERS_DIR/dynamodb.env`); without it every test skips with a notice, or fails
//! when `FENCE_REQUIRE_SERVERS=1`. Each test writes under a fresh random prefix (its own
//! partition of the shared table).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{
    CasGuard, ConditionalStore, Current, DeleteOutcome, Entropy, Fence, Key, MemoryStore,
    PutOutcome, Version,
};
use fence_dynamodb::DynamoDbStore;
use fence_testkit::scenarios::runtime::SERVER_TTL;
use fence_testkit::servers;
use fence_testkit::wire::{FaultProxy, Schedule, WireFault};
use fence_testkit::{probe, run_all, CountingStore, ProbeConfig, SuiteConfig, Verdict};

/// moto's coordinates, as written by `scripts/servers/dynamodb.sh`.
struct Moto {
    endpoint: String,
    table: String,
    region: String,
    key_id: String,
    secret: String,
}

/// The server, or `None` (with a notice) when the environment does not name it.
fn moto(test: &str) -> Option<Moto> {
    let names = [
        "FENCE_DYNAMODB_ENDPOINT",
        "FENCE_DYNAMODB_TABLE",
        "FENCE_DYNAMODB_REGION",
        "FENCE_DYNAMODB_ACCESS_KEY_ID",
        "FENCE_DYNAMODB_SECRET_ACCESS_KEY",
    ];
    let [endpoint, table, region, key_id, secret] =
        servers::from_env(test, &names)?.try_into().ok()?;
    Some(Moto {
        endpoint,
        table,
        region,
        key_id,
        secret,
    })
}

/// The record limit of the stores here. moto counts a binary (B) attribute by the length
/// of its base64 text, where DynamoDB counts its bytes, and refuses items over 405,000 of its
/// bytes: a binary record of more than about 300 KB fits DynamoDB's 400 KB items but not
/// moto's (the default, `MAX_RECORD`, is checked against canned answers in tests/wire.rs).
const MOTO_RECORD_LIMIT: usize = 288 << 10;

impl Moto {
    fn store(&self, prefix: &str) -> DynamoDbStore {
        self.store_at(&self.endpoint, prefix, Duration::from_secs(30))
    }

    fn store_at(&self, endpoint: &str, prefix: &str, ttl: Duration) -> DynamoDbStore {
        DynamoDbStore::builder()
            .with_table(&self.table)
            .with_prefix(prefix)
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region(&self.region)
            .with_credentials(&self.key_id, &self.secret)
            .with_lease_ttl(ttl)
            .with_record_limit(MOTO_RECORD_LIMIT)
            .build()
            .expect("valid configuration")
    }
}

/// A prefix (a partition of the table) no other run uses.
fn fresh_prefix(test: &str) -> String {
    let n = Entropy::from_os().next_u64();
    format!("fence-dynamodb-tests/{test}-{n:016x}")
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

/// Writes `body` under `guard`, which must apply; its version.
async fn applied(store: &DynamoDbStore, k: &Key, body: &str, guard: CasGuard) -> Version {
    let put = store.put(k, Bytes::from(body.to_owned()), guard).await;
    let Ok(PutOutcome::Applied(version)) = put else {
        panic!("{k}: expected Applied, got {put:?}");
    };
    version
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_and_deletes_on_moto() {
    let Some(m) = moto("conditional_writes_and_deletes_on_moto") else {
        return;
    };
    let store = m.store(&fresh_prefix("cas"));
    let k = key("cells/c1/own.json");
    let v1 = applied(&store, &k, "one", CasGuard::Absent).await;
    let (second, current) = store
        .put_with_current(&k, "two".into(), CasGuard::Absent)
        .await
        .unwrap();
    assert_eq!(second, PutOutcome::Rejected);
    let Current::Found(seen) = current else {
        panic!("the rejection carries the item: {current:?}");
    };
    assert_eq!((seen.body.as_ref(), &seen.version), (&b"one"[..], &v1));
    let v2 = applied(&store, &k, "two", CasGuard::Match(v1.clone())).await;
    assert_ne!(v1, v2);
    let stale = store.put_with_current(&k, "x".into(), CasGuard::Match(v1.clone()));
    let (stale, current) = stale.await.unwrap();
    assert_eq!(stale, PutOutcome::Rejected);
    assert!(matches!(current, Current::Found(s) if s.version == v2));
    let missing = key("missing");
    let on_missing = store.put_with_current(&missing, "x".into(), CasGuard::Match(v2.clone()));
    assert_eq!(
        on_missing.await.unwrap(),
        (PutOutcome::Rejected, Current::Absent)
    );
    assert_eq!(
        store.delete(&k, &v1).await.unwrap(),
        DeleteOutcome::Rejected
    );
    assert_eq!(store.get(&k).await.unwrap().unwrap().version, v2);
    assert_eq!(store.delete(&k, &v2).await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(store.get(&k).await.unwrap(), None);
    // Deleted and created again: a new version, and the old ones match nothing (no ABA).
    let v3 = applied(&store, &k, "one", CasGuard::Absent).await;
    assert!(v3 != v1 && v3 != v2);
    let old = store
        .put(&k, "x".into(), CasGuard::Match(v1))
        .await
        .unwrap();
    assert_eq!(old, PutOutcome::Rejected);
    println!("moto dynamodb: versions {v2} → {v3} after a delete and re-create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_records_and_listings_by_prefix() {
    let Some(m) = moto("binary_records_and_listings_by_prefix") else {
        return;
    };
    let store = m.store(&fresh_prefix("list"));
    for k in ["a", "a/b", "a/c/d", "a-b", "ab", "odd key %#[]"] {
        applied(&store, &key(k), k, CasGuard::Absent).await;
    }
    let binary = Bytes::from_static(b"\0\xff\x01{}");
    let put = store
        .put(&key("bin"), binary.clone(), CasGuard::Absent)
        .await;
    assert!(matches!(put, Ok(PutOutcome::Applied(_))));
    assert_eq!(store.get(&key("bin")).await.unwrap().unwrap().body, binary);
    let under_a = store.list(Some(&key("a"))).await.unwrap();
    assert_eq!(under_a, [key("a"), key("a/b"), key("a/c/d")]);
    let all: Vec<String> = store
        .list(None)
        .await
        .unwrap()
        .iter()
        .map(Key::to_string)
        .collect();
    assert_eq!(
        all,
        ["a", "a-b", "a/b", "a/c/d", "ab", "bin", "odd key %#[]"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_is_honest_on_moto() {
    let Some(m) = moto("probe_is_honest_on_moto") else {
        return;
    };
    let store = m.store("");
    let cfg = ProbeConfig {
        key_prefix: fresh_prefix("probe"),
        ..ProbeConfig::default()
    };
    let report = probe(&store, &cfg).await;
    println!("{report}");
    assert_eq!(report.verdict, Verdict::Honest, "{report:?}");
    assert!(report.left_behind.is_empty(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_moto() {
    let Some(m) = moto("conformance_suite_passes_on_moto") else {
        return;
    };
    let store: Arc<dyn ConditionalStore> = Arc::new(m.store(""));
    // moto serves one request at a time (about 80 a second here): fewer racers, rounds and
    // operations (CI cost), the same scenarios, as fence-s3's suite on SeaweedFS and moto.
    let cfg = SuiteConfig {
        key_prefix: fresh_prefix("suite"),
        linearizability_ops: 2_000,
        scenario_timeout: Duration::from_secs(180),
        runtime_ttl: SERVER_TTL,
        ..SuiteConfig::light()
    };
    let report = run_all(store, &cfg).await;
    println!("{report}");
    println!(
        "moto dynamodb: {} passed, {} failed",
        report.passed(),
        report.failed()
    );
    assert!(report.is_success(), "{report}");
}

/// A lost compare-and-swap costs one request on DynamoDB: its rejection carries the head, so
/// the runtime reads nothing after it (on a store without `ALL_OLD`, two: the write and a
/// read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_compare_and_swap_costs_one_request() {
    let Some(m) = moto("a_lost_compare_and_swap_costs_one_request") else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let prefix = key(&fresh_prefix("round-trips"));
    let store = Arc::new(m.store_at(&m.endpoint, "", ttl));
    let rows = fence_testkit::round_trips::measure(store, &prefix, ttl)
        .await
        .unwrap();
    println!("{rows}");
    let memory = fence_testkit::round_trips::measure(Arc::new(MemoryStore::new()), &prefix, ttl);
    let memory = memory.await.unwrap();
    let stale = |rows: &fence_testkit::round_trips::RoundTrips| {
        let row = rows
            .0
            .iter()
            .find(|r| r.operation == "stale write (rejected)");
        row.expect("measured").counts
    };
    let (dynamo, other) = (stale(&rows), stale(&memory));
    assert_eq!((dynamo.put, dynamo.get), (1, 0), "{rows}");
    assert_eq!(
        (other.put, other.get),
        (1, 1),
        "a store without ALL_OLD reads after"
    );
}

/// Waits until the listing a claim at a new epoch sends in the background (its payload
/// collection) has reached `proxy` — every request `counted` saw since the proxy had served
/// `before` — so that a fault scripted next falls on the test's own request.
async fn background_listing_sent(counted: &CountingStore, proxy: &FaultProxy, before: u64) {
    let clock = fence_core::Clock::system();
    for _ in 0..1000 {
        let seen = counted.counts();
        if seen.list >= 1 && proxy.stats().requests - before >= seen.total() {
            return;
        }
        clock.sleep(Duration::from_millis(10)).await;
    }
    panic!("the claim's background listing was not sent within 10 s");
}

/// A write whose answer is lost (the proxy drops it after moto applied the write) is settled
/// by sending it once more: the rejection carries our own write. One request more, no read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_write_is_settled_by_the_rejection_it_gets_again() {
    let Some(m) = moto("an_ambiguous_write_is_settled_by_the_rejection_it_gets_again") else {
        return;
    };
    let upstream = m.endpoint.trim_start_matches("http://").parse().unwrap();
    let proxy = FaultProxy::start(upstream, Schedule::seeded(1))
        .await
        .unwrap();
    let ttl = Duration::from_secs(30);
    let prefix = fresh_prefix("ambiguous");
    let store = Arc::new(m.store_at(&proxy.endpoint(), &prefix, ttl));
    let counted = Arc::new(CountingStore::new(store).ignoring(key("nodes/n1.json")));
    let fence = Fence::builder(counted.clone(), "n1")
        .ttl(ttl)
        .build()
        .unwrap();
    let lease = fence.acquire().await.unwrap();
    counted.reset();
    let before = proxy.stats().requests;
    let cell = lease.claim("cell").await.unwrap();
    background_listing_sent(&counted, &proxy, before).await;
    counted.reset();
    proxy.schedule().script([WireFault::DropAnswer]);
    cell.write("settled by ALL_OLD").await.unwrap();
    let counts = counted.reset();
    assert_eq!((counts.put, counts.get), (2, 0), "{counts}");
    assert_eq!(proxy.stats().faults, 1);
    let direct = m.store(&prefix);
    let head = direct
        .get(&key("cells/cell/own.json"))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&head.body).contains("settled by ALL_OLD"));
    lease.release().await;
}
