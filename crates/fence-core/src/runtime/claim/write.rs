//! The claimed cell's writes: fenced data writes and the head changes a hand-off and a
//! release make, driving `decide::claimed`'s machine.

use bytes::Bytes;
use tracing::warn;

use super::super::bounded;
use super::super::head::HeadWrite;
use super::{kept_moving, moved_on, CellClaim, Known, WriteAck};
use crate::decide::claimed::{Base, CellEnd, CellStep, CellWrite, Change};
use crate::decide::collect::Fate;
use crate::error::Error;
use crate::flaws::sabotaged;
use crate::record::CellPayload;
use crate::stats;
use crate::store::Version;

impl CellClaim {
    /// A fenced write of the cell's data.
    ///
    /// One compare-and-swap of the cell head (plus, for a payload above the inline bound, one
    /// create of a payload object first), guarded on the head version this claim last wrote
    /// or saw at `(self, epoch)`. Applied means we owned the cell at the instant it landed:
    /// the write is acknowledged. A claim at a later epoch rewrote the head, so from then on
    /// this claim's writes are rejected **by the store** ([`ErrorKind::Fenced`](crate::ErrorKind::Fenced)), whatever
    /// this process believes about its lease. An error whose
    /// [`commit`](Error::commit) is ambiguous means the write may have landed; it is never
    /// re-sent on a newer head.
    pub async fn write(&self, payload: impl Into<Bytes>) -> Result<WriteAck, Error> {
        self.write_checked(payload.into(), None).await
    }

    /// A [`write`](Self::write) that lands only over the head version `expected` (a
    /// [`CellData::version`](crate::CellData::version) this claim [read](Self::read)), or with `None` only while the
    /// cell holds no data (`read` answered `None`): a read-modify-write that never builds on
    /// a head it did not see. A head that moved — another write through this claim,
    /// or an ambiguous earlier one landing late — answers [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) with
    /// [`Commit::NotCommitted`](crate::Commit::NotCommitted): the store proved the write did
    /// not land; read again and rebuild. Same costs as `write`, plus one read when the claim
    /// does not know the head `expected` names.
    ///
    /// ```
    /// # fn block(f: impl std::future::Future<Output = ()>) {
    /// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
    /// # }
    /// # block(async {
    /// use std::sync::Arc;
    /// use fence_core::{ErrorKind, Fence, MemoryStore};
    /// let fence = Fence::builder(Arc::new(MemoryStore::new()), "n1").build().unwrap();
    /// let lease = fence.acquire().await.unwrap();
    /// let cell = lease.claim("counter").await.unwrap();
    /// cell.write("1").await.unwrap();
    /// let seen = cell.read().await.unwrap().unwrap();
    /// cell.write("2").await.unwrap(); // the head moves on
    /// let err = cell.write_if(Some(&seen.version), "stale + 1").await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Conflict);
    /// assert!(!err.is_ambiguous());
    /// # });
    /// ```
    pub async fn write_if(
        &self,
        expected: Option<&Version>,
        payload: impl Into<Bytes>,
    ) -> Result<WriteAck, Error> {
        self.write_checked(payload.into(), Some(expected)).await
    }

    async fn write_checked(
        &self,
        payload: Bytes,
        exact: Option<Option<&Version>>,
    ) -> Result<WriteAck, Error> {
        self.refuse_unless_acting("write")?;
        let fence = &self.shared.fence;
        let stored =
            fence
                .ownership
                .store_payload(&self.cell, self.epoch, payload, fence.inline_max);
        // A payload object no head points at commits nothing: its failure leaves the write
        // not made.
        let stored = bounded(&fence.clock, self.shared.request_bound_ms(), stored)
            .await
            .map_err(Error::not_committed)?;
        if sabotaged!(fence.flaws, ReapplyAfterAmbiguity) {
            // Not serialised: the state is copied out and the lock let go at once.
            let known = self.known.lock().await.take();
            let mut slot = known;
            let result = self.write_on(&mut slot, stored, exact).await;
            *self.known.lock().await = slot;
            return result;
        }
        let mut known = self.known.lock().await;
        // The claim may have ended (closed, handed off, released), or the lease run out,
        // while this write waited for the one before it.
        if let Err(e) = self.refuse_unless_acting("write") {
            self.collect_freed(Fate::NotLanded, &stored, &CellPayload::Empty);
            return Err(e);
        }
        self.write_on(&mut known, stored, exact).await
    }

    async fn write_on(
        &self,
        slot: &mut Option<Known>,
        payload: CellPayload,
        exact: Option<Option<&Version>>,
    ) -> Result<WriteAck, Error> {
        let change = Change::Data {
            payload: payload.clone(),
            exact: exact.map(|e| e.cloned()),
        };
        let end = match self.change(slot, change).await {
            Ok(end) => end,
            Err(e) => {
                let fate = Fate::of_failure(e.is_ambiguous());
                self.collect_freed(fate, &payload, &CellPayload::Empty);
                return Err(e);
            }
        };
        let replaced = match &end {
            CellEnd::Written { replaced, .. } => replaced.clone(),
            _ => CellPayload::Empty,
        };
        self.collect_freed(Fate::of_end(&end), &payload, &replaced);
        match end {
            CellEnd::Written { base, .. } => {
                stats::write_acknowledged();
                #[cfg(feature = "sabotage")]
                if sabotaged!(self.shared.fence.flaws, RollbackAcknowledged) {
                    self.shared.fence.wrote(&self.cell, &payload);
                }
                let version = base.version.clone();
                *slot = Some(Known::from(base));
                Ok(WriteAck {
                    epoch: self.epoch,
                    version,
                })
            }
            CellEnd::Conflict { base } => {
                *slot = Some(Known::from(base));
                Err(moved_on(&self.cell))
            }
            CellEnd::Superseded {
                epoch,
                maybe_landed,
            } => {
                warn!(node = self.shared.node(), cell = %self.cell, epoch = self.epoch, found = epoch,
                      "write refused: the epoch was superseded");
                stats::write_fenced();
                Err(self.superseded_by(epoch, maybe_landed))
            }
            CellEnd::KeptMoving => Err(kept_moving(&self.cell)),
        }
    }

    /// Performs the steps of one change of this claim's head, from what the claim knows of
    /// it (taken: if the change is cancelled or gets no verdict, the next one reads the head
    /// instead of trusting a guard the store may have moved past).
    pub(super) async fn change(
        &self,
        slot: &mut Option<Known>,
        change: Change,
    ) -> Result<CellEnd, Error> {
        let fence = &self.shared.fence;
        let own = &fence.ownership;
        let bound = || self.shared.request_bound_ms();
        let known = slot.take().map(Base::from);
        let me = self.shared.node();
        let nonce = own.fresh_nonce();
        let mut core = CellWrite::new(
            me,
            self.epoch,
            &self.shared.generation(),
            nonce,
            change,
            known,
        )
        .with_flaws(fence.flaws);
        let mut step = core.start();
        loop {
            step = match step {
                CellStep::ReadBase => {
                    let read = bounded(&fence.clock, bound(), own.read_head(&self.cell));
                    core.on_read(read.await.map_err(Error::not_committed)?)
                }
                CellStep::Seal { body, write } => {
                    let shell = HeadWrite {
                        own,
                        cell: &self.cell,
                        owner: me,
                        epoch: self.epoch,
                        body: &body,
                        guard: write.guard().clone(),
                        flaws: fence.flaws,
                        clock: &fence.clock,
                    };
                    let settled = shell.drive(write, bound).await?;
                    core.on_settled(body, settled)
                }
                CellStep::Done(end) => return Ok(end),
            };
        }
    }
}
