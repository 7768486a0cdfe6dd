//! How a claim stops acting: a hand-off in flight (or cancelled after it landed) has stopped
//! the sender, a hung garbage collection does not hold `close` forever, a write queued while
//! the lease runs out is refused unsent; and `update_cell` leaves no payload object behind,
//! absurd durations are invalid input. From the core's third review: each test failed on
//! main 3114028 for the reason its doc comment states and now asserts the fixed behaviour;
//! the last two cover what the review suspected without a test.

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::*;
use support::{advance, fence, Steered, Step};

/// R3-1. `CellClaim::hand_off` promises "No window in which both act: this claim stops first
/// — the write waits for any write of this claim in flight, and the claim is
/// [closed](Self::close) before the hand-off is sent", and docs/design.md ("Hand-off"): "The
/// sender stops first: the hand-off takes the claim's write lock … and closes the claim
/// before sending." Since the review-2 fix (claim.rs `hand_off`), the claim is only ended
/// *after* `rewrite` settles: while the hand-off's answer is on its way (here its answer is
/// lost and the read-back is slow), the head already names `b`, `b` has resumed the cell,
/// and the sender's claim still says `is_held()` / `ClaimStatus::Held` — two claims that
/// believe they hold one cell, with every clock exact (design.md promise 5).
#[tokio::test(start_paused = true)]
async fn a_hand_off_in_flight_has_already_stopped_the_sender() {
    let store = Steered::new();
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let b = fence(store.clone(), "b").acquire().await.unwrap();
    let sender = Arc::new(a.claim("c").await.unwrap());
    // The hand-off lands, its answer is lost, and its read-back takes 500 ms.
    store.puts("own.json", [Step::LoseAnswer]);
    store.gets("own.json", [Step::Delay(Duration::from_millis(500))]);
    let gen_b = b.generation();
    let hand_off = tokio::spawn({
        let c = sender.clone();
        async move { c.hand_off("b", Some(&gen_b)).await }
    });
    advance(20).await;
    let receiver = b.adopt("c").await.unwrap();
    assert!(receiver.is_held());
    assert_eq!(receiver.epoch(), 2);
    let sender_status = sender.status();
    // (Its read-back then finds b's seal, not its own nonce: an ambiguous `Fenced`.)
    let _ = hand_off.await.unwrap();
    assert_ne!(
        sender_status,
        ClaimStatus::Held,
        "the sender's claim read as held while its hand-off had landed and b held epoch 2"
    );
}

/// R3-1b. The same, made permanent by cancellation: a `hand_off` future dropped mid-await
/// (a caller's `tokio::time::timeout`, a `select!`) after its CAS landed never reaches the
/// `self.end(..)` calls at the bottom of claim.rs `hand_off`, so the claim is never ended:
/// it reads `Held` for as long as it lives (until a write or the lease's loss), `lost()`
/// never fires, while `b` holds the cell. The doc promises it was closed *before* the write
/// was sent.
#[tokio::test(start_paused = true)]
async fn a_cancelled_hand_off_that_landed_leaves_no_held_sender() {
    let store = Steered::new();
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let b = fence(store.clone(), "b").acquire().await.unwrap();
    let sender = a.claim("c").await.unwrap();
    store.puts("own.json", [Step::LoseAnswer]);
    store.gets("own.json", [Step::Delay(Duration::from_millis(500))]);
    let gen_b = b.generation();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        sender.hand_off("b", Some(&gen_b)),
    )
    .await;
    assert!(gave_up.is_err(), "the caller gave up on the hand-off");
    let receiver = b.adopt("c").await.unwrap();
    assert!(receiver.is_held());
    let lost = tokio::time::timeout(Duration::from_millis(100), sender.lost()).await;
    assert!(
        lost.is_ok() && !sender.is_held(),
        "the sender of a landed hand-off still reads {:?} while b holds epoch {}",
        sender.status(),
        receiver.epoch()
    );
}

/// A MemoryStore whose listings never answer (a hung connection).
#[derive(Debug, Default)]
struct HungList(MemoryStore);

#[async_trait::async_trait]
impl ConditionalStore for HungList {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.0.get(key).await
    }
    async fn put(
        &self,
        key: &Key,
        body: bytes::Bytes,
        guard: CasGuard,
    ) -> Result<PutOutcome, Error> {
        self.0.put(key, body, guard).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.0.delete(key, version).await
    }
    async fn list(&self, _prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        std::future::pending().await
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

/// R3-5. `CellClaim::close` "waits until no write of it is in flight" — and the fleet calls
/// it on every path that stops a shard (`lease_lost`, `poll_heads`, `drain` after its
/// deadline: run.rs `close_all`). claim.rs `collect_garbage` takes the same write lock and
/// then sends a listing, a head read and deletes with **no time bound** (every other request
/// of a claim goes through `bounded(.., request_bound_ms)`): one hung request keeps the lock,
/// so `close()` — and with it the fleet's reaction to a lost lease — never returns, and no
/// write of the claim can be made either. Correct code bounds each request (≤ 2.5 s by
/// default) and `close()` returns soon after.
#[tokio::test(start_paused = true)]
async fn a_hung_garbage_collection_does_not_block_close_forever() {
    let store = Arc::new(HungList::default());
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let claim = Arc::new(a.claim("c").await.unwrap());
    let collect = tokio::spawn({
        let c = claim.clone();
        async move { c.collect_garbage().await }
    });
    advance(10).await;
    let closed = tokio::time::timeout(Duration::from_secs(60), claim.close()).await;
    assert!(
        closed.is_ok(),
        "close() still waiting a minute later behind collect_garbage's unbounded listing"
    );
    let _ = collect.await;
}

/// Suspected in R3: `write` checked the lease only before waiting for the claim's write lock,
/// so a write queued behind a slow one was sent after the lease's authority had run out
/// meanwhile (the lease doc: writes are refused once the lease is not held). It is refused
/// unsent now.
#[tokio::test(start_paused = true)]
async fn a_write_queued_while_the_lease_runs_out_is_refused_unsent() {
    let store = Steered::new();
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let claim = Arc::new(a.claim("c").await.unwrap());
    // Renewals stop landing, and head writes hang in the network: the writes ahead of the
    // queued one hold the claim's lock (each bounded) until the lease has run out.
    store.puts(
        "nodes/a.json",
        std::iter::repeat_n(Step::Delay(Duration::from_secs(60)), 64),
    );
    store.puts(
        "own.json",
        std::iter::repeat_n(Step::Delay(Duration::from_secs(60)), 64),
    );
    let mut ahead = Vec::new();
    for i in 0..3 {
        ahead.push(tokio::spawn({
            let c = claim.clone();
            async move { c.write(format!("slow {i}")).await }
        }));
        advance(1).await;
    }
    let queued = tokio::spawn({
        let c = claim.clone();
        async move { c.write("queued").await }
    });
    for w in ahead {
        let _ = w.await.unwrap();
    }
    assert!(
        !a.is_held(),
        "the lease ran out while the writes ahead were settling"
    );
    let err = queued.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced);
    assert_eq!(err.commit(), Commit::NotCommitted);
    let head = Ownership::new(store.clone(), "x").read_head("c").await;
    let (head, _) = head.unwrap().unwrap();
    assert_ne!(
        head.payload,
        fence_core::record::CellPayload::Inline("queued".into())
    );
}

/// Suspected in R3: a keeperless `update_cell` (`fence put`) that replaced a payload object
/// left the replaced one behind (only a claim's own writes deleted what they replaced, and
/// `collect_garbage` only touches earlier epochs). Now every payload object no head refers
/// to is deleted once the write that replaced it lands.
#[tokio::test]
async fn update_cell_leaves_no_payload_object_behind() {
    let store = Arc::new(MemoryStore::new());
    let a = Fence::builder(store.clone(), "a").build().unwrap();
    let lease = a.acquire().await.unwrap();
    let claim = lease.claim("c").await.unwrap();
    let big = |c: char| bytes::Bytes::from(c.to_string().repeat(64 * 1024));
    claim.write(big('a')).await.unwrap();
    let own = Ownership::new(store.clone(), "put");
    let bound = Duration::from_secs(5);
    for c in ['b', 'c'] {
        update_cell(&own, "c", claim.epoch(), bound, |_| Ok(big(c)))
            .await
            .unwrap();
    }
    let prefix = own.blobs_prefix("c").unwrap();
    let objects = store.list(Some(&prefix)).await.unwrap();
    assert_eq!(
        objects.len(),
        1,
        "only the current payload object: {objects:?}"
    );
    let data = read_cell(&own, "c").await.unwrap().unwrap();
    assert_eq!(data.payload, big('c'));
}

/// Found by audit2: `LeaseConfig::with_ttl_ms` computed `30 * ttl_ms` unchecked — a TTL near
/// `u64::MAX` ms panicked in a debug build (wrapped in a release one). Absurd settings are
/// now `InvalidInput` from `build`, and the config arithmetic saturates.
#[test]
fn absurd_durations_are_invalid_input_not_a_panic() {
    let config = LeaseConfig::with_ttl_ms(u64::MAX);
    assert_eq!(config.stale_after_ms, u64::MAX);
    let century = Duration::from_secs(100 * 365 * 24 * 3600);
    let build = |b: FenceBuilder| b.build().map(|_| ()).unwrap_err().kind();
    let store = || Arc::new(MemoryStore::new());
    assert_eq!(
        build(Fence::builder(store(), "n").ttl(Duration::MAX)),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        build(Fence::builder(store(), "n").stale_after(Duration::MAX)),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        build(Fence::builder(store(), "n").skew_margin(century * 2)),
        ErrorKind::InvalidInput
    );
    // A century itself is still a TTL (a lease meant never to lapse).
    assert!(Fence::builder(store(), "n").ttl(century).build().is_ok());
}
