//! The world the fleet's real step machines run in: nodes (each a [`FleetCore`] and its
//! watcher), the store, time in ticks, and the chaos — node deaths, drains, joins, and
//! store answers lost (the request applied, its answer not) or failed (not applied).
//!
//! A node's activation is atomic: the core's effects are answered one by one from the
//! store, as the fleet's shell answers them, with at most one fault at a chosen effect.
//! Nodes and watchers act in any order within a tick; time advances when nobody has work
//! due.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use fence_core::decide::{Now, Observation};
use fence_core::{Error, LeaseConfig};
use fence_fleet::decide::record::{Notice, NoticeKind, Watched};
use fence_fleet::decide::watch::{burial, Schedule, WatchStep};
use fence_fleet::decide::{
    Claimed, FleetCore, FleetEffect, FleetInput, HandOffOutcome, LeadEffect, LeadInput, Read,
    Timing,
};
use fence_fleet::LEADER_CELL;
use stateright::{Model, Property};

use super::store::{Lease, Rec, Store};
use super::{props, ModelConfig};

pub const WALL: u64 = 1_700_000_000_000;

/// How a store answer goes wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Applied, but the answer is lost (an error that may have landed).
    Lost,
    /// Not applied, and said so (or the read failed).
    Failed,
}

/// A fault at the `at`-th store effect of an activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    pub at: u8,
    pub kind: FaultKind,
}

/// What happens next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes one tick (leases of running nodes are renewed).
    Tick,
    /// Node `n`'s task runs what is due: news from its watcher, a round.
    Act(u8, Option<Fault>),
    /// Node `n` dies (SIGKILL): its lease stays as it was.
    Kill(u8),
    /// Node `n` drains.
    Drain(u8, Option<Fault>),
    /// Node `n` starts (a join).
    Start(u8),
}

/// What the watcher tells its node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum News {
    Buried { node: String, inherit: Vec<String> },
    Overdue,
}

/// A watched node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Watching {
    pub heirs: BTreeMap<String, String>,
    pub schedule: Schedule,
    pub tombstoned: bool,
}

/// A node's watcher: its duty, and its observer's memory of every lease it read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Watcher {
    pub leader: String,
    pub watching: BTreeMap<String, Watching>,
    pub seen: BTreeMap<String, Observation>,
}

/// A running node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Up {
    pub core: FleetCore,
    pub generation: String,
    pub wake: u64,
    pub news: Vec<News>,
    pub watcher: Watcher,
    /// A poll of these heads is under way (answered at the end of the activation).
    pub polling: Option<Vec<String>>,
    pub started: u32,
}

/// A node's life.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    Down,
    Up(Box<Up>),
    Dead,
    Left,
}

impl Node {
    pub fn up(&self) -> Option<&Up> {
        match self {
            Node::Up(u) => Some(u),
            _ => None,
        }
    }
}

/// What is left of the chaos.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    pub faults: u8,
    pub kills: u8,
    pub drains: u8,
}

/// What the properties need of the past.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hist {
    /// The last node each cell's head named.
    pub last_owner: BTreeMap<String, String>,
    /// The first move of a cell the rules forbid.
    pub bad_move: Option<String>,
    /// The nodes a leader placed each cell on, and those its head ever named.
    pub placed: BTreeMap<String, BTreeSet<String>>,
    pub named: BTreeMap<String, BTreeSet<String>>,
    /// Cells given up (a hand-off, a release, a leave), and the tick they were.
    pub given: BTreeMap<String, u32>,
    /// Cells taken over from a dead node.
    pub took_over: bool,
    /// A drain handed a cell off.
    pub drain_handed: bool,
    /// A joiner took a cell.
    pub joiner_took: bool,
    /// A hand-off without an answer was settled.
    pub settled: bool,
}

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    pub tick: u32,
    /// The node whose activation is under way (taken out of `nodes` meanwhile), and
    /// whether it is leaving: between steps, `None`.
    pub acting: Option<(usize, bool)>,
    pub nodes: Vec<Node>,
    pub store: Store,
    pub budget: Budget,
    pub hist: Hist,
}

/// The model: a scope, and the names.
#[derive(Clone, Debug)]
pub struct FleetModel {
    pub cfg: ModelConfig,
    pub cells: Vec<String>,
    pub timing: Timing,
}

/// The node's name.
pub fn node_name(n: usize) -> String {
    format!("n{n}")
}

fn index(node: &str) -> usize {
    node.trim_start_matches('n').parse().unwrap_or(usize::MAX)
}

/// An activation's store effects, and the one fault among them.
struct Io {
    count: u8,
    fault: Option<Fault>,
}

impl Io {
    /// The fault of the next store effect, if it is the one.
    fn next(&mut self) -> Option<FaultKind> {
        let k = self.count;
        self.count = self.count.saturating_add(1);
        self.fault.filter(|f| f.at == k).map(|f| f.kind)
    }
}

impl FleetModel {
    pub fn new(cfg: ModelConfig) -> Self {
        let cells = (0..cfg.cells).map(|c| format!("c{c}")).collect();
        let t = cfg.tick_ms;
        let timing = Timing {
            interval_ms: t,
            settle_ms: t,
            min_hold_ms: 2 * t,
            head_poll_ms: Some(t),
            scan_ms: 10 * t,
            follow_ms: None,
            notices_ms: 60_000,
            lease: LeaseConfig::with_ttl_ms(3 * t),
        };
        FleetModel { cfg, cells, timing }
    }

    pub fn ttl(&self) -> u64 {
        self.timing.lease.ttl_ms
    }

    pub fn now(&self, w: &World) -> Now {
        let mono_ms = u64::from(w.tick) * self.cfg.tick_ms;
        Now {
            mono_ms,
            wall_ms: WALL + mono_ms,
        }
    }

    pub fn chaos(&self, w: &World) -> bool {
        w.tick < self.cfg.chaos_ticks
    }

    pub fn horizon(&self) -> u32 {
        self.cfg.chaos_ticks + self.cfg.settle_ticks
    }

    fn start(&self, w: &mut World, n: usize) {
        let me = node_name(n);
        let generation = format!("{me}-g");
        let now = self.now(w);
        let lease = Lease {
            generation: generation.clone(),
            version: 0,
            renewed_mono: now.mono_ms,
            released: false,
        };
        w.store.leases.insert(me.clone(), lease);
        let rec = w.store.records.entry(me.clone()).or_default();
        rec.generation = generation.clone();
        rec.leaving = false;
        let core = FleetCore::new(
            &me,
            self.cells.clone(),
            self.timing.clone(),
            &generation,
            None,
        );
        let up = Up {
            core: core.with_flaws(self.cfg.flaws()),
            generation,
            wake: now.mono_ms,
            news: Vec::new(),
            watcher: Watcher::default(),
            polling: None,
            started: w.tick,
        };
        w.nodes[n] = Node::Up(Box::new(up));
    }

    fn node_due(&self, w: &World, n: usize) -> bool {
        let now = self.now(w).mono_ms;
        w.nodes[n]
            .up()
            .is_some_and(|u| !u.news.is_empty() || u.wake <= now)
    }

    fn watch_due(&self, w: &World, n: usize) -> bool {
        let now = self.now(w).mono_ms;
        let due = |u: &Up| u.watcher.watching.values().any(|x| x.schedule.due(now));
        w.nodes[n].up().is_some_and(due)
    }

    /// The faults an activation may take now.
    fn faults(&self, w: &World) -> Vec<Option<Fault>> {
        let mut out = vec![None];
        if w.budget.faults > 0 && self.chaos(w) {
            for at in 0..self.cfg.fault_depth {
                for kind in [FaultKind::Lost, FaultKind::Failed] {
                    out.push(Some(Fault { at, kind }));
                }
            }
        }
        out
    }

    fn tick(&self, w: &mut World) {
        w.tick += 1;
        let now = self.now(w).mono_ms;
        for (n, node) in w.nodes.iter().enumerate() {
            if node.up().is_some() {
                if let Some(l) = w.store.leases.get_mut(&node_name(n)) {
                    l.version += 1;
                    l.renewed_mono = now;
                }
            }
        }
    }

    /// Runs `inputs` through node `n`'s core, answering its effects from the store.
    fn activate(&self, w: &mut World, n: usize, inputs: Vec<FleetInput>, io: &mut Io) {
        let Node::Up(mut up) = std::mem::replace(&mut w.nodes[n], Node::Down) else {
            return;
        };
        w.acting = Some((n, up.core.is_leaving()));
        let mut queue: VecDeque<FleetInput> = inputs.into();
        let mut left = false;
        loop {
            while let Some(input) = queue.pop_front() {
                let now = self.now(w);
                for effect in up.core.step(now, input) {
                    if matches!(effect, FleetEffect::Drained { .. }) {
                        left = true;
                    }
                    if let Some(next) = self.perform(w, n, &mut up, effect, io) {
                        queue.push_back(next);
                    }
                }
            }
            match up.polling.take() {
                Some(cells) => {
                    let heads = cells.iter().map(|c| (c.clone(), w.store.head(c))).collect();
                    queue.push_back(FleetInput::Polled(heads));
                }
                None => break,
            }
        }
        w.acting = None;
        if left {
            self.left(w, n);
        } else {
            w.nodes[n] = Node::Up(up);
        }
    }

    /// A drained node is gone: a cell whose head still names it was given up now.
    fn left(&self, w: &mut World, n: usize) {
        let me = node_name(n);
        for c in &self.cells {
            if w.store.heads.get(c).and_then(|h| h.owner.as_deref()) == Some(me.as_str()) {
                w.hist.given.entry(c.clone()).or_insert(w.tick);
            }
        }
        w.nodes[n] = Node::Left;
    }

    /// Performs one effect of node `n`; its answer.
    fn perform(
        &self,
        w: &mut World,
        n: usize,
        up: &mut Up,
        effect: FleetEffect,
        io: &mut Io,
    ) -> Option<FleetInput> {
        let me = node_name(n);
        let now = self.now(w);
        match effect {
            FleetEffect::ReadRecord => {
                let read = match (io.next(), w.store.records.get(&me)) {
                    (Some(_), _) => Read::Failed,
                    (None, Some(r)) => Read::Found(r.assignment(&me)),
                    (None, None) => Read::Absent,
                };
                Some(FleetInput::Record(read))
            }
            FleetEffect::WriteOwn { leaving } => {
                if io.next() != Some(FaultKind::Failed) {
                    let rec = w.store.records.entry(me).or_default();
                    rec.generation = up.generation.clone();
                    rec.leaving = leaving;
                }
                None
            }
            FleetEffect::ReadHeads { cells, purpose } => {
                let heads = match io.next() {
                    Some(_) => Vec::new(),
                    None => cells.iter().map(|c| (c.clone(), w.store.head(c))).collect(),
                };
                Some(FleetInput::Heads { purpose, heads })
            }
            FleetEffect::Poll { cells } => {
                up.polling = Some(cells);
                None
            }
            FleetEffect::Claim { cells } => {
                Some(FleetInput::Claimed(self.claim(w, n, up, cells, io)))
            }
            FleetEffect::Adopt { cells, purpose } => {
                let fault = io.next();
                let results = cells
                    .into_iter()
                    .map(|c| {
                        let r = match fault {
                            Some(FaultKind::Failed) => None,
                            _ => w.store.adopt(&c, &me, &up.generation),
                        };
                        let r = r.filter(|_| fault.is_none()).ok_or(true);
                        (c, r)
                    })
                    .collect();
                Some(FleetInput::Adopted { purpose, results })
            }
            FleetEffect::ReadReceivers { nodes } => {
                let ready = match io.next() {
                    Some(_) => BTreeMap::new(),
                    None => receivers(&w.store, nodes),
                };
                Some(FleetInput::Receivers(ready))
            }
            FleetEffect::HandOff { jobs, .. } => {
                Some(FleetInput::HandedOff(self.hand_off(w, n, up, jobs, io)))
            }
            FleetEffect::Release { cells } => {
                let fault = io.next();
                let held: BTreeMap<&str, u64> = up.core.held().collect();
                let mut results = Vec::new();
                for c in &cells {
                    let epoch = held.get(c.as_str()).copied().unwrap_or(0);
                    let done = fault != Some(FaultKind::Failed) && w.store.release(c, &me, epoch);
                    if done {
                        w.hist.given.insert(c.clone(), w.tick);
                    }
                    let r = if done && fault.is_none() {
                        Ok(())
                    } else {
                        Err(true)
                    };
                    results.push((c.clone(), r));
                }
                Some(FleetInput::Released(results))
            }
            FleetEffect::Post { to } => {
                if io.next() != Some(FaultKind::Failed) {
                    for (node, notices) in to {
                        w.store.post(&node, &notices);
                    }
                }
                None
            }
            FleetEffect::Duty { watched, leader } => {
                follow_duty(&mut up.watcher, &me, watched, leader);
                None
            }
            FleetEffect::ObserveLease { node } => {
                let o = w.store.observe(&node, self.ttl(), WALL);
                let seen =
                    Observation::update(up.watcher.seen.get(&node), o, now.mono_ms, now.mono_ms);
                Some(FleetInput::LeaseObserved(Some(seen)))
            }
            FleetEffect::ClaimLeadership => {
                let vouched: BTreeSet<String> = up.core.vouched().cloned().collect();
                let c = match io.next() {
                    Some(FaultKind::Failed) => Claimed::Failed,
                    f => {
                        let c = w.store.claim(
                            LEADER_CELL,
                            &me,
                            &up.generation,
                            &vouched,
                            now.mono_ms,
                            self.ttl(),
                        );
                        if f.is_some() {
                            Claimed::Failed
                        } else {
                            c
                        }
                    }
                };
                Some(FleetInput::LeadershipClaimed(c))
            }
            FleetEffect::Join { leader, notice } => {
                let ok = io.next() != Some(FaultKind::Failed);
                if ok {
                    w.store.post(&leader, &[notice]);
                }
                Some(FleetInput::Joined(ok))
            }
            FleetEffect::ReleaseLeadership => {
                let epoch = w.store.heads.get(LEADER_CELL).map_or(0, |h| h.epoch);
                w.store.release(LEADER_CELL, &me, epoch);
                None
            }
            FleetEffect::HandLeadership {
                to,
                generation,
                notice,
            } => {
                let epoch = w.store.heads.get(LEADER_CELL).map_or(0, |h| h.epoch);
                let ok = w
                    .store
                    .hand_off(LEADER_CELL, &me, epoch, &to, &generation)
                    .is_some();
                if ok {
                    w.store.post(&to, &[notice]);
                }
                Some(FleetInput::LeadershipHanded(ok))
            }
            FleetEffect::Lead(e) => Some(FleetInput::Lead(self.lead(w, &me, e, io))),
            FleetEffect::Bury(d) => {
                let mine = self.bury(w, &me, &d.node, &d.seen, &d.heirs, false, "", io);
                Some(FleetInput::Inherits(
                    mine.map(|(_, m)| m).unwrap_or_default(),
                ))
            }
            FleetEffect::Wait { .. } => Some(FleetInput::Waited),
            FleetEffect::ReleaseLease => {
                if let Some(l) = w.store.leases.get_mut(&me) {
                    l.released = true;
                    l.version += 1;
                }
                Some(FleetInput::LeaseReleased(true))
            }
            FleetEffect::WakeAt(at) => {
                up.wake = at;
                None
            }
            FleetEffect::Finish { reason, .. } => {
                use fence_fleet::StopReason;
                w.hist.settled |= matches!(
                    reason,
                    StopReason::HandedOff { .. } | StopReason::Superseded { .. }
                );
                None
            }
            _ => None,
        }
    }

    fn claim(
        &self,
        w: &mut World,
        n: usize,
        up: &Up,
        cells: Vec<String>,
        io: &mut Io,
    ) -> Vec<(String, Claimed)> {
        let me = node_name(n);
        w.acting = Some((n, up.core.is_leaving()));
        let now = self.now(w).mono_ms;
        let vouched: BTreeSet<String> = up.core.vouched().cloned().collect();
        let fault = io.next();
        let mut out = Vec::new();
        for c in cells {
            if fault == Some(FaultKind::Failed) {
                out.push((c, Claimed::Failed));
                continue;
            }
            let before = w.store.heads.get(&c).and_then(|h| h.owner.clone());
            let r = w
                .store
                .claim(&c, &me, &up.generation, &vouched, now, self.ttl());
            if matches!(r, Claimed::Held { .. }) {
                self.moved(w, &c, before.as_deref(), &me);
            }
            out.push((c, if fault.is_some() { Claimed::Failed } else { r }));
        }
        out
    }

    fn hand_off(
        &self,
        w: &mut World,
        n: usize,
        up: &Up,
        jobs: Vec<(String, String, String)>,
        io: &mut Io,
    ) -> Vec<(String, String, HandOffOutcome)> {
        let me = node_name(n);
        w.acting = Some((n, up.core.is_leaving()));
        let fault = io.next();
        let held: BTreeMap<&str, u64> = up.core.held().collect();
        let mut out = Vec::new();
        for (cell, to, gen) in jobs {
            let epoch = held.get(cell.as_str()).copied().unwrap_or(0);
            let landed = match fault {
                Some(FaultKind::Failed) => None,
                _ => w.store.hand_off(&cell, &me, epoch, &to, &gen),
            };
            if landed.is_some() {
                self.moved(w, &cell, Some(&me), &to);
                w.hist.given.insert(cell.clone(), w.tick);
                w.hist.drain_handed |= up.core.is_leaving();
            }
            let outcome = match (landed, fault) {
                (Some(_), Some(_)) => HandOffOutcome::Unsettled {
                    error: Error::new(fence_core::ErrorKind::Timeout, "answer lost"),
                },
                (Some(e), None) => HandOffOutcome::Landed(e),
                (None, _) => HandOffOutcome::NotMade {
                    lease_held: true,
                    error: Error::fenced("refused"),
                },
            };
            out.push((cell, to, outcome));
        }
        out
    }

    /// The head of `cell` named `from` and names `to` now: a move the rules must allow —
    /// its node died, left or is leaving, or the balance needed it (the giver above
    /// `ceil(cells / live)`, or the receiver below `floor(cells / live)`).
    fn moved(&self, w: &mut World, cell: &str, from: Option<&str>, to: &str) {
        let last = w.hist.last_owner.insert(cell.to_owned(), to.to_owned());
        if cell == LEADER_CELL {
            return;
        }
        w.hist
            .named
            .entry(cell.to_owned())
            .or_default()
            .insert(to.to_owned());
        let _ = from;
        let Some(from) = last.filter(|l| l != to) else {
            return;
        };
        if w.nodes.get(index(&from)) == Some(&Node::Dead) {
            w.hist.took_over = true;
        }
        if !self.staying(w, &from) {
            return;
        }
        let live = (0..w.nodes.len())
            .filter(|n| self.staying(w, &node_name(*n)))
            .count();
        let m = self.cells.len();
        let (floor, ceil) = (m / live.max(1), m.div_ceil(live.max(1)));
        let count = |node: &str| {
            let named = |c: &String| w.hist.last_owner.get(c).map(String::as_str) == Some(node);
            self.cells.iter().filter(|c| named(c)).count()
        };
        // Counted before the move: the receiver had one less, the giver one more.
        let (giver, receiver) = (count(&from) + 1, count(to).saturating_sub(1));
        let joiner = index(to) >= self.cfg.nodes - self.cfg.joiners;
        w.hist.joiner_took |= joiner;
        // A cell placed on a node that went before it took the cell went to that node's
        // heir, as the placement's rule says: one move more than needed, excused.
        let placed = w.hist.placed.get(cell).into_iter().flatten();
        let never_took = |n: &&String| w.hist.named.get(cell).is_none_or(|s| !s.contains(*n));
        let excused = placed.filter(never_took).any(|n| !self.staying(w, n));
        if giver <= ceil && receiver >= floor && !excused && w.hist.bad_move.is_none() {
            let why = format!("{cell} moved from {from} ({giver} cells) to {to} ({receiver}) at tick {}, with {live} live nodes", w.tick);
            w.hist.bad_move = Some(why);
        }
    }

    /// Whether `node` runs, is not leaving, and its lease is not dead by the claim rule.
    pub fn staying(&self, w: &World, node: &str) -> bool {
        let lease_live = !w.store.lease_dead(node, self.now(w).mono_ms, self.ttl());
        if let Some((n, leaving)) = w.acting.filter(|(n, _)| *n == index(node)) {
            return n == index(node) && !leaving && lease_live;
        }
        let up = w.nodes.get(index(node)).and_then(Node::up);
        up.is_some_and(|u| !u.core.is_leaving()) && lease_live
    }

    fn lead(&self, w: &mut World, me: &str, e: LeadEffect, io: &mut Io) -> LeadInput {
        let fault = io.next();
        let now = self.now(w).mono_ms;
        match e {
            LeadEffect::List => LeadInput::Listed(
                fault
                    .is_none()
                    .then(|| w.store.records.keys().cloned().collect()),
            ),
            LeadEffect::ReadRecords(nodes) => LeadInput::Records(
                nodes
                    .into_iter()
                    .map(|n| {
                        let a = w
                            .store
                            .records
                            .get(&n)
                            .filter(|_| fault.is_none())
                            .map(|r| r.assignment(&n));
                        (n, a)
                    })
                    .collect(),
            ),
            LeadEffect::ReadLeases(nodes) => {
                let reads = nodes
                    .into_iter()
                    .map(|n| {
                        let o = fault
                            .is_none()
                            .then(|| w.store.observe(&n, self.ttl(), WALL));
                        (n, o)
                    })
                    .collect();
                LeadInput::Leases {
                    sent_mono: now,
                    reads,
                }
            }
            LeadEffect::Publish { term, parts } => {
                let mut out = Vec::new();
                for (n, part) in parts {
                    for c in &part.cells {
                        w.hist
                            .placed
                            .entry(c.clone())
                            .or_default()
                            .insert(n.clone());
                    }
                    if fault != Some(FaultKind::Failed) {
                        let rec = w.store.records.entry(n.clone()).or_default();
                        rec.term = term;
                        rec.leader = me.to_owned();
                        rec.cells = part.cells;
                        rec.heirs = part.heirs;
                        rec.moves = part.moves;
                        rec.watch = part.watch;
                    }
                    out.push((n, fault.is_none()));
                }
                LeadInput::Published(out)
            }
        }
    }

    /// Tombstones `dead`'s lease (as it was seen) and tells its heirs, as the fleet's
    /// tombstoner does; `None` to try again.
    #[allow(clippy::too_many_arguments)]
    fn bury(
        &self,
        w: &mut World,
        me: &str,
        dead: &str,
        seen: &Observation,
        heirs: &BTreeMap<String, String>,
        tombstoned: bool,
        leader: &str,
        io: &mut Io,
    ) -> Option<(bool, Vec<String>)> {
        let lease = seen.lease.as_ref()?;
        let released = lease.record.is_released() && !tombstoned;
        if !lease.record.is_released() {
            if io.next().is_some() {
                return None;
            }
            if !w.store.tombstone(dead, lease.version.as_str()) {
                return Some((false, Vec::new()));
            }
        }
        let known = |c: &str| self.cells.iter().any(|x| x == c);
        let at = self.now(w).wall_ms;
        let (told, mine) = burial(me, dead, heirs, known, released, leader, at);
        for (node, notices) in told {
            w.store.post(&node, &notices);
        }
        Some((!released, mine))
    }

    /// Node `n`'s watcher reads the leases due, as the fleet's watcher does.
    fn watch(&self, w: &mut World, n: usize, io: &mut Io) {
        let Node::Up(mut up) = std::mem::replace(&mut w.nodes[n], Node::Down) else {
            return;
        };
        let me = node_name(n);
        let now = self.now(w);
        let margin = (self.timing.poll_ms() / 2).max(1);
        let due: Vec<String> = up
            .watcher
            .watching
            .iter()
            .filter(|(_, x)| x.schedule.due(now.mono_ms))
            .map(|(n, _)| n.clone())
            .collect();
        for node in due {
            if io.next().is_some() {
                if let Some(x) = up.watcher.watching.get_mut(&node) {
                    x.schedule.after_failure(now.mono_ms, margin);
                }
                continue;
            }
            let lease = w.store.observe(&node, self.ttl(), WALL);
            let o =
                Observation::update(up.watcher.seen.get(&node), lease, now.mono_ms, now.mono_ms);
            up.watcher.seen.insert(node.clone(), o.clone());
            let Some(x) = up.watcher.watching.get_mut(&node) else {
                continue;
            };
            match x
                .schedule
                .on_read(&o, now, &self.timing.lease, margin, self.timing.scan_ms)
            {
                WatchStep::Wait => {}
                WatchStep::WarnHeirs => {
                    let heirs: BTreeSet<String> = x.heirs.values().cloned().collect();
                    for heir in heirs {
                        if heir == me {
                            up.news.push(News::Overdue);
                        } else {
                            let notice = Notice {
                                at: now.wall_ms,
                                kind: NoticeKind::Suspect,
                                cell: String::new(),
                                node: node.clone(),
                            };
                            w.store.post(&heir, &[notice]);
                        }
                    }
                }
                WatchStep::Bury => {
                    let (heirs, tombstoned) = (x.heirs.clone(), x.tombstoned);
                    let leader = up.watcher.leader.clone();
                    match self.bury(w, &me, &node, &o, &heirs, tombstoned, &leader, io) {
                        Some((t, inherit)) => {
                            if let Some(x) = up.watcher.watching.get_mut(&node) {
                                x.tombstoned |= t;
                            }
                            up.news.push(News::Buried { node, inherit });
                        }
                        None => {
                            if let Some(x) = up.watcher.watching.get_mut(&node) {
                                x.schedule.after_failure(now.mono_ms, margin);
                            }
                        }
                    }
                }
            }
        }
        w.nodes[n] = Node::Up(up);
    }

    /// Whether every cell is held by exactly one live node, named by its head at its epoch,
    /// and every live node holds its fair share.
    pub fn settled(&self, w: &World) -> bool {
        let live: Vec<usize> = (0..w.nodes.len())
            .filter(|n| self.staying(w, &node_name(*n)))
            .collect();
        if live.is_empty() {
            return true;
        }
        let m = self.cells.len();
        let (floor, ceil) = (m / live.len(), m.div_ceil(live.len()));
        let holds = |n: usize, c: &str| {
            let epoch = w.store.heads.get(c).map_or(0, |h| h.epoch);
            w.nodes[n]
                .up()
                .is_some_and(|u| u.core.held().any(|(x, e)| x == c && e == epoch))
        };
        let each_once = self.cells.iter().all(|c| {
            let owner = w.store.heads.get(c).and_then(|h| h.owner.clone());
            let holders: Vec<usize> = (0..w.nodes.len())
                .filter(|n| {
                    w.nodes[*n]
                        .up()
                        .is_some_and(|u| u.core.held().any(|(x, _)| x == c))
                })
                .collect();
            holders.len() == 1
                && owner == Some(node_name(holders[0]))
                && live.contains(&holders[0])
                && holds(holders[0], c)
        });
        let fair = live.iter().all(|n| {
            let k = w.nodes[*n].up().map_or(0, |u| u.core.held().count());
            (floor..=ceil).contains(&k)
        });
        each_once && fair
    }

    /// Whether `cell`'s head names a node that was killed.
    pub fn owner_dead(&self, w: &World, cell: &str) -> bool {
        let owner = w.store.heads.get(cell).and_then(|h| h.owner.as_deref());
        owner.is_some_and(|o| w.nodes.get(index(o)) == Some(&Node::Dead))
    }

    /// Whether `cell` is held: its head names a running node whose core holds it at that
    /// epoch.
    pub fn held(&self, w: &World, cell: &str) -> bool {
        let Some(h) = w.store.heads.get(cell) else {
            return false;
        };
        let Some(owner) = &h.owner else {
            return false;
        };
        let up = w.nodes.get(index(owner)).and_then(Node::up);
        up.is_some_and(|u| u.core.held().any(|(c, e)| c == cell && e == h.epoch))
    }
}

/// The generation of each receiver that takes cells now: its record names one, and it is
/// not leaving.
fn receivers(store: &Store, nodes: BTreeSet<String>) -> BTreeMap<String, String> {
    let ready = |n: &String| {
        let r: &Rec = store.records.get(n)?;
        (!r.leaving && !r.generation.is_empty()).then(|| r.generation.clone())
    };
    nodes
        .iter()
        .filter_map(|n| Some((n.clone(), ready(n)?)))
        .collect()
}

/// The watcher's new duty, as the fleet's watcher follows it.
fn follow_duty(w: &mut Watcher, me: &str, watched: Vec<Watched>, leader: String) {
    let listed: BTreeSet<String> = watched.iter().map(|x| x.node.clone()).collect();
    w.watching.retain(|n, _| listed.contains(n));
    for x in watched.into_iter().filter(|x| x.node != me) {
        let entry = w.watching.entry(x.node.clone()).or_insert(Watching {
            heirs: BTreeMap::new(),
            schedule: Schedule::default(),
            tombstoned: false,
        });
        entry.heirs = x.heirs;
    }
    w.leader = leader;
}

impl Model for FleetModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let mut w = World {
            tick: 0,
            acting: None,
            nodes: vec![Node::Down; self.cfg.nodes],
            store: Store::default(),
            budget: Budget {
                faults: self.cfg.faults,
                kills: self.cfg.kills,
                drains: self.cfg.drains,
            },
            hist: Hist::default(),
        };
        for n in 0..self.cfg.nodes - self.cfg.joiners {
            self.start(&mut w, n);
        }
        vec![w]
    }

    fn actions(&self, w: &World, out: &mut Vec<Action>) {
        // Any node with work due may go first while the chaos lasts; after it, the nodes
        // act in turn (the settling is deterministic: every path to the end is checked,
        // not every order of the same steps).
        let due = (0..w.nodes.len()).filter(|n| self.node_due(w, *n) || self.watch_due(w, *n));
        let due: Vec<usize> = if self.chaos(w) {
            due.collect()
        } else {
            due.take(1).collect()
        };
        let busy = !due.is_empty();
        for n in due {
            out.extend(self.faults(w).into_iter().map(|f| Action::Act(n as u8, f)));
        }
        if self.chaos(w) {
            for (n, node) in w.nodes.iter().enumerate() {
                let up = node.up().is_some_and(|u| !u.core.is_leaving());
                if up && w.budget.kills > 0 {
                    out.push(Action::Kill(n as u8));
                }
                if up && w.budget.drains > 0 {
                    out.extend(
                        self.faults(w)
                            .into_iter()
                            .map(|f| Action::Drain(n as u8, f)),
                    );
                }
                if *node == Node::Down {
                    out.push(Action::Start(n as u8));
                }
            }
        }
        if !busy && w.tick < self.horizon() {
            out.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut w = last.clone();
        let spend = |w: &mut World, f: Option<Fault>| {
            if f.is_some() {
                w.budget.faults -= 1;
            }
        };
        match action {
            Action::Tick => self.tick(&mut w),
            Action::Act(n, f) => {
                spend(&mut w, f);
                let n = n as usize;
                // The watcher's reads first: its news reach the task in the same step.
                let mut io = Io { count: 0, fault: f };
                self.watch(&mut w, n, &mut io);
                let Node::Up(up) = &mut w.nodes[n] else {
                    return None;
                };
                let mut inputs: Vec<FleetInput> = up
                    .news
                    .drain(..)
                    .map(|x| match x {
                        News::Buried { node, inherit } => FleetInput::Buried { node, inherit },
                        News::Overdue => FleetInput::Overdue,
                    })
                    .collect();
                if up.wake <= self.now(last).mono_ms {
                    inputs.push(FleetInput::Tick);
                }
                self.activate(&mut w, n, inputs, &mut io);
            }
            Action::Kill(n) => {
                w.budget.kills -= 1;
                w.nodes[n as usize] = Node::Dead;
                // A cell given to it is now a dead node's: the failover's bound applies.
                let dead = node_name(n as usize);
                let heads = &w.store.heads;
                let named = |c: &String| heads.get(c).and_then(|h| h.owner.as_ref()) == Some(&dead);
                w.hist.given.retain(|c, _| !named(c));
            }
            Action::Drain(n, f) => {
                w.budget.drains -= 1;
                spend(&mut w, f);
                let mut io = Io { count: 0, fault: f };
                self.activate(&mut w, n as usize, vec![FleetInput::Drain], &mut io);
            }
            Action::Start(n) => self.start(&mut w, n as usize),
        }
        self.settle_given(&mut w);
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        props::all()
    }

    fn within_boundary(&self, w: &World) -> bool {
        w.tick <= self.horizon()
    }
}

impl FleetModel {
    /// A cell given up is taken off the list once it is held again.
    fn settle_given(&self, w: &mut World) {
        let held: Vec<String> = w
            .hist
            .given
            .keys()
            .filter(|c| self.held(w, c))
            .cloned()
            .collect();
        for c in held {
            w.hist.given.remove(&c);
        }
    }
}
