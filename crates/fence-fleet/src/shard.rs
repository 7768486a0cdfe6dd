//! A cell this node holds through the fleet, and the events of a fleet.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use fence_core::runtime::{CellClaim, CellData, ClaimStatus, WriteAck};
use fence_core::Error;
use tokio::sync::{mpsc, watch};

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
    /// Handed to `to`, which holds it at `epoch` from now on: told only once the hand-off
    /// landed.
    HandedOff {
        /// The receiver. After a hand-off through the shard's own claim
        /// ([`CellClaim::hand_off`]) the fleet reads it back from the head (one request); it
        /// is empty if that read failed.
        to: String,
        /// The receiver's epoch.
        epoch: u64,
    },
    /// Stopped without a write of this node's that ended it — the fleet stopped (drained or
    /// dropped), a hand-off failed, or the claim was closed: the store still names this node
    /// until the cell is taken over or resumed (the fleet resumes it after a failed
    /// hand-off, announcing a new `Started`).
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
pub enum FleetEvent {
    /// This node holds `shard` now: act on it until [`Shard::lost`] fires.
    Started {
        /// The cell.
        shard: Shard,
        /// Whether it was resumed at the epoch the store already named it with (a hand-off to
        /// this node, or a cell of this node's earlier process), rather than claimed anew.
        resumed: bool,
    },
    /// This node no longer holds `cell` (the shard's [`lost`](Shard::lost) has fired).
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
    LeaseAcquired {
        /// The lease generation.
        generation: String,
    },
}

/// How a shard ends: its one final reason, set once, and announced once as
/// [`FleetEvent::Stopped`] by whoever sets it.
#[derive(Debug)]
pub(crate) struct End {
    reason: watch::Sender<Option<StopReason>>,
    /// Set when the fleet begins to stop the shard (a hand-off, a release, a close): it no
    /// longer acts, though why it ends may not be known yet.
    stopping: AtomicBool,
    cell: String,
    epoch: u64,
    events: mpsc::UnboundedSender<FleetEvent>,
}

impl End {
    /// Stops acting now; the reason comes later, through [`finish`](Self::finish).
    pub(crate) fn stop_acting(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Sets the final reason and announces it, unless one was set already; returns whether
    /// this call set it.
    pub(crate) fn finish(&self, reason: StopReason) -> bool {
        self.stop_acting();
        let set = self.reason.send_if_modified(|r| {
            if r.is_some() {
                return false;
            }
            *r = Some(reason.clone());
            true
        });
        if set {
            let _ = self.events.send(FleetEvent::Stopped {
                cell: self.cell.clone(),
                epoch: self.epoch,
                reason,
            });
        }
        set
    }

    pub(crate) fn reason(&self) -> Option<StopReason> {
        self.reason.borrow().clone()
    }
}

/// A cell this node holds: the claim, and a cancellation-safe watch of its end.
///
/// Cloning shares the claim. When the fleet stops a shard (a hand-off, a drain, a lost
/// lease, a head found superseded), [`is_held`](Self::is_held) turns false first — writes
/// through the shard are refused from then on — and [`lost`](Self::lost) answers once the
/// reason is known: a hand-off is told as [`StopReason::HandedOff`] only once it landed.
#[derive(Clone, Debug)]
pub struct Shard {
    pub(crate) claim: Arc<CellClaim>,
    pub(crate) end: Arc<End>,
}

impl Shard {
    pub(crate) fn new(claim: CellClaim, events: mpsc::UnboundedSender<FleetEvent>) -> Shard {
        let end = End {
            reason: watch::channel(None).0,
            stopping: AtomicBool::new(false),
            cell: claim.cell().to_owned(),
            epoch: claim.epoch(),
            events,
        };
        Shard {
            claim: Arc::new(claim),
            end: Arc::new(end),
        }
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

    /// Why the shard stopped, once that is known: the reason [`lost`](Self::lost) answers
    /// and the [`FleetEvent::Stopped`] event told.
    pub fn ended(&self) -> Option<StopReason> {
        self.end.reason()
    }

    /// Whether this node may act on the cell now: the fleet has not begun to stop it and the
    /// claim is held (see [`CellClaim::is_held`]).
    pub fn is_held(&self) -> bool {
        !self.end.is_stopping() && self.end.reason().is_none() && self.claim.is_held()
    }

    /// Waits until the shard is gone — the lease lost, a write or a head poll found the cell
    /// superseded, or the fleet handed it off, released or closed it — and says why: the same
    /// reason as the cell's [`FleetEvent::Stopped`], told only once it is known (a hand-off
    /// whose outcome is not known yet is waited for). Cancellation-safe; returns at once once
    /// gone.
    pub async fn lost(&self) -> StopReason {
        let mut rx = self.end.reason.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            // The sender lives as long as this shard: `changed` only fails if it is dropped.
            if rx.changed().await.is_err() {
                return StopReason::Closed;
            }
        }
    }

    /// A fenced write of the cell's data ([`CellClaim::write`]); refused once the fleet has
    /// begun to stop the shard.
    pub async fn write(&self, payload: impl Into<Bytes>) -> Result<WriteAck, Error> {
        if self.end.is_stopping() || self.end.reason().is_some() {
            return Err(Error::fenced(format!(
                "cell {}: the shard was stopped; write refused locally",
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
