//! The lease, takeover and fenced-write behaviour of the runtime on the in-memory store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::decide::{FenceReason, LeaseStatus};
use fence_core::*;
use fence_testkit::sim::PausableStore;
use fence_testkit::{CountingStore, Fault, FaultyStore, OpKind};
use tokio::sync::Barrier;

/// A path that lets another writer's body land in place of our next put, then answers
/// ambiguously (the one fault the testkit's `FaultyStore` does not model).
#[derive(Debug)]
struct Overtaken {
    inner: Arc<MemoryStore>,
    other: Mutex<Option<Bytes>>,
}

#[async_trait]
impl ConditionalStore for Overtaken {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let other = self.other.lock().unwrap().take();
        match other {
            None => self.inner.put(key, body, guard).await,
            Some(other) => {
                self.inner.put(key, other, guard).await?;
                Err(Error::new(ErrorKind::Unavailable, "answer lost"))
            }
        }
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

const TTL: Duration = Duration::from_secs(2);

fn fence(store: Arc<dyn ConditionalStore>, node: &str) -> Fence {
    Fence::builder(store, node)
        .ttl(TTL)
        .clock(Clock::virtual_at(1_700_000_000_000))
        .build()
        .unwrap()
}

async fn advance(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test(start_paused = true)]
async fn two_simultaneous_acquirers_one_wins() {
    for _ in 0..20 {
        let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
        let barrier = Arc::new(Barrier::new(2));
        let mut tasks = Vec::new();
        for i in 0..2 {
            let (store, barrier) = (store.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let own = Ownership::new(store, "shared-node");
                let rec = NodeLeaseRecord {
                    node: "shared-node".into(),
                    expires_ms: 5,
                    addr: format!("p{i}"),
                    peer_protocol: 1,
                    generation: format!("g{i}"),
                };
                barrier.wait().await;
                own.cas_node_lease(CasGuard::Absent, &rec).await.unwrap()
            }));
        }
        let mut applied = 0;
        for t in tasks {
            match t.await.unwrap() {
                LeaseCasOutcome::Applied { .. } => applied += 1,
                LeaseCasOutcome::Rejected => {}
            }
        }
        assert_eq!(applied, 1);
    }
    // The same through the runtime: one keeper, one error of a clear kind.
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let (a, b) = (fence(store.clone(), "n"), fence(store.clone(), "n"));
    let (ra, rb) = tokio::join!(a.acquire(), b.acquire());
    let kinds: Vec<_> = [&ra, &rb]
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.kind()))
        .collect();
    assert_eq!(kinds.len(), 1, "exactly one acquirer must fail");
    assert!(matches!(kinds[0], ErrorKind::Busy | ErrorKind::Fenced));
}

#[tokio::test(start_paused = true)]
async fn renewal_with_stale_etag_fences_and_writes_fail() {
    let store = Arc::new(MemoryStore::new());
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    cell.write("one").await.unwrap();
    // Someone rewrites a's lease record behind its back: a's held etag is now stale.
    let thief = Ownership::new(store.clone(), "thief");
    let current = thief.read_node_lease("a").await.unwrap().unwrap();
    let mut rec = current.record.clone();
    rec.generation = "intruder".into();
    let out = thief
        .cas_node_lease(CasGuard::Match(current.etag), &rec)
        .await
        .unwrap();
    assert!(matches!(out, LeaseCasOutcome::Applied { .. }));
    advance(TTL.as_millis() as u64 / 3 + 50).await;
    assert_eq!(
        lease.status(),
        LeaseStatus::Fenced {
            reason: FenceReason::Rejected
        }
    );
    assert!(!lease.is_held());
    assert_eq!(
        cell.write("two").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
}

#[tokio::test(start_paused = true)]
async fn paused_holder_is_taken_over_only_after_expiry() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let a_path = Arc::new(PausableStore::new(store.clone()));
    let a = fence(a_path.clone(), "a");
    let lease_a = a.acquire().await.unwrap();
    let cell_a = lease_a.claim("c").await.unwrap();
    assert_eq!(cell_a.epoch(), 1);
    cell_a.write("a1").await.unwrap();

    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();

    a_path.freeze(); // a is paused: its requests hang
    advance(500).await;
    let early = lease_b.claim("c").await.unwrap_err();
    assert_eq!(early.kind(), ErrorKind::Busy, "a's lease is still live");

    advance(TTL.as_millis() as u64 + 500).await;
    assert!(!lease_a.is_held(), "a judges itself by its monotonic clock");
    let cell_b = lease_b.claim("c").await.unwrap();
    assert_eq!(cell_b.epoch(), 2);
    let ack = cell_b.write("b1").await.unwrap();
    assert_eq!(ack.epoch, 2);
    a_path.thaw();
    assert_eq!(
        cell_a.write("late").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    let data = cell_b.read().await.unwrap().unwrap();
    assert_eq!((data.epoch, &data.payload[..]), (2, &b"b1"[..]));
}

#[tokio::test(start_paused = true)]
async fn stale_writer_that_believes_it_holds_is_rejected_by_the_store() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    // a's wall clock runs an hour late: peers see its lease as long expired, while a's own
    // monotonic judgement says it holds.
    let a = Fence::builder(store.clone(), "a")
        .ttl(TTL)
        .clock(Clock::virtual_at(1_700_000_000_000).with_skew_ms(-3_600_000))
        .build()
        .unwrap();
    let lease_a = a.acquire().await.unwrap();
    let cell_a = lease_a.claim("c").await.unwrap();
    cell_a.write("a1").await.unwrap();

    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    let cell_b = lease_b.claim("c").await.unwrap();
    assert_eq!(cell_b.epoch(), cell_a.epoch() + 1);

    assert!(lease_a.is_held(), "a still believes it holds");
    let err = cell_a.write("stale").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    let data = cell_b.read().await.unwrap().unwrap();
    assert_eq!(data.epoch, 2);
    assert_ne!(&data.payload[..], b"stale");
}

async fn ambiguous_renewal(fault: Fault) -> (LeaseKeeper, Arc<FaultyStore>) {
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new()), 7));
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    store.script(OpKind::Put, [fault]);
    advance(TTL.as_millis() as u64 / 3 + 50).await;
    (lease, store)
}

#[tokio::test(start_paused = true)]
async fn ambiguous_renewal_that_landed_is_held() {
    let (lease, store) = ambiguous_renewal(Fault::LoseAnswer).await;
    assert_eq!(store.injected(), 1);
    assert_eq!(lease.status(), LeaseStatus::Held);
    advance(TTL.as_millis() as u64 * 3).await;
    assert!(
        lease.is_held(),
        "renewals go on after the resolved ambiguity"
    );
}

#[tokio::test(start_paused = true)]
async fn ambiguous_renewal_that_did_not_land_keeps_the_prior_and_retries() {
    let (lease, store) = ambiguous_renewal(Fault::LoseRequest).await;
    assert_eq!(store.injected(), 1);
    assert_eq!(lease.status(), LeaseStatus::Held);
    assert!(lease.is_held());
    advance(TTL.as_millis() as u64 * 3).await;
    assert!(lease.is_held());
}

#[tokio::test(start_paused = true)]
async fn ambiguous_renewal_overtaken_by_another_writer_fences() {
    let store = Arc::new(Overtaken {
        inner: Arc::new(MemoryStore::new()),
        other: Mutex::new(None),
    });
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    *store.other.lock().unwrap() = Some(Bytes::from_static(
        br#"{"v":1,"node":"a","expires_ms":9,"addr":"","peer_protocol":1,"generation":"x","nonce":"other","ttl_ms":1000}"#,
    ));
    advance(TTL.as_millis() as u64 / 3 + 50).await;
    assert_eq!(
        lease.status(),
        LeaseStatus::Fenced {
            reason: FenceReason::Superseded
        }
    );
    assert!(!lease.is_held());
}

#[tokio::test(start_paused = true)]
async fn release_keeps_the_epoch_and_the_next_claim_raises_it() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let a = fence(store.clone(), "a");
    let lease_a = a.acquire().await.unwrap();
    let cell = lease_a.claim("c").await.unwrap();
    assert_eq!(cell.epoch(), 1);
    cell.release().await.unwrap();
    let own = Ownership::new(store.clone(), "reader");
    let rec = own.read_owner("c").await.unwrap().unwrap();
    assert_eq!((rec.node, rec.epoch), (None, 1));
    // The same node claiming again also takes a new epoch.
    let again = lease_a.claim("c").await.unwrap();
    assert_eq!(again.epoch(), 2);
    lease_a.release().await;
    // A released lease is expired at once: another node may take the cell now.
    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    let cell_b = lease_b.claim("c").await.unwrap();
    assert_eq!(cell_b.epoch(), 3);
}

#[tokio::test(start_paused = true)]
async fn corrupt_records_are_reported_and_never_overwritten() {
    let store = Arc::new(MemoryStore::new());
    let own = Ownership::new(store.clone(), "a");
    let owner_key = own.owner_key("c").unwrap();
    let lease_key = own.lease_key("a").unwrap();
    let full = br#"{"v":1,"node":"z","epoch":3,"nonce":"n"}"#;
    for garbage in [&b"not json"[..], &full[..full.len() - 3], b"", b"{\"v\":1}"] {
        for key in [&owner_key, &lease_key] {
            let cur = store.get(key).await.unwrap().map(|s| s.version);
            let guard = cur.map_or(CasGuard::Absent, CasGuard::Match);
            store
                .put(key, Bytes::copy_from_slice(garbage), guard)
                .await
                .unwrap();
        }
        assert_eq!(
            own.read_owner("c").await.unwrap_err().kind(),
            ErrorKind::Corrupt
        );
        let err = own.read_node_lease("a").await.unwrap_err();
        assert_eq!(
            (err.kind(), err.key()),
            (ErrorKind::Corrupt, Some(&lease_key))
        );

        let fence = fence(store.clone(), "a");
        assert_eq!(
            fence.acquire().await.unwrap_err().kind(),
            ErrorKind::Corrupt
        );
        let v = store.get(&owner_key).await.unwrap().unwrap().version;
        let err = own.cas_owner("c", CasGuard::Match(v), 9).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        for key in [&owner_key, &lease_key] {
            assert_eq!(&store.get(key).await.unwrap().unwrap().body[..], garbage);
        }
    }
}

#[tokio::test]
async fn invalid_names_are_refused_before_any_io() {
    let store = Arc::new(CountingStore::new(Arc::new(MemoryStore::new())));
    let own = Ownership::new(store.clone(), "a");
    for bad in ["", "..", "a/b", "."] {
        assert_eq!(
            own.read_owner(bad).await.unwrap_err().kind(),
            ErrorKind::InvalidKey
        );
        let err = own.cas_owner(bad, CasGuard::Absent, 1).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidKey);
        assert_eq!(
            own.read_node_lease(bad).await.unwrap_err().kind(),
            ErrorKind::InvalidKey
        );
        let err = Fence::builder(store.clone(), bad).build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidKey);
    }
    let bad_owner = Ownership::new(store.clone(), "x/y");
    let rec = NodeLeaseRecord {
        node: "x/y".into(),
        expires_ms: 1,
        addr: String::new(),
        peer_protocol: 1,
        generation: "g".into(),
    };
    let err = bad_owner
        .cas_node_lease(CasGuard::Absent, &rec)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseCasError::NotCommitted(ref e) if e.kind() == ErrorKind::InvalidKey));
    assert_eq!(store.counts().total(), 0, "no request was sent");
}

#[tokio::test]
async fn unknown_fields_survive_a_rewrite() {
    let store = Arc::new(MemoryStore::new());
    let own = Ownership::new(store.clone(), "a");
    let key = own.owner_key("c").unwrap();
    let body = br#"{"v":1,"node":"a","epoch":1,"nonce":"n","zone":"eu-1","flags":[1,2]}"#;
    store
        .put(&key, Bytes::from_static(body), CasGuard::Absent)
        .await
        .unwrap();
    let rec = own.read_owner("c").await.unwrap().unwrap();
    // A fresh Ownership that never read the record must still keep the fields.
    let other = Ownership::new(store.clone(), "b");
    assert_eq!(
        other
            .cas_owner("c", CasGuard::Match(rec.etag), 2)
            .await
            .unwrap(),
        CasOutcome::Applied
    );
    let raw: serde_json::Value =
        serde_json::from_slice(&store.get(&key).await.unwrap().unwrap().body).unwrap();
    assert_eq!(raw["zone"], "eu-1");
    assert_eq!(raw["flags"], serde_json::json!([1, 2]));
    assert_eq!(raw["node"], "b");
    assert_eq!(raw["epoch"], 2);
}

#[tokio::test]
async fn epochs_never_go_back() {
    let store = Arc::new(MemoryStore::new());
    let own = Ownership::new(store.clone(), "a");
    own.cas_owner("c", CasGuard::Absent, 5).await.unwrap();
    let rec = own.read_owner("c").await.unwrap().unwrap();
    for epoch in [0, 4, 5] {
        let err = own
            .cas_owner("c", CasGuard::Match(rec.etag.clone()), epoch)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "epoch {epoch}");
    }
    assert_eq!(own.read_owner("c").await.unwrap().unwrap().epoch, 5);
}

#[tokio::test(start_paused = true)]
async fn a_claim_whose_answer_is_lost_still_holds_the_cell() {
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new()), 11));
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    // The claim is one put of the cell head; its answer is lost.
    store.script(OpKind::Put, [Fault::LoseAnswer]);
    let cell = lease.claim("c").await.unwrap();
    assert_eq!(store.injected(), 1);
    assert_eq!(cell.epoch(), 1);
    let owner = a.ownership().read_owner("c").await.unwrap().unwrap();
    assert_eq!(
        (owner.node.as_deref(), owner.epoch),
        (Some("a"), 1),
        "the claim landed"
    );
    assert_eq!(cell.write("x").await.unwrap().epoch, 1);
}
