//! Performing the core's effects: the store's reads and writes, the claims, the shards and
//! the events. Each effect that has an answer returns it, for the core.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use fence_core::runtime::{CellClaim, Fence};
use fence_core::{Commit, Error, ErrorKind};
use futures::StreamExt;
use tracing::{debug, info, warn};

use super::tasks::watch_claim;
use super::{Held, Run};
use crate::assignment::{self, Assignment, Notice};
use crate::decide::{AdoptFor, Claimed, FleetEffect, FleetInput, HandOffOutcome, Read, Seen};
use crate::fleet::lock;
use crate::follow::read_heads;
use crate::leader::{LeaderIo, LEADER_CELL};
use crate::shard::{FleetEvent, Shard, StopReason};
use crate::watch::Duty;

impl Run {
    /// Performs `effect`; its answer, if it has one.
    pub(super) async fn perform(&mut self, effect: FleetEffect) -> Option<FleetInput> {
        match effect {
            FleetEffect::ReadRecord => Some(FleetInput::Record(self.read_record().await)),
            FleetEffect::WriteOwn { leaving } => {
                self.write_own(leaving).await;
                None
            }
            FleetEffect::ReadHeads { cells, purpose } => {
                let heads = self.read_heads(cells).await;
                Some(FleetInput::Heads { purpose, heads })
            }
            FleetEffect::Poll { cells } => {
                self.poll(cells);
                None
            }
            FleetEffect::Claim { cells } => Some(FleetInput::Claimed(self.claim(cells).await)),
            FleetEffect::Adopt { cells, purpose } => {
                let results = self.adopt(cells, purpose).await;
                Some(FleetInput::Adopted { purpose, results })
            }
            FleetEffect::ReadReceivers { nodes } => {
                Some(FleetInput::Receivers(self.receivers(nodes).await))
            }
            FleetEffect::HandOff { jobs, .. } => {
                Some(FleetInput::HandedOff(self.hand_off(jobs).await))
            }
            FleetEffect::Release { cells } => Some(FleetInput::Released(self.release(cells).await)),
            FleetEffect::ObserveLease { node } => {
                Some(FleetInput::LeaseObserved(self.observe(&node).await))
            }
            FleetEffect::ClaimLeadership => {
                Some(FleetInput::LeadershipClaimed(self.claim_leadership().await))
            }
            FleetEffect::Join { leader, notice } => {
                Some(FleetInput::Joined(self.notify(&leader, notice).await))
            }
            FleetEffect::HandLeadership {
                to,
                generation,
                notice,
            } => Some(FleetInput::LeadershipHanded(
                self.hand_leadership(&to, &generation, notice).await,
            )),
            FleetEffect::Lead(e) => {
                let io = LeaderIo {
                    fence: &self.fence,
                    filter: self.s.filter.as_ref(),
                    bound_ms: self.bound_ms(),
                    claim: self.leadership.as_ref(),
                };
                Some(FleetInput::Lead(io.perform(e).await))
            }
            FleetEffect::Bury(d) => {
                let buried = self.tombstoner.bury(&d.node, &d.seen, &d.heirs, false, "");
                Some(FleetInput::Inherits(
                    buried.await.map(|(_, mine)| mine).unwrap_or_default(),
                ))
            }
            FleetEffect::Wait { ms } => {
                self.fence.clock().sleep(Duration::from_millis(ms)).await;
                Some(FleetInput::Waited)
            }
            other => {
                self.apply(other).await;
                None
            }
        }
    }

    /// The effects without an answer: shards, events, notices, the watcher's duty.
    async fn apply(&mut self, effect: FleetEffect) {
        match effect {
            FleetEffect::Close { cells, reason } => self.close(cells, reason).await,
            FleetEffect::Install { cell, resumed } => self.install(&cell, resumed),
            FleetEffect::Remove { cell, reason } => {
                self.remove(&cell, reason);
            }
            FleetEffect::Unsettle { cell } => {
                if let Some(h) = self.remove(&cell, None) {
                    warn!(node = %self.inner.node, cell, "hand-off unsettled");
                    self.unsettled.insert(cell, h.shard.end.clone());
                }
            }
            FleetEffect::Finish { cell, reason } => {
                if let Some(end) = self.unsettled.remove(&cell) {
                    end.finish(reason);
                }
            }
            FleetEffect::NewOwner { cell, owner, epoch } => {
                self.emit(FleetEvent::NewOwner { cell, owner, epoch })
            }
            FleetEffect::Post { to } => self.post(to).await,
            FleetEffect::Duty { watched, leader } => {
                let duty = Duty { watched, leader };
                self.duty
                    .send_if_modified(|d| std::mem::replace(d, duty.clone()) != duty);
            }
            FleetEffect::Reply(r) => {
                if let Some(reply) = self.reply.take() {
                    let _ = reply.send(r);
                }
            }
            FleetEffect::CloseLeadership => {
                if let Some(l) = self.leadership.take() {
                    warn!(node = %self.inner.node, "leadership superseded or over");
                    l.close().await;
                }
            }
            FleetEffect::ReleaseLeadership => {
                if let Some(l) = self.leadership.take() {
                    let _ = l.release_shared().await;
                }
            }
            FleetEffect::WakeAt(at) => self.wake = self.wake_at(at),
            _ => {}
        }
    }

    async fn read_record(&self) -> Read<Assignment> {
        let me = &self.inner.node;
        match assignment::read(&self.fence, me, self.bound_ms()).await {
            Ok(Some((a, _))) => Read::Found(a),
            Ok(None) => Read::Absent,
            Err(e) => {
                debug!(node = %me, error = %e, "assignment read failed");
                Read::Failed
            }
        }
    }

    /// Writes this node's own part of its record: its generation, and whether it is leaving.
    async fn write_own(&self, leaving: bool) {
        let generation = self.lease.generation();
        let own = |a: &mut Assignment| {
            let changed = a.generation != generation || a.leaving != leaving;
            a.generation = generation.clone();
            a.leaving = leaving;
            changed
        };
        let me = &self.inner.node;
        let r = assignment::edit(&self.fence, me, self.bound_ms(), true, own).await;
        if let Err(e) = &r {
            debug!(node = %me, error = %e, "own record not written");
        }
    }

    /// Reads the heads of `cells`; failed reads are left out.
    async fn read_heads(&self, cells: Vec<String>) -> Vec<(String, Seen)> {
        let heads = read_heads(&self.fence, cells, self.bound_ms(), self.s.concurrency).await;
        let read = heads.into_iter().filter_map(|(cell, head)| match head {
            Ok(h) => Some((cell, seen_of(h.as_ref()))),
            Err(e) => {
                debug!(cell, error = %e, "head read failed");
                None
            }
        });
        read.collect()
    }

    /// Starts reading the heads of `cells` in the background.
    fn poll(&self, cells: Vec<String>) {
        let (fence, bound, n) = (self.fence.clone(), self.bound_ms(), self.s.concurrency);
        let tx = self.polled_tx.clone();
        tokio::spawn(async move {
            let heads = read_heads(&fence, cells, bound, n).await;
            let read = heads
                .into_iter()
                .filter_map(|(c, h)| Some((c, seen_of(h.ok()?.as_ref()))));
            let _ = tx.send(read.collect());
        });
    }

    /// Claims `cells` (or resumes those a vouched generation wrote), `concurrency` at once;
    /// the claims are kept for their shards.
    async fn claim(&mut self, cells: Vec<String>) -> Vec<(String, Claimed)> {
        let vouched: Vec<String> = self.core.vouched().cloned().collect();
        let results = self
            .lease
            .claim_or_resume_many(cells, self.s.concurrency, &vouched)
            .await;
        let mut out = Vec::new();
        for (cell, r) in results {
            let claimed = match r {
                Ok((claim, resumed)) => {
                    let epoch = claim.epoch();
                    self.claims.insert(cell.clone(), claim);
                    Claimed::Held { epoch, resumed }
                }
                Err(e) if e.kind() == ErrorKind::Busy => {
                    debug!(node = %self.inner.node, cell, error = %e, "not taken yet");
                    Claimed::Busy
                }
                Err(e) => {
                    warn!(node = %self.inner.node, cell, error = %e, "claim failed");
                    Claimed::Failed
                }
            };
            out.push((cell, claimed));
        }
        out
    }

    /// Adopts `cells` (they name this node), `concurrency` at a time; a failure says
    /// whether the lease was still held.
    async fn adopt(
        &mut self,
        cells: Vec<String>,
        purpose: AdoptFor,
    ) -> Vec<(String, Result<u64, bool>)> {
        let lease = &self.lease;
        let results: Vec<(String, Result<CellClaim, Error>)> = futures::stream::iter(cells)
            .map(|cell| async move {
                let r = lease.adopt(&cell).await;
                (cell, r)
            })
            .buffer_unordered(self.s.concurrency)
            .collect()
            .await;
        let mut out = Vec::new();
        for (cell, r) in results {
            match r {
                Ok(claim) => {
                    let epoch = claim.epoch();
                    self.claims.insert(cell.clone(), claim);
                    out.push((cell, Ok(epoch)));
                }
                Err(e) => {
                    debug!(node = %self.inner.node, cell, ?purpose, error = %e, "not adopted");
                    out.push((cell, Err(self.lease.is_held())));
                }
            }
        }
        out
    }

    /// Starts the shard of `cell` from the claim just made.
    fn install(&mut self, cell: &str, resumed: bool) {
        let Some(claim) = self.claims.remove(cell) else {
            return;
        };
        let shard = Shard::new(claim, self.events.clone());
        let watcher = tokio::spawn(watch_claim(
            shard.clone(),
            self.fence.clone(),
            self.bound_ms(),
            self.lost_tx.clone(),
        ));
        info!(node = %self.inner.node, cell, epoch = shard.epoch(), resumed, "cell started");
        lock(&self.inner.shards).insert(cell.to_owned(), shard.clone());
        let held = Held {
            shard: shard.clone(),
            watcher,
        };
        self.held.insert(cell.to_owned(), held);
        self.emit(FleetEvent::Started { shard, resumed });
    }

    /// Forgets `cell`'s shard; tells `reason` unless a reason was told already.
    fn remove(&mut self, cell: &str, reason: Option<StopReason>) -> Option<Held> {
        let h = self.held.remove(cell)?;
        h.watcher.abort();
        h.shard.end.stop_acting();
        lock(&self.inner.shards).remove(cell);
        if let Some(r) = reason {
            info!(node = %self.inner.node, cell, epoch = h.shard.epoch(), reason = ?r, "cell stopped");
            h.shard.end.finish(r);
        }
        Some(h)
    }

    /// Stops acting on `cells`, closes their claims (once no write is in flight), and
    /// stops them for `reason`.
    async fn close(&mut self, cells: Vec<String>, reason: StopReason) {
        for cell in cells {
            if let Some(h) = self.held.get(&cell) {
                h.shard.end.stop_acting();
                h.shard.claim.close().await;
            }
            self.remove(&cell, Some(reason.clone()));
        }
    }

    /// The lease generation of each receiver that takes cells now — its record names one
    /// and it is not leaving — by one read of its record.
    async fn receivers(&self, nodes: BTreeSet<String>) -> BTreeMap<String, String> {
        let (fence, bound) = (&self.fence, self.bound_ms());
        let read: Vec<(String, Option<String>)> = futures::stream::iter(nodes)
            .map(|n| async move {
                let a = assignment::read(fence, &n, bound).await;
                let ready = a.ok().flatten().map(|(a, _)| a);
                let generation = ready.filter(|a| !a.leaving && !a.generation.is_empty());
                (n, generation.map(|a| a.generation))
            })
            .buffer_unordered(self.s.concurrency)
            .collect()
            .await;
        read.into_iter()
            .filter_map(|(n, g)| g.map(|g| (n, g)))
            .collect()
    }

    /// Stops acting on each cell, then hands it to its receiver, `concurrency` at a time.
    async fn hand_off(
        &mut self,
        jobs: Vec<(String, String, String)>,
    ) -> Vec<(String, String, HandOffOutcome)> {
        let mut sends = Vec::new();
        for (cell, to, generation) in jobs {
            let Some(h) = self.held.get(&cell) else {
                continue;
            };
            // The application stops acting first; why, it learns once known.
            h.shard.end.stop_acting();
            sends.push((cell, to, generation, h.shard.claim.clone()));
        }
        let results: Vec<(String, String, Result<u64, Error>)> = futures::stream::iter(sends)
            .map(|(cell, to, generation, claim)| async move {
                let r = claim.hand_off(&to, Some(&generation)).await;
                (cell, to, r)
            })
            .buffer_unordered(self.s.concurrency)
            .collect()
            .await;
        let lease_held = self.lease.is_held();
        let outcome = |r: Result<u64, Error>| match r {
            Ok(epoch) => HandOffOutcome::Landed(epoch),
            Err(error) if error.commit() == Commit::NotCommitted => {
                HandOffOutcome::NotMade { lease_held, error }
            }
            Err(error) => HandOffOutcome::Unsettled { error },
        };
        let mut out = Vec::new();
        for (cell, to, r) in results {
            match &r {
                Ok(epoch) => info!(node = %self.inner.node, cell, to, epoch, "cell handed off"),
                Err(e) => warn!(node = %self.inner.node, cell, to, error = %e, "hand-off not made"),
            }
            out.push((cell, to, outcome(r)));
        }
        out
    }

    /// Stops acting on `cells` and releases them, `concurrency` at a time.
    async fn release(&mut self, cells: Vec<String>) -> Vec<(String, Result<(), bool>)> {
        let shards: Vec<Shard> = cells
            .iter()
            .filter_map(|c| self.held.get(c).map(|h| h.shard.clone()))
            .collect();
        for s in &shards {
            s.end.stop_acting();
        }
        let results: Vec<(String, Result<(), Error>)> = futures::stream::iter(shards)
            .map(|s| async move { (s.cell().to_owned(), s.claim.release_shared().await) })
            .buffer_unordered(self.s.concurrency)
            .collect()
            .await;
        let lease_held = self.lease.is_held();
        let mut out = Vec::new();
        for (cell, r) in results {
            if let Err(e) = &r {
                warn!(node = %self.inner.node, cell, error = %e, "release failed");
            }
            out.push((cell, r.map_err(|_| lease_held)));
        }
        out
    }

    /// `node`'s lease by one read, as this node's observer sees it.
    async fn observe(&self, node: &str) -> Option<fence_core::decide::Observation> {
        let observer = self.fence.observer();
        observer
            .observe(&self.fence, node, self.bound_ms())
            .await
            .ok()
    }

    /// Claims (or resumes) the leadership cell.
    async fn claim_leadership(&mut self) -> Claimed {
        let vouched: Vec<String> = self.core.vouched().cloned().collect();
        match self.lease.claim_or_resume(LEADER_CELL, &vouched).await {
            Ok((claim, resumed)) => {
                let epoch = claim.epoch();
                info!(node = %self.inner.node, term = epoch, "leading the fleet");
                self.leadership = Some(Arc::new(claim));
                Claimed::Held { epoch, resumed }
            }
            Err(e) if e.kind() == ErrorKind::Busy => Claimed::Busy,
            Err(e) => {
                debug!(node = %self.inner.node, error = %e, "leadership not checked");
                Claimed::Failed
            }
        }
    }

    /// Hands the leadership to `to` and tells it; whether it landed.
    async fn hand_leadership(&mut self, to: &str, generation: &str, notice: Notice) -> bool {
        let Some(l) = self.leadership.take() else {
            return false;
        };
        if l.hand_off(to, Some(generation)).await.is_err() {
            return false;
        }
        self.notify(to, notice).await;
        true
    }

    /// Posts one notice to `to`; whether it landed.
    async fn notify(&self, to: &str, notice: Notice) -> bool {
        let oldest = self
            .fence
            .clock()
            .wall_ms()
            .saturating_sub(self.s.timing.notices_ms);
        let r = assignment::notify(&self.fence, to, vec![notice], oldest, self.bound_ms());
        r.await.is_ok()
    }

    /// Posts notices, one edit per recipient, `concurrency` at a time.
    async fn post(&self, by_node: BTreeMap<String, Vec<Notice>>) {
        let oldest = self
            .fence
            .clock()
            .wall_ms()
            .saturating_sub(self.s.timing.notices_ms);
        let (fence, bound) = (&self.fence, self.bound_ms());
        let sent: Vec<(String, Result<(), Error>)> = futures::stream::iter(by_node)
            .map(|(to, notices)| async move {
                let r = assignment::notify(fence, &to, notices, oldest, bound).await;
                (to, r)
            })
            .buffer_unordered(self.s.concurrency)
            .collect()
            .await;
        for (to, r) in sent {
            if let Err(e) = r {
                debug!(node = %self.inner.node, to, error = %e, "notice not posted");
            }
        }
    }
}

/// The owner and epoch a head names.
fn seen_of(head: Option<&fence_core::record::CellHead>) -> Seen {
    Seen {
        owner: head.and_then(|h| h.node.clone()),
        epoch: head.map_or(0, |h| h.epoch),
    }
}

/// Whether the store's lease record of this node is the released record (`expires_ms` 0) of
/// `generation`: one read, bounded by `bound_ms`.
pub(super) async fn shows_released(fence: &Fence, generation: &str, bound_ms: u64) -> bool {
    let own = fence.ownership();
    let read = own.read_node_lease(own.node());
    match fence.clock().timeout(bound_ms, read).await {
        Some(Ok(Some(l))) => l.record.generation == generation && l.record.expires_ms == 0,
        _ => false,
    }
}
