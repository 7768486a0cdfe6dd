//! How a claim ends by its holder's hand: close, hand-off and release.

use tracing::info;

use super::{kept_moving, CellClaim, ClaimStatus, Known, LeaveRegister};
use crate::decide::claimed::{CellEnd, Change};
use crate::error::{Error, ErrorKind};
use crate::ownership::check_name;

impl CellClaim {
    /// Stops this claim: waits until no write of it is in flight, then ends it, so from the
    /// moment this returns no write of this claim can be acknowledged any more (later writes
    /// are refused locally). The store still names this node at this epoch: the cell can be
    /// [adopted](crate::LeaseKeeper::adopt) again, handed off or taken over. Nothing is sent.
    pub async fn close(&self) {
        let _quiet = self.known.lock().await;
        self.end(ClaimStatus::Closed);
    }

    /// Hands the cell to node `to`: one compare-and-swap of the head that names `to` at
    /// `epoch + 1`, recording `generation` (the receiver's lease generation, if known) as
    /// the head's writer, so that process may [adopt](crate::LeaseKeeper::adopt) it at that
    /// epoch without taking another. Returns the receiver's epoch.
    ///
    /// No window in which both act: this claim stops first — the write waits for any write
    /// of this claim in flight, and the claim is [closed](Self::close) before the hand-off
    /// is sent — and the receiver can act only once the hand-off landed. If it does not land
    /// (an error that is not ambiguous), the claim stays closed and the store still names
    /// this node at this epoch: adopt it to act again. An ambiguous error may have handed
    /// it off: read the head to tell.
    ///
    /// ```
    /// # fn block(f: impl std::future::Future<Output = ()>) {
    /// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
    /// # }
    /// # block(async {
    /// use std::sync::Arc;
    /// use fence_core::{ClaimStatus, Fence, MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// let a = Fence::builder(store.clone(), "a").build().unwrap().acquire().await.unwrap();
    /// let b = Fence::builder(store, "b").build().unwrap().acquire().await.unwrap();
    /// let cell = a.claim("orders").await.unwrap();
    /// assert_eq!(cell.hand_off("b", Some(&b.generation())).await.unwrap(), 2);
    /// assert_eq!(cell.status(), ClaimStatus::HandedOff { epoch: 2 });
    /// assert_eq!(b.adopt("orders").await.unwrap().epoch(), 2);
    /// # });
    /// ```
    ///
    /// Errors: [`ErrorKind::InvalidInput`] for this node itself or a bad name;
    /// [`ErrorKind::Fenced`] if the lease is not held or the claim is over (superseded,
    /// released, handed off) — nothing is written.
    pub async fn hand_off(&self, to: &str, generation: Option<&str>) -> Result<u64, Error> {
        check_name("node", to)?;
        if to == self.shared.node() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("cell {}: a hand-off names another node", self.cell),
            )
            .not_committed());
        }
        if !self.shared.is_held() {
            return Err(Error::fenced(format!(
                "cell {}: lease not held; hand-off refused locally",
                self.cell
            )));
        }
        self.refuse_if_over()?;
        let Some(next) = crate::decide::next_epoch(self.epoch) else {
            let key = self.shared.fence.ownership.owner_key(&self.cell)?;
            return Err(Error::corrupt(&key, "epoch cannot be raised"));
        };
        let mut slot = self.known.lock().await;
        self.refuse_unless_acting("hand-off")?;
        // Stop acting first: no write of this claim is in flight (we hold its lock, and every
        // write checks the claim's end after taking it), none will be sent from here on, and
        // the claim reads as closed before the hand-off is sent — also if this future is
        // dropped. It stays in the lease's register until the hand-off settles (or is given
        // up), so this lease cannot adopt the cell while the hand-off may still be retried.
        self.stop_acting();
        let _leave = LeaveRegister(self);
        if self.shared.hand_off_begins(&self.cell, self.epoch) {
            self.registered
                .store(false, std::sync::atomic::Ordering::SeqCst);
        }
        let receiver = Change::HandOff {
            to: to.to_owned(),
            generation: generation.map(str::to_owned),
        };
        match self.rewrite(&mut slot, receiver).await {
            Ok(()) => {
                info!(node = self.shared.node(), cell = %self.cell, to, epoch = next, "cell handed off");
                self.end(ClaimStatus::HandedOff { epoch: next });
                Ok(next)
            }
            Err(e) => {
                self.end(ClaimStatus::Closed);
                Err(e)
            }
        }
    }

    /// Releases the cell: an unowned head that keeps the epoch and the data. One request.
    /// Refused ([`ErrorKind::Fenced`], nothing written) once the lease is no longer held:
    /// release cells before the lease.
    pub async fn release(self) -> Result<(), Error> {
        self.release_shared().await
    }

    /// [`release`](Self::release) through a shared reference, for a claim kept in an `Arc`.
    ///
    /// Like a hand-off, the claim stops acting before the release is sent: it waits for any
    /// write of it in flight, then reads as [`ClaimStatus::Closed`] — `is_held()` is false,
    /// `lost()` returns, later writes are refused locally — from the instant the release may
    /// land (another node may own the cell from then on, also while this process is
    /// suspended with the release in flight), and as [`ClaimStatus::Released`] once it
    /// landed. A release that fails leaves the claim closed; the store still names this node
    /// at this epoch unless the error is ambiguous: [adopt](crate::LeaseKeeper::adopt) it to
    /// act again.
    pub async fn release_shared(&self) -> Result<(), Error> {
        if !self.shared.is_held() {
            return Err(Error::fenced(format!(
                "cell {}: lease not held; release refused locally (the cell stays named until taken over)",
                self.cell
            )));
        }
        self.refuse_if_over()?;
        let mut slot = self.known.lock().await;
        self.refuse_unless_acting("release")?;
        self.stop_acting();
        let _leave = LeaveRegister(self);
        match self.rewrite(&mut slot, Change::Release).await {
            Ok(()) => {
                info!(node = self.shared.node(), cell = %self.cell, epoch = self.epoch, "cell released");
                self.end(ClaimStatus::Released);
                Ok(())
            }
            Err(e) => {
                self.end(ClaimStatus::Closed);
                Err(e)
            }
        }
    }

    /// Rewrites the head from what this claim knows of it (a release or a hand-off),
    /// re-reading after a co-writer's move, until the write lands or the cell is found
    /// superseded.
    async fn rewrite(&self, slot: &mut Option<Known>, change: Change) -> Result<(), Error> {
        match self.change(slot, change).await? {
            CellEnd::Written { .. } => Ok(()),
            CellEnd::Superseded {
                epoch,
                maybe_landed,
            } => Err(self.superseded_by(epoch, maybe_landed)),
            CellEnd::Conflict { .. } | CellEnd::KeptMoving => Err(kept_moving(&self.cell)),
        }
    }
}
