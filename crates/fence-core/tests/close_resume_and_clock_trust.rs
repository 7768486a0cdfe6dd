//! A closed claim sends nothing and releases nothing its resumer holds, a resume seals the
//! cell against a racing takeover, a cell is not adopted while its hand-off is in flight, a
//! reader of a busy cell is never told it is corrupt; and the clock rules these rest on (a
//! wall clock set far behind trusted only within `stale_after`, the rate margin never zero,
//! attempt timeouts kept by `ttl`). From the core's second review: each test showed a defect
//! on main 3edc867 and now asserts the fixed behaviour (Q4 asserts the documented exception
//! and its opt-out).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fence_core::*;
use support::{advance, clock, fence, Steered, Step, TTL};

/// Q1. `CellClaim::close` promises "from the moment this returns no write of this claim can
/// be acknowledged any more", and docs/design.md ("Restart and resume", case 2) rests on it.
/// But `write` checks `ended` *before* it waits for the claim's write lock and never again
/// after: a write queued behind an in-flight one (tokio's mutex is FIFO, `close` queued
/// between them) passes the check, `close` returns, and then the queued write is sent and
/// acknowledged. claim.rs `write` → `write_on` (no `ended` check under the lock).
#[tokio::test(start_paused = true)]
async fn a_write_queued_behind_close_is_refused_unsent() {
    let store = Steered::new();
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let claim = Arc::new(a.claim("c").await.unwrap());
    // The first write is slow in the network: it holds the claim's write lock meanwhile.
    store.puts("own.json", [Step::Delay(Duration::from_millis(300))]);
    let w1 = tokio::spawn({
        let c = claim.clone();
        async move { c.write("w1").await }
    });
    advance(10).await;
    let closed = Arc::new(AtomicBool::new(false));
    let close = tokio::spawn({
        let (c, closed) = (claim.clone(), closed.clone());
        async move {
            c.close().await;
            closed.store(true, Ordering::SeqCst);
        }
    });
    advance(10).await;
    let w2 = tokio::spawn({
        let (c, closed) = (claim.clone(), closed.clone());
        async move {
            let r = c.write("w2").await;
            (r, closed.load(Ordering::SeqCst))
        }
    });
    w1.await.unwrap().unwrap();
    close.await.unwrap();
    let (r2, close_had_returned) = w2.await.unwrap();
    assert!(close_had_returned);
    let err = r2.expect_err("a write of a closed claim is acknowledged after close() returned");
    assert_eq!(err.kind(), ErrorKind::Fenced);
    assert_eq!(err.commit(), Commit::NotCommitted);
}

/// Q2. docs/design.md promise 5: "Two processes believe they hold one cell at the same
/// instant only if a holder's monotonic clock *and* wall clock both run slow". A resume
/// (`claim_or_resume`, `adopt`, a hand-off's receiver) writes nothing, so it does not seal:
/// a peer that judged the node's old lease dead and whose takeover CAS is in flight lands
/// *after* the resume read, and both claims say `is_held()` — with every clock exact. Here
/// case 3 of "Restart and resume" as documented: the predecessor is killed (known gone) and
/// its successor takes over the lease with `acquire_succeeding`. The resumer learns only at
/// its first write (or a fleet's head poll, TTL/3 later).
#[tokio::test(start_paused = true)]
async fn a_resume_seals_so_a_racing_takeover_is_refused() {
    use fence_testkit::sim::PausableStore;
    let store = Steered::new();
    let path = Arc::new(PausableStore::new(store.clone()));
    let a1 = fence(path.clone(), "a").acquire().await.unwrap();
    let g1 = a1.generation();
    drop(a1.claim("c").await.unwrap());
    path.kill(); // SIGKILL: nothing of process a1 reaches the store again
    drop(a1);
    let b = Arc::new(fence(store.clone(), "b").acquire().await.unwrap());
    assert_eq!(b.claim("c").await.unwrap_err().kind(), ErrorKind::Busy);
    advance(TTL.as_millis() as u64 + 300).await;
    // b judges a dead; its takeover CAS takes 200 ms in the network.
    store.puts("own.json", [Step::Delay(Duration::from_millis(200))]);
    let takeover = tokio::spawn({
        let b = b.clone();
        async move { b.claim("c").await }
    });
    advance(20).await;
    // a's next process knows a1 is gone: it takes the lease over and resumes its cell.
    let a2 = fence(store.clone(), "a")
        .acquire_succeeding(&g1)
        .await
        .unwrap();
    // The resume seals: it is a CAS of the head at its epoch, so exactly one of it and the
    // peer's takeover lands, and only the winner believes it holds the cell.
    let (resumed, was_resumed) = a2
        .claim_or_resume("c", std::slice::from_ref(&g1))
        .await
        .unwrap();
    assert!(was_resumed);
    let lost = takeover
        .await
        .unwrap()
        .expect_err("the resume's seal landed first");
    assert_eq!(lost.kind(), ErrorKind::Busy);
    assert_eq!(lost.commit(), Commit::NotCommitted);
    assert!(resumed.is_held());
    assert_eq!(resumed.epoch(), 1);
    resumed.write("after the resume").await.unwrap();
}

/// Q1b. `close` says "Nothing is sent" and design.md case 2 says "this process's own closed
/// claims refuse every write". `refuse_if_over` lets a *closed* claim through, so
/// `release_shared` (and `hand_off`) still write: after the cell was resumed at its epoch by
/// a new claim, the old closed claim releases the cell out from under it (its rejected CAS
/// reads back "moved on, still (self, epoch)" and is rebuilt on the resumer's head). The
/// resumer still says `is_held()`.
#[tokio::test(start_paused = true)]
async fn a_closed_claim_cannot_release_the_cell_its_resumer_holds() {
    let store = Steered::new();
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let old = a.claim("c").await.unwrap();
    old.close().await;
    let (new, resumed) = a.claim_or_resume("c", &[a.generation()]).await.unwrap();
    assert!(resumed);
    new.write("resumer's data").await.unwrap();
    let late = old.release_shared().await;
    assert_eq!(
        late.map_err(|e| e.kind()),
        Err(ErrorKind::Fenced),
        "a closed claim sent a release"
    );
    let head = Ownership::new(store.clone(), "x").read_owner("c").await;
    assert_eq!(head.unwrap().unwrap().node.as_deref(), Some("a"));
    assert!(new.is_held());
}

/// Q4. The one exception that trusts wall clocks (docs/design.md promise 5): a lease whose
/// `expires_ms` lies more than `stale_after` (default max(10 min, 30 × TTL)) in the past by
/// the peer's wall clock is judged dead at once — so a *live* holder whose wall clock is set
/// more than `stale_after` behind is taken over without a TTL of observation. The data fence
/// still holds: its next write is rejected by the store. A deployment that cannot bound its
/// clocks' offset raises `stale_after`, and then the same holder is `Busy`.
#[tokio::test(start_paused = true)]
async fn a_wall_clock_set_far_behind_is_trusted_only_within_stale_after() {
    let store = Steered::new();
    let behind = Fence::builder(store.clone(), "a")
        .ttl(TTL)
        .clock(clock().with_skew_ms(-11 * 60 * 1000))
        .build()
        .unwrap();
    let a = behind.acquire().await.unwrap();
    let held = a.claim("c").await.unwrap();
    advance(1_000).await; // a renews on time
    let b = fence(store.clone(), "b").acquire().await.unwrap();
    let stolen = b
        .claim("c")
        .await
        .expect("the documented stale_after exception");
    assert_eq!(stolen.epoch(), 2);
    let late = held.write("after the takeover").await.unwrap_err();
    assert_eq!(late.kind(), ErrorKind::Fenced);
    assert_eq!(late.commit(), Commit::NotCommitted);

    // The opt-out: with stale_after beyond any offset the clocks can have, observation only.
    let store = Steered::new();
    let behind = Fence::builder(store.clone(), "a")
        .ttl(TTL)
        .clock(clock().with_skew_ms(-11 * 60 * 1000))
        .build()
        .unwrap();
    let a = behind.acquire().await.unwrap();
    let held = a.claim("c").await.unwrap();
    advance(1_000).await;
    let patient = Fence::builder(store.clone(), "b")
        .ttl(TTL)
        .clock(clock())
        .stale_after(Duration::from_secs(24 * 3600))
        .build()
        .unwrap();
    let b = patient.acquire().await.unwrap();
    assert_eq!(b.claim("c").await.unwrap_err().kind(), ErrorKind::Busy);
    assert!(a.is_held() && held.is_held());
}

/// Q5. `FenceBuilder::ttl` rebuilds the whole `LeaseConfig` (keeping only `max_attempts`), so
/// `attempt_timeouts` set before it are silently dropped; and its doc's "attempt timeouts
/// scale with it" is not what `LeaseConfig::with_ttl_ms` does (fixed 250 ms–2.5 s).
#[test]
fn attempt_timeouts_set_before_ttl_are_kept() {
    let f = Fence::builder(Arc::new(MemoryStore::new()), "a")
        .attempt_timeouts(Duration::from_millis(50), Duration::from_millis(200))
        .ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(
        (f.config().attempt_min_ms, f.config().attempt_max_ms),
        (50, 200)
    );
}

/// Q8. `hand_off` ends the claim as `Closed` — which takes it out of the lease's register —
/// *before* its write is sent. While the hand-off is in flight the same lease may `adopt`
/// (or `claim_or_resume` with its own generation) the cell: the register no longer refuses
/// it (`InvalidInput` "already holds it"), the head still names this node, and the new
/// claim then says `is_held()` for a cell the hand-off gave to `b` a moment later.
#[tokio::test(start_paused = true)]
async fn a_cell_cannot_be_adopted_while_its_hand_off_is_in_flight() {
    let store = Steered::new();
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let b = fence(store.clone(), "b").acquire().await.unwrap();
    let claim = Arc::new(a.claim("c").await.unwrap());
    store.puts("own.json", [Step::Delay(Duration::from_millis(200))]);
    let gen_b = b.generation();
    let hand_off = tokio::spawn({
        let c = claim.clone();
        async move { c.hand_off("b", Some(&gen_b)).await }
    });
    advance(20).await;
    let adopted = a.adopt("c").await;
    assert_eq!(hand_off.await.unwrap().unwrap(), 2);
    match adopted {
        Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidInput),
        Ok(second) => panic!(
            "adopted during the hand-off: epoch {}, is_held {} while b holds epoch {}",
            second.epoch(),
            second.is_held(),
            b.adopt("c").await.unwrap().epoch()
        ),
    }
}

/// Q9. `read_cell` re-reads the head when a payload object vanished (a newer write replaced
/// and collected it), but only 4 times, and then answers `ErrorKind::Corrupt` ("the head
/// points at a payload object that does not exist") — for a healthy cell whose owner merely
/// writes payloads above the inline bound faster than the reader's two round trips
/// (cell.rs `read_cell`). Corrupt is the kind for records fence must never touch.
/// The reader's path to the store: every get takes `.1` ms.
#[derive(Debug)]
struct Far(Arc<dyn ConditionalStore>, u64);

#[async_trait::async_trait]
impl ConditionalStore for Far {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        advance(self.1).await;
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
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.0.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

#[tokio::test(start_paused = true)]
async fn a_reader_of_a_busy_cell_is_never_told_it_is_corrupt() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let claim = Arc::new(a.claim("c").await.unwrap());
    let big = |i: u8| bytes::Bytes::from(vec![i; 16 * 1024]);
    claim.write(big(0)).await.unwrap();
    let writer = tokio::spawn({
        let c = claim.clone();
        async move {
            for i in 1..=40u8 {
                c.write(big(i)).await.unwrap();
                advance(20).await;
            }
        }
    });
    // The reader is 40 ms from the store; the owner writes every 20 ms.
    let reader = Ownership::new(Arc::new(Far(store.clone(), 40)), "reader");
    let read = fence_core::runtime::read_cell(&reader, "c").await;
    writer.await.unwrap();
    assert!(
        read.as_ref().is_ok_and(|d| d.is_some()),
        "a healthy cell read as {:?}",
        read.map_err(|e| e.kind()).map(|d| d.map(|d| d.epoch))
    );
}

/// Q10. `Observation::hold_ms` adds "0.2 % for monotonic clocks that tick at different
/// rates" as `hold / 500`, rounded down: for any TTL under 500 ms (the builder allows 30 ms)
/// there is no margin at all.
#[test]
fn the_rate_margin_is_never_zero() {
    use fence_core::decide::{LeaseConfig, Observation};
    let cfg = LeaseConfig::with_ttl_ms(400);
    assert!(Observation::first(None, 0).hold_ms(&cfg) > 400);
}
