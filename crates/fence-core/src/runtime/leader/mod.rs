//! Leader election for one resource: the recipe of client-go's `leaderelection` and the
//! DynamoDB lock client, built on a node lease and one cell.
//!
//! **What "leader" means.** A node leads a resource while it holds two things: its node
//! lease (renewed by compare-and-swap; its authority judged on the monotonic clock) and a
//! claim of the resource's cell at some epoch. The epoch is the *fencing token*: every
//! claim raises it by compare-and-swap, so a deposed leader's writes through its claim (or
//! through [`update_cell`](super::update_cell) with its epoch) are refused **by the store**,
//! whatever the deposed process believes. A peer takes over only after it observed the
//! leader's lease record unchanged for a full TTL (or once it is released), so two terms
//! overlap only as the [observation rule](crate::decide::observe) allows (clocks off by more
//! than its margin), and even then the store takes writes only from the later term once it
//! has claimed.
//!
//! **How to use it.** [`Election::builder`] over a [`Fence`], [`start`](ElectionBuilder::start)
//! it, and follow its [`ElectionEvent`]s (a [`Stream`](futures::Stream), or
//! [`Election::next_event`]): [`Started`](ElectionEvent::Started) hands over a [`Term`]
//! — the epoch, the instant the leader's authority ends if no renewal lands
//! ([`safe_until`](Term::safe_until)), fenced writes of the cell, and a
//! cancellation-safe [`lost`](Term::lost) — and [`Stopped`](ElectionEvent::Stopped)
//! always follows it; [`NewLeader`](ElectionEvent::NewLeader) names whoever the store names;
//! [`SafeTimeLow`](ElectionEvent::SafeTimeLow) warns while renewals fall behind.
//!
//! ```
//! # fn block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
//! #         .build().unwrap().block_on(f)
//! # }
//! # block(async {
//! use std::sync::Arc;
//! use fence_core::{Election, ElectionEvent, Fence, MemoryStore};
//!
//! let store = Arc::new(MemoryStore::new());
//! let fence = Fence::builder(store, "node-a").build().unwrap();
//! let mut election = Election::builder(fence, "scheduler").start().unwrap();
//! while let Some(event) = election.next_event().await {
//!     match event {
//!         ElectionEvent::Started(term) => {
//!             // Lead until `term.lost()` fires; pass `term.epoch()` to whatever you write.
//!             term.claim().write(format!("leader since epoch {}", term.epoch())).await.unwrap();
//!             break;
//!         }
//!         ElectionEvent::NewLeader(leader) => println!("the store names {leader:?}"),
//!         other => println!("{other:?}"),
//!     }
//! }
//! election.stop().await.result.unwrap(); // releases the cell, then the lease: a peer leads at once
//! # });
//! ```
//!
//! **Costs.** Every candidate holds its node lease (one write per TTL/3). A follower reads
//! the cell head and the leader's lease every
//! [`retry_period`](ElectionBuilder::retry_period) (default
//! [`poll_ms`](crate::decide::LeaseConfig::poll_ms) = min(TTL/10, 250 ms); at most a TTL
//! apart). A leader reads
//! the head every [`check_period`](ElectionBuilder::check_period) (default TTL/3). A
//! failover takes at most TTL + min(retry period, TTL) after the leader's last renewal
//! landed, plus three requests; a released resource (the leader stopped) is taken within one retry
//! period.

mod queue;
mod run;

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::claim::{CellClaim, ClaimStatus};
use super::keeper::Shared;
use super::{bounded, Fence};
use crate::decide::LeaseStatus;
use crate::error::{Error, ErrorKind};

/// A node the store names as the resource's owner, and the epoch it holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Leader {
    /// The node id, as the cell head names it.
    pub node: String,
    /// Its epoch: the fencing token of its term.
    pub epoch: u64,
}

/// Why a term ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepDown {
    /// The node lease is no longer held: a renewal did not land in time, or another process
    /// wrote the node's lease record. A peer may take over once it observed the lease
    /// unchanged for a TTL.
    LeaseLost {
        /// The lease's status when the term ended.
        status: LeaseStatus,
    },
    /// The store names a later epoch or another owner: a write through the claim was
    /// refused, or the leader's [check](ElectionBuilder::check_period) of the head found it.
    Deposed {
        /// The epoch the head holds (0 if the head was gone).
        epoch: u64,
        /// Its owner, when the head named one.
        by: Option<String>,
    },
    /// This node gave the resource up: the [`Election`] was stopped or dropped, the term
    /// was handed to another node ([`Election::hand_off`]), or the claim was released,
    /// closed or handed off through [`Term::claim`].
    Resigned,
    /// The [health check](ElectionBuilder::health_check) said this process is unhealthy:
    /// the term was given up (the cell released, so a healthy peer leads at once), and the
    /// node campaigns again only once it is healthy.
    Unhealthy,
}

/// What an [`Election`] reports, in order. `Started` and `Stopped` of one term always come
/// as a pair (`Started` first), and a term that started and ended while nobody read the
/// events is dropped as a pair; a `NewLeader` superseded by another before it was read is
/// dropped too; so the queue of unread events stays a handful long, however long the reader
/// sleeps, and the last `NewLeader` read always names the last leader known.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ElectionEvent {
    /// This node leads (client-go's `OnStartedLeading`): act through the term until
    /// [`Term::lost`] fires, and pass [`Term::epoch`] to anything that can fence.
    Started(Term),
    /// This node's term at `epoch` ended (`OnStoppedLeading`): stop acting as leader; writes
    /// through the term's claim are refused from now on.
    Stopped {
        /// The term's epoch.
        epoch: u64,
        /// Why.
        reason: StepDown,
    },
    /// The leader the store names changed (`OnNewLeader`), as this node last read the cell
    /// head: another node, this node (after its `Started`; without one, an ended term of
    /// this node or of its previous process), or `None` when nobody holds the resource
    /// (released, or never claimed). A named node may have died: it stays named until a
    /// peer takes over after observing its lease for a TTL.
    NewLeader(Option<Leader>),
    /// The leader's safe time runs low (the DynamoDB lock client's session monitor): the
    /// node lease has at most the [warning](ElectionBuilder::safe_time_warning) left
    /// because renewals fall behind. Finish or abandon what cannot complete by `safe_until`.
    /// Reported once per dip; again after a renewal restored the margin and it ran low again.
    SafeTimeLow {
        /// The term's epoch.
        epoch: u64,
        /// The authority left when this was reported.
        remaining: Duration,
        /// The instant authority ends unless a renewal lands first.
        safe_until: tokio::time::Instant,
    },
}

/// Builds an [`Election`].
#[derive(Debug)]
#[must_use]
pub struct ElectionBuilder {
    fence: Fence,
    resource: String,
    retry: Option<Duration>,
    check: Option<Duration>,
    warning: Option<Duration>,
    recampaign: bool,
    health: Option<HealthCheck>,
}

/// A health check of the process (see [`ElectionBuilder::health_check`]).
#[derive(Clone)]
pub(crate) struct HealthCheck(Arc<dyn Fn() -> bool + Send + Sync>);

impl HealthCheck {
    pub(crate) fn healthy(&self) -> bool {
        (self.0)()
    }
}

impl fmt::Debug for HealthCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HealthCheck")
    }
}

/// The election's settings, in milliseconds.
#[derive(Clone, Copy, Debug)]
struct Settings {
    retry_ms: u64,
    check_ms: u64,
    warning_ms: u64,
    recampaign: bool,
}

/// The longest retry or check period: a century (longer ones are a unit mistake, and the
/// instants they lead to would overflow).
const MAX_PERIOD_MS: u64 = 100 * 365 * 24 * 3_600_000;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl ElectionBuilder {
    /// How often a follower looks at the cell and its leader's lease (default the fence's
    /// [`poll_ms`](crate::decide::LeaseConfig::poll_ms)): two reads per look. A follower
    /// also looks at the instant the leader's lease could first be judged dead — once a TTL
    /// while the leader renews — so a dead leader is replaced a TTL after the follower's
    /// first look at its last renewal whatever this says, and a period above the TTL acts as
    /// the TTL. It bounds how late a follower sees a release (a stopped leader) or a lease
    /// renewed just after a look: raise it to follow more cheaply.
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.retry = Some(period);
        self
    }

    /// How often the leader reads the cell head to confirm the store still names it
    /// (default TTL/3). It learns of a deposition its lease cannot show — an operator's
    /// takeover, another process under the same node id — within this period.
    pub fn check_period(mut self, period: Duration) -> Self {
        self.check = Some(period);
        self
    }

    /// Report [`ElectionEvent::SafeTimeLow`] once the lease's remaining authority drops to
    /// this (default TTL/2; must be below the TTL). Renewals at TTL/3 keep at least 2/3 of
    /// a TTL left while they land on time.
    pub fn safe_time_warning(mut self, left: Duration) -> Self {
        self.warning = Some(left);
        self
    }

    /// Whether to campaign again after a term ends (default `true`). With `false` the
    /// election ends after its first term (as client-go's `RunOrDie` returns): the events
    /// end after `Stopped`, and the lease is released.
    pub fn recampaign(mut self, again: bool) -> Self {
        self.recampaign = again;
        self
    }

    /// A health check of this process (client-go's leader-election health check, turned
    /// into action): the leader calls `healthy` every [check
    /// period](Self::check_period), and when it answers `false` the term ends
    /// ([`StepDown::Unhealthy`]) and the cell is released, so a healthy peer leads within
    /// its retry period; a follower that is unhealthy does not campaign (it looks again
    /// every retry period, reporting nothing meanwhile). Keep it quick: it runs on the
    /// election's task.
    pub fn health_check(mut self, healthy: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        self.health = Some(HealthCheck(Arc::new(healthy)));
        self
    }

    /// Validates the settings and starts campaigning in a task on the current Tokio
    /// runtime. Errors: [`ErrorKind::InvalidKey`] for a resource name that is not one path
    /// segment; [`ErrorKind::InvalidInput`] for a period of zero or over a century, a
    /// warning not below the TTL, or no Tokio runtime.
    pub fn start(self) -> Result<Election, Error> {
        crate::ownership::check_name("cell", &self.resource)?;
        let invalid = |what: &str| Error::new(ErrorKind::InvalidInput, what).not_committed();
        let ttl_ms = self.fence.config().ttl_ms;
        let settings = Settings {
            retry_ms: self.retry.map_or(self.fence.config().poll_ms(), ms),
            check_ms: self.check.map_or((ttl_ms / 3).max(1), ms),
            warning_ms: self.warning.map_or(ttl_ms / 2, ms),
            recampaign: self.recampaign,
        };
        let periods = [settings.retry_ms, settings.check_ms];
        if periods.iter().any(|p| !(1..=MAX_PERIOD_MS).contains(p)) {
            return Err(invalid(
                "election periods must be at least 1 ms and at most a century",
            ));
        }
        if settings.warning_ms >= ttl_ms {
            return Err(invalid("the safe-time warning must be below the lease TTL"));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| invalid("an election starts inside a Tokio runtime"))?;
        let outbox = Arc::new(Outbox::new());
        let (stop, stopped) = watch::channel(false);
        let node = self.fence.ownership().node().to_owned();
        let campaign = run::Campaign::new(
            self.fence,
            self.resource.clone(),
            settings,
            outbox.clone(),
            stopped,
        )
        .with_health(self.health);
        Ok(Election {
            node,
            resource: self.resource,
            outbox,
            stop,
            task: Some(runtime.spawn(campaign.run())),
        })
    }
}

/// A running campaign for one resource: the events of this node's terms and of the leaders
/// it sees, until [stopped](Self::stop) or dropped.
///
/// # Stopping and dropping
///
/// [`stop`](Self::stop) (or [`cancel`](Self::cancel)) ends the election and returns once done: a term in progress ends
/// ([`StepDown::Resigned`]), the cell is released (a head naming nobody, at the same epoch)
/// and then the node lease, so a peer leads within its retry period instead of after a TTL
/// — client-go's `ReleaseOnCancel`, always on. Dropping the election does the same in the
/// background, as long as the runtime keeps running (see
/// [`LeaseKeeper`](super::LeaseKeeper)'s "Dropping it" for what happens when it does not:
/// nothing unsafe, only a failover a TTL later).
#[derive(Debug)]
pub struct Election {
    node: String,
    resource: String,
    outbox: Arc<Outbox>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<Result<(), Error>>>,
}

impl Election {
    /// A builder for an election of node `fence` over `resource` (a cell name). The election
    /// acquires and holds the fence's node lease itself: do not acquire that node's lease
    /// elsewhere in the process (give other work another node id).
    pub fn builder(fence: Fence, resource: impl Into<String>) -> ElectionBuilder {
        ElectionBuilder {
            fence,
            resource: resource.into(),
            retry: None,
            check: None,
            warning: None,
            recampaign: true,
            health: None,
        }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The resource (cell) campaigned for.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The next event; `None` once the election has ended (stopped, its only term over
    /// without [`recampaign`](ElectionBuilder::recampaign), or failed: [`stop`](Self::stop)
    /// tells why) and every event was read. Cancellation-safe: an event is taken only when
    /// returned.
    pub async fn next_event(&mut self) -> Option<ElectionEvent> {
        std::future::poll_fn(|cx| self.outbox.poll_next(cx)).await
    }

    /// The leader the store named when this node last read the cell head (this node
    /// included), `None` if nobody.
    pub fn leader(&self) -> Option<Leader> {
        self.outbox.leader.borrow().clone()
    }

    /// A channel of [`leader`](Self::leader) changes, for many readers (a router following
    /// the leader, say).
    pub fn watch_leader(&self) -> watch::Receiver<Option<Leader>> {
        self.outbox.leader.subscribe()
    }

    /// This node's term, while it leads.
    pub fn term(&self) -> Option<Term> {
        let term = self.outbox.term().clone();
        term.filter(Term::is_held)
    }

    /// Whether this node leads now (client-go's `IsLeader`): a term has started and not
    /// ended, and the node lease is held by this process's clocks. A local judgement: the
    /// store stays the fence (see [`Term::is_held`]).
    pub fn is_leader(&self) -> bool {
        self.term().is_some()
    }

    /// Hands the leadership to node `to` (client-go has no such call; a DynamoDB lock can
    /// be handed by its holder): this node's term ends ([`StepDown::Resigned`]), one
    /// compare-and-swap names `to` in the cell at the next epoch (with `to`'s lease
    /// generation, read first), and `to` leads within its retry period, at an epoch of its
    /// own. Returns the epoch the cell was handed at. Nothing is written unless `to` has a
    /// live node lease by one read and this node leads.
    ///
    /// Errors: [`ErrorKind::InvalidInput`] when this node does not lead, `to` is this node,
    /// or `to` has no live lease; those of the hand-off
    /// ([`CellClaim::hand_off`](super::CellClaim::hand_off)).
    pub async fn hand_off(&self, to: &str) -> Result<u64, Error> {
        let invalid = |what: String| Error::new(ErrorKind::InvalidInput, what).not_committed();
        let term = self
            .term()
            .ok_or_else(|| invalid(format!("{}: this node does not lead", self.resource)))?;
        if to == self.node {
            return Err(invalid(format!("{to} is this node")));
        }
        let fence = &term.term.lease.fence;
        let bound = fence.cfg.attempt_max_ms;
        let seen = fence.observer.observe(fence, to, bound).await?;
        let lease = seen
            .lease
            .as_ref()
            .filter(|_| seen.judge(fence.now(), &fence.cfg) != crate::decide::Liveness::Dead);
        let Some(lease) = lease else {
            return Err(invalid(format!("{to} has no live node lease")));
        };
        let generation = lease.record.generation.clone();
        term.claim().hand_off(to, Some(&generation)).await
    }

    /// Asks the election to end, as [`stop`](Self::stop) does, without waiting: the events
    /// go on until it has ended — the `Stopped` of a term in progress, a `NewLeader(None)`
    /// once the cell is released — and then end. Then call `stop` for how it ended.
    pub fn cancel(&self) {
        self.stop.send_replace(true);
    }

    /// Ends the election — a term in progress ends (its [`Term::lost`] fires, with
    /// [`StepDown::Resigned`]), the cell and then the lease are released — and returns once
    /// done, with every event not read yet ([`ElectionEnd::unread`]: the `Stopped` of a term
    /// whose `Started` was read is there unless it was read) and how the election ended.
    /// So a caller that leaves its event loop first loses no step-down: the shutdown is
    /// `stop`, then the unread events, then joining the leader's work (README, "Leader
    /// election").
    pub async fn stop(mut self) -> ElectionEnd {
        self.cancel();
        let result = match self.task.take() {
            None => Ok(()),
            Some(task) => task.await.unwrap_or_else(|e| {
                Err(Error::new(
                    ErrorKind::Other,
                    format!("the election's task ended abnormally: {e}"),
                ))
            }),
        };
        ElectionEnd {
            unread: self.outbox.queue().take_all(),
            result,
        }
    }
}

/// How an election ended: what [`Election::stop`] returns.
#[derive(Debug)]
#[non_exhaustive]
pub struct ElectionEnd {
    /// The events nobody read, in order. Every term whose `Started` was read has its
    /// `Stopped` either read before or here; a term that started and ended unread is
    /// dropped as a pair (see [`ElectionEvent`]).
    pub unread: Vec<ElectionEvent>,
    /// `Ok` unless the election had failed before the stop (a corrupt cell head, refused
    /// credentials, an invalid name): the error that ended it.
    pub result: Result<(), Error>,
}

impl Drop for Election {
    fn drop(&mut self) {
        // The task sees the stop (or the closed channel) and releases on its own.
        self.stop.send_replace(true);
    }
}

impl futures::Stream for Election {
    type Item = ElectionEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ElectionEvent>> {
        self.outbox.poll_next(cx)
    }
}

/// What the campaign task shares with the [`Election`] handle.
#[derive(Debug)]
struct Outbox {
    queue: Mutex<queue::Queue>,
    leader: watch::Sender<Option<Leader>>,
    term: Mutex<Option<Term>>,
}

impl Outbox {
    fn new() -> Self {
        Outbox {
            queue: Mutex::new(queue::Queue::default()),
            leader: watch::channel(None).0,
            term: Mutex::new(None),
        }
    }

    fn queue(&self) -> MutexGuard<'_, queue::Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn term(&self) -> MutexGuard<'_, Option<Term>> {
        self.term.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, event: ElectionEvent) {
        let waker = self.queue().push(event);
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn close(&self) {
        let waker = self.queue().close();
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<ElectionEvent>> {
        self.queue().poll_next(cx)
    }

    /// The store names `leader` now: reported if that is news.
    fn saw(&self, leader: Option<Leader>) {
        let changed = self.leader.send_if_modified(|known| {
            let news = *known != leader;
            if news {
                known.clone_from(&leader);
            }
            news
        });
        if changed {
            self.push(ElectionEvent::NewLeader(leader));
        }
    }
}

/// One term of this node as leader: its epoch (the fencing token), its safe time, and
/// fenced writes of the resource's cell. Cheap to clone; every clone sees the same term.
///
/// The term ends when the node lease is lost, when the store is found to name a later epoch
/// (a refused write, or the leader's check of the head), or when the election is stopped or
/// dropped; [`lost`](Self::lost) tells which. From then on [`is_held`](Self::is_held)
/// is `false` and writes through [`claim`](Self::claim) are refused.
#[derive(Clone)]
pub struct Term {
    term: Arc<TermState>,
}

struct TermState {
    claim: CellClaim,
    lease: Arc<Shared>,
    /// Set once, when the term's end is first known.
    ended: OnceLock<StepDown>,
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("node", &self.node())
            .field("resource", &self.resource())
            .field("epoch", &self.epoch())
            .finish()
    }
}

impl Term {
    fn new(claim: CellClaim, lease: Arc<Shared>) -> Self {
        let term = TermState {
            claim,
            lease,
            ended: OnceLock::new(),
        };
        Term {
            term: Arc::new(term),
        }
    }

    /// The epoch of this term: the fencing token. Every later term (of any node) holds a
    /// higher one, and the store refuses writes at this epoch once one exists.
    pub fn epoch(&self) -> u64 {
        self.term.claim.epoch()
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        self.term.lease.node()
    }

    /// The resource (cell) led.
    pub fn resource(&self) -> &str {
        self.term.claim.cell()
    }

    /// Whether this node may act as leader now: the term has not ended and the node lease is
    /// held, judged at call time on the monotonic and the wall clock. A local judgement: the
    /// store remains the fence (a write through [`claim`](Self::claim) is refused once a
    /// later epoch exists, whatever this says).
    pub fn is_held(&self) -> bool {
        self.term.ended.get().is_none() && self.term.claim.is_held()
    }

    /// The authority left now (zero once the term ended). Renewals extend it; it only runs
    /// out while they fail.
    pub fn remaining(&self) -> Duration {
        Duration::from_millis(self.remaining_ms())
    }

    fn remaining_ms(&self) -> u64 {
        if self.is_held() {
            self.term.lease.remaining_ms()
        } else {
            0
        }
    }

    /// The instant this term's authority ends unless a renewal lands first: now +
    /// [`remaining`](Self::remaining), on the monotonic clock the lease is judged by (and
    /// never later than its wall clock allows), as a [`tokio::time::Instant`] (to print it,
    /// print [`remaining`](Self::remaining) instead: an `Instant` has no readable form).
    /// Work that must finish while this node leads must finish before it; renewals move it
    /// later.
    pub fn safe_until(&self) -> tokio::time::Instant {
        let clock = &self.term.lease.fence.clock;
        clock.instant_at(clock.mono_ms().saturating_add(self.remaining_ms()))
    }

    /// The claim of the resource's cell for this term: fenced writes and reads of the
    /// leader's state. Refused by the store once a later term exists.
    pub fn claim(&self) -> &CellClaim {
        &self.term.claim
    }

    /// Waits until the term ends and says why: at the instant the lease's authority runs
    /// out (judged on this process's clocks, not when the keeper next gets to report it), or
    /// as soon as the claim is found over. A deposition found by a write through the claim
    /// is named after one read of the head ([`StepDown::Deposed`]'s `by`: whom the store
    /// names). Cancellation-safe.
    pub async fn lost(&self) -> StepDown {
        self.concluded().await.0
    }

    /// The end of the term once it came, and whom the store names since when a read of the
    /// head showed it (`Some(None)`: nobody).
    async fn concluded(&self) -> (StepDown, Option<Option<Leader>>) {
        let clock = &self.term.lease.fence.clock;
        loop {
            if let Some(why) = self.term.ended.get() {
                return (why.clone(), None);
            }
            match self.term.claim.status() {
                ClaimStatus::Held => {}
                ClaimStatus::Superseded { epoch } => return self.deposed(epoch).await,
                status => return (self.settle(status), None),
            }
            let until = clock.mono_ms().saturating_add(self.remaining_ms());
            tokio::select! {
                _ = self.term.claim.lost() => {}
                _ = clock.sleep_until(until) => {}
            }
        }
    }

    /// A write through the claim found the cell at `epoch`: one bounded read of the head
    /// names the node the store names now, and records the end of the term as
    /// [`StepDown::Deposed`] by it (by nobody if the read failed or the head names nobody).
    async fn deposed(&self, epoch: u64) -> (StepDown, Option<Option<Leader>>) {
        let fence = &self.term.lease.fence;
        let read = bounded(
            &fence.clock,
            fence.cfg.attempt_max_ms,
            fence.ownership.read_head(self.resource()),
        );
        match read.await {
            Ok(head) => {
                let head = head.map(|(h, _)| h);
                let leader = run::leader_of(head.as_ref());
                let why = self.end(StepDown::Deposed {
                    epoch: head.as_ref().map_or(0, |h| h.epoch),
                    by: leader.as_ref().map(|l| l.node.clone()),
                });
                (why, Some(leader))
            }
            Err(_) => (self.end(StepDown::Deposed { epoch, by: None }), None),
        }
    }

    /// Why the term ended, `None` while it lasts. A deposition found by a write through the
    /// claim is told here at once, before the read of the head that names the new owner:
    /// its `by` may be `None` until [`lost`](Self::lost) or the `Stopped` event named it.
    pub fn ended(&self) -> Option<StepDown> {
        if let Some(why) = self.term.ended.get() {
            return Some(why.clone());
        }
        match self.term.claim.status() {
            ClaimStatus::Held => None,
            ClaimStatus::Superseded { epoch } => Some(StepDown::Deposed { epoch, by: None }),
            status => Some(self.settle(status)),
        }
    }

    /// Records `why` as the end of the term unless one is recorded; returns the recorded one.
    fn end(&self, why: StepDown) -> StepDown {
        self.term.ended.get_or_init(|| why).clone()
    }

    /// The end of the term, from the claim's `status` (which must not be `Held`) unless
    /// one is recorded.
    fn settle(&self, status: ClaimStatus) -> StepDown {
        let why = match status {
            ClaimStatus::LeaseLost => StepDown::LeaseLost {
                status: self.term.lease.status_now(),
            },
            ClaimStatus::Superseded { epoch } => StepDown::Deposed { epoch, by: None },
            ClaimStatus::Held
            | ClaimStatus::Released
            | ClaimStatus::HandedOff { .. }
            | ClaimStatus::Closed => StepDown::Resigned,
        };
        self.end(why)
    }
}
