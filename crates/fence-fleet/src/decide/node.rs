//! One node of a fleet as a step machine: [`FleetCore`].
//!
//! A round (at each [`FleetInput::Tick`] the core asked for) is a sequence of stages: read
//! this node's record and hear its notices; settle hand-offs whose answer was lost; answer
//! asks; take the cells it wants and give those placed elsewhere; start a poll of the held
//! cells' heads; follow every cell (opt-in); lead, or try the leadership. A stage that needs
//! the store emits one effect and waits for its outcome; the shell performs the effects of a
//! step in order and feeds each outcome back before anything else, so a round runs to its
//! end (or, in a drain, to the deadline) before the next input.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::lead::{Death, LeaderCore};
use super::record::{Notice, NoticeKind, Watched};
pub use super::step::{
    AdoptFor, Claimed, FleetEffect, FleetInput, HandOffFor, HandOffOutcome, HeadsFor, Mine, Read,
    Seen,
};
use super::{Flaws, Now, Timing};
use crate::cells::Cells;
use crate::leader::LEADER_CELL;
use crate::shard::StopReason;

/// A held cell as the core keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Holding {
    pub(super) epoch: u64,
    /// When (monotonic ms) it was taken.
    pub(super) since: u64,
}

/// A hand-off whose outcome is not known yet: settled by evidence before anything is told.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Unsettled {
    pub(super) to: String,
    pub(super) epoch: u64,
}

/// The steps of a round (and of a drain) still to come.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Stage {
    Record,
    Settle,
    Asks,
    AskHandOff(Vec<(String, String)>),
    Take,
    Claim,
    Shed,
    Release(Vec<String>),
    NextTake,
    Poll,
    Follow,
    Lead,
    Bury(Vec<Death>),
    End,
    /// Read the receivers of `moves`, then hand them off.
    HandOff(Vec<(String, String)>, HandOffFor),
    HandOffSend(Vec<(String, String)>, HandOffFor),
    /// An application's hand-off: is the receiver live?
    Asked(String, String),
    /// Waits for the receiver's observation ([`FleetCore::asked_observed`]).
    AskedSend(String, String),
    ReadUnsettled(Vec<String>),
    JoinRead(Vec<String>),
    JoinPost(String),
    Drain(super::leave::Leg),
}

/// What a drain has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Leaving {
    pub(super) handed_off: BTreeSet<String>,
    pub(super) released: BTreeSet<String>,
}

/// One node of a fleet: its state, timers and rules (module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FleetCore {
    pub(super) me: String,
    pub(super) t: Timing,
    pub(super) cells: Arc<Cells>,
    pub(super) flaws: Flaws,
    pub(super) generation: String,
    /// Lease generations whose cells this process may resume at their epoch.
    pub(super) vouched: BTreeSet<String>,
    pub(super) held: BTreeMap<String, Holding>,
    pub(super) unsettled: BTreeMap<String, Unsettled>,
    pub(super) seen: BTreeMap<String, Seen>,
    /// Cells the store names as this node's with no claim of this process.
    pub(super) orphans: BTreeSet<String>,
    pub(super) mine: Mine,
    /// The watcher's duty as last told: whom to watch, and who leads.
    pub(super) duty: (Vec<Watched>, String),
    /// Cells to take because their node died (cell → since, wall ms).
    pub(super) inherit: BTreeMap<String, u64>,
    /// Cells handed to this node (cell → since, wall ms).
    pub(super) handed: BTreeMap<String, u64>,
    /// Cells another node asked for (cell → asker).
    pub(super) asked: BTreeMap<String, String>,
    /// Notices acted on.
    pub(super) processed: BTreeSet<Notice>,
    /// Target cells held by another node, and since when (monotonic ms).
    pub(super) waiting: BTreeMap<String, u64>,
    pub(super) asked_at: BTreeMap<String, u64>,
    /// Until when (monotonic ms) the record is read every poll.
    pub(super) vigil_until: u64,
    pub(super) polling: bool,
    pub(super) leader: Option<LeaderCore>,
    pub(super) for_leader: Vec<Notice>,
    pub(super) joined: bool,
    pub(super) next_leader_check: u64,
    pub(super) next_read: u64,
    pub(super) next_take: u64,
    pub(super) next_poll: u64,
    pub(super) next_follow: u64,
    /// When the round under way began (monotonic ms).
    pub(super) round_at: u64,
    pub(super) stages: VecDeque<Stage>,
    /// Cells a stage found to claim, and the receivers a hand-off read.
    pub(super) to_take: Vec<String>,
    pub(super) receivers: BTreeMap<String, String>,
    /// Why the hand-offs in flight are made.
    pub(super) handing: Option<HandOffFor>,
    pub(super) leaving: Option<Leaving>,
    /// The task ends: the handle is gone or the drain is done.
    pub(super) done: bool,
}

impl FleetCore {
    /// The core of node `me` over `cells`, under the lease `generation`; `predecessor`: a
    /// generation of this node's earlier process the caller vouched for.
    pub fn new(
        me: &str,
        cells: Vec<String>,
        t: Timing,
        generation: &str,
        predecessor: Option<&str>,
    ) -> Self {
        Self::over(me, crate::cells::intern(cells), t, generation, predecessor)
    }

    pub(crate) fn over(
        me: &str,
        cells: Arc<Cells>,
        t: Timing,
        generation: &str,
        predecessor: Option<&str>,
    ) -> Self {
        let mut vouched: BTreeSet<String> = predecessor.iter().map(|p| p.to_string()).collect();
        vouched.insert(generation.to_owned());
        FleetCore {
            me: me.to_owned(),
            t,
            cells,
            flaws: Flaws::default(),
            generation: generation.to_owned(),
            vouched,
            held: BTreeMap::new(),
            unsettled: BTreeMap::new(),
            seen: BTreeMap::new(),
            orphans: BTreeSet::new(),
            mine: Mine::default(),
            duty: (Vec::new(), String::new()),
            inherit: BTreeMap::new(),
            handed: BTreeMap::new(),
            asked: BTreeMap::new(),
            processed: BTreeSet::new(),
            waiting: BTreeMap::new(),
            asked_at: BTreeMap::new(),
            vigil_until: 0,
            polling: false,
            leader: None,
            for_leader: Vec::new(),
            joined: false,
            next_leader_check: 0,
            next_read: 0,
            next_take: 0,
            next_poll: 0,
            next_follow: 0,
            round_at: 0,
            stages: VecDeque::new(),
            to_take: Vec::new(),
            receivers: BTreeMap::new(),
            handing: None,
            leaving: None,
            done: false,
        }
    }

    /// The same core with sabotage `flaws` (only ever set with the `sabotage` feature).
    #[must_use]
    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.me
    }

    /// The cells this node holds, and their epochs.
    pub fn held(&self) -> impl Iterator<Item = (&str, u64)> {
        self.held.iter().map(|(c, h)| (c.as_str(), h.epoch))
    }

    /// What this node's record said when last read.
    pub fn mine(&self) -> &Mine {
        &self.mine
    }

    /// The leader's core, while this node leads.
    pub fn leader(&self) -> Option<&LeaderCore> {
        self.leader.as_ref()
    }

    /// The lease generations whose cells this process may resume at their epochs.
    pub fn vouched(&self) -> impl Iterator<Item = &String> {
        self.vouched.iter()
    }

    /// Cells the store names as this node's that it holds no claim of.
    pub fn orphans(&self) -> &BTreeSet<String> {
        &self.orphans
    }

    /// Whether a round (or the drain) is under way.
    pub fn busy(&self) -> bool {
        !self.stages.is_empty()
    }

    /// Whether the task ends (the handle is gone, or the drain is done).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether this node is draining.
    pub fn is_leaving(&self) -> bool {
        self.leaving.is_some()
    }

    /// The nodes this node knows of and, where known, their generations: itself, on the
    /// leader every member, elsewhere the nodes its record names.
    pub fn members(&self) -> BTreeMap<String, Option<String>> {
        let mut live = BTreeMap::new();
        live.insert(self.me.clone(), Some(self.generation.clone()));
        if let Some(l) = &self.leader {
            for (n, m) in l.members() {
                let g = Some(m.generation.clone()).filter(|g| !g.is_empty());
                live.insert(n.clone(), g);
            }
        }
        let named = self.duty.0.iter().map(|w| &w.node);
        let named = named
            .chain(self.mine.heirs.values())
            .chain(self.mine.moves.values());
        for n in named.chain(std::iter::once(&self.mine.leader)) {
            if !n.is_empty() {
                live.entry(n.clone()).or_insert(None);
            }
        }
        live
    }

    /// Feeds `input` at `now`; returns the effects to perform, in order.
    pub fn step(&mut self, now: Now, input: FleetInput) -> Vec<FleetEffect> {
        let mut out = Vec::new();
        self.input(now, input, &mut out);
        out
    }

    fn input(&mut self, now: Now, input: FleetInput, out: &mut Vec<FleetEffect>) {
        match input {
            FleetInput::Tick => self.tick(now, out),
            FleetInput::Reap {
                ended,
                leadership_held,
            } => self.reap(ended, leadership_held, out),
            FleetInput::LeaseLost => self.close_all(StopReason::LeaseLost, out),
            FleetInput::LeaseAcquired { generation } => self.reacquired(generation),
            FleetInput::Closed => {
                self.close_all(StopReason::Closed, out);
                self.done = true;
            }
            FleetInput::Polled(heads) => self.polled(heads, out),
            FleetInput::Buried { node, inherit } => self.heard_death(now, node, inherit, out),
            FleetInput::Overdue => {
                self.keep_vigil(now);
                out.push(FleetEffect::WakeAt(self.next_wake(now.mono_ms)));
            }
            FleetInput::HandOffAsked { cell, to } => self.hand_off_asked(now, cell, to, out),
            FleetInput::Drain => self.drain(now, out),
            FleetInput::DrainDeadline => self.drain_deadline(now, out),
            other => {
                self.outcome(now, other, out);
                self.advance(now, out);
            }
        }
    }

    /// An outcome of a stage's effect: recorded; the round goes on.
    fn outcome(&mut self, now: Now, input: FleetInput, out: &mut Vec<FleetEffect>) {
        match input {
            FleetInput::Record(r) => self.record_read(now, r, out),
            FleetInput::Heads { purpose, heads } => self.heads_read(now, purpose, heads, out),
            FleetInput::Claimed(results) => self.claimed(now, results, out),
            FleetInput::LeadershipClaimed(c) => self.leadership_claimed(now, c, out),
            FleetInput::Adopted { purpose, results } => self.adopted(now, purpose, results, out),
            FleetInput::Receivers(r) => self.receivers = r,
            FleetInput::HandedOff(results) => self.handed_off(now, results, out),
            FleetInput::Released(results) => self.released(results, out),
            FleetInput::Joined(ok) => self.joined = ok,
            FleetInput::LeaseObserved(o) => self.asked_observed(now, o, out),
            FleetInput::Inherits(cells) => self.inherits(now, cells),
            FleetInput::Waited => {}
            FleetInput::LeadershipHanded(_) => {}
            FleetInput::LeaseReleased(shown) => self.lease_released(shown, out),
            FleetInput::Lead(i) => self.lead_input(now, i, out),
            _ => {}
        }
    }

    /// A wake-up: a round begins, unless one is under way (a drain).
    fn tick(&mut self, now: Now, out: &mut Vec<FleetEffect>) {
        if self.busy() || self.done {
            return;
        }
        let at = now.mono_ms;
        self.round_at = at;
        let mut stages = Vec::new();
        if at >= self.next_read {
            stages.push(Stage::Record);
        }
        stages.extend([Stage::Settle, Stage::Asks]);
        if at >= self.next_take {
            stages.extend([Stage::Take, Stage::Shed, Stage::NextTake]);
        }
        stages.extend([Stage::Poll, Stage::Follow, Stage::Lead, Stage::End]);
        self.stages = stages.into();
        self.advance(now, out);
    }

    /// Runs stages until one waits for an outcome, or none is left.
    pub(super) fn advance(&mut self, now: Now, out: &mut Vec<FleetEffect>) {
        if self.leader.as_ref().is_some_and(LeaderCore::busy) {
            return;
        }
        while let Some(stage) = self.stages.pop_front() {
            if self.run_stage(now, stage, out) {
                return;
            }
        }
    }

    /// Runs `stage`; `true` if it waits for an outcome.
    fn run_stage(&mut self, now: Now, stage: Stage, out: &mut Vec<FleetEffect>) -> bool {
        match stage {
            Stage::Record => {
                out.push(FleetEffect::ReadRecord);
                true
            }
            Stage::Settle => self.settle(out),
            Stage::ReadUnsettled(cells) => self.read_unsettled(cells, out),
            Stage::Asks => self.answer_asks(out),
            Stage::AskHandOff(asks) => self.ask_hand_off(asks),
            Stage::Take => self.take(now, out),
            Stage::Claim => self.claim(now, out),
            Stage::Shed => self.shed(now),
            Stage::Release(cells) => self.release(cells, out),
            Stage::NextTake => {
                self.next_take = self.round_at.saturating_add(self.take_every());
                false
            }
            Stage::Poll => self.poll(now, out),
            Stage::Follow => self.follow(now, out),
            Stage::Lead => self.lead(now, out),
            Stage::JoinRead(cells) => self.join_read(cells, out),
            Stage::JoinPost(leader) => self.join_post(now, leader, out),
            Stage::Bury(deaths) => self.bury(deaths, out),
            Stage::End => {
                out.push(FleetEffect::WakeAt(self.next_wake(now.mono_ms)));
                false
            }
            Stage::HandOff(moves, purpose) => self.read_receivers(moves, purpose, out),
            Stage::HandOffSend(moves, purpose) => self.send_hand_offs(moves, purpose, out),
            Stage::Asked(cell, to) => self.asked_check(cell, to, out),
            Stage::AskedSend(..) => false,
            Stage::Drain(leg) => self.drain_leg(now, leg, out),
        }
    }

    /// Forgets the shards that ended on their own; the leadership whose claim ended.
    fn reap(&mut self, ended: Vec<String>, leadership_held: bool, out: &mut Vec<FleetEffect>) {
        for cell in ended {
            if self.held.remove(&cell).is_some() {
                out.push(FleetEffect::Remove {
                    cell: cell.clone(),
                    reason: None,
                });
            }
            self.seen.remove(&cell);
        }
        if !leadership_held && self.leader.take().is_some() {
            self.stages.retain(|s| *s != Stage::Lead);
        }
    }

    /// Stops every shard for `reason`; the leadership too.
    pub(super) fn close_all(&mut self, reason: StopReason, out: &mut Vec<FleetEffect>) {
        let cells: Vec<String> = std::mem::take(&mut self.held).into_keys().collect();
        if !cells.is_empty() {
            self.orphans.extend(cells.iter().cloned());
            out.push(FleetEffect::Close {
                cells,
                reason: reason.clone(),
            });
        }
        for (cell, _) in std::mem::take(&mut self.unsettled) {
            out.push(FleetEffect::Finish {
                cell,
                reason: reason.clone(),
            });
        }
        if self.leader.take().is_some() {
            out.push(FleetEffect::CloseLeadership);
        }
        self.stages.clear();
    }

    /// The lease was taken again as the successor of the one that lapsed.
    fn reacquired(&mut self, generation: String) {
        self.vouched.insert(generation.clone());
        self.generation = generation;
        self.joined = false;
        self.next_leader_check = 0;
    }

    /// The watcher buried a node: take the cells this node inherits; the leader hears of
    /// it in the next round, which comes at once.
    fn heard_death(
        &mut self,
        now: Now,
        node: String,
        inherit: Vec<String>,
        out: &mut Vec<FleetEffect>,
    ) {
        self.inherits(now, inherit);
        if self.leader.is_some() {
            let gone = self.notice(now, NoticeKind::Gone, "", &node);
            self.for_leader.push(gone);
        }
        if self.mine.leader == node {
            self.next_leader_check = 0;
        }
        out.push(FleetEffect::WakeAt(now.mono_ms));
    }

    /// Cells this node inherits from a dead node: taken at the next round.
    fn inherits(&mut self, now: Now, cells: Vec<String>) {
        for cell in cells {
            self.inherit.insert(cell, now.wall_ms);
            self.next_take = 0;
        }
    }

    /// An heir of an overdue node reads its record every poll for a TTL and an interval:
    /// the notice of the death comes within a poll of its confirmation.
    pub(super) fn keep_vigil(&mut self, now: Now) {
        let until = now.mono_ms + self.t.lease.ttl_ms + self.t.interval_ms;
        self.vigil_until = self.vigil_until.max(until);
        self.next_read = self.next_read.min(now.mono_ms + self.t.poll_ms());
    }

    /// How often this node's record is read: every interval, every poll while on vigil.
    pub(super) fn read_every(&self, now_mono: u64) -> u64 {
        if now_mono < self.vigil_until {
            self.t.poll_ms().min(self.t.interval_ms)
        } else {
            self.t.interval_ms
        }
    }

    /// Whether a cell is on its way to or from this node.
    fn pending(&self) -> bool {
        let targets = self.mine.targets.iter();
        targets.clone().any(|c| !self.held.contains_key(c))
            || !self.inherit.is_empty()
            || !self.handed.is_empty()
            || !self.orphans.is_empty()
            || !self.unsettled.is_empty()
            || self.held.keys().any(|c| !self.mine.targets.contains(c))
    }

    /// How often cells are taken and given: every interval, four times as often while a
    /// cell is on its way.
    fn take_every(&self) -> u64 {
        if self.pending() {
            (self.t.interval_ms / 4).max(self.t.poll_ms())
        } else {
            self.t.interval_ms
        }
    }

    /// When the next round is due (the shell also wakes when the lease's authority would
    /// run out).
    pub fn next_wake(&self, now_mono: u64) -> u64 {
        let mut at = self.next_read.min(self.next_take).max(now_mono + 1);
        if self.t.head_poll_ms.is_some() {
            at = at.min(self.next_poll.max(now_mono + 1));
        }
        at
    }

    pub(super) fn notice(&self, now: Now, kind: NoticeKind, cell: &str, node: &str) -> Notice {
        Notice {
            at: now.wall_ms,
            kind,
            cell: cell.to_owned(),
            node: node.to_owned(),
        }
    }

    /// The oldest notice still acted on (wall ms).
    pub(super) fn oldest_notice(&self, now: Now) -> u64 {
        now.wall_ms.saturating_sub(self.t.notices_ms)
    }

    /// Records the owner this node now knows `cell` has, and announces it when it changed:
    /// the `NewOwner` events alone always name the last owner this node knows.
    pub(super) fn learned(&mut self, cell: &str, seen: Seen, out: &mut Vec<FleetEffect>) {
        let before = self.seen.insert(cell.to_owned(), seen.clone());
        if before.as_ref() != Some(&seen) {
            out.push(FleetEffect::NewOwner {
                cell: cell.to_owned(),
                owner: seen.owner,
                epoch: seen.epoch,
            });
        }
    }

    /// Records what a read of `cell`'s head showed: a head naming this node with no claim
    /// of it is an orphan, adopted or claimed back.
    pub(super) fn saw(&mut self, cell: &str, seen: Seen, out: &mut Vec<FleetEffect>) {
        let mine = seen.owner.as_deref() == Some(self.me.as_str());
        self.learned(cell, seen, out);
        if mine && !self.held.contains_key(cell) && !self.unsettled.contains_key(cell) {
            self.orphans.insert(cell.to_owned());
        } else {
            self.orphans.remove(cell);
        }
    }

    /// A claim landed: the shard starts.
    pub(super) fn install(
        &mut self,
        now: Now,
        cell: &str,
        epoch: u64,
        resumed: bool,
        out: &mut Vec<FleetEffect>,
    ) {
        self.orphans.remove(cell);
        let holding = Holding {
            epoch,
            since: now.mono_ms,
        };
        self.held.insert(cell.to_owned(), holding);
        out.push(FleetEffect::Install {
            cell: cell.to_owned(),
            resumed,
        });
        let owner = Some(self.me.clone());
        self.learned(cell, Seen { owner, epoch }, out);
    }

    /// Starts a background read of the held cells' heads (and the leadership's).
    fn poll(&mut self, now: Now, out: &mut Vec<FleetEffect>) -> bool {
        let Some(every) = self.t.head_poll_ms else {
            return false;
        };
        if now.mono_ms < self.next_poll {
            return false;
        }
        if !self.polling {
            let mut cells: Vec<String> = self.held.keys().cloned().collect();
            if self.leader.is_some() {
                cells.push(LEADER_CELL.to_owned());
            }
            self.polling = true;
            out.push(FleetEffect::Poll { cells });
        }
        self.next_poll = now.mono_ms.saturating_add(every);
        false
    }

    /// Stops the shards whose head, as a poll read it, is no longer this node's; the
    /// leadership too.
    fn polled(&mut self, heads: Vec<(String, Seen)>, out: &mut Vec<FleetEffect>) {
        self.polling = false;
        for (cell, head) in heads {
            if cell == LEADER_CELL {
                let term = self.leader.as_ref().map_or(0, LeaderCore::term);
                if !head.is_owned_by(&self.me, term) && self.leader.take().is_some() {
                    out.push(FleetEffect::CloseLeadership);
                }
                continue;
            }
            let Some(h) = self.held.get(&cell) else {
                continue;
            };
            if head.is_owned_by(&self.me, h.epoch) {
                continue;
            }
            self.held.remove(&cell);
            let reason = StopReason::Superseded { epoch: head.epoch };
            out.push(FleetEffect::Close {
                cells: vec![cell.clone()],
                reason,
            });
            self.saw(&cell, head, out);
        }
    }

    /// Reads every cell's head not held (opt-in).
    fn follow(&mut self, now: Now, out: &mut Vec<FleetEffect>) -> bool {
        let Some(every) = self.t.follow_ms else {
            return false;
        };
        if now.mono_ms < self.next_follow {
            return false;
        }
        self.next_follow = now.mono_ms.saturating_add(every);
        let cells: Vec<String> = self
            .cells
            .names()
            .iter()
            .filter(|c| !self.held.contains_key(*c))
            .cloned()
            .collect();
        out.push(FleetEffect::ReadHeads {
            cells,
            purpose: HeadsFor::Follow,
        });
        true
    }

    fn heads_read(
        &mut self,
        now: Now,
        purpose: HeadsFor,
        heads: Vec<(String, Seen)>,
        out: &mut Vec<FleetEffect>,
    ) {
        match purpose {
            HeadsFor::Settle => self.settle_by_heads(heads, out),
            HeadsFor::Take => self.free_by_heads(now, heads, out),
            HeadsFor::Follow => {
                for (cell, head) in heads {
                    self.saw(&cell, head, out);
                }
            }
            HeadsFor::Join => self.join(heads),
        }
    }
}
