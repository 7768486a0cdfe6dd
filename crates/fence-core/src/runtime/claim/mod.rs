//! Claims and the fenced writes of a claimed cell, split as `decide/` is: `acquire` (a
//! claim, a resume, an adoption: `decide::claim`), `write` (the claimed cell's writes:
//! `decide::claimed`), `handoff` (close, hand-off, release) and `collect` (payload
//! collection: `decide::collect`). This file holds the claim itself and its standing.

use std::sync::Arc;

use super::keeper::{Reservation, Shared};
use super::{bounded, cell, CellData};

use super::head::superseded;
use crate::decide::claimed::{Base, Refusal, Standing};
use crate::error::{Error, ErrorKind};
use crate::record::{CellHead, CellPayload, Extra};
use crate::store::Version;

mod acquire;
mod collect;
mod handoff;
mod write;

pub(crate) use acquire::{adopt, claim, claim_or_resume};
pub(crate) use collect::collection_budget_ms;

/// A fenced write's acknowledgement: the head is stored at `version`, and the store applied
/// it under a guard on a version that named us at `epoch` — so we owned the cell at the
/// instant the write landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteAck {
    /// The epoch the write was made under.
    pub epoch: u64,
    /// The head's new version.
    pub version: Version,
}

/// What a claim knows of its cell's head: the guard of its next write. Kept small (a held
/// claim costs about 240 B): the head's unknown fields, rarely any, live behind a box.
#[derive(Debug)]
struct Known {
    version: Version,
    payload: CellPayload,
    extra: Option<Box<Extra>>,
}

impl Known {
    fn of(head: CellHead, version: Version) -> Self {
        let extra = (!head.extra.is_empty()).then(|| Box::new(head.extra));
        Known {
            version,
            payload: head.payload,
            extra,
        }
    }
}

impl From<Known> for Base {
    fn from(k: Known) -> Base {
        Base {
            version: k.version,
            payload: k.payload,
            extra: k.extra.map(|e| *e).unwrap_or_default(),
        }
    }
}

impl From<Base> for Known {
    fn from(b: Base) -> Known {
        let extra = (!b.extra.is_empty()).then(|| Box::new(b.extra));
        Known {
            version: b.version,
            payload: b.payload,
            extra,
        }
    }
}

pub use crate::decide::claimed::ClaimStatus;

/// A claimed cell: its epoch, and fenced writes of its head.
///
/// Writes through one claim are serialised (it is `&self`, so they may be issued
/// concurrently): each is settled by evidence before the next is sent, so none is ever
/// applied twice or over a later one. Dropping it ends the claim locally (the store still
/// names this node until it is released or taken over).
#[derive(Debug)]
pub struct CellClaim {
    shared: Arc<Shared>,
    cell: Box<str>,
    epoch: u64,
    /// `None` after a write that got no verdict: the next write reads the head first.
    known: tokio::sync::Mutex<Option<Known>>,
    /// Whether (and how) the claim ended: set once a write found it superseded, it was
    /// closed, or a release or hand-off was about to be sent.
    standing: std::sync::Mutex<Standing>,
    /// Whether this claim still stands in the lease's register of claimed cells (an ended
    /// claim leaves it at once, so the cell can be claimed or adopted again).
    registered: std::sync::atomic::AtomicBool,
}

/// A [`CellClaim::write_if`] whose head moved: the store proved it did not land.
fn moved_on(cell: &str) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "cell {cell}: the head moved past the version this write was made for; nothing written"
        ),
    )
    .not_committed()
}

fn kept_moving(cell: &str) -> Error {
    Error::new(
        ErrorKind::Busy,
        format!("cell {cell}: the head kept moving"),
    )
    .not_committed()
}

impl Drop for CellClaim {
    fn drop(&mut self) {
        self.leave_register();
    }
}

/// Takes a claim out of its lease's register when dropped: when its hand-off returns, or is
/// given up by its caller.
struct LeaveRegister<'a>(&'a CellClaim);

impl Drop for LeaveRegister<'_> {
    fn drop(&mut self) {
        self.0.leave_register();
    }
}

impl CellClaim {
    fn new(
        shared: &Arc<Shared>,
        slot: Reservation<'_>,
        cell: &str,
        epoch: u64,
        known: Option<Known>,
    ) -> Self {
        slot.keep(epoch);
        CellClaim {
            shared: shared.clone(),
            cell: cell.into(),
            epoch,
            known: tokio::sync::Mutex::new(known),
            standing: std::sync::Mutex::new(Standing::default()),
            registered: std::sync::atomic::AtomicBool::new(true),
        }
    }

    fn leave_register(&self) {
        use std::sync::atomic::Ordering;
        if self.registered.swap(false, Ordering::SeqCst) {
            self.shared.unregister(&self.cell, self.epoch);
        }
    }

    fn standing(&self) -> std::sync::MutexGuard<'_, Standing> {
        self.standing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the claim as `how` ([`Standing::end`]) and takes it out of the lease's register.
    fn end(&self, how: ClaimStatus) {
        self.standing().end(how);
        self.leave_register();
        self.shared.claim_ended();
    }

    /// Stops the claim acting without leaving the lease's register: a release or a hand-off
    /// is about to be sent ([`Standing::stop_acting`]).
    fn stop_acting(&self) {
        self.standing().stop_acting();
        self.shared.claim_ended();
    }

    fn ended(&self) -> Option<ClaimStatus> {
        self.standing().ended()
    }

    /// The cell.
    pub fn cell(&self) -> &str {
        &self.cell
    }

    /// The epoch this claim holds.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The fence of the lease this claim belongs to (its store and node): what a fenced
    /// read-modify-write at this claim's epoch goes through
    /// ([`keymap::put`](crate::keymap::put), [`update_cell`](crate::update_cell)).
    pub fn fence(&self) -> &super::Fence {
        &self.shared.fence
    }

    /// The bound of one request made for this claim now: the attempt timeout for the
    /// lease's remaining authority (half of it, within the fence's attempt timeouts), as
    /// every write of the claim is bounded. A request made with less authority left gets
    /// less time, so none outlives the lease by much.
    pub fn request_bound(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.shared.request_bound_ms())
    }

    /// Whether this claim may act now: the node lease is held (judged now, on both the
    /// monotonic and the wall clock) and no write has found the cell superseded. A local check; the store is the
    /// real fence — a claim superseded since its last write reads as held until its next
    /// write or the lease's loss says otherwise.
    pub fn is_held(&self) -> bool {
        self.status() == ClaimStatus::Held
    }

    /// This claim's state, as far as this process knows.
    pub fn status(&self) -> ClaimStatus {
        let standing = *self.standing();
        standing.status(self.shared.is_held())
    }

    /// Waits until the claim is over as far as this process can tell — the lease is lost
    /// (fenced, expired, released) or a write found the cell superseded — and says how.
    /// Cancellation-safe.
    pub async fn lost(&self) -> ClaimStatus {
        loop {
            let ended = self.shared.claim_ended_signal();
            let status = self.status();
            if status != ClaimStatus::Held {
                return status;
            }
            tokio::select! {
                _ = ended => {}
                _ = self.shared.lost() => {}
            }
        }
    }

    /// Ends this claim as superseded by `epoch` and says so.
    fn superseded_by(&self, epoch: u64, maybe_landed: bool) -> Error {
        self.end(ClaimStatus::Superseded { epoch });
        superseded(&self.cell, self.epoch, epoch, maybe_landed)
    }

    /// Refuses once the claim has ended in any way (closed included): nothing more is sent
    /// through it. Checked again after taking the write lock, so nothing queued behind a
    /// `close`, a hand-off or a release goes out either.
    fn refuse_if_over(&self) -> Result<(), Error> {
        match self.ended() {
            None => Ok(()),
            Some(how) => Err(Error::fenced(format!(
                "cell {}: the claim has ended ({how:?}); refused locally, nothing written",
                self.cell
            ))),
        }
    }

    /// [`refuse_if_over`](Self::refuse_if_over), and the lease judged now: checked again
    /// once the claim's write lock is taken, so a request queued behind a slow one is never
    /// sent after the lease's authority ran out meanwhile.
    fn refuse_unless_acting(&self, what: &str) -> Result<(), Error> {
        let standing = *self.standing();
        match standing.admit(self.shared.is_held(), self.shared.fence.flaws) {
            Ok(()) => Ok(()),
            Err(Refusal::LeaseNotHeld) => Err(Error::fenced(format!(
                "cell {}: lease not held; {what} refused locally, nothing written",
                self.cell
            ))),
            Err(Refusal::ClaimEnded) => self.refuse_if_over(),
        }
    }

    /// Reads the cell's data, bounded by the fence's longest attempt timeout (default
    /// 2.5 s; [`ErrorKind::Timeout`] when no answer came).
    pub async fn read(&self) -> Result<Option<CellData>, Error> {
        let fence = &self.shared.fence;
        let read = cell::read_cell(&fence.ownership, &self.cell);
        bounded(&fence.clock, fence.cfg.attempt_max_ms, read).await
    }
}
