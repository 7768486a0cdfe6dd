//! Giving cells away: hand-offs (told only once their outcome is known), releases, answers to
//! asks, and leaving the fleet.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fence_core::decide::Liveness;
use fence_core::runtime::Fence;
use fence_core::Error;
use futures::StreamExt;
use tracing::{debug, info, warn};

use super::{invalid, now_of, Run, Seen, Unsettled};
use crate::assignment::{self, Notice, NoticeKind};
use crate::fleet::Drained;
use crate::leader::LEADER_CELL;
use crate::shard::{Shard, StopReason};

impl Run {
    // ----- giving cells away ---------------------------------------------------------------

    /// Hands off every held cell the placement moved elsewhere, once held long enough;
    /// releases a cell placed elsewhere with no receiver named, once held a `scan`.
    pub(super) async fn shed(&mut self) {
        if self.mine.term == 0 {
            return;
        }
        let now = self.now();
        let me = self.me();
        let mut moves = Vec::new();
        let mut release = Vec::new();
        for (c, h) in &self.held {
            let held_for = now.saturating_sub(h.since_mono);
            if self.mine.targets.contains(c) || held_for < self.s.min_hold_ms {
                continue;
            }
            match self.mine.moves.get(c).filter(|to| **to != me) {
                Some(to) => moves.push((c.clone(), to.clone())),
                None if held_for >= self.s.scan_ms.max(self.s.min_hold_ms) => {
                    release.push(c.clone())
                }
                None => {}
            }
        }
        self.hand_off_all(moves, false).await;
        self.release_cells(release).await;
    }

    /// Answers asks for cells: one held (or named this node's) that is not this node's by
    /// the placement is handed to the node that asked.
    pub(super) async fn answer_asks(&mut self) {
        let asks = std::mem::take(&mut self.asked);
        let mut moves = Vec::new();
        for (cell, asker) in asks {
            if self.mine.targets.contains(&cell) || asker == self.inner.node {
                continue;
            }
            if !self.held.contains_key(&cell) {
                self.adopt_all(vec![cell.clone()]).await;
            }
            if self.held.contains_key(&cell) {
                moves.push((cell, asker));
            }
        }
        self.hand_off_all(moves, true).await;
    }

    pub(super) async fn hand_off_asked(&mut self, cell: &str, to: &str) -> Result<u64, Error> {
        if !self.held.contains_key(cell) {
            return Err(invalid(format!("cell {cell} is not held by this node")));
        }
        if to == self.inner.node || !self.is_live(to).await {
            return Err(invalid(format!("{to} is not another live member")));
        }
        let mut done = self
            .hand_off_all(vec![(cell.to_owned(), to.to_owned())], true)
            .await;
        done.pop()
            .map_or_else(|| Err(invalid("no hand-off made".into())), |(_, r)| r)
    }

    /// Whether `node`'s lease is live by one read (judged by the observation rule).
    async fn is_live(&self, node: &str) -> bool {
        let observer = self.fence.observer();
        match observer.observe(&self.fence, node, self.bound_ms()).await {
            Ok(o) => {
                let now = now_of(&self.fence);
                o.lease.is_some() && o.judge(now, self.fence.config()) != Liveness::Dead
            }
            Err(_) => false,
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

    /// Hands off `moves` (cell, receiver), `concurrency` at a time; receivers that are
    /// leaving or unknown are refused. With `notify`, each receiver is told in its record.
    pub(super) async fn hand_off_all(
        &mut self,
        moves: Vec<(String, String)>,
        notify: bool,
    ) -> Vec<(String, Result<u64, Error>)> {
        if moves.is_empty() {
            return Vec::new();
        }
        let ready = self
            .receivers(moves.iter().map(|(_, to)| to.clone()).collect())
            .await;
        let mut out = Vec::new();
        let mut jobs = Vec::new();
        for (cell, to) in moves {
            let (Some(h), Some(generation)) = (self.held.get(&cell), ready.get(&to)) else {
                let e = invalid(format!(
                    "{to} is leaving or unknown; {cell} not handed to it"
                ));
                out.push((cell, Err(e)));
                continue;
            };
            // The application stops acting first; why, it learns once known.
            h.shard.end.stop_acting();
            jobs.push((cell, to, generation.clone(), h.shard.claim.clone()));
        }
        let results: Vec<(String, String, Result<u64, Error>)> = futures::stream::iter(jobs)
            .map(|(cell, to, generation, claim)| async move {
                let r = claim.hand_off(&to, Some(&generation)).await;
                (cell, to, r)
            })
            .buffer_unordered(self.s.concurrency)
            .collect()
            .await;
        let mut told: BTreeMap<String, Vec<Notice>> = BTreeMap::new();
        for (cell, to, r) in results {
            self.handed_off(&cell, &to, &r);
            if r.is_ok() && notify {
                let n = self.notice(NoticeKind::Handed, &cell, &self.me());
                told.entry(to).or_default().push(n);
            }
            out.push((cell, r));
        }
        self.post(told).await;
        out
    }

    /// Tells what a hand-off of `cell` to `to` did — only what is known: landed, not made,
    /// or (no verdict) left to [`settle_unsettled`](Self::settle_unsettled).
    fn handed_off(&mut self, cell: &str, to: &str, r: &Result<u64, Error>) {
        let Some(h) = self.remove(cell, None) else {
            return;
        };
        match r {
            Ok(epoch) => {
                let handed = StopReason::HandedOff {
                    to: to.to_owned(),
                    epoch: *epoch,
                };
                info!(node = %self.inner.node, cell, to, epoch, "cell handed off");
                h.shard.end.finish(handed);
                let seen = Seen {
                    owner: Some(to.to_owned()),
                    epoch: *epoch,
                };
                self.learned(cell, seen);
            }
            Err(e) if e.commit() == fence_core::Commit::NotCommitted => {
                warn!(node = %self.inner.node, cell, to, error = %e, "hand-off not made");
                let reason = if self.lease.is_held() {
                    StopReason::Closed
                } else {
                    StopReason::LeaseLost
                };
                h.shard.end.finish(reason);
                // Still this node's in the store: adopted again next round.
                self.seen.remove(cell);
                self.orphans.insert(cell.to_owned());
            }
            Err(e) => {
                warn!(node = %self.inner.node, cell, to, error = %e, "hand-off unsettled");
                let u = Unsettled {
                    end: h.shard.end.clone(),
                    to: to.to_owned(),
                    epoch: h.shard.epoch().saturating_add(1),
                };
                self.unsettled.insert(cell.to_owned(), u);
            }
        }
    }

    /// Settles hand-offs that got no verdict, by evidence: adopting the cell again (a seal
    /// at its epoch, after which the hand-off can never land) says it was not handed off; a
    /// head naming the receiver at the next epoch says it was.
    pub(super) async fn settle_unsettled(&mut self) {
        let cells: Vec<String> = self.unsettled.keys().cloned().collect();
        for cell in cells {
            match self.lease.adopt(&cell).await {
                Ok(claim) => {
                    if let Some(u) = self.unsettled.remove(&cell) {
                        u.end.finish(StopReason::Closed);
                    }
                    self.install(claim, true);
                    continue;
                }
                Err(e) if !self.lease.is_held() => {
                    debug!(cell, error = %e, "hand-off unsettled; lease lost");
                    continue;
                }
                Err(_) => {}
            }
            let read = self.fence.ownership().read_head(&cell);
            let Some(Ok(head)) = self.fence.clock().timeout(self.bound_ms(), read).await else {
                continue;
            };
            let head = head.map(|(h, _)| h);
            let me = self.inner.node.clone();
            if head
                .as_ref()
                .is_some_and(|h| h.node.as_deref() == Some(me.as_str()))
            {
                continue; // still ours: the adopt failed for another reason; again next round
            }
            let Some(u) = self.unsettled.remove(&cell) else {
                continue;
            };
            let landed = head
                .as_ref()
                .is_some_and(|h| h.epoch == u.epoch && h.node.as_deref() == Some(u.to.as_str()));
            let reason = if landed {
                StopReason::HandedOff {
                    to: u.to.clone(),
                    epoch: u.epoch,
                }
            } else {
                StopReason::Superseded {
                    epoch: head.as_ref().map_or(0, |h| h.epoch),
                }
            };
            u.end.finish(reason);
            self.saw(&cell, head.as_ref());
        }
    }

    /// Releases `cells` (held), `concurrency` at a time; returns those released.
    pub(super) async fn release_cells(&mut self, cells: Vec<String>) -> BTreeSet<String> {
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
        let mut released = BTreeSet::new();
        for (cell, r) in results {
            match r {
                Ok(()) => {
                    let epoch = self.held.get(&cell).map_or(0, |h| h.shard.epoch());
                    self.remove(&cell, Some(StopReason::Released));
                    self.learned(&cell, Seen { owner: None, epoch });
                    self.orphans.remove(&cell);
                    released.insert(cell);
                }
                Err(e) => {
                    warn!(node = %self.inner.node, cell, error = %e, "release failed");
                    let reason = if self.lease.is_held() {
                        StopReason::Closed
                    } else {
                        StopReason::LeaseLost
                    };
                    self.remove(&cell, Some(reason));
                    self.orphans.insert(cell);
                }
            }
        }
        released
    }

    // ----- leaving -------------------------------------------------------------------------

    pub(super) async fn drain(mut self, within_ms: u64) -> Drained {
        let clock = self.fence.clock().clone();
        let mut drained = Drained::default();
        let work = async {
            self.announce_leaving().await;
            // Where the placement without this node puts each cell (once the leader heard),
            // else its heir.
            let to = |c: &String| self.mine.moves.get(c).or(self.mine.heirs.get(c)).cloned();
            let moves: Vec<(String, String)> = self
                .held
                .keys()
                .filter_map(|c| Some((c.clone(), to(c)?)))
                .filter(|(_, to)| *to != self.inner.node)
                .collect();
            for (cell, r) in self.hand_off_all(moves, true).await {
                if r.is_ok() {
                    drained.handed_off.insert(cell);
                }
            }
            let orphans: Vec<String> = self.orphans.iter().cloned().collect();
            self.adopt_all(orphans).await;
            let rest: Vec<String> = self.held.keys().cloned().collect();
            drained.released = self.release_cells(rest).await;
            self.hand_over_leadership().await;
        };
        let _ = clock.timeout(within_ms, work).await;
        self.close_all(StopReason::Closed).await;
        drained.left = self.orphans.clone();
        let bound = self.bound_ms();
        let generation = self.lease.generation();
        let returned = clock.timeout(bound, self.lease.release()).await.is_some();
        // The keeper's release says nothing of whether its record landed (a lost lease, a
        // store that stopped answering): only a read of the record does.
        drained.lease_released = returned && shows_released(&self.fence, &generation, bound).await;
        drained
    }

    /// Marks this node leaving in its record, tells the leader, and gives nodes draining at
    /// the same moment the time to mark themselves too, so none hands cells to another: a
    /// drainer reads each receiver's record after its own mark landed, so of two drainers at
    /// least one sees the other's mark, and within this wait both do. Then reads its record
    /// again for the heirs of its cells.
    async fn announce_leaving(&mut self) {
        self.write_own(true).await;
        let me = self.me();
        let leaving = self.notice(NoticeKind::Leaving, "", &me);
        match &mut self.leader {
            Some(l) => {
                // A sweep first: a node that just started is a receiver too.
                l.sweep_now();
                l.round(vec![leaving]).await;
            }
            None if !self.mine.leader.is_empty() => {
                let to = BTreeMap::from([(self.mine.leader.clone(), vec![leaving])]);
                self.post(to).await;
            }
            None => {}
        }
        let wait = Duration::from_millis(self.fence.config().poll_ms());
        self.fence.clock().sleep(wait).await;
        if let Ok(Some((a, _))) = assignment::read(&self.fence, &me, self.bound_ms()).await {
            self.follow_assignment(&a);
        }
    }

    /// The leader leaving hands its leadership to another member (or releases it).
    async fn hand_over_leadership(&mut self) {
        let Some(l) = self.leader.take() else {
            return;
        };
        let others: BTreeSet<String> = l.others(&self.inner.node).into_iter().collect();
        let ready = self.receivers(others).await;
        let Some((to, generation)) = ready.into_iter().next() else {
            let _ = l.claim.release_shared().await;
            return;
        };
        if l.claim.hand_off(&to, Some(&generation)).await.is_ok() {
            let handed = self.notice(NoticeKind::Handed, LEADER_CELL, &self.me());
            let oldest = self.oldest_notice();
            let r = assignment::notify(&self.fence, &to, vec![handed], oldest, self.bound_ms());
            let _ = r.await;
        }
    }
}

/// Whether the store's lease record of this node is the released record (`expires_ms` 0) of
/// `generation`: one read, bounded by `bound_ms`.
async fn shows_released(fence: &Fence, generation: &str, bound_ms: u64) -> bool {
    let own = fence.ownership();
    let read = own.read_node_lease(own.node());
    match fence.clock().timeout(bound_ms, read).await {
        Some(Ok(Some(l))) => l.record.generation == generation && l.record.expires_ms == 0,
        _ => false,
    }
}
