//! The fleet's leader: the one node holding the leadership cell ([`LEADER_CELL`]) keeps the
//! placement and publishes each node's part of it in that node's assignment record.
//!
//! - **Takeover**: it lists the assignment records (one listing per 1,000 nodes), reads each
//!   record and each node's lease once, rebuilds the placement the records show, plans, and
//!   writes every member's record under its term (the epoch of its leadership claim).
//! - **Joins, leaves, deaths** reach it as notices in its own record (a node that starts, a
//!   node that drains, a watcher that confirmed a death, repeated until the leader acted on
//!   it), and joins also through a **sweep** — one listing of the records, and a read of the
//!   lease of each node it does not know — every `scan` per 1,000 nodes (sooner after a
//!   sweep that found one). A death is never the sweep's to find: a node's watcher finds it,
//!   and when the watcher died too, the watcher the ring gives that node next.
//! - **Plan and publish**: [`plan`] from the previous placement; only records whose part
//!   changed are written (compare-and-swap, keeping what others wrote).
//!
//! Its cost grows with the fleet only on takeover (one read of every record and lease) and
//! in the sweep, whose listing pages are spread so that they cost the same per month at any
//! size; no other node's cost grows with the fleet.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use fence_core::decide::{Liveness, Now, Observation, ObservedLease};
use fence_core::runtime::{CellClaim, Fence};
use fence_core::Error;
use futures::StreamExt;
use tracing::{debug, info, warn};

use crate::assign::{plan, watchers, Placement};
use crate::assignment::{self, Assignment, Notice, NoticeKind, Watched};
use crate::cells::Cells;
use crate::fleet::MemberFilter;

/// The cell whose holder leads the fleet. Not a name a fleet's cells may use.
pub const LEADER_CELL: &str = "fence-fleet.leader";

/// Requests in flight at once for the leader's reads and writes of records and leases.
const IN_FLIGHT: usize = 32;

/// A member as the leader knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) generation: String,
    pub(crate) leaving: bool,
    /// When (monotonic ms) it was first seen: joiners are placed once they settled.
    pub(crate) since: u64,
}

/// What the leader writes into one node's record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Part {
    cells: Vec<String>,
    heirs: BTreeMap<String, String>,
    moves: BTreeMap<String, String>,
    watch: Vec<Watched>,
}

/// The timing the leader works with.
#[derive(Clone)]
pub(crate) struct Timing {
    pub(crate) interval_ms: u64,
    pub(crate) settle_ms: u64,
    pub(crate) scan_ms: u64,
    /// How long a move stays in its old node's record.
    pub(crate) moves_ms: u64,
    pub(crate) bound_ms: u64,
}

pub(crate) struct Leader {
    pub(crate) claim: Arc<CellClaim>,
    pub(crate) term: u64,
    fence: Fence,
    cells: Arc<Cells>,
    filter: Option<MemberFilter>,
    t: Timing,
    pub(crate) members: BTreeMap<String, Member>,
    placement: Placement,
    /// What each record was last written with.
    published: HashMap<String, Part>,
    dirty: BTreeSet<String>,
    /// Moves not yet expired, per old node: cell → (new node, wall ms when moved).
    moves: BTreeMap<String, BTreeMap<String, (String, u64)>>,
    /// The sweep's own observations of every member's lease.
    seen: HashMap<String, Observation>,
    next_sweep: u64,
    /// Where the next audit of records starts.
    audited: usize,
    /// The live set and the members (whom the watch ring runs through) of the last plan
    /// (`None`: plan at once).
    planned: Option<(Vec<String>, Vec<String>)>,
    /// Whether the placement was rebuilt from a complete listing of the records. Until it
    /// is, the leader places nothing: a listing that failed is not a fleet of one.
    rebuilt: bool,
    /// Notices heard before the rebuild, heard once it is done.
    deferred: Vec<Notice>,
}

impl Leader {
    /// Takes over with `claim` of [`LEADER_CELL`]: rebuilds the placement from the records.
    pub(crate) async fn take_over(
        fence: &Fence,
        claim: Arc<CellClaim>,
        cells: Arc<Cells>,
        filter: Option<MemberFilter>,
        t: Timing,
    ) -> Leader {
        let term = claim.epoch();
        info!(node = fence.ownership().node(), term, "leading the fleet");
        let mut leader = Leader {
            claim,
            term,
            fence: fence.clone(),
            cells,
            filter,
            t,
            members: BTreeMap::new(),
            placement: Placement::default(),
            published: HashMap::new(),
            dirty: BTreeSet::new(),
            moves: BTreeMap::new(),
            seen: HashMap::new(),
            next_sweep: 0,
            audited: 0,
            planned: None,
            rebuilt: false,
            deferred: Vec::new(),
        };
        leader.rebuild().await;
        leader
    }

    fn now(&self) -> Now {
        Now {
            mono_ms: self.fence.clock().mono_ms(),
            wall_ms: self.fence.clock().wall_ms(),
        }
    }

    fn me(&self) -> &str {
        self.fence.ownership().node()
    }

    /// The ids of the assignment records, filtered: one listing.
    async fn list(&self) -> Result<Vec<String>, Error> {
        let folder = assignment::folder(&self.fence)?;
        let store = self.fence.ownership().store();
        let listed = self
            .fence
            .clock()
            .timeout(self.t.bound_ms, store.list(Some(&folder)));
        let keys = listed.await.ok_or_else(|| {
            Error::new(fence_core::ErrorKind::Timeout, "listing assignment records").not_committed()
        })??;
        let mut ids: Vec<String> = keys
            .iter()
            .filter_map(assignment::node_of)
            .filter(|n| fence_core::ownership::check_name("node", n).is_ok())
            .filter(|n| self.filter.as_ref().is_none_or(|f| f(n) || *n == self.me()))
            .map(str::to_owned)
            .collect();
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// Reads the lease of each of `nodes` into the sweep's observations; returns the verdicts
    /// (`None`: the read failed).
    async fn judge(
        &mut self,
        nodes: Vec<String>,
    ) -> Vec<(String, Option<(Liveness, Observation)>)> {
        let fence = &self.fence;
        let bound = self.t.bound_ms;
        let read: Vec<_> = futures::stream::iter(nodes)
            .map(|n| async move {
                let sent = fence.clock().mono_ms();
                let r = fence
                    .clock()
                    .timeout(bound, fence.ownership().read_node_lease(&n))
                    .await;
                (n, sent, r)
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let now = self.now();
        let mut out = Vec::new();
        for (n, sent, r) in read {
            let Some(Ok(lease)) = r else {
                out.push((n, None));
                continue;
            };
            let lease = lease.map(|l| ObservedLease {
                record: l.record,
                version: l.etag,
                nonce: l.nonce,
                ttl_ms: l.ttl_ms,
            });
            let o = Observation::update(self.seen.get(&n), lease, sent, now.mono_ms);
            self.seen.insert(n.clone(), o.clone());
            let verdict = o.judge(now, self.fence.config());
            out.push((n, Some((verdict, o))));
        }
        out
    }

    /// Rebuilds members and placement from every record, and reads every lease. When the
    /// records cannot be listed, nothing is rebuilt (the next round tries again): a leader
    /// that took a failed listing for a fleet of itself would move every cell to itself.
    async fn rebuild(&mut self) {
        let ids = match self.list().await {
            Ok(ids) => ids,
            Err(e) => {
                warn!(error = %e, "leader: listing records failed; placing nothing until one succeeds");
                return;
            }
        };
        self.rebuilt = true;
        let fence = &self.fence;
        let bound = self.t.bound_ms;
        let records: Vec<(String, Option<Assignment>)> = futures::stream::iter(ids.clone())
            .map(|n| async move {
                let a = assignment::read(fence, &n, bound).await;
                (n, a.ok().flatten().map(|(a, _)| a))
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let mut by_term: Vec<&(String, Option<Assignment>)> = records.iter().collect();
        by_term.sort_by_key(|(n, a)| (a.as_ref().map_or(0, |a| a.term), n.clone()));
        for (node, a) in by_term {
            let Some(a) = a else { continue };
            for c in a.cells.iter().filter(|c| self.cells.contains(c)) {
                self.placement.targets.insert(c.clone(), node.clone());
            }
            for (c, h) in a.heirs.iter().filter(|(c, _)| self.cells.contains(c)) {
                self.placement.heirs.insert(c.clone(), h.clone());
            }
        }
        let leaving: BTreeSet<String> = records
            .iter()
            .filter(|(_, a)| a.as_ref().is_some_and(|a| a.leaving))
            .map(|(n, _)| n.clone())
            .collect();
        let now = self.now().mono_ms;
        for (n, verdict) in self.judge(ids).await {
            // A read that failed counts as live; a missing lease as no member.
            let live = match &verdict {
                None => true,
                Some((Liveness::Live { .. }, o)) => o.lease.is_some(),
                Some((Liveness::Dead, _)) => false,
            };
            let generation = verdict
                .and_then(|(_, o)| o.lease.map(|l| l.record.generation))
                .unwrap_or_default();
            if live || n == self.me() {
                let leaving = leaving.contains(&n);
                // Nodes already placed count as settled.
                let since = now.saturating_sub(self.t.settle_ms);
                self.members.insert(
                    n,
                    Member {
                        generation,
                        leaving,
                        since,
                    },
                );
            }
        }
        self.next_sweep = now + self.t.scan_ms;
        self.dirty = self.members.keys().cloned().collect();
    }

    /// A round of the leader's work: `notices` addressed to it first, then a sweep if due,
    /// a plan if the live set changed, and the records to write. Returns the deaths it found
    /// itself (not released): each dead node with the heir of each of its cells, for the
    /// caller to tombstone and announce.
    pub(crate) async fn round(&mut self, notices: Vec<Notice>) -> Vec<Death> {
        let mut deaths = Vec::new();
        let mut notices = notices;
        if !self.rebuilt {
            self.rebuild().await;
            if !self.rebuilt {
                // Notices repeat until the leader acts on them: the newest suffice.
                self.deferred.append(&mut notices);
                let over = self.deferred.len().saturating_sub(assignment::MAX_NOTICES);
                self.deferred.drain(..over);
                return deaths;
            }
        }
        for n in std::mem::take(&mut self.deferred)
            .into_iter()
            .chain(notices)
        {
            self.hear(n, &mut deaths).await;
        }
        if self.now().mono_ms >= self.next_sweep {
            self.sweep().await;
        }
        let now = self.now();
        let live = self.live(now.mono_ms);
        let members: Vec<String> = self.members.keys().cloned().collect();
        if self.planned.as_ref() != Some(&(live.clone(), members.clone())) {
            self.replan_now(live, members, now);
        }
        self.expire_moves(now.wall_ms);
        self.publish().await;
        deaths
    }

    /// The members to place cells on: not leaving, and seen for `settle` (or already
    /// placed, or the first).
    fn live(&self, now: u64) -> Vec<String> {
        let placed: BTreeSet<&String> = self.placement.targets.values().collect();
        let first = placed.is_empty();
        let settled = |(n, m): &(&String, &Member)| {
            first || placed.contains(n) || now.saturating_sub(m.since) >= self.t.settle_ms
        };
        let staying = self.members.iter().filter(|(_, m)| !m.leaving);
        let live: Vec<String> = staying
            .clone()
            .filter(settled)
            .map(|(n, _)| n.clone())
            .collect();
        if live.is_empty() {
            // Everyone placed is leaving: the joiners take over at once.
            return staying.map(|(n, _)| n.clone()).collect();
        }
        live
    }

    async fn hear(&mut self, n: Notice, deaths: &mut Vec<Death>) {
        match n.kind {
            NoticeKind::Joined if !n.node.is_empty() => {
                if self.filter.as_ref().is_some_and(|f| !f(&n.node)) {
                    return;
                }
                for (node, verdict) in self.judge(vec![n.node.clone()]).await {
                    if let Some((Liveness::Live { .. }, o)) = verdict {
                        self.admit(&node, o);
                    }
                }
            }
            NoticeKind::Leaving => {
                if let Some(m) = self.members.get_mut(&n.node) {
                    m.leaving = true;
                }
            }
            NoticeKind::Gone => {
                // Believed only when the lease shows it: released or tombstoned.
                for (node, verdict) in self.judge(vec![n.node.clone()]).await {
                    if let Some((Liveness::Dead, o)) = verdict {
                        self.depart(&node, &o, deaths);
                    }
                }
            }
            _ => {}
        }
    }

    fn admit(&mut self, node: &str, o: Observation) {
        let generation = o.lease.map(|l| l.record.generation).unwrap_or_default();
        let since = self.fence.clock().mono_ms();
        match self.members.get_mut(node) {
            Some(m) if m.generation == generation => {}
            Some(m) => {
                m.generation = generation;
                m.leaving = false;
                self.dirty.insert(node.to_owned());
            }
            None => {
                debug!(node, "leader: joined");
                self.members.insert(
                    node.to_owned(),
                    Member {
                        generation,
                        leaving: false,
                        since,
                    },
                );
                self.dirty.insert(node.to_owned());
            }
        }
    }

    /// Removes a member whose lease is dead; a death the leader found itself (not released)
    /// is added to `deaths` for the caller to tombstone and announce to the heirs.
    fn depart(&mut self, node: &str, o: &Observation, deaths: &mut Vec<Death>) {
        if node == self.me() || !self.members.contains_key(node) {
            return;
        }
        info!(node, "leader: gone");
        let heirs = self.heirs_of(node);
        self.members.remove(node);
        self.published.remove(node);
        self.dirty.remove(node);
        let released = o.lease.as_ref().is_none_or(|l| l.record.is_released());
        if !released {
            deaths.push(Death {
                node: node.to_owned(),
                seen: o.clone(),
                heirs,
            });
        }
    }

    async fn sweep(&mut self) {
        let ids = match self.list().await {
            Ok(ids) => ids,
            Err(e) => {
                debug!(error = %e, "leader: sweep listing failed");
                self.next_sweep = self.now().mono_ms + self.t.interval_ms;
                return;
            }
        };
        let mut found = false;
        // Only nodes it does not know yet: a member's death is its watcher's to find (and
        // when a watcher dies too, the watcher the ring gives its node next finds it).
        let fresh: Vec<String> = ids
            .iter()
            .filter(|n| !self.members.contains_key(*n))
            .cloned()
            .collect();
        for (node, verdict) in self.judge(fresh).await {
            if let Some((Liveness::Live { .. }, o)) = verdict.filter(|(_, o)| o.lease.is_some()) {
                self.admit(&node, o);
                found = true;
            }
        }
        self.audit().await;
        let pages = (ids.len() as u64).div_ceil(1_000).max(1);
        let every = if found {
            self.t.interval_ms
        } else {
            self.t.scan_ms.saturating_mul(pages)
        };
        self.next_sweep = self.now().mono_ms + every;
    }

    fn replan_now(&mut self, live: Vec<String>, members: Vec<String>, now: Now) {
        if live.is_empty() {
            return;
        }
        let next = plan(&self.placement, self.cells.names(), &live);
        self.planned = Some((live, members));
        for (c, to) in &next.targets {
            match self.placement.targets.get(c) {
                Some(from) if from != to => {
                    let moved = self.moves.entry(from.clone()).or_default();
                    moved.insert(c.clone(), (to.clone(), now.wall_ms));
                    if let Some(m) = self.moves.get_mut(to) {
                        m.remove(c);
                    }
                }
                _ => {}
            }
        }
        self.placement = next;
        let parts = self.parts();
        for (node, part) in parts {
            if self.published.get(&node) != Some(&part) {
                self.dirty.insert(node);
            }
        }
    }

    fn expire_moves(&mut self, wall_ms: u64) {
        let oldest = wall_ms.saturating_sub(self.t.moves_ms);
        for (node, moved) in self.moves.iter_mut() {
            let before = moved.len();
            moved.retain(|_, (_, at)| *at >= oldest);
            if moved.len() != before {
                self.dirty.insert(node.clone());
            }
        }
        self.moves.retain(|_, m| !m.is_empty());
    }

    /// Every member's part of the placement.
    fn parts(&self) -> BTreeMap<String, Part> {
        let members: Vec<String> = self.members.keys().cloned().collect();
        let (leaving, staying): (Vec<&String>, Vec<&String>) =
            members.iter().partition(|n| self.members[*n].leaving);
        let own = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<String>>();
        let ring = watchers(&own(staying), &own(leaving));
        let mut parts: BTreeMap<String, Part> = members
            .iter()
            .map(|n| (n.clone(), Part::default()))
            .collect();
        for (c, n) in &self.placement.targets {
            if let Some(p) = parts.get_mut(n) {
                p.cells.push(c.clone());
                if let Some(h) = self.placement.heirs.get(c) {
                    p.heirs.insert(c.clone(), h.clone());
                }
            }
        }
        for (node, moved) in &self.moves {
            if let Some(p) = parts.get_mut(node) {
                p.moves = moved
                    .iter()
                    .map(|(c, (to, _))| (c.clone(), to.clone()))
                    .collect();
            }
        }
        for (watched, watcher) in &ring {
            // Who takes each cell if the watched node dies: the heir of a cell it is placed
            // with, the new node of a cell moved away from it (it may still hold it).
            let heirs = parts.get(watched).map_or_else(BTreeMap::new, |p| {
                let mut heirs = p.heirs.clone();
                heirs.extend(p.moves.clone());
                heirs
            });
            if let Some(p) = parts.get_mut(watcher) {
                p.watch.push(Watched {
                    node: watched.clone(),
                    heirs,
                });
            }
        }
        parts
    }

    /// Writes every dirty member's record; failures stay dirty for the next round.
    async fn publish(&mut self) {
        if self.dirty.is_empty() || !self.claim.is_held() {
            return;
        }
        let parts = self.parts();
        let dirty: Vec<String> = std::mem::take(&mut self.dirty).into_iter().collect();
        let (fence, term, me, bound) = (&self.fence, self.term, self.me(), self.t.bound_ms);
        let claim = &self.claim;
        let writes: Vec<(String, Part, Result<Assignment, Error>)> = futures::stream::iter(dirty)
            .filter_map(|n| {
                let part = parts.get(&n).cloned();
                async move { part.map(|p| (n, p)) }
            })
            .map(|(n, part)| async move {
                let write = |a: &mut Assignment| {
                    // A deposed leader writes nothing more (as far as it can tell: a write of
                    // one that was paused right here may land, and is a stale hint until
                    // the next leader's audit rewrites it).
                    if !claim.is_held() {
                        return false;
                    }
                    let before = (a.term, a.leader.clone(), a.cells.clone(), a.heirs.clone());
                    let before = (before, a.moves.clone(), a.watch.clone());
                    a.term = term;
                    a.leader = me.to_owned();
                    a.cells = part.cells.clone();
                    a.heirs = part.heirs.clone();
                    a.moves = part.moves.clone();
                    a.watch = part.watch.clone();
                    let after = (a.term, a.leader.clone(), a.cells.clone(), a.heirs.clone());
                    before != (after, a.moves.clone(), a.watch.clone())
                };
                let r = assignment::edit(fence, &n, bound, true, write).await;
                (n, part, r)
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        for (n, part, r) in writes {
            match r {
                Ok(_) => {
                    self.published.insert(n, part);
                }
                Err(e) => {
                    debug!(node = n, error = %e, "leader: record not written; retried");
                    self.dirty.insert(n);
                }
            }
        }
    }

    /// The heirs of `node`'s cells, as placed now.
    pub(crate) fn heirs_of(&self, node: &str) -> BTreeMap<String, String> {
        let cells = self.placement.cells_of(node);
        cells
            .into_iter()
            .filter_map(|c| self.placement.heirs.get(&c).map(|h| (c, h.clone())))
            .collect()
    }

    /// Reads 16 members' records per 1,000 (in turn: the sweep's cost per second stays the
    /// same at any size) and marks for writing those whose leader's part differs from what
    /// it wrote: a record a deposed leader, a bug or a hand overwrote is put right.
    async fn audit(&mut self) {
        let members: Vec<String> = self.members.keys().cloned().collect();
        if members.is_empty() {
            return;
        }
        let pages = members.len().div_ceil(1_000);
        let share = (16 * pages).min(members.len());
        let start = self.audited % members.len();
        let turn: Vec<String> = members
            .iter()
            .cycle()
            .skip(start)
            .take(share)
            .cloned()
            .collect();
        self.audited = start + share;
        let (fence, bound) = (&self.fence, self.t.bound_ms);
        let read: Vec<(String, Option<Assignment>)> = futures::stream::iter(turn)
            .map(|n| async move {
                let a = assignment::read(fence, &n, bound).await;
                (n, a.ok().flatten().map(|(a, _)| a))
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let parts = self.parts();
        for (n, a) in read {
            let Some(part) = parts.get(&n) else { continue };
            let shown = a.map(|a| Part {
                cells: a.cells,
                heirs: a.heirs,
                moves: a.moves,
                watch: a.watch,
            });
            if shown.as_ref() != Some(part) {
                debug!(
                    node = n,
                    "leader: record differs from the placement; rewritten"
                );
                self.published.remove(&n);
                self.dirty.insert(n);
            }
        }
    }

    /// Makes the next round sweep.
    pub(crate) fn sweep_now(&mut self) {
        self.next_sweep = 0;
    }

    /// The members other than `node` that are not leaving, in ring order.
    pub(crate) fn others(&self, node: &str) -> Vec<String> {
        let mut others: Vec<String> = self
            .members
            .iter()
            .filter(|(n, m)| *n != node && !m.leaving)
            .map(|(n, _)| n.clone())
            .collect();
        others.sort_by_key(|n| crate::assign::stable_hash(n.as_bytes()));
        others
    }
}

/// A death the leader found itself: the node, what it saw of its lease, and its cells' heirs.
pub(crate) struct Death {
    pub(crate) node: String,
    pub(crate) seen: Observation,
    pub(crate) heirs: BTreeMap<String, String>,
}
