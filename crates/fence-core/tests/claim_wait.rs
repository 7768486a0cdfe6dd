//! `LeaseKeeper::claim_wait`: waiting for a cell as `acquire_wait` waits for a lease — a
//! dead owner taken over only after a TTL of observation, a live one answered `Busy` at the
//! deadline, store failures retried, and nothing claimed once the waiter's own lease is lost.
//! All in virtual time.

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::*;
use fence_testkit::sim::PausableStore;
use fence_testkit::{Fault, FaultyStore, OpKind, RandomFaults};
use support::{advance, fence, Steered, Step, TTL};

const TTL_MS: u64 = TTL.as_millis() as u64;

/// The poll period of the tests' fences: min(TTL/10, 250 ms).
const POLL_MS: u64 = 200;

async fn owner(store: Arc<dyn ConditionalStore>, cell: &str) -> (Option<String>, u64) {
    let (head, _) = Ownership::new(store, "reader")
        .read_head(cell)
        .await
        .unwrap()
        .unwrap();
    (head.node, head.epoch)
}

/// The owner crashed (its path to the store is dead: no renewal, no release). A waiter
/// that never watched it before takes the cell exactly a TTL after its first look — not
/// sooner, whatever the wall clocks say — and at the next epoch.
#[tokio::test(start_paused = true)]
async fn a_dead_owner_is_taken_over_after_a_ttl_of_observation() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let lease_a = fence(path.clone(), "a").acquire().await.unwrap();
    let _held = lease_a.claim("c").await.unwrap();
    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    path.kill();
    let start = b.clock().mono_ms();
    let claim = lease_b
        .claim_wait("c", Duration::from_secs(30))
        .await
        .unwrap();
    let waited = b.clock().mono_ms() - start;
    assert!(
        (TTL_MS..=TTL_MS + POLL_MS).contains(&waited),
        "taken after {waited} ms; the rule asks for one TTL ({TTL_MS} ms) of observation"
    );
    assert!(!lease_a.is_held(), "a's authority ended before b claimed");
    assert_eq!(claim.epoch(), 2);
    assert_eq!(owner(store, "c").await, (Some("b".into()), 2));
}

/// A live, renewing owner: the waiter answers `Busy` (not committed) at its deadline —
/// not before, not later — however many TTLs the wait spans, and the cell stays the
/// owner's.
#[tokio::test(start_paused = true)]
async fn a_live_owner_is_answered_busy_at_the_deadline() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let lease_a = fence(store.clone(), "a").acquire().await.unwrap();
    let held = lease_a.claim("c").await.unwrap();
    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    for timeout_ms in [0, 1_500, 3 * TTL_MS] {
        let start = b.clock().mono_ms();
        let e = lease_b
            .claim_wait("c", Duration::from_millis(timeout_ms))
            .await
            .unwrap_err();
        let waited = b.clock().mono_ms() - start;
        assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
        assert_eq!(e.commit(), Commit::NotCommitted);
        assert_eq!(waited, timeout_ms, "answered after {waited} ms");
    }
    assert!(held.is_held());
    assert_eq!(owner(store, "c").await, (Some("a".into()), 1));
}

/// A cell released while someone waits is taken at the waiter's next look (within a poll
/// period), not after a TTL.
#[tokio::test(start_paused = true)]
async fn a_released_cell_is_taken_within_a_poll() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let lease_a = fence(store.clone(), "a").acquire().await.unwrap();
    let held = lease_a.claim("c").await.unwrap();
    let b = fence(store.clone(), "b");
    let lease_b = Arc::new(b.acquire().await.unwrap());
    let waiting = tokio::spawn({
        let lease_b = lease_b.clone();
        let clock = b.clock().clone();
        async move {
            let claim = lease_b.claim_wait("c", Duration::from_secs(30)).await;
            (claim, clock.mono_ms())
        }
    });
    advance(TTL_MS / 2 + 7).await;
    held.release().await.unwrap();
    let released = b.clock().mono_ms();
    let (claim, claimed) = waiting.await.unwrap();
    assert_eq!(claim.unwrap().epoch(), 2);
    assert!(
        claimed - released <= POLL_MS,
        "taken {} ms after the release",
        claimed - released
    );
}

/// Store failures are retried with backoff until the wait claims; a store that keeps
/// failing is reported with its own error kind at the deadline.
#[tokio::test(start_paused = true)]
async fn store_failures_are_retried_until_the_deadline() {
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new()), 7));
    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    store.script(OpKind::Get, [Fault::FailBeforeSend; 3]);
    let claim = lease_b
        .claim_wait("c", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(claim.epoch(), 1);
    assert_eq!(
        store.pending(OpKind::Get),
        0,
        "every scripted failure was met"
    );

    store.set_random(
        OpKind::Get,
        RandomFaults {
            fail_before_send: 1.0,
            ..RandomFaults::default()
        },
    );
    let start = b.clock().mono_ms();
    let e = lease_b
        .claim_wait("d", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_eq!(b.clock().mono_ms() - start, 1_000);
}

/// The waiter's own lease is lost while it waits for a cell whose owner died: it answers
/// `Fenced` as soon as the lease is gone — long before its deadline — and claims nothing,
/// then or later, although the owner's death would have been confirmed a moment after.
#[tokio::test(start_paused = true)]
async fn nothing_is_claimed_once_the_waiters_lease_is_lost() {
    let store = Steered::new();
    let path = Arc::new(PausableStore::new(store.clone()));
    let lease_a = fence(path.clone(), "a").acquire().await.unwrap();
    let _held = lease_a.claim("c").await.unwrap();
    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    let acquired = b.clock().mono_ms();
    path.kill();
    // b's renewals never land from now on: its authority ends a TTL after it acquired.
    store.puts(
        "nodes/b.json",
        std::iter::repeat_n(Step::Delay(Duration::from_secs(600)), 64),
    );
    advance(100).await;
    let e = lease_b
        .claim_wait("c", Duration::from_secs(60))
        .await
        .unwrap_err();
    let answered = b.clock().mono_ms() - acquired;
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    assert_eq!(e.commit(), Commit::NotCommitted);
    assert!(
        answered <= TTL_MS + 50,
        "answered {answered} ms after the acquisition, the lease ran out at {TTL_MS}"
    );
    advance(10 * TTL_MS).await;
    assert_eq!(owner(store, "c").await, (Some("a".into()), 1));
}

/// Bad input is refused at once, as `claim` refuses it; an endless timeout is not bad input.
#[tokio::test(start_paused = true)]
async fn bad_input_is_refused_at_once() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    let start = b.clock().mono_ms();
    let e = lease_b
        .claim_wait("a/b", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidKey);
    let _held = lease_b.claim("c").await.unwrap();
    let e = lease_b
        .claim_wait("c", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidInput,
        "already claimed by this lease"
    );
    assert_eq!(b.clock().mono_ms(), start);
    // An endless wait is fine: no deadline arithmetic overflows.
    let free = lease_b.claim_wait("d", Duration::MAX).await.unwrap();
    assert_eq!(free.epoch(), 1);
}
