//! The fleet's task: the shell around [`FleetCore`]. It keeps what the core cannot — the
//! shards and their claims, the channels to the handle, the watcher and the background head
//! poll — feeds the core its inputs (wake-ups, commands, news, answers) and performs the
//! effects it asks for, feeding each outcome back, as fence-core's keeper drives its
//! `LeaseCore`. Every decision is the core's; every one is guarded by the core's epochs.

mod perform;
mod tasks;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use fence_core::decide::Now;
use fence_core::runtime::{CellClaim, Fence, LeaseKeeper};
use fence_core::Error;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::cells::Cells;
use crate::decide::{FleetCore, FleetEffect, FleetInput, Seen, Timing};
use crate::fleet::{acquire, lock, Command, Drained, Inner, Settings};
use crate::membership::{Member, Members};
use crate::shard::{End, FleetEvent, Shard};
use crate::watch::{Duty, News, Tombstoner, Watcher};
use tasks::guard_lease;

/// A held cell as the task keeps it.
struct Held {
    shard: Shard,
    watcher: JoinHandle<()>,
}

/// What a head poll read: each cell's head (failed reads left out).
type Polled = Vec<(String, Seen)>;

enum Wake {
    Command(Command),
    Closed,
    Lost,
    News(News),
    Polled(Polled),
    Tick,
}

pub(crate) struct Run {
    inner: Arc<Inner>,
    fence: Fence,
    s: Settings,
    lease: LeaseKeeper,
    core: FleetCore,
    held: BTreeMap<String, Held>,
    /// The ends of shards whose hand-off has no verdict yet.
    unsettled: BTreeMap<String, Arc<End>>,
    /// Claims made and not installed yet.
    claims: HashMap<String, CellClaim>,
    /// The claim of the leadership cell, while this node leads.
    leadership: Option<Arc<CellClaim>>,
    /// Whom this node's watcher watches (its task reads leases on a schedule of its own).
    duty: watch::Sender<Duty>,
    news: mpsc::UnboundedReceiver<News>,
    tombstoner: Tombstoner,
    /// Results of the head poll running in the background.
    polled_tx: mpsc::UnboundedSender<Polled>,
    polled_rx: mpsc::UnboundedReceiver<Polled>,
    events: mpsc::UnboundedSender<FleetEvent>,
    commands: mpsc::Receiver<Command>,
    lost_tx: mpsc::UnboundedSender<()>,
    lost_rx: mpsc::UnboundedReceiver<()>,
    /// When (monotonic ms) the lease's authority runs out unless renewed, for the task that
    /// stops every shard then even while a round waits on the store.
    expiry: watch::Sender<u64>,
    /// When the next round is due.
    wake: u64,
    /// The answer to the application's hand-off under way.
    reply: Option<oneshot::Sender<Result<u64, Error>>>,
}

impl Run {
    pub(crate) fn new(
        inner: Arc<Inner>,
        s: Settings,
        lease: LeaseKeeper,
        cells: Arc<Cells>,
        events: mpsc::UnboundedSender<FleetEvent>,
        commands: mpsc::Receiver<Command>,
    ) -> Run {
        let fence = lease.fence().clone();
        let (lost_tx, lost_rx) = mpsc::unbounded_channel();
        let expiry = watch::channel(u64::MAX).0;
        let guard = guard_lease(
            inner.clone(),
            fence.clone(),
            expiry.subscribe(),
            lost_tx.clone(),
        );
        tokio::spawn(guard);
        let tombstoner = Tombstoner {
            fence: fence.clone(),
            known: cells.clone(),
            bound_ms: bound_ms(&fence, &s.timing),
            notices_ms: s.timing.notices_ms,
        };
        let duty = watch::channel(Duty::default()).0;
        let (news_tx, news) = mpsc::unbounded_channel();
        let scan_ms = s.timing.scan_ms;
        let watcher = Watcher::new(tombstoner.clone(), scan_ms, duty.subscribe(), news_tx);
        tokio::spawn(watcher.run());
        let (polled_tx, polled_rx) = mpsc::unbounded_channel();
        let generation = lease.generation();
        let core = FleetCore::over(
            &inner.node,
            cells,
            s.timing.clone(),
            &generation,
            s.predecessor.as_deref(),
        )
        .with_flaws(s.flaws);
        Run {
            inner,
            fence,
            s,
            lease,
            core,
            held: BTreeMap::new(),
            unsettled: BTreeMap::new(),
            claims: HashMap::new(),
            leadership: None,
            duty,
            news,
            tombstoner,
            polled_tx,
            polled_rx,
            events,
            commands,
            lost_tx,
            lost_rx,
            expiry,
            wake: 0,
            reply: None,
        }
    }

    fn now(&self) -> Now {
        now_of(&self.fence)
    }

    fn emit(&self, event: FleetEvent) {
        let _ = self.events.send(event);
    }

    /// The bound of one request of a round: an attempt's longest, but no longer than an
    /// interval (a slow store must not hold up the rounds that notice losses and deaths).
    fn bound_ms(&self) -> u64 {
        bound_ms(&self.fence, &self.s.timing)
    }

    pub(crate) async fn run(mut self) {
        loop {
            let clock = self.fence.clock().clone();
            let event = tokio::select! {
                biased;
                c = self.commands.recv() => c.map_or(Wake::Closed, Wake::Command),
                _ = self.lost_rx.recv() => Wake::Lost,
                Some(n) = self.news.recv() => Wake::News(n),
                Some(p) = self.polled_rx.recv() => Wake::Polled(p),
                _ = clock.sleep_until(self.wake) => Wake::Tick,
            };
            match event {
                Wake::Command(Command::HandOff { cell, to, reply }) => {
                    self.reply = Some(reply);
                    self.drive(FleetInput::HandOffAsked { cell, to }).await;
                    if let Some(reply) = self.reply.take() {
                        let _ = reply.send(Err(crate::fleet::stopped()));
                    }
                }
                Wake::Command(Command::Drain { within_ms, reply }) => {
                    let _ = reply.send(self.drain(within_ms).await);
                    return;
                }
                Wake::Closed => {
                    self.drive(FleetInput::Closed).await;
                    return;
                }
                Wake::Lost => {
                    while self.lost_rx.try_recv().is_ok() {}
                    if self.reap().await {
                        return;
                    }
                }
                Wake::News(News::Buried { node, inherit }) => {
                    self.drive(FleetInput::Buried { node, inherit }).await;
                }
                Wake::News(News::Overdue) => self.drive(FleetInput::Overdue).await,
                Wake::Polled(heads) => self.drive(FleetInput::Polled(heads)).await,
                Wake::Tick => {
                    if self.reap().await {
                        return;
                    }
                    self.drive(FleetInput::Tick).await;
                    self.publish_members();
                }
            }
        }
    }

    /// Feeds `input` and performs effects until none are left, each outcome fed back
    /// before anything else.
    async fn drive(&mut self, input: FleetInput) {
        let mut queue = VecDeque::from([input]);
        while let Some(input) = queue.pop_front() {
            let now = self.now();
            for effect in self.core.step(now, input) {
                if let Some(next) = self.perform(effect).await {
                    queue.push_back(next);
                }
            }
        }
    }

    /// Tells the core which shards ended on their own, and whether the leadership's claim
    /// still stands; handles a lost lease. `true` when the task ends.
    async fn reap(&mut self) -> bool {
        if !self.lease.is_held() {
            return self.lease_lost().await;
        }
        let ended: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.shard.ended().is_some())
            .map(|(c, _)| c.clone())
            .collect();
        let leadership_held = self.leadership.as_ref().is_none_or(|c| c.is_held());
        if !leadership_held {
            info!(node = %self.inner.node, "no longer leading");
            self.leadership = None;
        }
        self.drive(FleetInput::Reap {
            ended,
            leadership_held,
        })
        .await;
        false
    }

    /// Leaves the fleet within `within_ms`: the core's drain, driven until it is done or
    /// the deadline passes (then what is left is left); last, the node lease is released.
    async fn drain(mut self, within_ms: u64) -> Drained {
        let clock = self.fence.clock().clone();
        let done = clock
            .timeout(within_ms, self.drive(FleetInput::Drain))
            .await;
        if done.is_none() || self.core.busy() {
            self.drive(FleetInput::DrainDeadline).await;
        }
        let (fence, bound) = (self.fence.clone(), self.bound_ms());
        let Run {
            lease, mut core, ..
        } = self;
        let generation = lease.generation();
        let returned = clock.timeout(bound, lease.release()).await.is_some();
        // The keeper's release says nothing of whether its record landed (a lost lease, a
        // store that stopped answering): only a read of the record does.
        let shown = returned && perform::shows_released(&fence, &generation, bound).await;
        let effects = core.step(now_of(&fence), FleetInput::LeaseReleased(shown));
        for effect in effects {
            if let FleetEffect::Drained {
                handed_off,
                released,
                left,
                lease_released,
            } = effect
            {
                return Drained {
                    handed_off,
                    released,
                    left,
                    lease_released,
                    unread: Vec::new(),
                };
            }
        }
        Drained::default()
    }

    /// The lease is gone: every shard stops, and the lease is taken again as the successor
    /// of the generation that lapsed (this process knows its keeper has stopped). `true`
    /// when the task ends.
    async fn lease_lost(&mut self) -> bool {
        warn!(node = %self.inner.node, "node lease lost: stopping every cell");
        self.drive(FleetInput::LeaseLost).await;
        let ttl = self.fence.config().ttl_ms;
        let _ = self.fence.clock().timeout(ttl, self.lease.lost()).await;
        let settings = Settings {
            predecessor: Some(self.lease.generation()),
            ..self.s.clone()
        };
        loop {
            // Commands are answered while the lease is being taken again: nothing is held,
            // so a drain is done at once and a hand-off has nothing to hand.
            let acquired = tokio::select! {
                a = acquire(&self.fence, &settings) => a,
                c = self.commands.recv() => {
                    if !self.answer_while_lost(c) {
                        return true;
                    }
                    continue;
                }
            };
            match acquired {
                Ok(lease) => {
                    self.reacquired(lease).await;
                    return false;
                }
                Err(_) if self.commands.is_closed() => return true,
                Err(e) => {
                    warn!(node = %self.inner.node, error = %e, "node lease not acquired; retrying");
                    let d = Duration::from_millis(self.s.timing.interval_ms);
                    self.fence.clock().sleep(d).await;
                }
            }
        }
    }

    async fn reacquired(&mut self, lease: LeaseKeeper) {
        let generation = lease.generation();
        info!(node = %self.inner.node, generation, "node lease acquired again");
        *lock(&self.inner.generation) = generation.clone();
        self.lease = lease;
        self.emit(FleetEvent::LeaseAcquired {
            generation: generation.clone(),
        });
        self.drive(FleetInput::LeaseAcquired { generation }).await;
        self.wake = 0;
    }

    /// Answers a command while the lease is lost; `false` when the task should end.
    fn answer_while_lost(&mut self, command: Option<Command>) -> bool {
        match command {
            None => false,
            Some(Command::Drain { reply, .. }) => {
                let drained = Drained {
                    left: self.core.orphans().clone(),
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

    /// When the next round is due, at the latest the moment the lease's authority would
    /// run out unrenewed (every shard stops then).
    fn wake_at(&self, at: u64) -> u64 {
        let now = self.fence.clock().mono_ms();
        let remaining = u64::try_from(self.lease.remaining().as_millis()).unwrap_or(u64::MAX);
        let expires = now.saturating_add(remaining).saturating_add(1);
        self.expiry
            .send_if_modified(|e| std::mem::replace(e, expires) != expires);
        at.min(expires)
    }

    /// What this node knows of the fleet, for [`Fleet::members`](crate::Fleet::members).
    fn publish_members(&self) {
        let live = self
            .core
            .members()
            .into_iter()
            .map(|(node, generation)| Member {
                node,
                generation,
                addr: String::new(),
            });
        let members = Members {
            live: live.collect(),
            ..Members::default()
        };
        *lock(&self.inner.members) = members;
    }
}

/// The bound of one request of a round (see [`Run::bound_ms`]).
fn bound_ms(fence: &Fence, t: &Timing) -> u64 {
    let cfg = fence.config();
    cfg.attempt_max_ms
        .min(t.interval_ms)
        .max(cfg.attempt_min_ms)
}

pub(crate) fn now_of(fence: &Fence) -> Now {
    Now {
        mono_ms: fence.clock().mono_ms(),
        wall_ms: fence.clock().wall_ms(),
    }
}
