//! The tasks beside a fleet's rounds: one that stops every shard when the lease's authority
//! runs out, and one per shard that tells why its claim ended.

use std::sync::Arc;

use fence_core::runtime::{ClaimStatus, Fence};
use tokio::sync::{mpsc, watch};

use crate::fleet::{lock, Inner};
use crate::shard::{Shard, StopReason};

/// Stops every shard once the lease's authority ran out (its claims no longer held), at the
/// moment `expiry` names — also while the fleet's task waits on a store that stopped
/// answering. Ends when the fleet's task does.
pub(super) async fn guard_lease(
    inner: Arc<Inner>,
    fence: Fence,
    mut expiry: watch::Receiver<u64>,
    lost: mpsc::UnboundedSender<()>,
) {
    let clock = fence.clock().clone();
    let recheck = std::time::Duration::from_millis(fence.config().poll_ms());
    loop {
        let at = *expiry.borrow_and_update();
        tokio::select! {
            changed = expiry.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
            _ = clock.sleep_until(at) => {}
        }
        let shards: Vec<Shard> = lock(&inner.shards).values().cloned().collect();
        let mut stopped = false;
        for s in shards.iter().filter(|s| !s.claim.is_held()) {
            stopped |= s.end.finish(StopReason::LeaseLost);
        }
        if stopped {
            let _ = lost.send(());
        }
        // Renewed meanwhile: wait for the fleet's next word, or look again shortly.
        tokio::select! {
            changed = expiry.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = clock.sleep(recheck) => {}
        }
    }
}

/// Watches a shard's claim: when it ends other than by the fleet's own doing, tells why —
/// after a close, once no write of the claim is in flight, so a hand-off the application
/// made through the claim is told as landed or not.
pub(super) async fn watch_claim(
    shard: Shard,
    fence: Fence,
    bound_ms: u64,
    lost: mpsc::UnboundedSender<()>,
) {
    let claim = shard.claim.clone();
    let mut how = claim.lost().await;
    if how == ClaimStatus::Closed && !shard.end.is_stopping() {
        claim.close().await;
        how = claim.status();
    }
    if shard.end.is_stopping() {
        // The fleet is stopping it, and tells why itself.
        let _ = lost.send(());
        return;
    }
    let reason = match StopReason::of(how) {
        Some(StopReason::HandedOff { epoch, .. }) => {
            let to = receiver(&fence, claim.cell(), epoch, bound_ms).await;
            StopReason::HandedOff { to, epoch }
        }
        Some(r) => r,
        None => StopReason::Closed,
    };
    shard.end.finish(reason);
    let _ = lost.send(());
}

/// The receiver of a hand-off through a shard's own claim ([`CellClaim::hand_off`]), whose
/// status carries only the epoch: one bounded read of the head, which names the receiver at
/// that epoch (empty if it no longer shows that epoch or cannot be read).
async fn receiver(fence: &Fence, cell: &str, epoch: u64, bound_ms: u64) -> String {
    let read = fence.ownership().read_head(cell);
    match fence.clock().timeout(bound_ms, read).await {
        Some(Ok(Some((h, _)))) if h.epoch == epoch => h.node.unwrap_or_default(),
        _ => String::new(),
    }
}
