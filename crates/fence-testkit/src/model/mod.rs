//! An exhaustive model check of the real decision core, with `stateright`.
//!
//! The nodes of the model run fence's own pure step machines — nothing is re-implemented:
//! [`LeaseCore`](fence_core::decide::LeaseCore) (acquire, renew, resolve, fence),
//! [`Observation`](fence_core::decide::Observation) (judging a peer's lease),
//! [`ClaimFlow`](fence_core::decide::claim::ClaimFlow) (claim, resume, takeover, seal),
//! [`CellWrite`](fence_core::decide::claimed::CellWrite) and
//! [`admit`](fence_core::decide::claimed::admit) (fenced writes, release, hand-off, and the
//! lease check before them), [`HeadWrite`](fence_core::decide::write::HeadWrite) (the
//! settlement of every head write by evidence), and the payload collection rule
//! ([`blob_epoch`](fence_core::decide::claimed::blob_epoch) and
//! [`collectable`](fence_core::decide::claimed::collectable)), and a lease's register of
//! claimed cells ([`Register`](fence_core::decide::register::Register): what it lets claim,
//! resume or adopt a cell while a hand-off is under way). The tokio runtime drives the
//! very same machines and rules. Only the world around them is the model's: a store with versions, a network
//! whose requests can be held up, answered late, lost or refused, clocks (monotonic and wall,
//! skewed, suspended), pauses, crashes and restarts, a lapsed lease taken back as its own
//! successor (resuming its heads), an adoption in a second task of a node, and a co-writer
//! at the cell's epoch (`update_cell`, as `fence put` is).
//!
//! A scope may have more than one cell ([`ModelConfig::cells`]): every node claims each
//! cell in a task of its own, under its one lease and its one register of claims, and every
//! property is judged per cell ([`ModelConfig::two_cells`] in CI, the 2 × 2 scope
//! [`ModelConfig::two_by_two`] on demand).
//!
//! Time is discrete: it advances in ticks of [`ModelConfig::tick_ms`] only when the network
//! is quiet (every request answered, except those a fault made slow) and no node has work
//! due, so a state is small and hashable (versions are small integers, times bounded by the
//! horizon). Faults, pauses, crashes and the nodes' own choices (write, release, hand off)
//! happen only during the first [`ModelConfig::chaos_ticks`]; the run then goes on quietly
//! for [`ModelConfig::settle_ticks`], so every path ends, and the liveness property is
//! judged on its end.
//!
//! ```no_run
//! use fence_testkit::model::{check, ModelConfig};
//! let report = check(&ModelConfig::quick());
//! println!("{}", report.summary());
//! assert!(report.is_clean(), "{}", report.counterexamples());
//! ```

mod explore;
mod props;
mod trace;
mod world;

use std::fmt;
use std::time::Duration;

pub use explore::{explore, Condition, Scope};
pub use props::{PropertyName, EXCLUSION};
pub use trace::Counterexample;
pub use world::{Action, World};

#[cfg(feature = "sabotage")]
pub use fence_core::sabotage::Sabotage;

/// A clock or an assumption docs/design.md names, bent on purpose. Beyond what the design
/// admits, the model must find two nodes that believe they hold the cell at once; within it
/// (a clock rate inside the 0.2 % margin), every property must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exception {
    /// Node 0's monotonic *and* wall clocks run at half speed (far beyond the 0.2 % margin).
    SlowClocks,
    /// Node 0's monotonic *and* wall clocks run slower than real time by `ppm` parts per
    /// million: within the margin a peer's observation allows for (2,000 ppm, 0.2 %), no
    /// breach at all; beyond it, an admitted exception.
    SlowClock {
        /// How much slower, in parts per million.
        ppm: u32,
    },
    /// Node 0's wall clock is set behind by more than its peers' `stale_after`: they judge
    /// its live lease stale at once, without observation.
    WallBehind,
}

/// The scope of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Nodes (2 or 3), competing for each cell.
    pub nodes: usize,
    /// Cells (1 to 4), each claimed by every node under the node's one lease and its one
    /// register of claims. Writes and appends (per node) and co-writes are counted per
    /// cell; faults, pauses, crashes, releases, hand-offs, collections, adoptions and
    /// successions in all.
    pub cells: usize,
    /// How many of them (the first ones) make choices — write, release, hand off — and can
    /// be paused or crash; the others only keep their leases and claim.
    pub actors: usize,
    /// How many nodes (the first ones) append to the cell's log: the acting ones, and more
    /// (which make no other choice) when this is larger.
    pub appenders: usize,
    /// Each node's lease TTL in ms (mixed TTLs allowed); the last one repeats.
    pub ttl_ms: Vec<u64>,
    /// One tick of model time, in ms.
    pub tick_ms: u64,
    /// Faulty answers in all (held up, lost, refused, late), at most.
    pub faults: u8,
    /// Pauses (a stalled or a suspended process), at most.
    pub pauses: u8,
    /// How long one pause lasts, in ticks.
    pub pause_ticks: u32,
    /// Crashes (each followed by a restart under a new process generation), at most.
    pub crashes: u8,
    /// Fenced data writes per node (and per cell), at most.
    pub writes: u8,
    /// Releases of the cell in all, at most.
    pub releases: u8,
    /// Hand-offs of the cell in all, at most.
    pub hand_offs: u8,
    /// Writes by a co-writer at the cell's epoch (`update_cell`), at most.
    pub co_writes: u8,
    /// Collections of unused payload objects (`collect_garbage`) in all, at most. With
    /// any, the co-writer's data goes to payload objects (nodes write inline data).
    pub collections: u8,
    /// Appends to the cell's log per appending node (and per cell), at most (`AppendLog`: the
    /// cell's data is then the log's head; nodes do not also write data).
    pub appends: u8,
    /// Adoptions of a cell by node 0 in a second task (`LeaseKeeper::adopt`), racing its
    /// first (a hand-off, a claim), as far as the lease's register of claims lets them
    /// start, at most.
    pub adopts: u8,
    /// Times a node whose lease lapsed takes it back as the successor of its own generation
    /// and resumes that generation's heads at their epochs (docs/design.md, "Restart and
    /// resume", case 2), at most.
    pub successions: u8,
    /// Ticks during which faults and choices happen.
    pub chaos_ticks: u32,
    /// Quiet ticks after them, by the end of which some node must hold the cell.
    pub settle_ticks: u32,
    /// A breached assumption, if any (see [`Exception`]).
    pub exception: Option<Exception>,
    /// Each state is brought to its canonical form, forgetting what cannot affect the
    /// future (on in every scope; off only to measure what it saves).
    pub canonical: bool,
    /// A sabotage switch every node runs with (feature `sabotage`).
    #[cfg(feature = "sabotage")]
    pub sabotage: Option<Sabotage>,
}

impl ModelConfig {
    /// The scope of faults every CI run checks: 2 nodes × 1 cell, up to 1 faulty answer, one
    /// pause (stall or suspension), one crash and restart, one fenced write, all during the
    /// first 2 ticks, then 8 quiet ones. Two faulty answers are [`ci_two_faults`](Self::ci_two_faults); both
    /// together with the write ([`two_faults`](Self::two_faults)) do not fit CI's 3 minutes
    /// and run on demand.
    pub fn ci() -> Self {
        ModelConfig {
            nodes: 2,
            cells: 1,
            actors: 1,
            appenders: 1,
            // With ticks of 300 ms, a peer's hold of a TTL of 898 ms (plus the 0.2 % margin
            // for clock rates, 2 ms) is exactly three ticks: no tick of slack hides a holder
            // that believes its lease a little too long.
            ttl_ms: vec![898],
            tick_ms: 300,
            faults: 1,
            pauses: 1,
            pause_ticks: 4,
            crashes: 1,
            writes: 1,
            releases: 0,
            hand_offs: 0,
            co_writes: 0,
            collections: 0,
            appends: 0,
            adopts: 0,
            successions: 0,
            chaos_ticks: 2,
            // Every path has settled well before: a cell is held again by a live node at
            // the latest 8 ticks after the faults (the liveness property holds with 8).
            settle_ticks: 8,
            exception: None,
            canonical: true,
            #[cfg(feature = "sabotage")]
            sabotage: None,
        }
    }

    /// The scope of two faults every CI run checks: 2 nodes × 1 cell, up to **2** faulty
    /// answers, one pause and one crash and restart during the first 2 ticks — [`ci`](Self::ci)
    /// without its fenced data write (the claim, the lease and the settlement of their
    /// ambiguous writes, twice over; a data write's faults are `ci`'s).
    pub fn ci_two_faults() -> Self {
        ModelConfig {
            faults: 2,
            writes: 0,
            ..ModelConfig::ci()
        }
    }

    /// [`ci`](Self::ci) with up to 2 faulty answers (`FENCE_MODEL_LARGE=1` or
    /// `FENCE_MODEL_PRESET=faults`).
    pub fn two_faults() -> Self {
        ModelConfig {
            faults: 2,
            ..ModelConfig::ci()
        }
    }

    /// The scope for hand-offs (`FENCE_MODEL_LARGE=1`): 2 nodes × 1 cell, one faulty answer,
    /// a release, a hand-off, a co-writer at the cell's epoch, one fenced write.
    pub fn ci_hand_off() -> Self {
        ModelConfig {
            faults: 1,
            pauses: 0,
            crashes: 0,
            releases: 1,
            hand_offs: 1,
            co_writes: 1,
            chaos_ticks: 2,
            settle_ticks: 10,
            ..ModelConfig::ci()
        }
    }

    /// A larger scope (`FENCE_MODEL_LARGE=1` or `FENCE_MODEL_PRESET=three-nodes`): three
    /// nodes with mixed TTLs (898, 1,796 and 898 ms), node 0 acting, with
    /// [`quick`](Self::quick)'s pause and write. (With [`ci`](Self::ci)'s faulty answer and
    /// crash too, `FENCE_MODEL_SCOPE=2,10,1,1,1`, it has not been seen to finish.)
    pub fn three_nodes() -> Self {
        ModelConfig {
            nodes: 3,
            ttl_ms: vec![898, 1_796, 898],
            ..ModelConfig::quick()
        }
    }

    /// [`quick`](Self::quick) with mixed TTLs: node 0 holds its lease for twice node 1's
    /// TTL (1,796 and 898 ms), so node 1 must believe the TTL node 0's record states, not its
    /// own. Checked in every CI run.
    pub fn mixed_ttls() -> Self {
        ModelConfig {
            ttl_ms: vec![1_796, 898],
            ..ModelConfig::quick()
        }
    }

    /// Two nodes claiming one cell; node 0 releases it once and stalls or is suspended
    /// once, also with its release in flight: the release stops the claim acting before it
    /// is sent, so node 0 believes nothing from then on while node 1, judging the released
    /// record dead at once, claims the cell. Checked in every CI run.
    pub fn release() -> Self {
        ModelConfig {
            releases: 1,
            pauses: 1,
            ..ModelConfig::bare()
        }
    }

    /// Payload collection meeting the current payload object of an earlier epoch (on
    /// demand, `FENCE_MODEL_PRESET=collection-across-epochs`): the co-writer stores its data
    /// in a payload object at epoch 1, node 0 releases the cell and claims it again at
    /// epoch 2, carrying that object forward, and collects.
    pub fn collection_across_epochs() -> Self {
        ModelConfig {
            co_writes: 1,
            collections: 1,
            releases: 1,
            ..ModelConfig::bare()
        }
    }

    /// Two nodes claiming **two** cells, each node under its one lease and its one register
    /// of claims, with nothing else during 3 ticks: both cells' claims race, also within
    /// one node, and one lease comes to hold both. Checked in every CI run.
    pub fn two_cells() -> Self {
        ModelConfig {
            cells: 2,
            ..ModelConfig::bare()
        }
    }

    /// The 2 × 2 scope on demand (`FENCE_MODEL_LARGE=1` or `FENCE_MODEL_PRESET=two-by-two`):
    /// two nodes, two cells, [`quick`](Self::quick)'s pause (one process stalled or
    /// suspended stalls both its claims) and a fenced write to each cell by node 0, during
    /// 2 ticks.
    pub fn two_by_two() -> Self {
        ModelConfig {
            cells: 2,
            chaos_ticks: 2,
            ..ModelConfig::quick()
        }
    }

    /// Two nodes claiming one cell, node 0 writing once, one pause (a stall or a suspension),
    /// during 3 ticks: checked in every CI run beside [`ci`](Self::ci), which adds a faulty
    /// answer and a crash but has choices during 2 ticks only.
    pub fn quick() -> Self {
        ModelConfig {
            pauses: 1,
            writes: 1,
            ..ModelConfig::bare()
        }
    }

    /// Two nodes claiming one cell, node 0 pausing once (a stall or a suspension) and
    /// collecting unused payload objects once, and a co-writer at the cell's epoch whose
    /// data goes to a payload object: the scope of the payload collection rule, checked in
    /// every CI run.
    pub fn collection() -> Self {
        ModelConfig {
            pauses: 1,
            co_writes: 1,
            collections: 1,
            ..ModelConfig::bare()
        }
    }

    /// Payload collection beside a co-writer whose answer may be lost (one fault): the
    /// co-writer frees payload objects by the core's rule (`unused_payload`) once its write
    /// ends — its own only when the store proved it never lands, none when its fate is
    /// unknown, as its head may name that object. Checked in every CI run.
    pub fn collection_faults() -> Self {
        ModelConfig {
            faults: 1,
            co_writes: 1,
            collections: 1,
            releases: 1,
            ..ModelConfig::bare()
        }
    }

    /// Two nodes claiming one cell; node 0 stalls or is suspended once, and may then take
    /// its lapsed lease back as its own successor and resume the cell at its epoch, while
    /// node 1 may take it over: the scope of the resume's seal, checked in every CI run.
    pub fn succession() -> Self {
        ModelConfig {
            pauses: 1,
            successions: 1,
            ..ModelConfig::bare()
        }
    }

    /// Two nodes claiming one cell; node 0 hands the cell off once and adopts it once in a
    /// second task, whenever its lease's register of claims lets the adoption start: the
    /// scope of the register, checked in every CI run.
    pub fn adoption() -> Self {
        ModelConfig {
            hand_offs: 1,
            adopts: 1,
            ..ModelConfig::bare()
        }
    }

    /// [`succession`](Self::succession) and [`adoption`](Self::adoption) at once, with the
    /// pause (on demand, `FENCE_MODEL_LARGE=1`).
    pub fn resume() -> Self {
        ModelConfig {
            pauses: 1,
            successions: 1,
            ..ModelConfig::adoption()
        }
    }

    /// [`quick`](Self::quick) with one faulty answer (held up, lost, refused or late).
    pub fn faulty() -> Self {
        ModelConfig {
            faults: 1,
            ..ModelConfig::quick()
        }
    }

    /// A small scope with nothing but two nodes claiming one cell: faults, pauses, crashes
    /// and choices are added by the caller.
    pub fn bare() -> Self {
        ModelConfig {
            faults: 0,
            pauses: 0,
            crashes: 0,
            writes: 0,
            chaos_ticks: 3,
            settle_ticks: 10,
            ..ModelConfig::ci_hand_off()
        }
        .without_choices()
    }

    fn without_choices(mut self) -> Self {
        self.releases = 0;
        self.hand_offs = 0;
        self.co_writes = 0;
        self.collections = 0;
        self.appends = 0;
        self.adopts = 0;
        self.successions = 0;
        self
    }

    /// The scope of the append log's evidence, checked in every CI run: one node appending
    /// three records through its claim, one faulty answer, and a co-writer at the claim's
    /// epoch (`update_cell` writing the log's head back as it is, as a second `AppendLog` of
    /// the claim sealing it would): ambiguous appends, their settlement by a seal, and a
    /// record object found at the name an append wants — and, with a third append, a run of
    /// records under a new tag after one under the plain names.
    pub fn log() -> Self {
        ModelConfig {
            nodes: 1,
            faults: 1,
            co_writes: 1,
            appends: 3,
            ..ModelConfig::bare()
        }
    }

    /// Two nodes appending one record each, one faulty answer and one pause during the
    /// first tick, checked in every CI run: node 0's append is left ambiguous, node 1 takes
    /// the cell over and commits its own record at the same sequence number (node 1 appends
    /// as soon as it holds the cell, also after the first tick), and node 0 settles its
    /// append against the later epoch's head (its own record object at that number is an
    /// orphan).
    pub fn log_handover() -> Self {
        ModelConfig {
            appenders: 2,
            faults: 1,
            pauses: 1,
            appends: 1,
            chaos_ticks: 1,
            ..ModelConfig::bare()
        }
    }

    /// The scope of a takeover in the middle of an append, checked in every CI run: two
    /// nodes, node 0 appending two records and pausing once (a stall or a suspension).
    pub fn log_takeover() -> Self {
        ModelConfig {
            pauses: 1,
            appends: 2,
            ..ModelConfig::bare()
        }
    }

    /// A takeover racing an append whose answer was faulty: two nodes, one append, one
    /// faulty answer, one pause, faults and choices during 2 ticks. The ambiguous append is
    /// settled by the later epoch's head (its seal refused: the cell moved on).
    pub fn log_faults() -> Self {
        ModelConfig {
            faults: 1,
            pauses: 1,
            appends: 1,
            chaos_ticks: 2,
            ..ModelConfig::bare()
        }
    }

    /// The smallest scope that exercises what `switch` breaks: the check must find a
    /// counterexample in it.
    #[cfg(feature = "sabotage")]
    pub fn catching(switch: Sabotage) -> Self {
        let b = ModelConfig::bare();
        let cfg = match switch {
            Sabotage::SkipSeal => ModelConfig { releases: 1, ..b },
            Sabotage::EarlySealRead => ModelConfig {
                writes: 1,
                pauses: 1,
                ..b
            },
            // A holder's renewal is refused, so its lease record stays unchanged a tick
            // longer, and its retry leaves a tick later; then a pause of two ticks.
            // no-landed-after-expiry: the holder is suspended while the retry travels, and
            // its answer comes after the old authority ended. confirm-at-return: the observer
            // stalls while its confirming read travels back, and the retry lands meanwhile.
            Sabotage::NoLandedAfterExpiry | Sabotage::ConfirmAtReturn => ModelConfig {
                faults: 1,
                pauses: 1,
                pause_ticks: 2,
                ..b
            },
            Sabotage::AckWithoutOwnerRead => ModelConfig {
                faults: 1,
                writes: 1,
                ..b
            },
            // The co-writer's payload object of the claim's epoch is listed before its head
            // write lands.
            Sabotage::GcCurrentEpoch => ModelConfig {
                co_writes: 1,
                collections: 1,
                ..b
            },
            Sabotage::StealLiveOwner => b,
            // A stall as long as the TTL, ending while node 0 may still choose to write.
            Sabotage::SkipFencedCheck => ModelConfig {
                writes: 1,
                pauses: 1,
                pause_ticks: 3,
                chaos_ticks: 4,
                ..b
            },
            Sabotage::ReapplyAfterAmbiguity => ModelConfig {
                faults: 1,
                writes: 1,
                co_writes: 1,
                ..b
            },
            Sabotage::RollbackAcknowledged => ModelConfig {
                writes: 1,
                co_writes: 1,
                releases: 1,
                ..b
            },
            // Node 0 stalls past its lease; node 1 judges it dead and takes over while node 0
            // takes its lease back as its own successor and resumes the cell.
            Sabotage::ResumeWithoutSeal => ModelConfig {
                pauses: 1,
                successions: 1,
                ..b
            },
            // Node 0 adopts the cell while its hand-off is on the way.
            Sabotage::HandOffUnregistersEarly => ModelConfig {
                hand_offs: 1,
                adopts: 1,
                ..b
            },
            // An append's head write loses its answer and a co-writer at the claim's epoch
            // moves the head meanwhile: the append ends ambiguous and is settled as not
            // landed; the next append finds the first one's record object at its name. One
            // node suffices (no takeover is needed), and keeps the scope small.
            Sabotage::LogAcceptsForeignRecord => ModelConfig::log(),
            // Node 0 stalls: it believes its lease past a TTL after its last renewal was
            // sent (and node 1 takes over after exactly a TTL).
            Sabotage::HolderOverstays => ModelConfig { pauses: 1, ..b },
            // A renewal answered a tick after it was sent, then a stall: node 0 believes its
            // lease until a TTL after the answer.
            Sabotage::AuthorityFromAnswer => ModelConfig {
                faults: 1,
                pauses: 1,
                ..b
            },
            // A write whose answer is lost, a stall while its read-back travels, a takeover
            // meanwhile: the read-back shows a later epoch, and the write landed. All of it
            // can start in the first tick.
            Sabotage::SupersededForgetsAmbiguity => ModelConfig {
                chaos_ticks: 1,
                ..ModelConfig::faulty()
            },
            // Node 0 crashes; its next process claims the cell, whose head names node 0 but
            // was written by the crashed process's lease.
            Sabotage::ResumeUnvouched => ModelConfig { crashes: 1, ..b },
            Sabotage::RegisterAdmitsTwice => ModelConfig::adoption(),
            Sabotage::LogRunIgnoresTag => ModelConfig::log(),
            Sabotage::LogSettlesOnOwnOrphan => ModelConfig::log_handover(),
            // Node 0 releases and is suspended while its release travels; the release
            // lands and node 1 claims the cell.
            Sabotage::ReleaseActsUntilLanded => ModelConfig::release(),
            // Node 0 carries the co-writer's object of epoch 1 forward into epoch 2, then
            // collects.
            Sabotage::CollectCurrentObject => ModelConfig::collection_across_epochs(),
            // Node 0 (TTL 1,796 ms) stalls; node 1 (898 ms) judges it by its own TTL.
            Sabotage::ObserverIgnoresStatedTtl => ModelConfig {
                pauses: 1,
                ttl_ms: vec![1_796, 898],
                ..b
            },
        };
        ModelConfig {
            sabotage: Some(switch),
            ..cfg
        }
    }

    /// A short name of the scope, as the CI line prints it.
    pub fn scope(&self) -> String {
        let mut s = format!(
            "{} nodes ({} acting) x {} cell{}, ttl {:?} ms, {} faults, {} pause ({} ticks), {} crash, {} writes/node, {} appends/node, {} release, {} hand-off, {} co-write, {} collection, {}+{} ticks of {} ms",
            self.nodes,
            self.actors,
            self.cells,
            if self.cells == 1 { "" } else { "s" },
            self.ttl_ms,
            self.faults,
            self.pauses,
            self.pause_ticks,
            self.crashes,
            self.writes,
            self.appends,
            self.releases,
            self.hand_offs,
            self.co_writes,
            self.collections,
            self.chaos_ticks,
            self.settle_ticks,
            self.tick_ms
        );
        if self.appenders > self.actors {
            s.push_str(&format!(", {} appending", self.appenders));
        }
        if self.adopts > 0 {
            s.push_str(&format!(", {} adoption", self.adopts));
        }
        if self.successions > 0 {
            s.push_str(&format!(", {} succession", self.successions));
        }
        if let Some(e) = self.exception {
            s.push_str(&format!(", exception {e:?}"));
        }
        s
    }

    pub(crate) fn ttl(&self, node: usize) -> u64 {
        let last = self.ttl_ms.last().copied().unwrap_or(900);
        self.ttl_ms.get(node).copied().unwrap_or(last)
    }
}

/// The result of one check.
#[derive(Debug)]
pub struct ModelReport {
    /// The scope.
    pub scope: String,
    /// Distinct states explored.
    pub states: usize,
    /// Every reachable state was explored (not stopped early, not truncated).
    pub exhaustive: bool,
    /// The deepest path explored.
    pub max_depth: usize,
    /// Wall time taken.
    pub elapsed: Duration,
    /// Counterexamples of `always` / `eventually` properties, one per broken property.
    pub violations: Vec<Counterexample>,
    /// `sometimes` properties never seen (the model would be vacuous).
    pub never_seen: Vec<&'static str>,
}

impl ModelReport {
    /// No property broken and every `sometimes` property seen, over every state.
    pub fn is_clean(&self) -> bool {
        self.exhaustive && self.violations.is_empty() && self.never_seen.is_empty()
    }

    /// The CI line: `model check <scope>: N states, exhaustive, 0 violations`.
    pub fn summary(&self) -> String {
        let how = if self.exhaustive {
            "exhaustive"
        } else {
            "NOT exhaustive"
        };
        let mut line = format!(
            "model check {}: {} states, {how}, {} violations ({:.1} s, depth {})",
            self.scope,
            self.states,
            self.violations.len(),
            self.elapsed.as_secs_f64(),
            self.max_depth
        );
        if !self.never_seen.is_empty() {
            line.push_str(&format!("; never seen: {:?}", self.never_seen));
        }
        line
    }

    /// Every counterexample, as readable traces.
    pub fn counterexamples(&self) -> String {
        let all: Vec<String> = self.violations.iter().map(|c| c.to_string()).collect();
        all.join("\n\n")
    }
}

impl fmt::Display for ModelReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

/// Checks every state of `cfg`'s scope (breadth first, two threads), until done or — with
/// `first_failure` — until the first broken property (its counterexample is then a
/// shortest one).
pub fn run(cfg: &ModelConfig, first_failure: bool) -> ModelReport {
    let model = world::FenceModel::new(cfg.clone());
    let scope = Scope {
        name: cfg.scope(),
        first_failure,
        progress: "FENCE_MODEL_PROGRESS",
    };
    explore(
        model,
        scope,
        |name, _| reachable(name, cfg),
        |m, name, path, holds| trace::Counterexample::new(m, name, path, holds),
    )
}

/// Whether `cfg`'s scope can show the `sometimes` property `name` at all: an ambiguous write
/// needs a faulty answer, a resumed hand-off a hand-off.
fn reachable(name: &str, cfg: &ModelConfig) -> bool {
    match name {
        "an ambiguous write is settled by evidence" => cfg.faults > 0,
        "a hand-off is resumed by its receiver" => cfg.hand_offs > 0,
        "a record is appended" => cfg.appends > 0,
        "a write is acknowledged" => cfg.writes > 0 || (cfg.co_writes > 0 && cfg.appends == 0),
        // An append ends ambiguous when a faulty answer meets a co-writer or a takeover.
        props::LOG_SETTLED => {
            cfg.appends > 0 && cfg.faults > 0 && (cfg.co_writes > 0 || cfg.nodes > 1)
        }
        // A takeover while an append's answer is faulty.
        props::LOG_SETTLED_LATER => {
            cfg.appends > 0 && cfg.faults > 0 && cfg.nodes > 1 && cfg.pauses > 0
        }
        "a node resumes its cell after its lease lapsed" => cfg.successions > 0 && cfg.pauses > 0,
        "an adoption runs beside a claim or hand-off" => cfg.adopts > 0,
        props::ONE_LEASE_TWO_CELLS => cfg.cells > 1,
        // Only a second node, and a pause, a crash or a faulty answer making a node look dead
        // to its peer.
        "a takeover happens" => {
            cfg.nodes > 1
                && (cfg.pauses > 0 || cfg.crashes > 0 || cfg.faults > 0 || cfg.exception.is_some())
        }
        _ => true,
    }
}

/// Checks every state of `cfg`'s scope to the end.
pub fn check(cfg: &ModelConfig) -> ModelReport {
    run(cfg, false)
}
