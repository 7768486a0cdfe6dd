//! Deterministic simulation of the runtime and its decision core.
//!
//! One seed drives everything: the virtual clock (a current-thread tokio runtime with paused
//! time: sleeps complete instantly in wall time, in order of virtual time), each process's
//! actions and their timing, the wall-clock skew between processes, pauses (a process's path
//! to the store frozen, and — for a *suspension* — its monotonic clock stopped too), crashes at
//! any await point (the process's tasks aborted, its path killed; restarted later as a new
//! process with a new generation), and [`FaultyStore`] faults (lost answers, lost requests,
//! 409s, 5xx after applying, latency, hangs).
//!
//! Each node runs the real runtime ([`fence_core::Fence`]): acquires its lease, claims cells,
//! writes fenced data with a per-process sequence (sometimes two writes at once through one
//! claim, sometimes beside a keeperless co-writer at the claim's epoch, sometimes payloads
//! large enough for payload objects), collects unused payload objects while a co-writer
//! creates one, hands cells off (sometimes racing a resume of the same cell), releases now
//! and then, and tries one more write on each claim after losing its lease. Some writes are
//! held up in the network and land after their caller gave up; some read answers arrive
//! late; a process may stop while its renewal is held up (the renewal lands just before it
//! runs again) or right after a read of a peer's lease was served. Every claim, acknowledged write, `is_held() == true` answer, belief in
//! a claim, every write the store applied and every payload object it deleted is recorded;
//! the [properties](Property) are checked on that record and the store's final state.
//!
//! With the `sabotage` feature, `SimConfig::sabotage` makes every node run a deliberately
//! broken core (`fence_core::sabotage`); the properties must catch each switch.
//!
//! ```
//! use fence_testkit::sim::{run_seed, SimConfig};
//! let cfg = SimConfig { chaos_ms: 4_000, ..SimConfig::default() };
//! let outcome = run_seed(7, &cfg);
//! assert!(outcome.is_ok(), "{outcome}");
//! assert_eq!(outcome.trace_hash, run_seed(7, &cfg).trace_hash, "same seed, same trace");
//! ```

mod check;
mod late;
mod node;
mod pause;
mod trace;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(feature = "sabotage")]
pub use fence_core::sabotage::Sabotage;
use fence_core::{
    Clock, ConditionalStore, Entropy, Fence, Key, LeaseKeeper, MemoryStore, Ownership, Stop,
    Suspension,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

use crate::faulty::{FaultyStore, OpKind, RandomFaults};
use check::FinalHead;
pub use check::{Property, Violation};
use late::LateStore;
use node::{KeeperSlot, Process};
pub use pause::PausableStore;
pub use trace::{trace_hash, Event, Log};
use trace::{HistoryStore, PathProbe};

/// The environment variable that replays one seed: `FENCE_SIM_SEED=<seed>`.
pub const SEED_ENV: &str = "FENCE_SIM_SEED";

/// The wall clock of the simulated world at virtual time 0.
const BASE_WALL_MS: u64 = 1_700_000_000_000;

/// How far process wall clocks disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkewMode {
    /// Each process's wall clock within ± margin/2 of the others'.
    WithinMargin,
    /// Each process within ± 2 × margin. Takeovers are judged by observation, so nothing may
    /// change: the same properties must hold, exclusion included.
    BeyondMargin,
}

/// What one simulated run looks like. Small by default (3 nodes, 3 cells, 20 virtual
/// seconds) so that a thousand seeds take a few minutes in a debug build.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Nodes (each one process at a time).
    pub nodes: usize,
    /// Cells they compete for.
    pub cells: usize,
    /// Lease TTL, virtual ms (at least 100).
    pub ttl_ms: u64,
    /// The runtime's skew margin, virtual ms.
    pub skew_margin_ms: u64,
    /// Virtual duration of the chaos phase (faults, pauses, crashes); then the faults stop
    /// and ownership must settle.
    pub chaos_ms: u64,
    /// Random store faults on puts during the chaos phase (`None`: no faults).
    pub put_faults: Option<RandomFaults>,
    /// Random store faults on gets during the chaos phase.
    pub get_faults: Option<RandomFaults>,
    /// Random pauses (stalls and suspensions).
    pub pauses: bool,
    /// Random crashes and restarts.
    pub crashes: bool,
    /// Share of puts held up in the network for up to 1.5 × TTL, landing after their caller
    /// gave up.
    pub late_writes: f64,
    /// Share of gets whose answer is held up in the network for up to half a TTL: served at
    /// once, it arrives late (a renewal may land while a confirming read of the lease
    /// travels back; a read-back's answer comes after a co-writer's write landed).
    pub late_answers: f64,
    /// Clock skew between processes.
    pub skew: SkewMode,
    /// A broken core run by every node (feature `sabotage`).
    #[cfg(feature = "sabotage")]
    pub sabotage: Option<Sabotage>,
}

impl Default for SimConfig {
    fn default() -> Self {
        let latency = RandomFaults {
            latency: 0.2,
            latency_max: Duration::from_millis(150),
            ..RandomFaults::default()
        };
        SimConfig {
            nodes: 3,
            cells: 3,
            ttl_ms: 1_000,
            skew_margin_ms: 200,
            chaos_ms: 20_000,
            put_faults: Some(RandomFaults {
                fail_before_send: 0.01,
                lose_request: 0.02,
                lose_answer: 0.02,
                conflict: 0.02,
                server_error_after_apply: 0.02,
                hang: 0.003,
                ..latency
            }),
            get_faults: Some(RandomFaults {
                fail_before_send: 0.01,
                lose_answer: 0.01,
                hang: 0.002,
                ..latency
            }),
            pauses: true,
            crashes: true,
            late_writes: 0.02,
            late_answers: 0.02,
            skew: SkewMode::WithinMargin,
            #[cfg(feature = "sabotage")]
            sabotage: None,
        }
    }
}

impl SimConfig {
    fn ttl(&self) -> u64 {
        self.ttl_ms.max(100)
    }

    /// The largest skew of one process's wall clock.
    pub fn max_skew_ms(&self) -> u64 {
        match self.skew {
            SkewMode::WithinMargin => self.skew_margin_ms / 2,
            SkewMode::BeyondMargin => self.skew_margin_ms * 2,
        }
    }

    /// How long after the chaos phase every cell must be owned by a live node: the late
    /// writes still in flight (1.5 × TTL), then a restarted node's acquisition (one TTL of
    /// observation), a takeover (another TTL of observation), and the nodes' own pacing
    /// (TTL).
    pub fn settle_bound_ms(&self) -> u64 {
        5 * self.ttl() + self.ttl() / 2
    }
}

/// The result of one seed.
#[derive(Clone, Debug)]
pub struct SimOutcome {
    /// The seed.
    pub seed: u64,
    /// Every property violation found (empty: the run is fine).
    pub violations: Vec<Violation>,
    /// A hash of the whole event trace (the determinism self-test compares it).
    pub trace_hash: u64,
    /// Events recorded.
    pub events: usize,
    /// Successful claims.
    pub claims: usize,
    /// Successful resumes (a cell acted on again at the epoch its head had).
    pub resumes: usize,
    /// Acknowledged writes.
    pub acks: usize,
    /// Store faults injected.
    pub faults: u64,
    /// Pauses applied.
    pub pauses: u32,
    /// Crashes applied.
    pub crashes: u32,
    /// Virtual ms from the end of the chaos phase until every cell was owned by a live node.
    pub settle_ms: Option<u64>,
    /// Virtual duration of the run.
    pub virtual_ms: u64,
}

impl SimOutcome {
    /// Whether every property held.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Whether `property` was violated.
    pub fn violated(&self, property: Property) -> bool {
        self.violations.iter().any(|v| v.property == property)
    }

    /// The line that replays this seed.
    pub fn replay_line(&self) -> String {
        format!("{SEED_ENV}={}", self.seed)
    }
}

impl fmt::Display for SimOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.is_ok() { "ok" } else { "FAILED" };
        write!(
            f,
            "seed {} {verdict}: {} events, {} claims, {} resumes, {} acks, {} faults, {} pauses, {} crashes, settled in {:?} ms, {} virtual ms, trace {:016x}",
            self.seed, self.events, self.claims, self.resumes, self.acks, self.faults, self.pauses,
            self.crashes, self.settle_ms, self.virtual_ms, self.trace_hash
        )?;
        for v in &self.violations {
            write!(f, "\n  {v}")?;
        }
        if !self.is_ok() {
            write!(f, "\n  replay with {}", self.replay_line())?;
        }
        Ok(())
    }
}

/// The seed to replay from [`SEED_ENV`], if set and numeric.
pub fn replay_seed() -> Option<u64> {
    std::env::var(SEED_ENV).ok()?.trim().parse().ok()
}

/// Runs one seed over a fresh [`MemoryStore`].
pub fn run_seed(seed: u64, cfg: &SimConfig) -> SimOutcome {
    run_seed_on(seed, cfg, || Arc::new(MemoryStore::new()))
}

/// Payloads above this go to payload objects in the simulation (small, so that some writes
/// exercise them).
const INLINE_MAX: usize = 64;

/// Runs one seed over a fresh [`MemoryStore`] and returns its whole event trace too (for
/// studying a failing seed).
pub fn run_seed_traced(seed: u64, cfg: &SimConfig) -> (SimOutcome, Vec<Event>) {
    let trace = Arc::new(Mutex::new(Vec::new()));
    let keep = trace.clone();
    let outcome = run_with(seed, cfg, Arc::new(MemoryStore::new()), Some(keep));
    let events = std::mem::take(&mut *trace.lock().unwrap_or_else(|p| p.into_inner()));
    (outcome, events)
}

/// Runs one seed over the store `store()` makes (an in-process store: time is virtual).
/// Builds its own current-thread tokio runtime with paused time; call it from outside any
/// runtime.
pub fn run_seed_on(
    seed: u64,
    cfg: &SimConfig,
    store: impl FnOnce() -> Arc<dyn ConditionalStore>,
) -> SimOutcome {
    run_with(seed, cfg, store(), None)
}

type TraceSink = Arc<Mutex<Vec<Event>>>;

fn run_with(
    seed: u64,
    cfg: &SimConfig,
    base: Arc<dyn ConditionalStore>,
    sink: Option<TraceSink>,
) -> SimOutcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    match runtime {
        // The world is made inside the runtime, so that every clock starts on virtual time.
        Ok(rt) => rt.block_on(async move {
            let world = World::new(seed, cfg.clone(), base);
            world.run(sink).await
        }),
        Err(e) => SimOutcome {
            seed,
            violations: vec![Violation {
                property: Property::OwnershipSettles,
                detail: format!("could not build the runtime: {e}"),
            }],
            trace_hash: 0,
            events: 0,
            claims: 0,
            resumes: 0,
            acks: 0,
            faults: 0,
            pauses: 0,
            crashes: 0,
            settle_ms: None,
            virtual_ms: 0,
        },
    }
}

/// A summary of many seeds.
#[derive(Clone, Debug, Default)]
pub struct SimSummary {
    /// Seeds run.
    pub runs: usize,
    /// Outcomes of the seeds that failed.
    pub failures: Vec<SimOutcome>,
    /// Acknowledged writes over all seeds.
    pub acks: usize,
    /// Resumes over all seeds.
    pub resumes: usize,
    /// Faults injected over all seeds.
    pub faults: u64,
    /// Crashes over all seeds.
    pub crashes: u64,
    /// The longest settle time seen, virtual ms.
    pub max_settle_ms: u64,
}

/// Runs every seed of `seeds` on `threads` OS threads (each seed on its own runtime) and
/// summarises. With `print`, failing seeds are printed with their replay line as they are
/// found.
pub fn run_seeds(
    seeds: std::ops::Range<u64>,
    cfg: &SimConfig,
    threads: usize,
    print: bool,
) -> SimSummary {
    let next = Mutex::new(seeds.clone());
    let summary = Mutex::new(SimSummary::default());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let seed = next.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some(seed) = seed else { return };
                let outcome = run_seed(seed, cfg);
                let mut sum = summary.lock().unwrap_or_else(|p| p.into_inner());
                sum.runs += 1;
                sum.acks += outcome.acks;
                sum.resumes += outcome.resumes;
                sum.faults += outcome.faults;
                sum.crashes += u64::from(outcome.crashes);
                sum.max_settle_ms = sum.max_settle_ms.max(outcome.settle_ms.unwrap_or(0));
                if !outcome.is_ok() {
                    if print {
                        println!("{outcome}");
                    }
                    sum.failures.push(outcome);
                }
            });
        }
    });
    let mut sum = summary.into_inner().unwrap_or_else(|p| p.into_inner());
    sum.failures.sort_by_key(|o| o.seed);
    sum
}

/// How a process is paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PauseKind {
    /// Its path to the store is stalled; it keeps running.
    Stall,
    /// The machine is suspended: path stalled and monotonic clock stopped.
    Suspend,
    /// The process is stopped (SIGSTOP): path stalled, answers held, timers held; its
    /// monotonic clock keeps running.
    Stop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Pause {
        idx: usize,
        kind: PauseKind,
        ms: u64,
    },
    /// Stop the process right after its next lease write applies, for `ms`.
    StopMidRenewal {
        idx: usize,
        ms: u64,
    },
    /// Stop the process right after its next read of a peer's lease is served, for `ms`.
    StopMidPeerRead {
        idx: usize,
        ms: u64,
    },
    Thaw {
        idx: usize,
        incarnation: u32,
    },
    Crash {
        idx: usize,
    },
    Restart {
        idx: usize,
    },
}

/// One process slot: a node and its current process.
struct Slot {
    node: String,
    incarnation: u32,
    path: Arc<PausableStore>,
    suspension: Arc<Suspension>,
    stop: Arc<Stop>,
    task: Option<JoinHandle<()>>,
    keeper: KeeperSlot,
    /// The lease generation the process had when it crashed.
    crashed_gen: Option<String>,
    dead: bool,
    paused: bool,
}

struct World {
    seed: u64,
    cfg: SimConfig,
    log: Log,
    base: Arc<dyn ConditionalStore>,
    faulty: Arc<FaultyStore>,
    late: Arc<LateStore>,
    rng: SmallRng,
    slots: Vec<Slot>,
    /// Keepers of crashed processes, kept alive so that no drop sends a graceful release.
    graveyard: Vec<Arc<LeaseKeeper>>,
    queue: BTreeMap<(u64, u64), Action>,
    queued: u64,
    pauses: u32,
    crashes: u32,
}

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut x =
        seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 31;
    x.wrapping_mul(0xBF58_476D_1CE4_E5B9)
}

impl World {
    fn new(seed: u64, cfg: SimConfig, base: Arc<dyn ConditionalStore>) -> Self {
        let log = Log::new(Clock::virtual_at(BASE_WALL_MS));
        let history: Arc<dyn ConditionalStore> =
            Arc::new(HistoryStore::new(base.clone(), log.clone()));
        let faulty = Arc::new(FaultyStore::new(history, mix(seed, 1, 0)));
        if let Some(r) = cfg.put_faults {
            faulty.set_random(OpKind::Put, r);
        }
        if let Some(r) = cfg.get_faults {
            faulty.set_random(OpKind::Get, r);
        }
        let max_delay = Duration::from_millis(cfg.ttl() * 3 / 2);
        let late = Arc::new(
            LateStore::new(faulty.clone(), mix(seed, 5, 0), cfg.late_writes, max_delay)
                .with_late_answers(cfg.late_answers, Duration::from_millis(cfg.ttl() / 2)),
        );
        World {
            seed,
            cfg,
            log,
            base,
            faulty,
            late,
            rng: SmallRng::seed_from_u64(mix(seed, 2, 0)),
            slots: Vec::new(),
            graveyard: Vec::new(),
            queue: BTreeMap::new(),
            queued: 0,
            pauses: 0,
            crashes: 0,
        }
    }

    fn cells(&self) -> Vec<String> {
        (0..self.cfg.cells.max(1))
            .map(|c| format!("c{c}"))
            .collect()
    }

    fn action(&self, what: String) {
        self.log.push(|t| Event::Action { t, what });
    }

    fn schedule(&mut self, at: u64, action: Action) {
        self.queued += 1;
        self.queue.insert((at, self.queued), action);
    }

    /// A fresh path (through the faulty network) and clock for a new process of slot `idx`.
    fn process_parts(
        &mut self,
        idx: usize,
    ) -> (Arc<PausableStore>, Arc<Suspension>, Arc<Stop>, Clock) {
        let store: Arc<dyn ConditionalStore> = self.late.clone();
        let skew = self.cfg.max_skew_ms() as i64;
        let skew = self.rng.gen_range(-skew..=skew);
        let suspension = Arc::new(Suspension::default());
        let stop = Arc::new(Stop::default());
        let clock = Clock::virtual_at(BASE_WALL_MS + self.log.now())
            .with_skew_ms(skew)
            .with_suspension(suspension.clone())
            .with_stop(stop.clone());
        let path = Arc::new(PausableStore::new(store));
        self.action(format!(
            "start process {} of slot {idx}, skew {skew} ms",
            self.slots.get(idx).map_or(1, |s| s.incarnation + 1)
        ));
        (path, suspension, stop, clock)
    }

    /// Starts (or restarts) node `idx` as a new process; half of the restarts after a crash
    /// acquire as the crashed process's successor.
    fn start_node(&mut self, idx: usize) {
        let node = format!("n{idx}");
        let predecessor = self
            .slots
            .get(idx)
            .and_then(|s| s.crashed_gen.clone())
            .filter(|_| self.rng.gen_bool(0.5));
        let incarnation = self.slots.get(idx).map_or(1, |s| s.incarnation + 1);
        let (path, suspension, stop, clock) = self.process_parts(idx);
        let view: Arc<dyn ConditionalStore> = Arc::new(PathProbe::new(
            path.clone(),
            clock.clone(),
            self.log.clone(),
            node.clone(),
        ));
        let builder = Fence::builder(view, node.clone())
            .ttl(Duration::from_millis(self.cfg.ttl()))
            .skew_margin(Duration::from_millis(self.cfg.skew_margin_ms))
            .inline_max(INLINE_MAX)
            .clock(clock.clone())
            .entropy(Entropy::seeded(mix(
                self.seed,
                3 + idx as u64,
                u64::from(incarnation),
            )));
        #[cfg(feature = "sabotage")]
        let builder = match self.cfg.sabotage {
            Some(s) => builder.sabotage(s),
            None => builder,
        };
        let built = builder.build();
        let keeper: KeeperSlot = Arc::new(Mutex::new(None));
        let task = built.ok().map(|fence| {
            let process = Process {
                node: node.clone(),
                process: format!("{node}#{incarnation}"),
                fence,
                clock,
                log: self.log.clone(),
                rng: SmallRng::seed_from_u64(mix(
                    self.seed,
                    100 + idx as u64,
                    u64::from(incarnation),
                )),
                cells: self.cells(),
                ttl_ms: self.cfg.ttl(),
                slot: keeper.clone(),
                large: INLINE_MAX,
                predecessor: predecessor.clone(),
                vouched: None,
                peers: (0..self.cfg.nodes)
                    .map(|i| format!("n{i}"))
                    .filter(|n| *n != node)
                    .collect(),
            };
            tokio::spawn(process.run())
        });
        let slot = Slot {
            node,
            incarnation,
            path,
            suspension,
            stop,
            task,
            keeper,
            crashed_gen: None,
            dead: false,
            paused: false,
        };
        match self.slots.get_mut(idx) {
            Some(s) => *s = slot,
            None => self.slots.push(slot),
        }
    }

    /// Draws the chaos plan: pauses and crashes of the ordinary nodes.
    fn plan(&mut self) {
        let span = self.cfg.chaos_ms.saturating_sub(1_000).max(1);
        let ttl = self.cfg.ttl();
        for idx in 0..self.cfg.nodes {
            if self.cfg.pauses {
                for _ in 0..self.rng.gen_range(0..=2) {
                    let at = 500 + self.rng.gen_range(0..span);
                    let kind = match self.rng.gen_range(0..3) {
                        0 => PauseKind::Stall,
                        1 => PauseKind::Suspend,
                        _ => PauseKind::Stop,
                    };
                    let ms = self.rng.gen_range(ttl / 4..=3 * ttl);
                    self.schedule(at, Action::Pause { idx, kind, ms });
                }
                // A pause that ends while a peer takes the node's cells over (about a TTL
                // after its last renewal): a write it sent before is let through then, between
                // the taker's reads of the head.
                let at = 500 + self.rng.gen_range(0..span);
                let kind = [PauseKind::Stall, PauseKind::Suspend, PauseKind::Stop]
                    [self.rng.gen_range(0..3)];
                let ms = self.rng.gen_range(ttl..=ttl * 8 / 5);
                self.schedule(at, Action::Pause { idx, kind, ms });
            }
            // A stop while a renewal is held up in the network, long enough that it lands
            // after the prior authority ended but before the new one would end.
            for _ in 0..u32::from(self.cfg.pauses) * 2 {
                let at = 500 + self.rng.gen_range(0..span);
                let ms = self.rng.gen_range(ttl * 75 / 100..=ttl * 90 / 100);
                self.schedule(at, Action::StopMidRenewal { idx, ms });
            }
            // A stop while a read of a peer's lease travels back, long enough that the peer
            // renews meanwhile, short enough that this node's own lease outlives it.
            for _ in 0..u32::from(self.cfg.pauses) * 2 {
                let at = 500 + self.rng.gen_range(0..span);
                let ms = self.rng.gen_range(ttl * 70 / 100..=ttl * 95 / 100);
                self.schedule(at, Action::StopMidPeerRead { idx, ms });
            }
            if self.cfg.crashes && self.rng.gen_bool(0.6) {
                let at = 500 + self.rng.gen_range(0..span);
                self.schedule(at, Action::Crash { idx });
            }
        }
    }

    fn apply(&mut self, action: Action) {
        let now = self.log.now();
        match action {
            Action::Pause { idx, kind, ms } => {
                let s = &mut self.slots[idx];
                if s.dead || s.paused || s.path.is_blocked() {
                    return;
                }
                match kind {
                    PauseKind::Stall => s.path.freeze(),
                    PauseKind::Suspend => {
                        s.path.freeze();
                        s.suspension.suspend();
                        let process = format!("{}#{}", s.node, s.incarnation);
                        self.log.push(|t| Event::Suspended { t, process });
                    }
                    PauseKind::Stop => {
                        s.path.stop();
                        s.stop.stop();
                    }
                }
                s.paused = true;
                let incarnation = s.incarnation;
                self.pauses += 1;
                self.action(format!("pause slot {idx} for {ms} ms ({kind:?})"));
                self.schedule(now + ms, Action::Thaw { idx, incarnation });
            }
            Action::StopMidRenewal { idx, ms } => {
                let s = &self.slots[idx];
                if !s.dead && !s.paused {
                    s.path.stop_around_next_lease_write(ms, s.stop.clone());
                    self.pauses += 1;
                    self.action(format!(
                        "slot {idx} stops for {ms} ms at its next lease write"
                    ));
                }
            }
            Action::StopMidPeerRead { idx, ms } => {
                let s = &self.slots[idx];
                let own = Key::new(format!("nodes/{}.json", s.node));
                if let (false, false, Ok(own)) = (s.dead, s.paused, own) {
                    s.path
                        .stop_around_next_peer_lease_read(own, ms, s.stop.clone());
                    self.pauses += 1;
                    self.action(format!(
                        "slot {idx} stops for {ms} ms at its next read of a peer's lease"
                    ));
                }
            }
            Action::Thaw { idx, incarnation } => {
                if self.slots[idx].incarnation == incarnation {
                    self.thaw(idx);
                }
            }
            Action::Crash { idx } => {
                if self.crash(idx) {
                    let after = self.rng.gen_range(0..2 * self.cfg.ttl());
                    self.schedule(now + after, Action::Restart { idx });
                }
            }
            Action::Restart { idx } => {
                if self.slots[idx].dead {
                    self.start_node(idx);
                }
            }
        }
    }

    fn thaw(&mut self, idx: usize) {
        let s = &mut self.slots[idx];
        if s.paused {
            s.paused = false;
            s.path.thaw();
            s.suspension.resume();
            s.stop.resume();
            self.action(format!("thaw slot {idx}"));
        }
    }

    fn crash(&mut self, idx: usize) -> bool {
        let s = &mut self.slots[idx];
        if s.dead {
            return false;
        }
        if let Some(k) = s.keeper.lock().unwrap_or_else(|p| p.into_inner()).take() {
            s.crashed_gen = Some(k.generation());
            self.graveyard.push(k);
        }
        s.path.kill();
        s.suspension.resume();
        s.stop.resume();
        if let Some(task) = &s.task {
            task.abort();
        }
        s.dead = true;
        s.paused = false;
        self.crashes += 1;
        self.action(format!("crash slot {idx}"));
        true
    }

    async fn sleep_until(&self, t: u64) {
        let now = self.log.now();
        if t > now {
            tokio::time::sleep(Duration::from_millis(t - now)).await;
        }
    }

    async fn run(mut self, sink: Option<TraceSink>) -> SimOutcome {
        for idx in 0..self.cfg.nodes.max(1) {
            self.start_node(idx);
        }
        self.plan();
        let chaos_end = self.cfg.chaos_ms;
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 >= chaos_end {
                break;
            }
            let ((at, _), action) = entry.remove_entry();
            self.sleep_until(at).await;
            self.apply(action);
        }
        self.sleep_until(chaos_end).await;
        self.end_chaos();
        let settle = self.settle(chaos_end).await;
        self.finish(settle, sink).await
    }

    /// Stops every fault: faults cleared, paused processes thawed, crashed ones restarted.
    fn end_chaos(&mut self) {
        self.faulty.clear();
        self.late.clear();
        self.queue.clear();
        for idx in 0..self.slots.len() {
            // A trap armed late in the chaos must not stop a process while it settles.
            self.slots[idx].path.disarm();
            self.thaw(idx);
            if self.slots[idx].dead {
                self.start_node(idx);
            }
        }
        self.action("chaos over".into());
    }

    /// Waits until every cell is owned by a live node; `Err(evidence)` past the bound.
    async fn settle(&self, since: u64) -> Result<u64, String> {
        let deadline = since + self.cfg.settle_bound_ms();
        loop {
            let unsettled = self.unsettled().await;
            let now = self.log.now();
            if unsettled.is_empty() {
                return Ok(now - since);
            }
            if now >= deadline {
                return Err(format!(
                    "{} ms after the last fault: {}",
                    now - since,
                    unsettled.join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Cells not owned by a live node (a node whose current process holds its lease).
    async fn unsettled(&self) -> Vec<String> {
        let reader = Ownership::new(self.base.clone(), "observer");
        let mut out = Vec::new();
        for cell in self.cells() {
            let owner = reader.read_owner(&cell).await.ok().flatten();
            let node = owner.as_ref().and_then(|o| o.node.clone());
            let live = node.as_deref().is_some_and(|n| self.is_live(n));
            if !live {
                out.push(format!("{cell} owned by {node:?} (not a live node)"));
            }
        }
        out
    }

    fn is_live(&self, node: &str) -> bool {
        self.slots.iter().any(|s| {
            s.node == node
                && !s.dead
                && s.keeper
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_ref()
                    .is_some_and(|k| k.is_held())
        })
    }

    async fn finish(self, settle: Result<u64, String>, sink: Option<TraceSink>) -> SimOutcome {
        // The trace is taken before any task is stopped: a stopped process drops its keeper,
        // whose release would otherwise still reach the log.
        let reader = Ownership::new(self.base.clone(), "observer");
        let mut finals = BTreeMap::new();
        for cell in self.cells() {
            let head = reader.read_head(&cell).await.ok().flatten();
            let mut fin = None;
            if let Some((h, _)) = head {
                let payload = reader.load_payload(&cell, &h.payload).await.ok().flatten();
                fin = Some(FinalHead {
                    epoch: h.epoch,
                    payload: payload.unwrap_or_default(),
                });
            }
            finals.insert(cell, fin);
        }
        let events = self.log.events();
        for s in &self.slots {
            if let Some(task) = &s.task {
                task.abort();
            }
        }
        let mut violations = check::check(&events, &finals, self.cfg.ttl());
        let settle_ms = match settle {
            Ok(ms) => Some(ms),
            Err(detail) => {
                violations.push(Violation {
                    property: Property::OwnershipSettles,
                    detail,
                });
                None
            }
        };
        let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
        let outcome = SimOutcome {
            seed: self.seed,
            violations,
            trace_hash: trace_hash(&events),
            events: events.len(),
            claims: count(|e| matches!(e, Event::Claimed { .. })),
            resumes: count(|e| matches!(e, Event::Resumed { .. })),
            acks: count(|e| matches!(e, Event::Acked { .. })),
            faults: self.faulty.injected(),
            pauses: self.pauses,
            crashes: self.crashes,
            settle_ms,
            virtual_ms: self.log.now(),
        };
        if let Some(sink) = sink {
            *sink.lock().unwrap_or_else(|p| p.into_inner()) = events;
        }
        outcome
    }
}
