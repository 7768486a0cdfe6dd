//! A cell this node holds through the fleet, and the events of a fleet.

use std::sync::Arc;

use bytes::Bytes;
use fence_core::runtime::{CellClaim, CellData, ClaimStatus, WriteAck};
use fence_core::Error;
use tokio::sync::watch;

/// Why this node stopped holding a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The node lease was lost (fenced, expired): the cell is taken over after the usual
    /// observation, or resumed by this node if nobody did.
    LeaseLost,
    /// A write, or a read of the head, found the cell at a later epoch or another owner.
    Superseded {
        /// The epoch found (0 when the head was gone).
        epoch: u64,
    },
    /// Released (an unowned head at the same epoch), by a drain or on request.
    Released,
    /// Handed to `to`, which holds it at `epoch` from now on.
    HandedOff {
        /// The receiver. After a hand-off through the shard's own claim
        /// ([`CellClaim::hand_off`]) the fleet reads it back from the head (one request),
        /// and it is empty until then, or if that read fails.
        to: String,
        /// The receiver's epoch.
        epoch: u64,
    },
    /// The fleet stopped (drained or dropped) without writing anything for this cell: the
    /// store still names this node until it is taken over or resumed.
    Closed,
}

impl StopReason {
    pub(crate) fn of(status: ClaimStatus) -> Option<StopReason> {
        match status {
            ClaimStatus::Held => None,
            ClaimStatus::Superseded { epoch } => Some(StopReason::Superseded { epoch }),
            ClaimStatus::Released => Some(StopReason::Released),
            ClaimStatus::LeaseLost => Some(StopReason::LeaseLost),
            ClaimStatus::HandedOff { epoch } => Some(StopReason::HandedOff {
                to: String::new(),
                epoch,
            }),
            ClaimStatus::Closed => Some(StopReason::Closed),
        }
    }
}

/// What a fleet tells its application, cell by cell.
#[derive(Debug)]
pub enum CellEvent {
    /// This node holds `shard` now: act on it until [`Shard::gone`] fires.
    Started {
        /// The cell.
        shard: Shard,
        /// Whether it was resumed at the epoch the store already named it with (a hand-off to
        /// this node, or a cell of this node's earlier process), rather than claimed anew.
        resumed: bool,
    },
    /// This node no longer holds `cell` (the shard's [`gone`](Shard::gone) has fired).
    Stopped {
        /// The cell.
        cell: String,
        /// The epoch it was held at.
        epoch: u64,
        /// Why.
        reason: StopReason,
    },
    /// The owner this node knows `cell` has changed: a read of its head found another owner,
    /// or this node claimed, resumed, handed off or released it (then after its own
    /// `Started` / `Stopped`). The last `NewOwner` of a cell always names the last owner
    /// this node knows of, this node included (`None`: released).
    NewOwner {
        /// The cell.
        cell: String,
        /// The owner, `None` when released.
        owner: Option<String>,
        /// The head's epoch.
        epoch: u64,
    },
    /// This process acquired the node lease under `generation`: persist it to restart with
    /// [`FleetBuilder::predecessor`](crate::FleetBuilder::predecessor).
    Acquired {
        /// The lease generation.
        generation: String,
    },
}

/// A cell this node holds: the claim, and a cancellation-safe watch of its end.
///
/// Cloning shares the claim. The fleet stops a shard (a hand-off, a drain, a lost lease, a
/// head found superseded) by firing [`gone`](Self::gone) first; writes through a stopped
/// shard are refused.
#[derive(Clone, Debug)]
pub struct Shard {
    pub(crate) claim: Arc<CellClaim>,
    pub(crate) stop: watch::Receiver<Option<StopReason>>,
}

impl Shard {
    pub(crate) fn new(claim: CellClaim) -> (Shard, watch::Sender<Option<StopReason>>) {
        let (tx, rx) = watch::channel(None);
        (
            Shard {
                claim: Arc::new(claim),
                stop: rx,
            },
            tx,
        )
    }

    /// The cell.
    pub fn cell(&self) -> &str {
        self.claim.cell()
    }

    /// The epoch it is held at.
    pub fn epoch(&self) -> u64 {
        self.claim.epoch()
    }

    /// The claim underneath.
    pub fn claim(&self) -> &Arc<CellClaim> {
        &self.claim
    }

    /// Why the shard stopped, if it has (as far as this process knows now).
    pub fn stopped(&self) -> Option<StopReason> {
        if let Some(r) = self.stop.borrow().clone() {
            return Some(r);
        }
        StopReason::of(self.claim.status())
    }

    /// Whether this node may act on the cell now: the fleet has not stopped it and the claim
    /// is held (see [`CellClaim::is_held`]).
    pub fn is_held(&self) -> bool {
        self.stopped().is_none()
    }

    /// Waits until the shard is gone — the lease lost, a write or a head poll found the cell
    /// superseded, or the fleet handed it off, released or closed it — and says why.
    /// Cancellation-safe; returns at once once gone.
    pub async fn gone(&self) -> StopReason {
        let mut rx = self.stop.clone();
        loop {
            if let Some(r) = self.stop.borrow().clone() {
                return r;
            }
            let ended = StopReason::of(self.claim.status());
            // A hand-off through the claim itself: wait for the fleet to name the receiver.
            let unnamed = matches!(&ended, Some(StopReason::HandedOff { to, .. }) if to.is_empty());
            if let Some(r) = ended.clone().filter(|_| !unnamed) {
                return r;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The fleet is gone: only the claim can still tell.
                        return match ended {
                            Some(r) => r,
                            None => StopReason::of(self.claim.lost().await).unwrap_or(StopReason::Closed),
                        };
                    }
                }
                _ = self.claim.lost(), if ended.is_none() => {}
            }
        }
    }

    /// A fenced write of the cell's data ([`CellClaim::write`]); refused once the shard is
    /// stopped.
    pub async fn write(&self, payload: impl Into<Bytes>) -> Result<WriteAck, Error> {
        if let Some(r) = self.stop.borrow().clone() {
            return Err(Error::fenced(format!(
                "cell {}: the shard was stopped ({r:?}); write refused locally",
                self.cell()
            )));
        }
        self.claim.write(payload).await
    }

    /// Reads the cell's data.
    pub async fn read(&self) -> Result<Option<CellData>, Error> {
        self.claim.read().await
    }
}
