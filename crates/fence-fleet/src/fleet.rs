//! The fleet: a node keeps its fair share of a set of cells, placed by an elected leader.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fence_core::runtime::{Fence, LeaseKeeper};
use fence_core::{Error, ErrorKind};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::decide::Timing;
use crate::membership::Members;
use crate::run::Run;
use crate::shard::{FleetEvent, Shard};

/// The events of a fleet, in the order it learned them: what [`FleetBuilder::start`] hands
/// out beside the [`Fleet`]. Read them with [`recv`](Self::recv) (or as a
/// [`Stream`](futures::Stream)). Unbounded: read them, or drop this receiver (the fleet then
/// keeps none). The events still unread when the fleet stops are not lost:
/// [`Fleet::drain`] returns them ([`Drained::unread`]), among them the `Stopped` of every
/// cell the drain stopped, so a caller that left its event loop before draining still
/// learns of every stop. Each event is told once: to a reader, or by the drain.
#[derive(Debug)]
pub struct Events {
    rx: Arc<Mutex<mpsc::UnboundedReceiver<FleetEvent>>>,
}

impl Events {
    /// The next event; `None` once the fleet has stopped and every event was read (or the
    /// drain took the rest). Cancellation-safe.
    pub async fn recv(&mut self) -> Option<FleetEvent> {
        std::future::poll_fn(|cx| lock(&self.rx).poll_recv(cx)).await
    }
}

impl futures::Stream for Events {
    type Item = FleetEvent;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<FleetEvent>> {
        lock(&self.rx).poll_recv(cx)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        // Nobody reads any more: the fleet keeps no event (nor does its drain).
        let mut rx = lock(&self.rx);
        rx.close();
        while rx.try_recv().is_ok() {}
    }
}

/// Takes every event still queued in `rx`, and closes it.
fn take_unread(rx: &Mutex<mpsc::UnboundedReceiver<FleetEvent>>) -> Vec<FleetEvent> {
    let mut rx = lock(rx);
    rx.close();
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// Which nodes under `nodes/` belong to the fleet.
pub type MemberFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The settings of a fleet: the core's timing (see [`FleetBuilder`] for each one's meaning)
/// and the shell's limits.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) concurrency: usize,
    pub(crate) timing: Timing,
    pub(crate) acquire_ms: u64,
    pub(crate) predecessor: Option<String>,
    pub(crate) filter: Option<MemberFilter>,
    pub(crate) flaws: crate::flaws::Flaws,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("concurrency", &self.concurrency)
            .field("timing", &self.timing)
            .field("acquire_ms", &self.acquire_ms)
            .field("predecessor", &self.predecessor.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds and starts a [`Fleet`].
#[derive(Debug)]
pub struct FleetBuilder {
    fence: Fence,
    cells: Vec<String>,
    settings: Settings,
}

impl FleetBuilder {
    /// Claims, adoptions and hand-offs in flight at once (default 32).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.settings.concurrency = n.max(1);
        self
    }

    /// How often the fleet reads this node's assignment record and acts on it (default
    /// TTL/5, within [`poll_ms`](fence_core::LeaseConfig::poll_ms)…2 s): the delay between a
    /// watcher confirming a death and the heirs taking its cells.
    #[must_use]
    pub fn interval(mut self, d: Duration) -> Self {
        self.settings.timing.interval_ms = ms(d).max(1);
        self
    }

    /// How long the leader waits after a node joins before it places cells on it (default
    /// one interval): joins close together are placed together. Dead nodes' cells are taken
    /// over without it.
    #[must_use]
    pub fn settle(mut self, d: Duration) -> Self {
        self.settings.timing.settle_ms = ms(d);
        self
    }

    /// A cell this node took is kept at least this long before it is shed again (default
    /// two intervals): no cell bounces between two nodes faster.
    #[must_use]
    pub fn min_hold(mut self, d: Duration) -> Self {
        self.settings.timing.min_hold_ms = ms(d);
        self
    }

    /// How often the heads of held cells are read to learn of a supersession no write has
    /// found yet (default one renewal period, TTL/3: one read per held cell each time);
    /// `None` to rely on writes and the lease alone.
    #[must_use]
    pub fn head_poll(mut self, every: Option<Duration>) -> Self {
        self.settings.timing.head_poll_ms = every.map(|d| ms(d).max(1));
        self
    }

    /// Reads every cell's head every `every`, so this node's [`FleetEvent::NewOwner`] events
    /// name every cell's owner (a router on one node). Off by default: it costs one read per
    /// cell per `every` on this node, which grows with the fleet. Without it, a node reads
    /// only the heads of the cells it holds or is about to take.
    #[must_use]
    pub fn scan(mut self, every: Duration) -> Self {
        self.settings.timing.follow_ms = Some(ms(every).max(1));
        self
    }

    /// How long [`start`](Self::start) waits for the node lease (default 3 × TTL).
    #[must_use]
    pub fn acquire_timeout(mut self, d: Duration) -> Self {
        self.settings.acquire_ms = ms(d);
        self
    }

    /// The lease generation of this node's previous process, which the caller **knows** has
    /// ended (it persisted [`FleetEvent::LeaseAcquired`]'s generation, and that process is gone):
    /// its lease is taken over at once, and its cells are resumed at their current epochs.
    /// Without it, a restart waits until the old lease is observed unchanged for a TTL, and
    /// resumes the cells at new epochs. See docs/design.md, "Restart and resume".
    #[must_use]
    pub fn predecessor(mut self, generation: impl Into<String>) -> Self {
        self.settings.predecessor = Some(generation.into());
        self
    }

    /// Only nodes for which `filter` says yes are members (default: every node that runs a
    /// fleet in this store, under the fence's prefix). The leader applies it: give every
    /// node the same filter. This node is always one.
    #[must_use]
    pub fn members(mut self, filter: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.settings.filter = Some(Arc::new(filter));
        self
    }

    /// Runs this fleet's rules with sabotage switch `switch` on (the model check and the
    /// sabotage test only; feature `sabotage`).
    #[cfg(feature = "sabotage")]
    #[must_use]
    pub fn sabotage(mut self, switch: crate::sabotage::Sabotage) -> Self {
        self.settings.flaws = crate::flaws::Flaws::switch(Some(switch));
        self
    }

    /// Acquires the node lease and starts the fleet's task. The first round reads every
    /// cell's head and resumes those the store names as this node's.
    ///
    /// Errors: those of [`Fence::acquire_wait`] (the lease held by a live process of this
    /// node: [`ErrorKind::Busy`]); [`ErrorKind::InvalidKey`] for a bad cell name, and
    /// [`ErrorKind::InvalidInput`] for the name the fleet's leadership uses
    /// ([`LEADER_CELL`](crate::LEADER_CELL)).
    pub async fn start(self) -> Result<(Fleet, Events), Error> {
        for c in &self.cells {
            fence_core::ownership::check_name("cell", c)?;
            if c == crate::LEADER_CELL {
                let msg = format!("cell name {c:?} is the fleet's leadership cell");
                return Err(Error::new(ErrorKind::InvalidInput, msg).not_committed());
            }
        }
        let lease = acquire(&self.fence, &self.settings).await?;
        announce(&self.fence, &lease).await;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let events = Arc::new(Mutex::new(events_rx));
        let _ = events_tx.send(FleetEvent::LeaseAcquired {
            generation: lease.generation(),
        });
        let inner = Arc::new(Inner {
            node: self.fence.ownership().node().to_owned(),
            generation: Mutex::new(lease.generation()),
            shards: Mutex::new(BTreeMap::new()),
            members: Mutex::new(Members::default()),
        });
        let (commands, rx) = mpsc::channel(16);
        let cells = crate::cells::intern(self.cells);
        let run = Run::new(inner.clone(), self.settings, lease, cells, events_tx, rx);
        let task = tokio::spawn(run.run());
        Ok((
            Fleet {
                inner,
                commands,
                task: Some(task),
                events: events.clone(),
            },
            Events { rx: events },
        ))
    }
}

/// Writes this node's generation into its assignment record (not leaving), so senders of a
/// hand-off can name it; a failure is retried by the fleet's rounds.
async fn announce(fence: &Fence, lease: &LeaseKeeper) {
    let generation = lease.generation();
    let own = |a: &mut crate::assignment::Assignment| {
        let changed = a.generation != generation || a.leaving;
        a.generation = generation.clone();
        a.leaving = false;
        changed
    };
    let bound = fence.config().attempt_max_ms;
    let me = fence.ownership().node();
    if let Err(e) = crate::assignment::edit(fence, me, bound, true, own).await {
        tracing::debug!(node = me, error = %e, "assignment record not written at start");
    }
}

/// The node lease for a fleet's start: the predecessor's at once if named, else waited for.
pub(crate) async fn acquire(fence: &Fence, settings: &Settings) -> Result<LeaseKeeper, Error> {
    if let Some(p) = &settings.predecessor {
        match fence.acquire_succeeding(p).await {
            Err(e) if e.kind() == ErrorKind::Busy => {}
            other => return other,
        }
    }
    fence
        .acquire_wait(Duration::from_millis(settings.acquire_ms))
        .await
}

/// What the handle and the fleet's task share.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) node: String,
    pub(crate) generation: Mutex<String>,
    pub(crate) shards: Mutex<BTreeMap<String, Shard>>,
    pub(crate) members: Mutex<Members>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a drain did, and the events nobody read.
#[derive(Debug, Default)]
pub struct Drained {
    /// Cells handed to another live node.
    pub handed_off: BTreeSet<String>,
    /// Cells released.
    pub released: BTreeSet<String>,
    /// Cells neither handed off nor released by the deadline: the store still names this
    /// node; they are taken over once its lease is observed gone.
    pub left: BTreeSet<String>,
    /// Whether the node lease was released (peers may act at once): true only when a read
    /// after the release shows this process's released record. False when the lease was
    /// already lost or the store did not answer — peers then take over after the usual
    /// observation.
    pub lease_released: bool,
    /// The events no reader had taken when the fleet stopped, in order: every cell whose
    /// `Started` was read has its `Stopped` either read before or here (empty if the
    /// [`Events`] receiver was dropped).
    pub unread: Vec<FleetEvent>,
}

pub(crate) enum Command {
    HandOff {
        cell: String,
        to: String,
        reply: oneshot::Sender<Result<u64, Error>>,
    },
    Drain {
        within_ms: u64,
        reply: oneshot::Sender<Drained>,
    },
}

/// One node of a fleet: keeps its fair share of the fleet's cells — `ceil(cells / live
/// nodes)` — hands cells on when nodes join, takes the cells it inherits from dead nodes,
/// and tells the application what it holds through [`FleetEvent`]s. See docs/fleet.md.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::{sync::Arc, time::Duration};
/// use fence::{Fence, MemoryStore};
/// use fence_fleet::{Fleet, FleetEvent};
///
/// let store = Arc::new(MemoryStore::new());
/// let fence = Fence::builder(store, "node-a").ttl(Duration::from_secs(2)).build().unwrap();
/// let cells = (0..4).map(|i| format!("shard-{i}"));
/// let (fleet, mut events) = Fleet::builder(fence, cells).start().await.unwrap();
/// let mut started = 0;
/// while started < 4 {
///     if let Some(FleetEvent::Started { shard, .. }) = events.recv().await {
///         shard.write("hello").await.unwrap();
///         started += 1;
///     }
/// }
/// let drained = fleet.drain(Duration::from_secs(5)).await;
/// assert_eq!(drained.released.len(), 4); // nobody else to hand them to
/// # });
/// ```
///
/// Dropping the handle stops the fleet's task at its next step: every shard is stopped
/// ([`StopReason::Closed`](crate::StopReason::Closed)) and the node lease is dropped (see
/// [`LeaseKeeper`]'s "Dropping it"); no cell is released. Use [`Fleet::drain`] to leave.
#[derive(Debug)]
pub struct Fleet {
    inner: Arc<Inner>,
    commands: mpsc::Sender<Command>,
    task: Option<JoinHandle<()>>,
    /// The receiver the [`Events`] handle reads: the drain takes what is left in it.
    events: Arc<Mutex<mpsc::UnboundedReceiver<FleetEvent>>>,
}

impl Fleet {
    /// A fleet of this fence's node over `cells`. Every node of one fleet must be given the
    /// same cells.
    pub fn builder<I, S>(fence: Fence, cells: I) -> FleetBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let cfg = fence.config().clone();
        let settings = Settings {
            concurrency: 32,
            timing: Timing::for_lease(&cfg),
            acquire_ms: 3 * cfg.ttl_ms,
            predecessor: None,
            filter: None,
            flaws: crate::flaws::Flaws::default(),
        };
        FleetBuilder {
            fence,
            cells: cells.into_iter().map(Into::into).collect(),
            settings,
        }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// The current lease generation (persist it to restart with
    /// [`FleetBuilder::predecessor`]; it changes when the lease is re-acquired, announced by
    /// [`FleetEvent::LeaseAcquired`]).
    pub fn generation(&self) -> String {
        lock(&self.inner.generation).clone()
    }

    /// The cells this node holds now.
    pub fn held(&self) -> Vec<Shard> {
        lock(&self.inner.shards).values().cloned().collect()
    }

    /// The shard of `cell`, if this node holds it.
    pub fn shard(&self, cell: &str) -> Option<Shard> {
        lock(&self.inner.shards).get(cell).cloned()
    }

    /// The nodes this node knows of (itself included): on the fleet's leader every member,
    /// elsewhere the nodes its assignment names — the node it watches, the heirs of its
    /// cells, the leader. Generations are known for this node and, on the leader, for all.
    pub fn members(&self) -> Members {
        lock(&self.inner.members).clone()
    }

    /// Hands `cell` to live node `to` ([`CellClaim::hand_off`](fence_core::CellClaim::hand_off)):
    /// the shard is stopped first, then one write names `to` at the next epoch, `to` is told
    /// in its assignment record, and it resumes the cell at that epoch. Returns `to`'s epoch.
    /// A hand-off against the placement is undone: the receiver releases the cell after a
    /// `scan`, and the node it is placed on takes it.
    ///
    /// Errors: [`ErrorKind::InvalidInput`] if this node does not hold `cell`, or `to` is not
    /// another node with a live lease that takes cells (not leaving); those of the hand-off.
    pub async fn hand_off(&self, cell: &str, to: &str) -> Result<u64, Error> {
        let (reply, answer) = oneshot::channel();
        let cmd = Command::HandOff {
            cell: cell.to_owned(),
            to: to.to_owned(),
            reply,
        };
        if self.commands.send(cmd).await.is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Leaves the fleet within `within` and consumes it: marks this node leaving, hands
    /// every held cell to its heir (or releases it when there is none, the heir is leaving
    /// too, or the hand-off failed), then releases the node lease so peers act at once.
    /// What is not done by the deadline is left to be taken over. Returns once the fleet's
    /// task has ended, with the events nobody read ([`Drained::unread`]): the `Stopped` of
    /// every cell it stopped is there unless a reader took it, so draining after leaving
    /// the event loop loses no stop.
    pub async fn drain(mut self, within: Duration) -> Drained {
        let (reply, answer) = oneshot::channel();
        let cmd = Command::Drain {
            within_ms: ms(within),
            reply,
        };
        let mut drained = Drained::default();
        if self.commands.send(cmd).await.is_ok() {
            drained = answer.await.unwrap_or_default();
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        drained.unread = take_unread(&self.events);
        drained
    }
}

pub(crate) fn stopped() -> Error {
    Error::new(ErrorKind::Unavailable, "the fleet has stopped").not_committed()
}
