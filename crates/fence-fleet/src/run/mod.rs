//! The fleet's task: one round after another of reading this node's assignment, taking and
//! giving cells, watching, polling heads and (on one node) leading. Protocol glue; every
//! decision it makes is guarded by the core's epochs.

mod give;
mod lead;
mod tasks;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use fence_core::decide::Now;
use fence_core::record::CellHead;
use fence_core::runtime::{CellClaim, Fence, LeaseKeeper};
use fence_core::{Error, ErrorKind};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::assignment::{self, Assignment, Notice, NoticeKind};
use crate::cells::Cells;
use crate::fleet::{acquire, lock, Command, Drained, Inner, Settings};
use crate::follow::read_heads;
use crate::leader::{Leader, LEADER_CELL};
use crate::membership::{Member, Members};
use crate::shard::{CellEvent, End, Shard, StopReason};
use crate::watch::{Duty, News, Tombstoner, Watcher};
use tasks::{guard_lease, watch_claim};

/// A held cell as the task keeps it.
struct Held {
    shard: Shard,
    since_mono: u64,
    watcher: JoinHandle<()>,
}

/// A hand-off whose outcome is not known yet (its write got no answer): settled by evidence
/// before anything is told.
struct Unsettled {
    end: Arc<End>,
    to: String,
    epoch: u64,
}

/// The last head this node read of a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    owner: Option<String>,
    epoch: u64,
}

impl Seen {
    fn of(head: Option<&CellHead>) -> Seen {
        Seen {
            owner: head.and_then(|h| h.node.clone()),
            epoch: head.map_or(0, |h| h.epoch),
        }
    }
}

/// What this node's assignment record says, as last read.
#[derive(Default)]
struct Mine {
    term: u64,
    leader: String,
    targets: BTreeSet<String>,
    heirs: BTreeMap<String, String>,
    moves: BTreeMap<String, String>,
}

pub(crate) struct Run {
    inner: Arc<Inner>,
    fence: Fence,
    s: Settings,
    lease: LeaseKeeper,
    /// Lease generations whose cells this process may resume at their epoch: its own, and a
    /// predecessor the caller vouched for.
    vouched: HashSet<String>,
    cells: Arc<Cells>,
    held: BTreeMap<String, Held>,
    unsettled: BTreeMap<String, Unsettled>,
    seen: HashMap<String, Seen>,
    /// Cells the store names as this node's with no claim of this process.
    orphans: BTreeSet<String>,
    mine: Mine,
    /// Cells to take because their node died (cell → since, wall ms).
    inherit: BTreeMap<String, u64>,
    /// Cells handed to this node (cell → since, wall ms).
    handed: BTreeMap<String, u64>,
    /// Cells another node asked for (cell → asker).
    asked: BTreeMap<String, String>,
    /// Notices acted on, and when they were written.
    processed: HashSet<Notice>,
    /// Target cells held by another node, and since when (monotonic ms).
    waiting: HashMap<String, u64>,
    asked_at: HashMap<String, u64>,
    /// Whom this node's watcher watches (its task reads leases on a schedule of its own).
    duty: watch::Sender<Duty>,
    news: mpsc::UnboundedReceiver<News>,
    /// Until when (monotonic ms) the record is read every poll: an heir of an overdue node.
    vigil_until: u64,
    tombstoner: Tombstoner,
    /// Results of the head poll running in the background.
    polled_tx: mpsc::UnboundedSender<Polled>,
    polled_rx: mpsc::UnboundedReceiver<Polled>,
    polling: bool,
    leader: Option<Leader>,
    next_leader_check: u64,
    joined: bool,
    next_read: u64,
    next_take: u64,
    next_poll: u64,
    next_follow: u64,
    events: mpsc::UnboundedSender<CellEvent>,
    commands: mpsc::Receiver<Command>,
    lost_tx: mpsc::UnboundedSender<()>,
    lost_rx: mpsc::UnboundedReceiver<()>,
    /// When (monotonic ms) the lease's authority runs out unless renewed, for the task that
    /// stops every shard then even while a round waits on the store.
    expiry: watch::Sender<u64>,
    /// A drain was answered while the lease was lost: the task ends.
    done: bool,
}

/// What a head poll read: each cell's head (failed reads left out).
type Polled = Vec<(String, Option<CellHead>)>;

enum Wake {
    Command(Command),
    Closed,
    Lost,
    News(News),
    Polled(Polled),
    Tick,
}

impl Run {
    pub(crate) fn new(
        inner: Arc<Inner>,
        s: Settings,
        lease: LeaseKeeper,
        cells: Arc<Cells>,
        events: mpsc::UnboundedSender<CellEvent>,
        commands: mpsc::Receiver<Command>,
    ) -> Run {
        let fence = lease.fence().clone();
        let mut vouched: HashSet<String> = s.predecessor.iter().cloned().collect();
        vouched.insert(lease.generation());
        let (lost_tx, lost_rx) = mpsc::unbounded_channel();
        let expiry = watch::channel(u64::MAX).0;
        let guard = guard_lease(
            inner.clone(),
            fence.clone(),
            expiry.subscribe(),
            lost_tx.clone(),
        );
        tokio::spawn(guard);
        let cfg = fence.config();
        let bound_ms = cfg
            .attempt_max_ms
            .min(s.interval_ms)
            .max(cfg.attempt_min_ms);
        let tombstoner = Tombstoner {
            fence: fence.clone(),
            known: cells.clone(),
            bound_ms,
            notices_ms: s.notices_ms,
        };
        let duty = watch::channel(Duty::default()).0;
        let (news_tx, news) = mpsc::unbounded_channel();
        let watcher = Watcher::new(tombstoner.clone(), s.scan_ms, duty.subscribe(), news_tx);
        tokio::spawn(watcher.run());
        let (polled_tx, polled_rx) = mpsc::unbounded_channel();
        Run {
            inner,
            fence,
            s,
            lease,
            vouched,
            cells,
            held: BTreeMap::new(),
            unsettled: BTreeMap::new(),
            seen: HashMap::new(),
            orphans: BTreeSet::new(),
            mine: Mine::default(),
            inherit: BTreeMap::new(),
            handed: BTreeMap::new(),
            asked: BTreeMap::new(),
            processed: HashSet::new(),
            waiting: HashMap::new(),
            asked_at: HashMap::new(),
            duty,
            news,
            vigil_until: 0,
            tombstoner,
            polled_tx,
            polled_rx,
            polling: false,
            leader: None,
            next_leader_check: 0,
            joined: false,
            next_read: 0,
            next_take: 0,
            next_poll: 0,
            next_follow: 0,
            events,
            commands,
            lost_tx,
            lost_rx,
            expiry,
            done: false,
        }
    }

    fn now(&self) -> u64 {
        self.fence.clock().mono_ms()
    }

    fn wall(&self) -> u64 {
        self.fence.clock().wall_ms()
    }

    fn me(&self) -> String {
        self.inner.node.clone()
    }

    fn emit(&self, event: CellEvent) {
        let _ = self.events.send(event);
    }

    /// The oldest notice still acted on (wall ms).
    fn oldest_notice(&self) -> u64 {
        self.wall().saturating_sub(self.s.notices_ms)
    }

    pub(crate) async fn run(mut self) {
        let mut wake = 0;
        loop {
            let clock = self.fence.clock().clone();
            let event = tokio::select! {
                biased;
                c = self.commands.recv() => c.map_or(Wake::Closed, Wake::Command),
                _ = self.lost_rx.recv() => Wake::Lost,
                Some(n) = self.news.recv() => Wake::News(n),
                Some(p) = self.polled_rx.recv() => Wake::Polled(p),
                _ = clock.sleep_until(wake) => Wake::Tick,
            };
            if self.done {
                return;
            }
            match event {
                Wake::Command(Command::HandOff { cell, to, reply }) => {
                    let r = self.hand_off_asked(&cell, &to).await;
                    let _ = reply.send(r);
                }
                Wake::Command(Command::Drain { within_ms, reply }) => {
                    let drained = self.drain(within_ms).await;
                    let _ = reply.send(drained);
                    return;
                }
                Wake::Closed => {
                    self.close_all(StopReason::Closed).await;
                    return;
                }
                Wake::Lost => {
                    while self.lost_rx.try_recv().is_ok() {}
                    self.reap().await;
                }
                Wake::News(News::Buried { node, inherit }) => {
                    self.heard_death(node, inherit).await;
                    wake = self.now();
                }
                Wake::News(News::Overdue) => self.keep_vigil(),
                Wake::Polled(heads) => {
                    self.polling = false;
                    self.polled(heads).await;
                }
                Wake::Tick => wake = self.round().await,
            }
            if self.done {
                return;
            }
        }
    }

    /// One round; returns when the next one is due.
    async fn round(&mut self) -> u64 {
        self.reap().await;
        let mut for_leader = Vec::new();
        let now = self.now();
        if now >= self.next_read {
            for_leader = self.read_assignment().await;
            self.next_read = now.saturating_add(self.read_every());
        }
        self.settle_unsettled().await;
        self.answer_asks().await;
        if now >= self.next_take {
            self.take().await;
            self.shed().await;
            self.next_take = now.saturating_add(self.take_every());
        }
        let now = self.now();
        if let Some(every) = self.s.head_poll_ms {
            if now >= self.next_poll {
                self.poll_heads();
                self.next_poll = now.saturating_add(every);
            }
        }
        if let Some(every) = self.s.follow_ms {
            if now >= self.next_follow {
                self.follow_all().await;
                self.next_follow = now.saturating_add(every);
            }
        }
        self.lead(for_leader).await;
        self.publish_members();
        self.next_wake()
    }

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
            (self.s.interval_ms / 4).max(self.fence.config().poll_ms())
        } else {
            self.s.interval_ms
        }
    }

    fn next_wake(&self) -> u64 {
        let now = self.now();
        let mut at = self.next_read.min(self.next_take).max(now + 1);
        if self.s.head_poll_ms.is_some() {
            at = at.min(self.next_poll.max(now + 1));
        }
        // The moment the lease's authority would run out unrenewed: every shard stops then.
        let remaining = u64::try_from(self.lease.remaining().as_millis()).unwrap_or(u64::MAX);
        let expires = now.saturating_add(remaining).saturating_add(1);
        self.expiry
            .send_if_modified(|e| std::mem::replace(e, expires) != expires);
        at.min(expires)
    }

    /// The bound of one request of a round: an attempt's longest, but no longer than an
    /// interval (a slow store must not hold up the rounds that notice losses and deaths).
    fn bound_ms(&self) -> u64 {
        let cfg = self.fence.config();
        cfg.attempt_max_ms
            .min(self.s.interval_ms)
            .max(cfg.attempt_min_ms)
    }

    // ----- the assignment ------------------------------------------------------------------

    /// Reads this node's assignment record; returns the notices addressed to the leader.
    async fn read_assignment(&mut self) -> Vec<Notice> {
        let me = self.me();
        let a = match assignment::read(&self.fence, &me, self.bound_ms()).await {
            Ok(Some((a, _))) => a,
            Ok(None) => Assignment::empty(&me),
            Err(e) => {
                debug!(node = %me, error = %e, "assignment read failed");
                return Vec::new();
            }
        };
        if a.generation != self.lease.generation() || a.leaving {
            self.write_own(false).await;
        }
        self.follow_assignment(&a);
        self.hear(a.notices)
    }

    /// Writes this node's own part of its record: its generation, and whether it is leaving.
    async fn write_own(&self, leaving: bool) -> bool {
        let generation = self.lease.generation();
        let me = self.me();
        let own = |a: &mut Assignment| {
            let changed = a.generation != generation || a.leaving != leaving;
            a.generation = generation.clone();
            a.leaving = leaving;
            changed
        };
        let r = assignment::edit(&self.fence, &me, self.bound_ms(), true, own).await;
        if let Err(e) = &r {
            debug!(node = %me, error = %e, "own record not written");
        }
        r.is_ok()
    }

    fn follow_assignment(&mut self, a: &Assignment) {
        let known = |c: &String| self.cells.contains(c);
        self.mine = Mine {
            term: a.term,
            leader: a.leader.clone(),
            targets: a.cells.iter().filter(|c| known(c)).cloned().collect(),
            heirs: a.heirs.clone(),
            moves: a.moves.clone(),
        };
        let duty = Duty {
            watched: a.watch.clone(),
            leader: a.leader.clone(),
        };
        self.duty
            .send_if_modified(|d| std::mem::replace(d, duty.clone()) != duty);
    }

    /// The watcher buried a node: take the cells this node inherits; the leader hears of it.
    async fn heard_death(&mut self, node: String, inherit: Vec<String>) {
        for cell in inherit {
            self.inherit.insert(cell, self.wall());
            self.next_take = 0;
        }
        let gone = self.notice(NoticeKind::Gone, "", &node);
        if let Some(l) = &mut self.leader {
            l.round(vec![gone]).await;
        }
        if self.mine.leader == node {
            self.next_leader_check = 0;
        }
    }

    /// An heir of an overdue node reads its record every poll for a TTL and an interval:
    /// the notice of the death comes within a poll of its confirmation.
    fn keep_vigil(&mut self) {
        let cfg = self.fence.config();
        let until = self.now() + cfg.ttl_ms + self.s.interval_ms;
        self.vigil_until = self.vigil_until.max(until);
        self.next_read = self.next_read.min(self.now() + cfg.poll_ms());
    }

    /// How often this node's record is read: every interval, every poll while on vigil.
    fn read_every(&self) -> u64 {
        if self.now() < self.vigil_until {
            self.fence.config().poll_ms().min(self.s.interval_ms)
        } else {
            self.s.interval_ms
        }
    }

    /// Takes in new notices; returns those addressed to the leader.
    fn hear(&mut self, notices: Vec<Notice>) -> Vec<Notice> {
        let oldest = self.oldest_notice();
        self.processed.retain(|n| n.at >= oldest);
        self.inherit.retain(|_, at| *at >= oldest);
        self.handed.retain(|_, at| *at >= oldest);
        let mut for_leader = Vec::new();
        for n in notices {
            if n.at < oldest || self.processed.contains(&n) {
                continue;
            }
            self.processed.insert(n.clone());
            let cell_known = self.cells.contains(&n.cell);
            match n.kind {
                // The leadership handed to this node: resumed at the next check, now.
                NoticeKind::Handed if n.cell == LEADER_CELL => self.next_leader_check = 0,
                NoticeKind::Inherit if cell_known => {
                    self.inherit.insert(n.cell, n.at);
                    self.next_take = 0;
                }
                NoticeKind::Handed if cell_known => {
                    self.handed.insert(n.cell, n.at);
                    self.next_take = 0;
                }
                NoticeKind::Ask if cell_known => {
                    self.asked.insert(n.cell, n.node);
                }
                NoticeKind::Suspect => self.keep_vigil(),
                NoticeKind::Joined | NoticeKind::Leaving | NoticeKind::Gone => for_leader.push(n),
                _ => {}
            }
        }
        for_leader
    }

    fn notice(&self, kind: NoticeKind, cell: &str, node: &str) -> Notice {
        Notice {
            at: self.wall(),
            kind,
            cell: cell.to_owned(),
            node: node.to_owned(),
        }
    }

    /// Posts notices, one edit per recipient, `concurrency` at a time.
    async fn post(&self, by_node: BTreeMap<String, Vec<Notice>>) {
        let (fence, oldest, bound) = (&self.fence, self.oldest_notice(), self.bound_ms());
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

    /// What this node knows of the fleet, for [`Fleet::members`](crate::Fleet::members).
    fn publish_members(&self) {
        let mut live: BTreeMap<String, Option<String>> = BTreeMap::new();
        live.insert(self.me(), Some(self.lease.generation()));
        if let Some(l) = &self.leader {
            for (n, m) in &l.members {
                live.insert(
                    n.clone(),
                    Some(m.generation.clone()).filter(|g| !g.is_empty()),
                );
            }
        }
        let duty = self.duty.borrow().clone();
        let named = duty.watched.iter().map(|w| &w.node);
        let named = named.chain(self.mine.heirs.values());
        let named = named.chain(self.mine.moves.values());
        for n in named.chain(std::iter::once(&self.mine.leader)) {
            if !n.is_empty() {
                live.entry(n.clone()).or_insert(None);
            }
        }
        let members = Members {
            live: live
                .into_iter()
                .map(|(node, generation)| Member {
                    node,
                    generation,
                    addr: String::new(),
                })
                .collect(),
            ..Members::default()
        };
        *lock(&self.inner.members) = members;
    }

    // ----- heads ---------------------------------------------------------------------------

    /// Reads the heads of `cells`; failed reads are left out.
    async fn read_heads(&self, cells: Vec<String>) -> Vec<(String, Option<CellHead>)> {
        let heads = read_heads(&self.fence, cells, self.bound_ms(), self.s.concurrency).await;
        let read = heads.into_iter().filter_map(|(cell, head)| match head {
            Ok(h) => Some((cell, h)),
            Err(e) => {
                debug!(cell, error = %e, "head read failed");
                None
            }
        });
        read.collect()
    }

    /// Records the owner this node now knows `cell` has — from a read of its head, or from
    /// this node's own claim, resume, hand-off or release — and announces it when it changed,
    /// so the `NewOwner` events alone always name the last owner this node knows.
    fn learned(&mut self, cell: &str, seen: Seen) {
        let before = self.seen.insert(cell.to_owned(), seen.clone());
        if before.as_ref() != Some(&seen) {
            self.emit(CellEvent::NewOwner {
                cell: cell.to_owned(),
                owner: seen.owner,
                epoch: seen.epoch,
            });
        }
    }

    /// Records what a read of `cell`'s head showed.
    fn saw(&mut self, cell: &str, head: Option<&CellHead>) {
        let seen = Seen::of(head);
        let mine = seen.owner.as_deref() == Some(self.inner.node.as_str());
        self.learned(cell, seen);
        if mine && !self.held.contains_key(cell) && !self.unsettled.contains_key(cell) {
            self.orphans.insert(cell.to_owned());
        } else {
            self.orphans.remove(cell);
        }
    }

    /// Reads every cell's head not held (opt-in: [`FleetBuilder::scan`](crate::FleetBuilder::scan)).
    async fn follow_all(&mut self) {
        let cells: Vec<String> = self
            .cells
            .names()
            .iter()
            .filter(|c| !self.held.contains_key(*c))
            .cloned()
            .collect();
        for (cell, head) in self.read_heads(cells).await {
            self.saw(&cell, head.as_ref());
        }
    }

    // ----- taking cells --------------------------------------------------------------------

    /// Takes what this node should hold: its target cells, cells it inherits from a dead
    /// node, cells handed to it, and cells the store names as its own.
    async fn take(&mut self) {
        let wanted = self.wanted();
        if wanted.is_empty() {
            return;
        }
        let take = self.free_of(wanted).await;
        self.ask_for_waited().await;
        if !take.is_empty() {
            self.claim_all(take).await;
        }
    }

    /// The cells this node should take now, and forgets waiting for the others.
    fn wanted(&mut self) -> BTreeSet<String> {
        let mut wanted: BTreeSet<String> = self.mine.targets.clone();
        wanted.extend(self.inherit.keys().cloned());
        wanted.extend(self.handed.keys().cloned());
        wanted.extend(self.orphans.iter().cloned());
        wanted.retain(|c| !self.held.contains_key(c) && !self.unsettled.contains_key(c));
        self.waiting.retain(|c, _| wanted.contains(c));
        wanted
    }

    /// Those of `wanted` to claim now: with no live owner known, or one this node was told is
    /// gone, or waited for too long (the claim then judges the owner by the observation
    /// rule). A cell a live node holds is read, and waited for: it hands it over.
    async fn free_of(&mut self, wanted: BTreeSet<String>) -> Vec<String> {
        let now = self.now();
        let me = self.me();
        let give_up = 2 * self.s.scan_ms;
        let sure = |run: &Run, c: &String| {
            let waited = run.waiting.get(c).map(|t| now.saturating_sub(*t));
            let seen_free = run
                .seen
                .get(c)
                .map(|s| s.owner.as_ref().is_none_or(|o| *o == me));
            run.inherit.contains_key(c)
                || run.handed.contains_key(c)
                || run.orphans.contains(c)
                || waited.is_some_and(|w| w >= give_up)
                || seen_free == Some(true)
        };
        let (mut take, unsure): (Vec<String>, Vec<String>) =
            wanted.into_iter().partition(|c| sure(self, c));
        for (cell, head) in self.read_heads(unsure).await {
            self.saw(&cell, head.as_ref());
            let owner = head.as_ref().and_then(|h| h.node.as_ref());
            if owner.is_none_or(|o| *o == me) {
                take.push(cell);
            } else {
                self.waiting.entry(cell).or_insert(now);
            }
        }
        take
    }

    /// Claims `cells` (or resumes those a vouched generation wrote), `concurrency` at once.
    async fn claim_all(&mut self, cells: Vec<String>) {
        let vouched: Vec<String> = self.vouched.iter().cloned().collect();
        let results = self
            .lease
            .claim_or_resume_many(cells, self.s.concurrency, &vouched)
            .await;
        for (cell, r) in results {
            match r {
                Ok((claim, resumed)) => {
                    self.inherit.remove(&cell);
                    self.handed.remove(&cell);
                    self.install(claim, resumed);
                }
                Err(e) => {
                    // Read it first next time: its owner may be live, or it moved.
                    self.seen.remove(&cell);
                    self.orphans.remove(&cell);
                    if e.kind() == ErrorKind::Busy {
                        debug!(node = %self.inner.node, cell, error = %e, "not taken yet");
                    } else {
                        warn!(node = %self.inner.node, cell, error = %e, "claim failed");
                    }
                }
            }
        }
    }

    /// Asks the holder of each target cell waited for too long to hand it over (at most once
    /// per `scan`): after a restart, or a hand-off it does not know of, it may not know it
    /// holds the cell.
    async fn ask_for_waited(&mut self) {
        let now = self.now();
        let patience = self.s.settle_ms + self.s.min_hold_ms + 2 * self.s.interval_ms;
        let mut asks: BTreeMap<String, Vec<Notice>> = BTreeMap::new();
        let me = self.me();
        for (cell, since) in &self.waiting {
            let due = now.saturating_sub(*since) >= patience
                && self
                    .asked_at
                    .get(cell)
                    .is_none_or(|t| now.saturating_sub(*t) >= self.s.scan_ms);
            let owner = self.seen.get(cell).and_then(|s| s.owner.clone());
            if let Some(owner) = owner.filter(|o| due && *o != me) {
                let n = self.notice(NoticeKind::Ask, cell, &me);
                asks.entry(owner).or_default().push(n);
            }
        }
        for n in asks.values().flatten() {
            self.asked_at.insert(n.cell.clone(), now);
        }
        if !asks.is_empty() {
            self.post(asks).await;
        }
    }

    /// Adopts `cells` (they name this node), `concurrency` at a time.
    async fn adopt_all(&mut self, cells: Vec<String>) {
        let lease = &self.lease;
        let results: Vec<(String, Result<CellClaim, Error>)> = futures::stream::iter(cells)
            .map(|cell| async move {
                let r = lease.adopt(&cell).await;
                (cell, r)
            })
            .buffer_unordered(self.s.concurrency)
            .collect()
            .await;
        for (cell, r) in results {
            match r {
                Ok(claim) => self.install(claim, true),
                Err(e) => {
                    debug!(node = %self.inner.node, cell, error = %e, "not adopted");
                    self.orphans.remove(&cell);
                    self.seen.remove(&cell);
                }
            }
        }
    }

    fn install(&mut self, claim: CellClaim, resumed: bool) {
        let cell = claim.cell().to_owned();
        let shard = Shard::new(claim, self.events.clone());
        let watcher = tokio::spawn(watch_claim(
            shard.clone(),
            self.fence.clone(),
            self.bound_ms(),
            self.lost_tx.clone(),
        ));
        info!(node = %self.inner.node, cell, epoch = shard.epoch(), resumed, "cell started");
        self.orphans.remove(&cell);
        lock(&self.inner.shards).insert(cell.clone(), shard.clone());
        let epoch = shard.epoch();
        let since_mono = self.now();
        let held = Held {
            shard: shard.clone(),
            since_mono,
            watcher,
        };
        self.held.insert(cell.clone(), held);
        self.emit(CellEvent::Started { shard, resumed });
        let me = Some(self.me());
        self.learned(&cell, Seen { owner: me, epoch });
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

    // ----- losing cells --------------------------------------------------------------------

    /// Stops the shards whose claims ended; handles a lost lease.
    async fn reap(&mut self) {
        if !self.lease.is_held() {
            self.lease_lost().await;
            return;
        }
        let ended: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.shard.stopped().is_some())
            .map(|(c, _)| c.clone())
            .collect();
        for cell in ended {
            self.remove(&cell, None);
            self.seen.remove(&cell);
        }
        if self.leader.as_ref().is_some_and(|l| !l.claim.is_held()) {
            info!(node = %self.inner.node, "no longer leading");
            self.leader = None;
        }
    }

    async fn close_all(&mut self, reason: StopReason) {
        let cells: Vec<String> = self.held.keys().cloned().collect();
        for cell in cells {
            if let Some(h) = self.held.get(&cell) {
                h.shard.end.stop_acting();
                h.shard.claim.close().await;
            }
            self.remove(&cell, Some(reason.clone()));
            self.orphans.insert(cell);
        }
        for (_, u) in std::mem::take(&mut self.unsettled) {
            u.end.finish(reason.clone());
        }
        if let Some(l) = self.leader.take() {
            l.claim.close().await;
        }
    }

    /// The lease is gone: every shard stops, and the lease is taken again as the successor
    /// of the generation that lapsed (this process knows its keeper has stopped).
    async fn lease_lost(&mut self) {
        warn!(node = %self.inner.node, "node lease lost: stopping every cell");
        self.close_all(StopReason::LeaseLost).await;
        let ttl = self.fence.config().ttl_ms;
        let _ = self.fence.clock().timeout(ttl, self.lease.lost()).await;
        let old = self.lease.generation();
        self.vouched.insert(old.clone());
        let settings = Settings {
            predecessor: Some(old),
            ..self.s.clone()
        };
        loop {
            // Commands are answered while the lease is being taken again: nothing is held,
            // so a drain is done at once and a hand-off has nothing to hand.
            let acquired = tokio::select! {
                a = acquire(&self.fence, &settings) => a,
                c = self.commands.recv() => {
                    if !self.answer_while_lost(c) {
                        self.done = true;
                        return;
                    }
                    continue;
                }
            };
            match acquired {
                Ok(lease) => {
                    let generation = lease.generation();
                    info!(node = %self.inner.node, generation, "node lease acquired again");
                    self.vouched.insert(generation.clone());
                    *lock(&self.inner.generation) = generation.clone();
                    self.lease = lease;
                    self.emit(CellEvent::Acquired { generation });
                    self.joined = false;
                    self.next_leader_check = 0;
                    return;
                }
                Err(_) if self.commands.is_closed() => return,
                Err(e) => {
                    warn!(node = %self.inner.node, error = %e, "node lease not acquired; retrying");
                    let d = Duration::from_millis(self.s.interval_ms);
                    self.fence.clock().sleep(d).await;
                }
            }
        }
    }

    /// Answers a command while the lease is lost; `false` when the task should end.
    fn answer_while_lost(&mut self, command: Option<Command>) -> bool {
        match command {
            None => false,
            Some(Command::Drain { reply, .. }) => {
                let drained = Drained {
                    left: self.orphans.clone(),
                    ..Drained::default()
                };
                let _ = reply.send(drained);
                false
            }
            Some(Command::HandOff { cell, reply, .. }) => {
                let e = Error::fenced(format!(
                    "cell {cell}: the node lease is lost; nothing is held to hand off"
                ));
                let _ = reply.send(Err(e));
                true
            }
        }
    }

    /// Starts reading the heads of held cells (and of the leadership cell) in the
    /// background; [`polled`](Self::polled) acts on what it finds.
    fn poll_heads(&mut self) {
        if self.polling {
            return;
        }
        let mut cells: Vec<String> = self.held.keys().cloned().collect();
        if self.leader.is_some() {
            cells.push(LEADER_CELL.to_owned());
        }
        self.polling = true;
        let (fence, bound, n) = (self.fence.clone(), self.bound_ms(), self.s.concurrency);
        let tx = self.polled_tx.clone();
        tokio::spawn(async move {
            let heads = read_heads(&fence, cells, bound, n).await;
            let read = heads.into_iter().filter_map(|(c, h)| Some((c, h.ok()?)));
            let _ = tx.send(read.collect());
        });
    }

    /// Stops the shards whose head, as a poll read it, is no longer this node's.
    async fn polled(&mut self, heads: Polled) {
        for (cell, head) in heads {
            if cell == LEADER_CELL {
                let term = self.leader.as_ref().map_or(0, |l| l.term);
                if !head
                    .as_ref()
                    .is_some_and(|h| h.is_owned_by(&self.inner.node, term))
                {
                    if let Some(l) = self.leader.take() {
                        warn!(node = %self.inner.node, "head poll: leadership superseded");
                        l.claim.close().await;
                    }
                }
                continue;
            }
            let Some(h) = self.held.get(&cell) else {
                continue;
            };
            let epoch = h.shard.epoch();
            if head
                .as_ref()
                .is_some_and(|hd| hd.is_owned_by(&self.inner.node, epoch))
            {
                continue;
            }
            let found = head.as_ref().map_or(0, |hd| hd.epoch);
            warn!(node = %self.inner.node, cell, epoch, found, "head poll: cell superseded");
            h.shard.end.stop_acting();
            h.shard.claim.close().await;
            self.remove(&cell, Some(StopReason::Superseded { epoch: found }));
            self.saw(&cell, head.as_ref());
        }
    }
}

fn now_of(fence: &Fence) -> Now {
    Now {
        mono_ms: fence.clock().mono_ms(),
        wall_ms: fence.clock().wall_ms(),
    }
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput, msg).not_committed()
}
