//! Issue 30, items 1 and 4: exclusion whatever the mix of TTLs across a fleet, and every
//! request a claim makes bounded (background deletes of replaced payload objects included).
//! Each test failed on main 56f0a6d for the reason its doc comment states.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::*;
use support::{advance, clock};

/// Item 1. A peer believed a record's `ttl_ms` only up to its *own* `stale_after` (default
/// max(10 min, 30 × its TTL)): holder `a` (TTL 45 min, healthy, renewing every 15 min) was
/// taken over by `b` (TTL 10 s) after 602 s, while `a` still held 2,098 s of authority and
/// its claim read as held. No faults, no skew.
#[tokio::test(start_paused = true)]
async fn a_long_ttl_holder_is_never_taken_over_by_a_short_ttl_peer() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let build = |node: &str, ttl: Duration| {
        Fence::builder(store.clone(), node)
            .ttl(ttl)
            .clock(clock())
            .build()
            .unwrap()
    };
    let a = build("a", Duration::from_secs(45 * 60))
        .acquire()
        .await
        .unwrap();
    let held = a.claim("orders").await.unwrap();
    let b = build("b", Duration::from_secs(10)).acquire().await.unwrap();
    // b tries every 10 s for 50 minutes; a renews on its own all along.
    for tick in 0..300 {
        advance(10_000).await;
        assert!(a.is_held(), "a's own lease lapsed at {tick}");
        match b.claim("orders").await {
            Err(e) => assert_eq!(e.kind(), ErrorKind::Busy, "{e}"),
            Ok(c) => panic!(
                "b took the cell at epoch {} after {} s while a held it (a's claim: {:?})",
                c.epoch(),
                (tick + 1) * 10,
                held.status()
            ),
        }
    }
    assert!(held.is_held());
}

/// A store that never answers a delete.
#[derive(Debug)]
struct DeafToDeletes(MemoryStore);

#[async_trait]
impl ConditionalStore for DeafToDeletes {
    async fn get(&self, key: &Key) -> Result<Option<Stored>> {
        self.0.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome> {
        self.0.put(key, body, guard).await
    }
    async fn delete(&self, _: &Key, _: &Version) -> Result<DeleteOutcome> {
        std::future::pending().await
    }
    async fn delete_immutable(&self, _: &Key) -> Result<()> {
        std::future::pending().await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>> {
        self.0.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

/// Item 4. The delete of a replaced payload object was the one request of a claim with no
/// time limit: 2,000 writes against a store that never answers deletes left 2,000 tasks
/// alive for ever.
#[tokio::test(start_paused = true)]
async fn background_deletes_of_replaced_payloads_are_bounded() {
    let store = Arc::new(DeafToDeletes(MemoryStore::new()));
    let fence = Fence::builder(store, "a")
        .inline_max(16)
        .clock(clock())
        .build()
        .unwrap();
    let lease = fence.acquire().await.unwrap();
    let cell = lease.claim("big").await.unwrap();
    let before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    for i in 0..2_000 {
        cell.write(format!("a payload object, number {i:08}"))
            .await
            .unwrap();
    }
    advance(10_000).await;
    let alive = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert!(
        alive <= before + 2,
        "{alive} tasks alive after the writes ({before} before): deletes left hanging"
    );
}
