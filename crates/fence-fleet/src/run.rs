//! The fleet's task: one round after another of membership, placement, takeovers, hand-offs
//! and head polls. Protocol glue; every decision it makes is guarded by the core's epochs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fence_core::record::CellHead;
use fence_core::runtime::{CellClaim, Fence, LeaseKeeper};
use fence_core::{Error, ErrorKind};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::assign::assign;
use crate::fleet::{acquire, lock, Command, Drained, Inner, Settings};
use crate::follow::read_heads;
use crate::membership::{judge_nodes, read_members, Member, Members};
use crate::shard::{CellEvent, Shard, StopReason};

/// A held cell as the task keeps it.
struct Held {
    shard: Shard,
    stop: Arc<watch::Sender<Option<StopReason>>>,
    since_mono: u64,
    watcher: JoinHandle<()>,
    /// Set by whoever announced the shard's end first: its watcher (at once, when the claim
    /// learns it is over) or the task.
    announced: Arc<AtomicBool>,
}

/// The last head this node read of a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    owner: Option<String>,
    epoch: u64,
    generation: Option<String>,
}

impl Seen {
    fn of(head: Option<&CellHead>) -> Seen {
        match head {
            Some(h) => Seen {
                owner: h.node.clone(),
                epoch: h.epoch,
                generation: h.generation.clone(),
            },
            None => Seen {
                owner: None,
                epoch: 0,
                generation: None,
            },
        }
    }
}

pub(crate) struct Run {
    inner: Arc<Inner>,
    fence: Fence,
    s: Settings,
    lease: LeaseKeeper,
    /// Lease generations whose cells this process may resume at their epoch: its own, and a
    /// predecessor the caller vouched for.
    vouched: HashSet<String>,
    cells: Vec<String>,
    held: BTreeMap<String, Held>,
    seen: HashMap<String, Seen>,
    /// Cells the store names as this node's with no claim of this process.
    orphans: BTreeSet<String>,
    view: Vec<String>,
    view_since: u64,
    target: BTreeMap<String, String>,
    next_scan: u64,
    next_poll: u64,
    events: mpsc::UnboundedSender<CellEvent>,
    commands: mpsc::Receiver<Command>,
    lost_tx: mpsc::UnboundedSender<()>,
    lost_rx: mpsc::UnboundedReceiver<()>,
    /// A drain was answered while the lease was lost: the task ends.
    done: bool,
}

enum Wake {
    Command(Command),
    Closed,
    Lost,
    Tick,
}

impl Run {
    pub(crate) fn new(
        inner: Arc<Inner>,
        s: Settings,
        lease: LeaseKeeper,
        cells: Vec<String>,
        events: mpsc::UnboundedSender<CellEvent>,
        commands: mpsc::Receiver<Command>,
    ) -> Run {
        let fence = lease.fence().clone();
        let mut vouched: HashSet<String> = s.predecessor.iter().cloned().collect();
        vouched.insert(lease.generation());
        let (lost_tx, lost_rx) = mpsc::unbounded_channel();
        Run {
            inner,
            fence,
            s,
            lease,
            vouched,
            cells,
            held: BTreeMap::new(),
            seen: HashMap::new(),
            orphans: BTreeSet::new(),
            view: Vec::new(),
            view_since: 0,
            target: BTreeMap::new(),
            next_scan: 0,
            next_poll: 0,
            events,
            commands,
            lost_tx,
            lost_rx,
            done: false,
        }
    }

    fn now(&self) -> u64 {
        self.fence.clock().mono_ms()
    }

    fn me(&self) -> String {
        self.inner.node.clone()
    }

    fn emit(&self, event: CellEvent) {
        let _ = self.events.send(event);
    }

    pub(crate) async fn run(mut self) {
        let mut wake = 0;
        loop {
            let clock = self.fence.clock().clone();
            let event = tokio::select! {
                biased;
                c = self.commands.recv() => c.map_or(Wake::Closed, Wake::Command),
                _ = self.lost_rx.recv() => Wake::Lost,
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
        let members = self.read_view().await;
        let now = self.now();
        let mut wanted: BTreeSet<String> = self
            .target
            .iter()
            .filter(|(c, n)| **n == self.inner.node && !self.held.contains_key(*c))
            .map(|(c, _)| c.clone())
            .collect();
        let mut fresh = HashSet::new();
        if now >= self.next_scan {
            fresh = self.scan().await;
            self.next_scan = now.saturating_add(self.s.scan_ms);
        }
        wanted.extend(self.orphans.iter().cloned());
        self.take(wanted, &members, &fresh).await;
        let stable = now.saturating_sub(self.view_since) >= self.s.settle_ms;
        if stable {
            self.shed(&members).await;
        }
        if let Some(every) = self.s.head_poll_ms {
            if now >= self.next_poll {
                self.poll_heads().await;
                self.next_poll = now.saturating_add(every);
            }
        }
        self.next_wake(&members, stable)
    }

    fn next_wake(&self, members: &Members, stable: bool) -> u64 {
        let now = self.now();
        let pending = self.orphans.len()
            + self
                .target
                .iter()
                .filter(|(c, n)| **n == self.inner.node && !self.held.contains_key(*c))
                .count();
        let mut every = self.s.interval_ms;
        if pending > 0 || self.has_excess() {
            every = (every / 4).max(self.fence.config().poll_ms());
        }
        let mut at = now.saturating_add(every);
        if let Some(r) = members.recheck_mono.filter(|r| *r > now) {
            at = at.min(r);
        }
        if self.s.head_poll_ms.is_some() {
            at = at.min(self.next_poll.max(now + 1));
        }
        if !stable {
            at = at.min(
                self.view_since
                    .saturating_add(self.s.settle_ms)
                    .max(now + 1),
            );
        }
        at
    }

    fn has_excess(&self) -> bool {
        self.held
            .keys()
            .any(|c| self.target.get(c).is_some_and(|n| *n != self.inner.node))
    }

    // ----- membership ----------------------------------------------------------------------

    async fn read_view(&mut self) -> Members {
        let bound = Duration::from_millis(self.bound_ms());
        let mut members = match read_members(&self.fence, bound).await {
            Ok(m) => m,
            Err(e) => {
                // The nodes last listed are judged again by fresh reads: a view kept whole
                // would show a node that died since live for as long as listings fail, and
                // its cells would never be taken over.
                debug!(node = %self.inner.node, error = %e, "membership listing failed; last listed nodes read again");
                let last = self.last_listed();
                match judge_nodes(&self.fence, last, bound).await {
                    Ok(m) => m,
                    Err(_) => lock(&self.inner.members).clone(),
                }
            }
        };
        if let Some(f) = &self.s.filter {
            members.live.retain(|m| f(&m.node));
            members.gone.retain(|n| f(n));
        }
        if !members.is_live(&self.inner.node) {
            members.live.push(Member {
                node: self.me(),
                generation: Some(self.lease.generation()),
                addr: String::new(),
            });
            members.live.sort_by(|a, b| a.node.cmp(&b.node));
        }
        let nodes = members.live_nodes();
        if nodes != self.view {
            info!(node = %self.inner.node, live = ?nodes, "membership changed");
            self.view_since = self.now();
            self.target = assign(&self.cells, &nodes);
            self.view = nodes;
        }
        *lock(&self.inner.members) = members.clone();
        members
    }

    /// The other nodes of the last view, live or gone.
    fn last_listed(&self) -> Vec<String> {
        let view = lock(&self.inner.members);
        let live = view.live.iter().map(|m| m.node.clone());
        let all = live.chain(view.gone.iter().cloned());
        all.filter(|n| *n != self.inner.node).collect()
    }

    /// The bound of one read of a round: an attempt's longest, but no longer than an interval
    /// (a slow store must not hold up the rounds that notice losses and deaths).
    fn bound_ms(&self) -> u64 {
        let cfg = self.fence.config();
        cfg.attempt_max_ms
            .min(self.s.interval_ms)
            .max(cfg.attempt_min_ms)
    }

    fn receivers(&self) -> Receivers {
        Receivers {
            fence: self.fence.clone(),
            bound_ms: self.bound_ms(),
        }
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
    /// this node's own claim, resume or hand-off — and announces it when it changed, so the
    /// `NewOwner` events alone always name the last owner known.
    fn learned(&mut self, cell: &str, seen: Seen) {
        let before = self.seen.insert(cell.to_owned(), seen.clone());
        if before.as_ref().map(|b| &b.owner) != Some(&seen.owner) {
            self.emit(CellEvent::NewOwner {
                cell: cell.to_owned(),
                owner: seen.owner,
                epoch: seen.epoch,
            });
        }
    }

    /// Records what a read of `cell`'s head showed; announces a new owner.
    fn saw(&mut self, cell: &str, head: Option<&CellHead>) {
        let seen = Seen::of(head);
        self.learned(cell, seen.clone());
        let mine = seen.owner.as_deref() == Some(self.inner.node.as_str());
        if mine && !self.held.contains_key(cell) {
            self.orphans.insert(cell.to_owned());
        } else {
            self.orphans.remove(cell);
        }
    }

    /// Reads every cell's head not held; returns the cells read.
    async fn scan(&mut self) -> HashSet<String> {
        let cells: Vec<String> = self
            .cells
            .iter()
            .filter(|c| !self.held.contains_key(*c))
            .cloned()
            .collect();
        let read = self.read_heads(cells).await;
        let mut fresh = HashSet::new();
        for (cell, head) in read {
            self.saw(&cell, head.as_ref());
            fresh.insert(cell);
        }
        fresh
    }

    // ----- taking cells --------------------------------------------------------------------

    async fn take(&mut self, wanted: BTreeSet<String>, members: &Members, fresh: &HashSet<String>) {
        if wanted.is_empty() {
            return;
        }
        // A cell last seen with a live foreign owner is read first (it waits for that owner's
        // hand-off); any other is taken at once: the claim reads the head itself, and resumes
        // it without a new epoch when a generation this process vouches for wrote it.
        let waits = |run: &Run, cell: &String| {
            run.seen.get(cell).is_none_or(|s| {
                s.owner
                    .as_ref()
                    .is_some_and(|o| *o != run.inner.node && members.is_live(o))
            })
        };
        let (unsure, mut take): (Vec<String>, Vec<String>) = wanted
            .into_iter()
            .partition(|c| !fresh.contains(c) && waits(self, c));
        for (cell, head) in self.read_heads(unsure).await {
            self.saw(&cell, head.as_ref());
            take.push(cell);
        }
        take.retain(|c| self.seen.get(c).is_none_or(|_| !waits(self, c)));
        if take.is_empty() {
            return;
        }
        let vouched: Vec<String> = self.vouched.iter().cloned().collect();
        let results = self
            .lease
            .claim_or_resume_many(take, self.s.concurrency, &vouched)
            .await;
        for (cell, r) in results {
            match r {
                Ok((claim, resumed)) => self.install(claim, resumed),
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
        let (shard, stop) = Shard::new(claim);
        let stop = Arc::new(stop);
        let announced = Arc::new(AtomicBool::new(false));
        let watcher = {
            let claim = shard.claim.clone();
            let (tx, events, announced) =
                (self.lost_tx.clone(), self.events.clone(), announced.clone());
            let (receivers, stop) = (self.receivers(), stop.clone());
            tokio::spawn(async move {
                let how = claim.lost().await;
                if let Some(reason) = StopReason::of(how) {
                    let reason = receivers.name(claim.cell(), reason).await;
                    stop.send_replace(Some(reason.clone()));
                    if !announced.swap(true, Ordering::SeqCst) {
                        let _ = events.send(CellEvent::Stopped {
                            cell: claim.cell().to_owned(),
                            epoch: claim.epoch(),
                            reason,
                        });
                    }
                }
                let _ = tx.send(());
            })
        };
        info!(node = %self.inner.node, cell, epoch = shard.epoch(), resumed, "cell started");
        self.orphans.remove(&cell);
        lock(&self.inner.shards).insert(cell.clone(), shard.clone());
        self.held.insert(
            cell.clone(),
            Held {
                shard: shard.clone(),
                stop,
                since_mono: self.now(),
                watcher,
                announced,
            },
        );
        let epoch = shard.epoch();
        self.emit(CellEvent::Started { shard, resumed });
        let generation = Some(self.lease.generation());
        let owner = Some(self.me());
        self.learned(
            &cell,
            Seen {
                owner,
                epoch,
                generation,
            },
        );
    }

    /// Forgets `cell`'s shard, announcing why it stopped.
    fn remove(&mut self, cell: &str, reason: StopReason) {
        let Some(h) = self.held.remove(cell) else {
            return;
        };
        h.watcher.abort();
        h.stop.send_replace(Some(reason.clone()));
        lock(&self.inner.shards).remove(cell);
        info!(node = %self.inner.node, cell, epoch = h.shard.epoch(), ?reason, "cell stopped");
        if !h.announced.swap(true, Ordering::SeqCst) {
            self.emit(CellEvent::Stopped {
                cell: cell.to_owned(),
                epoch: h.shard.epoch(),
                reason,
            });
        }
    }

    // ----- losing cells --------------------------------------------------------------------

    /// Stops the shards whose claims ended; handles a lost lease.
    async fn reap(&mut self) {
        if !self.lease.is_held() {
            self.lease_lost().await;
            return;
        }
        let ended: Vec<(String, StopReason)> = self
            .held
            .iter()
            .filter_map(|(c, h)| h.shard.stopped().map(|r| (c.clone(), r)))
            .collect();
        let receivers = self.receivers();
        for (cell, reason) in ended {
            let reason = receivers.name(&cell, reason).await;
            self.remove(&cell, reason);
            self.seen.remove(&cell);
        }
    }

    async fn close_all(&mut self, reason: StopReason) {
        let cells: Vec<String> = self.held.keys().cloned().collect();
        for cell in cells {
            if let Some(h) = self.held.get(&cell) {
                h.stop.send_replace(Some(reason.clone()));
                h.shard.claim.close().await;
            }
            self.remove(&cell, reason.clone());
            self.orphans.insert(cell);
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
                    self.next_scan = 0;
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

    /// Reads the heads of held cells; stops those that are no longer this node's.
    async fn poll_heads(&mut self) {
        let cells: Vec<String> = self.held.keys().cloned().collect();
        for (cell, head) in self.read_heads(cells).await {
            let Some(h) = self.held.get(&cell) else {
                continue;
            };
            let epoch = h.shard.epoch();
            let ours = head
                .as_ref()
                .is_some_and(|hd| hd.is_owned_by(&self.inner.node, epoch));
            if ours {
                continue;
            }
            let found = head.as_ref().map_or(0, |hd| hd.epoch);
            warn!(node = %self.inner.node, cell, epoch, found, "head poll: cell superseded");
            h.stop
                .send_replace(Some(StopReason::Superseded { epoch: found }));
            h.shard.claim.close().await;
            self.remove(&cell, StopReason::Superseded { epoch: found });
            self.saw(&cell, head.as_ref());
        }
    }

    // ----- giving cells away ---------------------------------------------------------------

    /// Hands off every held cell whose target is another live node, once held long enough.
    async fn shed(&mut self, members: &Members) {
        let now = self.now();
        let moves: Vec<(String, String)> = self
            .held
            .iter()
            .filter(|(_, h)| now.saturating_sub(h.since_mono) >= self.s.min_hold_ms)
            .filter_map(|(c, _)| {
                let to = self.target.get(c)?;
                (*to != self.inner.node && members.is_live(to)).then(|| (c.clone(), to.clone()))
            })
            .collect();
        self.hand_off_all(moves, members).await;
    }

    async fn hand_off_asked(&mut self, cell: &str, to: &str) -> Result<u64, Error> {
        let members = lock(&self.inner.members).clone();
        if !self.held.contains_key(cell) {
            return Err(invalid(format!("cell {cell} is not held by this node")));
        }
        if to == self.inner.node || !members.is_live(to) {
            return Err(invalid(format!("{to} is not another live member")));
        }
        let mut done = self
            .hand_off_all(vec![(cell.to_owned(), to.to_owned())], &members)
            .await;
        done.pop()
            .map_or_else(|| Err(invalid("no hand-off made".into())), |(_, r)| r)
    }

    /// Hands off `moves` (cell, receiver), `concurrency` at a time.
    async fn hand_off_all(
        &mut self,
        moves: Vec<(String, String)>,
        members: &Members,
    ) -> Vec<(String, Result<u64, Error>)> {
        let mut jobs = Vec::new();
        for (cell, to) in moves {
            let Some(h) = self.held.get(&cell) else {
                continue;
            };
            let epoch = h.shard.epoch().saturating_add(1);
            // The application stops acting first.
            h.stop.send_replace(Some(StopReason::HandedOff {
                to: to.clone(),
                epoch,
            }));
            let generation = members.generation(&to).map(str::to_owned);
            jobs.push((cell, to, generation, h.shard.claim.clone()));
        }
        let results: Vec<(String, String, Result<u64, Error>)> = futures::stream::iter(jobs)
            .map(|(cell, to, generation, claim)| async move {
                let r = claim.hand_off(&to, generation.as_deref()).await;
                (cell, to, r)
            })
            .buffer_unordered(self.s.concurrency)
            .collect()
            .await;
        let mut out = Vec::new();
        for (cell, to, r) in results {
            match &r {
                Ok(epoch) => {
                    self.remove(
                        &cell,
                        StopReason::HandedOff {
                            to: to.clone(),
                            epoch: *epoch,
                        },
                    );
                    let seen = Seen {
                        owner: Some(to),
                        epoch: *epoch,
                        generation: None,
                    };
                    self.learned(&cell, seen);
                }
                Err(e) => {
                    warn!(node = %self.inner.node, cell, to, error = %e, "hand-off failed");
                    self.remove(&cell, StopReason::Closed);
                    // Read again next round: adopted back if it is still ours.
                    self.seen.remove(&cell);
                    self.orphans.insert(cell.clone());
                }
            }
            out.push((cell, r));
        }
        out
    }

    async fn drain(mut self, within_ms: u64) -> Drained {
        let clock = self.fence.clock().clone();
        let members = self.read_view().await;
        let others: Vec<String> = members
            .live_nodes()
            .into_iter()
            .filter(|n| *n != self.inner.node)
            .collect();
        let target = assign(&self.cells, &others);
        let mut drained = Drained::default();
        let work = async {
            let moves: Vec<(String, String)> = self
                .held
                .keys()
                .filter_map(|c| Some((c.clone(), target.get(c)?.clone())))
                .collect();
            for (cell, r) in self.hand_off_all(moves, &members).await {
                if r.is_ok() {
                    drained.handed_off.insert(cell);
                }
            }
            drained.released = self.release_all().await;
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

    /// Releases every held cell (and the cells named ours with no claim are adopted first).
    async fn release_all(&mut self) -> BTreeSet<String> {
        let orphans: Vec<String> = self.orphans.iter().cloned().collect();
        self.adopt_all(orphans).await;
        let shards: Vec<Shard> = self.held.values().map(|h| h.shard.clone()).collect();
        for h in self.held.values() {
            h.stop.send_replace(Some(StopReason::Released));
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
                    self.remove(&cell, StopReason::Released);
                    let unowned = Seen {
                        owner: None,
                        epoch,
                        generation: None,
                    };
                    self.learned(&cell, unowned);
                    self.orphans.remove(&cell);
                    released.insert(cell);
                }
                Err(e) => warn!(node = %self.inner.node, cell, error = %e, "release failed"),
            }
        }
        released
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

/// Names the receiver of a hand-off made through a shard's own claim
/// ([`CellClaim::hand_off`]), whose status carries only the epoch: one bounded read of the
/// head, which names the receiver at that epoch.
struct Receivers {
    fence: Fence,
    bound_ms: u64,
}

impl Receivers {
    /// `reason`, with the receiver filled in when it is a hand-off that does not name it
    /// (left empty if the head no longer shows that epoch or cannot be read).
    async fn name(&self, cell: &str, reason: StopReason) -> StopReason {
        let StopReason::HandedOff { to, epoch } = reason else {
            return reason;
        };
        if !to.is_empty() {
            return StopReason::HandedOff { to, epoch };
        }
        let read = self.fence.ownership().read_head(cell);
        let head = self.fence.clock().timeout(self.bound_ms, read).await;
        let to = match head {
            Some(Ok(Some((h, _)))) if h.epoch == epoch => h.node.unwrap_or_default(),
            _ => String::new(),
        };
        StopReason::HandedOff { to, epoch }
    }
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput, msg).not_committed()
}
