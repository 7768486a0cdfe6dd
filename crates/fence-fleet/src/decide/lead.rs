//! The leader's rules as a step machine: [`LeaderCore`].
//!
//! - **Takeover**: the records are listed and read, and every listed node's lease; the
//!   placement the records show is rebuilt, and every member's record is to be written
//!   under the new term. Until a listing succeeds, the leader places nothing (a failed
//!   listing is not a fleet of one): each round tries the takeover again.
//! - **A round**: the notices addressed to the leader (joins, leaves, deaths — a death is
//!   believed only when a read of the lease shows it), then a sweep if due (one listing,
//!   a read of the lease of each node it does not know, and an audit of some records), a
//!   new [`plan`] when the live set changed, and the records whose part changed.
//!
//! Its cost grows with the fleet only on takeover and in the sweep (docs/fleet.md).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use fence_core::decide::{Liveness, Observation, ObservedLease};

use super::record::{Assignment, Notice, NoticeKind, Watched, MAX_NOTICES};
use super::{Flaws, Now, Timing};
use crate::assign::{plan, watchers, Placement};
use crate::cells::Cells;
use crate::flaws::sabotaged;

/// A member as the leader knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    /// Its lease generation (`""`: unknown).
    pub generation: String,
    /// It drains.
    pub leaving: bool,
    /// When (monotonic ms) it was first seen: joiners are placed once they settled.
    pub since: u64,
}

/// What the leader writes into one node's record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Part {
    /// The cells placed on the node.
    pub cells: Vec<String>,
    /// The heir of each of them.
    pub heirs: BTreeMap<String, String>,
    /// Cells moved away from it, and where.
    pub moves: BTreeMap<String, String>,
    /// The node it watches, and that node's heirs.
    pub watch: Vec<Watched>,
}

impl Part {
    /// The part a record shows.
    pub fn of(a: &Assignment) -> Part {
        Part {
            cells: a.cells.clone(),
            heirs: a.heirs.clone(),
            moves: a.moves.clone(),
            watch: a.watch.clone(),
        }
    }
}

/// A death the leader found itself: the node, what it saw of its lease, and its cells'
/// heirs — to tombstone and announce.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Death {
    /// The dead node.
    pub node: String,
    /// Its lease as observed.
    pub seen: Observation,
    /// The heir of each of its cells.
    pub heirs: BTreeMap<String, String>,
}

/// An effect of the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeadEffect {
    /// List the records; answer [`LeadInput::Listed`].
    List,
    /// Read the records of these nodes; answer [`LeadInput::Records`].
    ReadRecords(Vec<String>),
    /// Read the leases of these nodes (a node the membership filter refuses counts as a
    /// failed read); answer [`LeadInput::Leases`].
    ReadLeases(Vec<String>),
    /// Write each node's part under `term`, keeping what others wrote; answer
    /// [`LeadInput::Published`].
    Publish {
        /// The leader's term.
        term: u64,
        /// Each node's part.
        parts: Vec<(String, Part)>,
    },
}

/// An answer to a [`LeadEffect`].
#[derive(Clone, Debug, PartialEq)]
pub enum LeadInput {
    /// The records' node ids (`None`: the listing failed).
    Listed(Option<Vec<String>>),
    /// Each record read (`None`: absent, unreadable, or the read failed).
    Records(Vec<(String, Option<Assignment>)>),
    /// Each lease read (`None`: the read failed; `Some(None)`: no lease), all sent at
    /// `sent_mono`.
    Leases {
        /// When the reads were sent (monotonic ms).
        sent_mono: u64,
        /// The leases.
        reads: Vec<(String, Option<Option<ObservedLease>>)>,
    },
    /// Whether each part was written.
    Published(Vec<(String, bool)>),
}

/// What a [`LeaderCore`] step asks for: an effect to perform, or the round's end with the
/// deaths it found.
#[derive(Clone, Debug, PartialEq)]
pub enum LeadStep {
    /// Perform this, and feed its answer.
    Effect(LeadEffect),
    /// Done: the deaths found (not released) to tombstone and announce.
    Done(Vec<Death>),
}

/// What the leader waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Wait {
    RebuildList,
    RebuildRecords(Vec<String>),
    RebuildLeases(BTreeSet<String>),
    Admit,
    Depart,
    SweepList,
    SweepLeases(u64),
    Audit,
    Publish,
}

/// The stages of a round still to come.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Stage {
    Admit(Vec<String>),
    Depart(Vec<String>),
    Sweep,
    Plan,
}

/// The leader's state and rules (module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaderCore {
    me: String,
    term: u64,
    cells: Arc<Cells>,
    t: Timing,
    flaws: Flaws,
    members: BTreeMap<String, Member>,
    placement: Placement,
    /// What each record was last written with.
    published: BTreeMap<String, Part>,
    dirty: BTreeSet<String>,
    /// Moves not yet expired, per old node: cell → (new node, wall ms when moved).
    moves: BTreeMap<String, BTreeMap<String, (String, u64)>>,
    /// The leader's own observations of every member's lease.
    seen: BTreeMap<String, Observation>,
    next_sweep: u64,
    /// Where the next audit of records starts.
    audited: usize,
    /// The live set and the members of the last plan (`None`: plan at once).
    planned: Option<(Vec<String>, Vec<String>)>,
    /// Whether the placement was rebuilt from a complete listing of the records. Until it
    /// is, the leader places nothing: a listing that failed is not a fleet of one.
    rebuilt: bool,
    /// Notices heard before the rebuild, heard once it is done (the newest
    /// [`MAX_NOTICES`]: notices repeat until the leader acts on them).
    deferred: Vec<Notice>,
    /// Whether a round waits for the rebuild in progress, to run once it is done.
    round_after_rebuild: bool,
    waiting: Option<Wait>,
    stages: VecDeque<Stage>,
    deaths: Vec<Death>,
    found: bool,
}

impl LeaderCore {
    /// The leader of term `term` (the epoch of its leadership claim) on node `me`.
    pub(crate) fn new(me: &str, term: u64, cells: Arc<Cells>, t: Timing, flaws: Flaws) -> Self {
        LeaderCore {
            me: me.to_owned(),
            term,
            cells,
            t,
            flaws,
            members: BTreeMap::new(),
            placement: Placement::default(),
            published: BTreeMap::new(),
            dirty: BTreeSet::new(),
            moves: BTreeMap::new(),
            seen: BTreeMap::new(),
            next_sweep: 0,
            audited: 0,
            planned: None,
            rebuilt: false,
            deferred: Vec::new(),
            round_after_rebuild: false,
            waiting: None,
            stages: VecDeque::new(),
            deaths: Vec::new(),
            found: false,
        }
    }

    /// The term: the epoch of the leadership claim.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The members as the leader knows them.
    pub fn members(&self) -> &BTreeMap<String, Member> {
        &self.members
    }

    /// The placement the leader keeps.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Whether it waits for an answer.
    pub fn busy(&self) -> bool {
        self.waiting.is_some()
    }

    /// Drops what it waits for (a drain's deadline).
    pub(crate) fn abandon(&mut self) {
        self.waiting = None;
        self.round_after_rebuild = false;
        self.stages.clear();
    }

    /// Makes the next round sweep.
    pub(crate) fn sweep_now(&mut self) {
        self.next_sweep = 0;
    }

    /// Takes over: lists the records first. When the listing fails, nothing is rebuilt and
    /// the next round tries again.
    pub(crate) fn take_over(&mut self) -> LeadStep {
        self.wait(Wait::RebuildList, LeadEffect::List)
    }

    fn wait(&mut self, w: Wait, e: LeadEffect) -> LeadStep {
        self.waiting = Some(w);
        LeadStep::Effect(e)
    }

    /// A round: `notices` addressed to the leader first (a join admitted only when its
    /// lease reads live, a death believed only when it reads dead), then a sweep if due, a
    /// plan if the live set changed, and the records to write.
    /// Until a takeover's listing succeeded, a round only tries the rebuild again, keeping
    /// its notices for the round that follows the rebuild.
    pub(crate) fn round(&mut self, now: Now, notices: Vec<Notice>) -> LeadStep {
        for n in notices {
            if !self.deferred.contains(&n) {
                self.deferred.push(n);
            }
        }
        if !self.rebuilt {
            let over = self.deferred.len().saturating_sub(MAX_NOTICES);
            self.deferred.drain(..over);
            self.round_after_rebuild = true;
            return self.take_over();
        }
        self.start_round(now)
    }

    fn start_round(&mut self, now: Now) -> LeadStep {
        let (mut joined, mut gone) = (Vec::new(), Vec::new());
        for n in std::mem::take(&mut self.deferred) {
            match n.kind {
                NoticeKind::Joined if !n.node.is_empty() => joined.push(n.node),
                NoticeKind::Leaving => {
                    if let Some(m) = self.members.get_mut(&n.node) {
                        m.leaving = true;
                    }
                }
                NoticeKind::Gone => gone.push(n.node),
                _ => {}
            }
        }
        self.deaths.clear();
        self.stages = [
            Stage::Admit(joined),
            Stage::Depart(gone),
            Stage::Sweep,
            Stage::Plan,
        ]
        .into();
        self.advance(now)
    }

    /// Feeds the answer to the last effect.
    pub(crate) fn step(&mut self, now: Now, input: LeadInput) -> LeadStep {
        let Some(w) = self.waiting.take() else {
            return LeadStep::Done(Vec::new());
        };
        match (w, input) {
            (Wait::RebuildList, LeadInput::Listed(ids)) => {
                let Some(ids) = ids else {
                    self.round_after_rebuild = false;
                    return LeadStep::Done(Vec::new());
                };
                self.rebuilt = true;
                return self.wait(
                    Wait::RebuildRecords(ids.clone()),
                    LeadEffect::ReadRecords(ids),
                );
            }
            (Wait::RebuildRecords(ids), LeadInput::Records(records)) => {
                let leaving = self.rebuild(&records);
                return self.wait(Wait::RebuildLeases(leaving), LeadEffect::ReadLeases(ids));
            }
            (Wait::RebuildLeases(leaving), LeadInput::Leases { sent_mono, reads }) => {
                self.rebuilt(now, &leaving, sent_mono, reads);
                if std::mem::take(&mut self.round_after_rebuild) {
                    return self.start_round(now);
                }
                return LeadStep::Done(Vec::new());
            }
            (Wait::Admit, LeadInput::Leases { sent_mono, reads }) => {
                for (node, verdict) in self.judge(now, sent_mono, reads) {
                    if let Some((Liveness::Live { .. }, o)) = verdict {
                        self.admit(now, &node, o);
                    }
                }
            }
            (Wait::Depart, LeadInput::Leases { sent_mono, reads }) => {
                for (node, verdict) in self.judge(now, sent_mono, reads) {
                    if let Some((Liveness::Dead, o)) = verdict {
                        self.depart(&node, &o);
                    }
                }
            }
            (Wait::SweepList, LeadInput::Listed(ids)) => return self.swept(now, ids),
            (Wait::SweepLeases(pages), LeadInput::Leases { sent_mono, reads }) => {
                self.sweep_admit(now, sent_mono, reads);
                return self.audit(now, pages);
            }
            (Wait::Audit, LeadInput::Records(records)) => self.audited(records),
            (Wait::Publish, LeadInput::Published(results)) => {
                self.published(results);
                return LeadStep::Done(std::mem::take(&mut self.deaths));
            }
            _ => {}
        }
        self.advance(now)
    }

    /// Runs the round's stages until one needs the store.
    fn advance(&mut self, now: Now) -> LeadStep {
        while let Some(stage) = self.stages.pop_front() {
            let step = match stage {
                Stage::Admit(nodes) if !nodes.is_empty() => {
                    self.wait(Wait::Admit, LeadEffect::ReadLeases(nodes))
                }
                Stage::Depart(nodes) if !nodes.is_empty() => {
                    self.wait(Wait::Depart, LeadEffect::ReadLeases(nodes))
                }
                Stage::Sweep if now.mono_ms >= self.next_sweep => {
                    self.wait(Wait::SweepList, LeadEffect::List)
                }
                Stage::Plan => return self.plan_and_publish(now),
                _ => continue,
            };
            return step;
        }
        LeadStep::Done(std::mem::take(&mut self.deaths))
    }

    /// Rebuilds the placement the records show (later terms last, so they win); returns
    /// the nodes whose records say they are leaving.
    fn rebuild(&mut self, records: &[(String, Option<Assignment>)]) -> BTreeSet<String> {
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
        let leaving = records
            .iter()
            .filter(|(_, a)| a.as_ref().is_some_and(|a| a.leaving));
        leaving.map(|(n, _)| n.clone()).collect()
    }

    /// The members after a takeover: every listed node whose lease reads live (a read that
    /// failed counts as live; a missing lease as no member), and this node.
    fn rebuilt(
        &mut self,
        now: Now,
        leaving: &BTreeSet<String>,
        sent: u64,
        reads: Vec<(String, Option<Option<ObservedLease>>)>,
    ) {
        for (n, verdict) in self.judge(now, sent, reads) {
            let live = match &verdict {
                None => true,
                Some((Liveness::Live { .. }, o)) => o.lease.is_some(),
                Some((Liveness::Dead, _)) => false,
            };
            let generation = verdict
                .and_then(|(_, o)| o.lease.map(|l| l.record.generation))
                .unwrap_or_default();
            if live || n == self.me {
                // Nodes already placed count as settled.
                let since = now.mono_ms.saturating_sub(self.t.settle_ms);
                let leaving = leaving.contains(&n);
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
        self.next_sweep = now.mono_ms + self.t.scan_ms;
        self.dirty = self.members.keys().cloned().collect();
    }

    /// Each lease read, as the leader's observation, and its verdict (`None`: not read).
    fn judge(
        &mut self,
        now: Now,
        sent: u64,
        reads: Vec<(String, Option<Option<ObservedLease>>)>,
    ) -> Vec<(String, Option<(Liveness, Observation)>)> {
        let mut out = Vec::new();
        for (n, read) in reads {
            let Some(lease) = read else {
                out.push((n, None));
                continue;
            };
            let o = Observation::update(self.seen.get(&n), lease, sent, now.mono_ms);
            self.seen.insert(n.clone(), o.clone());
            let verdict = o.judge(now, &self.t.lease);
            out.push((n, Some((verdict, o))));
        }
        out
    }

    fn admit(&mut self, now: Now, node: &str, o: Observation) {
        let generation = o.lease.map(|l| l.record.generation).unwrap_or_default();
        match self.members.get_mut(node) {
            Some(m) if m.generation == generation => {}
            Some(m) => {
                m.generation = generation;
                m.leaving = false;
                self.dirty.insert(node.to_owned());
            }
            None => {
                let m = Member {
                    generation,
                    leaving: false,
                    since: now.mono_ms,
                };
                self.members.insert(node.to_owned(), m);
                self.dirty.insert(node.to_owned());
            }
        }
    }

    /// Removes a member whose lease is dead; a death the leader found itself (not
    /// released) is kept for the caller to tombstone and announce to the heirs.
    fn depart(&mut self, node: &str, o: &Observation) {
        if node == self.me || !self.members.contains_key(node) {
            return;
        }
        let heirs = self.heirs_of(node);
        self.members.remove(node);
        self.published.remove(node);
        self.dirty.remove(node);
        let released = o.lease.as_ref().is_none_or(|l| l.record.is_released());
        if !released {
            let seen = o.clone();
            self.deaths.push(Death {
                node: node.to_owned(),
                seen,
                heirs,
            });
        }
    }

    /// The sweep's listing: the nodes it does not know are read.
    fn swept(&mut self, now: Now, ids: Option<Vec<String>>) -> LeadStep {
        let Some(ids) = ids else {
            self.next_sweep = now.mono_ms + self.t.interval_ms;
            return self.advance(now);
        };
        let pages = (ids.len() as u64).div_ceil(1_000).max(1);
        // Only nodes it does not know yet: a member's death is its watcher's to find.
        let fresh: Vec<String> = ids
            .into_iter()
            .filter(|n| !self.members.contains_key(n))
            .collect();
        self.found = false;
        if fresh.is_empty() {
            return self.audit(now, pages);
        }
        self.wait(Wait::SweepLeases(pages), LeadEffect::ReadLeases(fresh))
    }

    fn sweep_admit(
        &mut self,
        now: Now,
        sent: u64,
        reads: Vec<(String, Option<Option<ObservedLease>>)>,
    ) {
        for (node, verdict) in self.judge(now, sent, reads) {
            if let Some((Liveness::Live { .. }, o)) = verdict.filter(|(_, o)| o.lease.is_some()) {
                self.admit(now, &node, o);
                self.found = true;
            }
        }
    }

    /// Reads 16 members' records per 1,000 (in turn), and plans the next sweep.
    fn audit(&mut self, now: Now, pages: u64) -> LeadStep {
        let every = if self.found {
            self.t.interval_ms
        } else {
            self.t.scan_ms.saturating_mul(pages)
        };
        self.next_sweep = now.mono_ms + every;
        let members: Vec<String> = self.members.keys().cloned().collect();
        if members.is_empty() {
            return self.advance(now);
        }
        let share = (16 * members.len().div_ceil(1_000)).min(members.len());
        let start = self.audited % members.len();
        let turn: Vec<String> = members
            .iter()
            .cycle()
            .skip(start)
            .take(share)
            .cloned()
            .collect();
        self.audited = start + share;
        self.wait(Wait::Audit, LeadEffect::ReadRecords(turn))
    }

    /// Marks for writing the records whose leader's part differs from what it wrote: a
    /// record a deposed leader, a bug or a hand overwrote is put right.
    fn audited(&mut self, records: Vec<(String, Option<Assignment>)>) {
        let parts = self.parts();
        for (n, a) in records {
            let Some(part) = parts.get(&n) else { continue };
            if a.as_ref().map(Part::of).as_ref() != Some(part) {
                self.published.remove(&n);
                self.dirty.insert(n);
            }
        }
    }

    /// Plans if the live set changed, expires old moves, and writes the dirty records.
    fn plan_and_publish(&mut self, now: Now) -> LeadStep {
        let live = self.live(now.mono_ms);
        let members: Vec<String> = self.members.keys().cloned().collect();
        if self.planned.as_ref() != Some(&(live.clone(), members.clone())) {
            self.replan(live, members, now);
        }
        self.expire_moves(now.wall_ms);
        if self.dirty.is_empty() {
            return LeadStep::Done(std::mem::take(&mut self.deaths));
        }
        let parts = self.parts();
        let dirty = std::mem::take(&mut self.dirty);
        let parts: Vec<(String, Part)> = dirty
            .into_iter()
            .filter_map(|n| parts.get(&n).cloned().map(|p| (n, p)))
            .collect();
        let term = self.term;
        self.wait(Wait::Publish, LeadEffect::Publish { term, parts })
    }

    fn published(&mut self, results: Vec<(String, bool)>) {
        let parts = self.parts();
        for (n, ok) in results {
            match parts.get(&n) {
                Some(p) if ok => {
                    self.published.insert(n, p.clone());
                }
                _ => {
                    self.dirty.insert(n);
                }
            }
        }
    }

    /// The members to place cells on: not leaving, and seen for `settle` (or already
    /// placed, or the first).
    pub fn live(&self, now_mono: u64) -> Vec<String> {
        let placed: BTreeSet<&String> = self.placement.targets.values().collect();
        let first = placed.is_empty();
        let settled = |(n, m): &(&String, &Member)| {
            first || placed.contains(n) || now_mono.saturating_sub(m.since) >= self.t.settle_ms
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

    fn replan(&mut self, live: Vec<String>, members: Vec<String>, now: Now) {
        if live.is_empty() {
            return;
        }
        let next = if sabotaged!(self.flaws, UnstickyPlacement) {
            let targets = crate::assign::assign(self.cells.names(), &live);
            let unsticky = Placement {
                targets,
                heirs: BTreeMap::new(),
            };
            let heirs = plan(&unsticky, self.cells.names(), &live).heirs;
            Placement { heirs, ..unsticky }
        } else {
            plan(&self.placement, self.cells.names(), &live)
        };
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
        for (node, part) in self.parts() {
            if self.published.get(&node) != Some(&part) {
                self.dirty.insert(node);
            }
        }
    }

    fn expire_moves(&mut self, wall_ms: u64) {
        let oldest = wall_ms.saturating_sub(self.t.notices_ms);
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
    pub fn parts(&self) -> BTreeMap<String, Part> {
        let (leaving, staying): (Vec<&String>, Vec<&String>) =
            self.members.keys().partition(|n| self.members[*n].leaving);
        let own = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<String>>();
        let ring = watchers(&own(staying), &own(leaving));
        let mut parts: BTreeMap<String, Part> = self
            .members
            .keys()
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
                if sabotaged!(self.flaws, PlaceTwice) {
                    p.cells.extend(p.moves.keys().cloned());
                }
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

    /// The heirs of `node`'s cells, as placed now.
    pub fn heirs_of(&self, node: &str) -> BTreeMap<String, String> {
        let cells = self.placement.cells_of(node);
        cells
            .into_iter()
            .filter_map(|c| self.placement.heirs.get(&c).map(|h| (c, h.clone())))
            .collect()
    }

    /// The members other than `node` that are not leaving, in ring order.
    pub fn others(&self, node: &str) -> Vec<String> {
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
