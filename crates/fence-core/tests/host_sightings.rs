//! A first sighting handed from one process to a later one of the same host
//! (`Observer::export` / `Observer::import`): the later process takes over a dead holder
//! without watching a whole TTL itself, and never a live one.

use std::sync::Arc;
use std::time::Duration;

use fence_core::decide::LeaseConfig;
use fence_core::record::LeaseBody;
use fence_core::runtime::observer::HostSighting;
use fence_core::{CasGuard, Clock, ErrorKind, Fence, MemoryStore, NodeLeaseRecord, Ownership};

/// The TTL of the dead-holder cases; a renewing holder gets a longer one, so that a loaded
/// machine does not make it miss its renewals (it would then rightly be taken over).
const TTL: Duration = Duration::from_millis(200);
const LIVE_TTL: Duration = Duration::from_secs(2);

/// A process of node `n` that starts now, on the host clock.
fn process(store: &Arc<MemoryStore>, ttl: Duration) -> Fence {
    Fence::builder(store.clone(), "n")
        .ttl(ttl)
        .clock(Clock::host())
        .build()
        .unwrap()
}

/// A lease record of node `n` (TTL [`TTL`]) left by a holder that died; it looks valid for
/// an hour (the holder's wall clock ran an hour ahead).
async fn dead_holder(store: &Arc<MemoryStore>) {
    let own = Ownership::new(store.clone(), "n");
    let body = LeaseBody {
        record: NodeLeaseRecord {
            node: "n".into(),
            expires_ms: fence_core::now_ms() + 3_600_000,
            addr: "pid:1@elsewhere".into(),
            peer_protocol: 1,
            generation: "dead".into(),
        },
        nonce: own.fresh_nonce(),
        ttl_ms: Some(TTL.as_millis() as u64),
        extra: Default::default(),
    };
    own.put_lease_body(CasGuard::Absent, &body).await.unwrap();
}

/// A one-shot process: acquires once (Busy expected) and hands on what it saw.
async fn one_shot(
    store: &Arc<MemoryStore>,
    ttl: Duration,
    import: Option<&HostSighting>,
) -> (bool, HostSighting) {
    let fence = process(store, ttl);
    if let Some(s) = import {
        fence.observer().import(fence.clock(), "n", s);
    }
    let held = match fence.acquire().await {
        Ok(keeper) => {
            keeper.release().await;
            true
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
            false
        }
    };
    let seen = fence.observer().export(fence.clock(), "n");
    (held, seen.unwrap_or_else(|| panic!("nothing to export")))
}

/// Twice a full hold, on the real clock.
async fn sleep_past_hold(ttl: Duration) {
    let hold = LeaseConfig::with_ttl_ms(ttl.as_millis() as u64).ttl_ms * 2;
    Clock::system().sleep(Duration::from_millis(hold)).await;
}

#[tokio::test]
async fn the_next_process_continues_the_watch_and_takes_over_a_dead_holder() {
    if Clock::host().host_instant_of(0).is_none() {
        return; // no host clock here (not Linux)
    }
    let store = Arc::new(MemoryStore::new());
    dead_holder(&store).await;
    let (held, first) = one_shot(&store, TTL, None).await;
    assert!(!held, "a first sighting never takes over");
    sleep_past_hold(TTL).await;
    // Without the first sighting, a new process starts watching afresh: busy again.
    let (held, _) = one_shot(&store, TTL, None).await;
    assert!(!held);
    // With it, the record was seen unchanged for a full hold: taken over.
    let (held, _) = one_shot(&store, TTL, Some(&first)).await;
    assert!(held, "the continued watch should have taken the lease over");
}

#[tokio::test]
async fn a_sighting_never_takes_over_a_renewing_holder_or_a_record_it_did_not_see() {
    if Clock::host().host_instant_of(0).is_none() {
        return;
    }
    let store = Arc::new(MemoryStore::new());
    let holder = process(&store, LIVE_TTL).acquire().await.unwrap();
    let mut sighting = one_shot(&store, LIVE_TTL, None).await.1;
    for _ in 0..3 {
        sleep_past_hold(LIVE_TTL).await;
        let (held, next) = one_shot(&store, LIVE_TTL, Some(&sighting)).await;
        assert!(!held, "a renewing holder was taken over");
        sighting = next;
    }
    assert!(holder.is_held());
    holder.release().await;

    // A sighting of another state (an earlier record) does not count for this one.
    let other = Arc::new(MemoryStore::new());
    dead_holder(&other).await;
    sleep_past_hold(TTL).await;
    let (held, _) = one_shot(&other, TTL, Some(&sighting)).await;
    assert!(!held, "a sighting of another record state counted");
}

#[tokio::test]
async fn a_sighting_from_another_boot_or_the_future_is_ignored() {
    let clock = Clock::host();
    let Some(now) = clock.host_instant_of(clock.mono_ms()) else {
        return;
    };
    let fence = process(&Arc::new(MemoryStore::new()), TTL);
    let observer = fence.observer();
    let other_boot = HostSighting {
        state: None,
        first_seen: fence_core::HostInstant {
            boot_id: "not-this-boot".into(),
            ..now.clone()
        },
    };
    assert!(!observer.import(fence.clock(), "n", &other_boot));
    let future = HostSighting {
        state: None,
        first_seen: fence_core::HostInstant {
            boot_ms: now.boot_ms + 60_000,
            ..now
        },
    };
    assert!(!observer.import(fence.clock(), "n", &future));
    assert!(observer.is_empty());
}
