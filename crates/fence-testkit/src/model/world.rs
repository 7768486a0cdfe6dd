//! The model's world: nodes running fence's pure machines, a store, a network, clocks, and
//! the faults — and its transitions.

use fence_core::decide::claim::{ClaimEnd, ClaimFlow, ClaimStep};
use fence_core::decide::claimed::{
    admit, blob_epoch, collectable, Base, CellEnd, CellStep, CellWrite, Change,
};
use fence_core::decide::log::{
    self as logrules, Append, AppendEnd, AppendStep, Created, HeadWritten, LogHead, RecordRead,
    Seal, SealStep,
};
use fence_core::decide::register::Register;
use fence_core::decide::write::{HeadWrite, PutAnswer, ReadAnswer, Settled, Unsettled, WriteStep};
use fence_core::decide::{
    Flaws, Holder, LeaseConfig, LeaseCore, LeaseEffect, LeaseEvent, Now, Observation,
    ObservedLease, ReadResult, WriteResult,
};
use fence_core::record::{BlobRef, CellHead, CellPayload, HeadFormat, NodeLeaseRecord};
use fence_core::{CasGuard, ErrorKind, Key, Version};
use stateright::{Model, Property};

mod log;

use self::log::unsettled_error;
use super::props::{self, PropertyName};
use super::{Exception, ModelConfig};

mod canon;
mod cells;

pub(crate) use self::cells::{cell_name, CellView};
pub use self::cells::{CellStore, NodeCell, Parked};

/// The wall clock at model time 0.
const BASE_WALL: u64 = 1_700_000_000_000;
/// The sender of the co-writer's requests.
pub(crate) const CO: u8 = u8::MAX;

/// A lease record as stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseObj {
    pub(crate) record: NodeLeaseRecord,
    pub(crate) nonce: String,
    pub(crate) ttl_ms: u64,
}

/// The store: one lease key per node and the cell's head (of the cell in place, see
/// [`Parked`]). Versions count per key (the
/// store contract asks a new version per write of a key, nothing across keys), so writes of
/// different keys in either order reach the same state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Store {
    pub(crate) leases: Vec<Option<(LeaseObj, Version)>>,
    lease_versions: Vec<u16>,
    /// The part of the cell in place (see [`Parked`]).
    pub(crate) cell: CellStore,
}

impl Store {
    fn lease_version(&mut self, n: usize) -> Version {
        self.lease_versions[n] += 1;
        version(&format!("l{n}.{}", self.lease_versions[n]))
    }

    fn head_version(&mut self) -> Version {
        self.cell.head_versions += 1;
        version(&format!("h{}", self.cell.head_versions))
    }
}

fn version(token: &str) -> Version {
    Version::new(token).unwrap_or_else(|_| unreachable!("a version token is never empty"))
}

/// Which part of a node sent a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Thread {
    /// The lease keeper.
    Lease,
    /// The application's task (claims and writes).
    Task,
    /// The co-writer.
    Co,
    /// A node's payload collection.
    Gc,
    /// A node's second task: an adoption of the cell, racing the first.
    Side,
}

/// A request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Write a lease record.
    PutLease { guard: CasGuard, obj: LeaseObj },
    /// Read a node's lease record.
    GetLease { node: u8 },
    /// Write the cell head; `data` names the fenced data write it carries, if any.
    PutHead {
        guard: CasGuard,
        head: CellHead,
        data: Option<u8>,
    },
    /// Read the cell head.
    GetHead,
    /// Create a payload object (names are unique).
    PutBlob { name: String },
    /// List the cell's payload objects.
    ListBlobs,
    /// Delete a payload object.
    DeleteBlob { name: String },
    /// Create a log record object (never over another): record `id` at `name`.
    PutRecord { name: String, id: u8 },
    /// Read a log record object.
    GetRecord { name: String },
}

impl Op {
    /// A write whose answer can be lost, or which can be held up and land late.
    fn is_write(&self) -> bool {
        matches!(
            self,
            Op::PutHead { .. } | Op::PutLease { .. } | Op::PutRecord { .. }
        )
    }
}

/// What the store answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A write: applied at this version, or rejected.
    Put(Option<Version>),
    /// A lease read.
    Lease(Option<(LeaseObj, Version)>),
    /// A head read.
    Head(Option<(CellHead, Version)>),
    /// A payload object created or deleted.
    Done,
    /// A listing of payload objects.
    Names(Vec<String>),
    /// A log record object created (`false`: its name was taken).
    Created(bool),
    /// A log record object read: the record there, if any.
    Record(Option<u8>),
}

/// Where a request is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReqState {
    /// Sent, not landed.
    InFlight,
    /// Landed; the answer is on its way back.
    Landed(Outcome),
    /// Its sender gave up on it; it may still land.
    Orphan,
}

/// A request in the network.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    pub(crate) from: u8,
    /// The cell whose task (or co-writer) sent it.
    pub(crate) cell: u8,
    pub(crate) incarnation: u8,
    pub(crate) thread: Thread,
    pub(crate) op: Op,
    pub(crate) state: ReqState,
    /// A fault made it slow: time may pass while it travels.
    pub(crate) slow: bool,
    /// The sender's monotonic time after which it gives up.
    pub(crate) deadline: u64,
}

/// A claim a node holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Claim {
    pub(crate) epoch: u64,
    pub(crate) known: Option<Base>,
    pub(crate) ended: bool,
    /// It stands in its lease's register of claims.
    pub(crate) registered: bool,
}

/// A node's second task and the claim it made: an adoption of the cell
/// (`LeaseKeeper::adopt`) while the first task may be handing it off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Side {
    pub(crate) task: Option<Task>,
    pub(crate) claim: Option<Claim>,
}

/// What a node's task runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Machine {
    /// A claim (or resume).
    Claim(ClaimFlow),
    /// A change of the claimed cell.
    Change(CellWrite, ChangeKind),
    /// An append to the cell's log, or the settlement of an ambiguous one.
    Log(LogTask),
}

/// The append log's work: `AppendLog::append` or `AppendLog::landed`, driving fence-core's
/// [`Append`] and [`Seal`] machines.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LogTask {
    pub(crate) op: LogOp,
    /// The head write under way (the claim's `write_if`), if any.
    write: Option<CellWrite>,
    /// The last head write's failure may have landed.
    ambiguous: bool,
}

/// Which log operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LogOp {
    /// `append` of record `id`.
    Append { append: Append, id: u8 },
    /// `landed`: the seal, then the verdict.
    Settle { seal: Seal, pending: Pending },
    /// `landed` after a failed seal: a read of the cell (did it move past our epoch?).
    MovedPast { pending: Pending },
    /// `landed`: the committed record compared with ours.
    Compare { pending: Pending },
}

/// An append whose answer was ambiguous, to settle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pending {
    pub(crate) seq: u64,
    pub(crate) id: u8,
    pub(crate) epoch: u64,
}

/// Which change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// Data write number `id`.
    Write(u8),
    /// Release.
    Release,
    /// Hand-off.
    HandOff,
}

/// What a task waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Wait {
    /// A head read for a claim.
    Head,
    /// A read of `node`'s lease, sent at `sent` (our monotonic clock).
    Judge { node: u8, sent: u64 },
    /// A head write's answer.
    Send,
    /// A read-back.
    Readback,
    /// Until our monotonic time.
    Until(u64),
    /// A head read for a change's base.
    Base,
    /// A head read for the log (`claim.read()`).
    LogRead,
    /// A log record object's create.
    Create,
    /// A log record object's read.
    RecordRead,
}

/// A node's task.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    pub(crate) machine: Machine,
    pub(crate) seal: Option<(HeadWrite, CellHead)>,
    pub(crate) wait: Wait,
    /// The change was admitted while the lease was not held.
    pub(crate) unheld: bool,
}

/// One node: a process of it, its lease, its task and its claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub(crate) alive: bool,
    pub(crate) incarnation: u8,
    acquisitions: u8,
    pub(crate) lease: Option<LeaseCore>,
    wake: Option<u64>,
    lease_busy: bool,
    /// Its part of the cell in place (see [`Parked`]).
    pub(crate) cell: NodeCell,
    seen: Vec<Option<Observation>>,
    pub(crate) paused_until: Option<u64>,
    suspended: bool,
    paused_at: u64,
    lag: u64,
    nonces: u16,
    /// The lease's register of claims (the core's), one per lease.
    pub(crate) register: Register,
    /// The second task's slots are swapped in.
    on_side: bool,
    /// A lapsed lease of ours this lease succeeded: its heads are resumed at their epochs.
    vouched: Option<String>,
}

/// The co-writer: `update_cell` at the cell's current epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoWriter {
    left: u8,
    /// Its payload object is being created; the head write follows.
    storing: bool,
    pub(crate) write: Option<(HeadWrite, CellHead, u8)>,
    reading: bool,
    tries: u8,
}

/// What is left of the faults and choices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Budget {
    faults: u8,
    pauses: u8,
    crashes: u8,
    releases: u8,
    hand_offs: u8,
    collections: u8,
    adopts: u8,
    successions: u8,
}

/// What the properties need of the past.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// The epochs claimed (not resumed), sorted: which node claimed one is not needed.
    claims: Vec<u64>,
    pub(crate) max_claimed: u64,
    /// Data writes landed: (id, order of landing).
    landed: Vec<(u8, u8)>,
    pub(crate) acked_order: u8,
    pub(crate) broken: Option<PropertyName>,
    /// The `sometimes` events, as pulses: true only in the state right after the step that
    /// made one happen (see [`FenceModel::canonical`]).
    pub(crate) takeover: bool,
    pub(crate) settled_ambiguity: bool,
    pub(crate) resumed_hand_off: bool,
    /// An ambiguous append was settled (a pulse).
    pub(crate) log_settled: bool,
    /// An ambiguous append was settled by a later epoch's head (a pulse).
    pub(crate) log_settled_later: bool,
    /// Log records acknowledged (appended, or settled as landed), as a sorted set.
    pub(crate) log_acked: Vec<u8>,
    /// Log records the log said never landed and never will, as a sorted set.
    pub(crate) log_denied: Vec<u8>,
    /// A log head or a committed record was found unreadable.
    pub(crate) log_corrupt: bool,
    /// A node resumed its cell as the successor of its own lapsed lease.
    pub(crate) resumed_after_lapse: bool,
    /// An adoption (a second task) started.
    pub(crate) adopted: bool,
}

impl History {
    pub(crate) fn order_of(&self, id: u8) -> Option<u8> {
        self.landed.iter().find(|(i, _)| *i == id).map(|(_, o)| *o)
    }

    fn breach(&mut self, p: PropertyName) {
        self.broken.get_or_insert(p);
    }

    /// The `sometimes` events of the last step are over.
    fn end_pulses(&mut self) {
        self.takeover = false;
        self.settled_ambiguity = false;
        self.resumed_hand_off = false;
        self.resumed_after_lapse = false;
        self.adopted = false;
        self.log_settled = false;
        self.log_settled_later = false;
    }

    /// What the log told the application of record `id` (`true`: it counts).
    pub(crate) fn log_told(&mut self, id: u8, counts: bool) {
        let set = if counts {
            &mut self.log_acked
        } else {
            &mut self.log_denied
        };
        if let Err(at) = set.binary_search(&id) {
            set.insert(at, id);
        }
    }
}

/// One state of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    pub(crate) time: u64,
    pub(crate) nodes: Vec<Node>,
    pub(crate) store: Store,
    pub(crate) net: Vec<Req>,
    pub(crate) co: CoWriter,
    budget: Budget,
    pub(crate) hist: History,
    /// The cells not in place (cells 1.. of a scope of more than one cell).
    pub(crate) parked: Vec<Parked>,
    /// The cell in place (0 in every state at rest).
    pub(crate) in_place: u8,
}

/// A faulty answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The request landed, its answer is lost (a timeout: ambiguous).
    LoseAnswer,
    /// The request is held up in the network: its sender times out now, it may land later.
    HoldUp,
    /// Refused before it was sent: not committed.
    Refuse,
    /// Slow: time may pass before it lands and is answered, until its sender times out.
    Slow,
}

/// A transition.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time advances one tick.
    Tick,
    /// Request `i` lands and (unless slow) is answered.
    Deliver(usize),
    /// Slow request `i`'s answer arrives.
    Answer(usize),
    /// A faulty answer for request `i`.
    Fault(usize, Fault),
    /// Node `n`'s lease keeper wakes up.
    Wake(u8),
    /// Node `n`'s task resumes after a wait.
    Resume(u8),
    /// Node `n` acquires a lease (again).
    Acquire(u8),
    /// Node `n` claims the cell.
    Claim(u8),
    /// Node `n` writes the cell.
    Write(u8),
    /// Node `n` releases the cell.
    Release(u8),
    /// Node `n` hands the cell to the next node.
    HandOff(u8),
    /// The co-writer starts a write at the cell's epoch.
    CoWrite,
    /// Node `n` collects the cell's unused payload objects.
    Collect(u8),
    /// Node `n` appends its next record to the cell's log.
    Append(u8),
    /// Node `n` settles its ambiguous append (`AppendLog::landed`).
    Settle(u8),
    /// Node `n` is paused (`true`: suspended, its monotonic clock stops).
    Pause(u8, bool),
    /// Node `n`'s process crashes.
    Crash(u8),
    /// Node `n` starts a new process.
    Restart(u8),
    /// Node `n`'s lease lapsed: it takes it back as the successor of its own generation and
    /// vouches for that generation's heads (docs/design.md, "Restart and resume", case 2).
    Succeed(u8),
    /// Node `n` adopts the cell in a second task (`LeaseKeeper::adopt`).
    Adopt(u8),
    /// Node `n`'s second task resumes after a wait.
    ResumeSide(u8),
    /// An action of a node's task or the co-writer of cell `c` (1 or more): the actions
    /// above are cell 0's.
    At(u8, Box<Action>),
}

/// The model: a scope and the properties.
#[derive(Clone, Debug)]
pub struct FenceModel {
    pub(crate) cfg: ModelConfig,
    lease_cfg: Vec<LeaseConfig>,
    flaws: Flaws,
}

impl FenceModel {
    pub(crate) fn new(cfg: ModelConfig) -> Self {
        assert!(
            (1..=cells::CELL_NAMES.len()).contains(&cfg.cells),
            "a scope has 1 to {} cells, not {}",
            cells::CELL_NAMES.len(),
            cfg.cells
        );
        let lease_cfg = (0..cfg.nodes)
            .map(|n| {
                let mut c = LeaseConfig::with_ttl_ms(cfg.ttl(n));
                c.attempt_min_ms = cfg.tick_ms;
                c
            })
            .collect();
        #[cfg(feature = "sabotage")]
        let flaws = Flaws::switch(cfg.sabotage);
        #[cfg(not(feature = "sabotage"))]
        let flaws = Flaws::default();
        FenceModel {
            cfg,
            lease_cfg,
            flaws,
        }
    }

    fn chaos(&self, w: &World) -> bool {
        w.time < u64::from(self.cfg.chaos_ticks) * self.cfg.tick_ms
    }

    pub(crate) fn horizon(&self) -> u64 {
        u64::from(self.cfg.chaos_ticks + self.cfg.settle_ticks) * self.cfg.tick_ms
    }

    pub(crate) fn after_chaos(&self, w: &World) -> bool {
        !self.chaos(w)
    }

    /// Node `n`'s clocks now.
    pub(crate) fn now(&self, w: &World, n: usize) -> Now {
        let node = &w.nodes[n];
        let t = if node.suspended {
            node.paused_at
        } else {
            w.time
        };
        let mut mono = t.saturating_sub(node.lag);
        let mut wall_t = w.time;
        let mut skew: i64 = 0;
        match self.cfg.exception {
            Some(Exception::SlowClocks) if n == 0 => {
                mono /= 2;
                wall_t /= 2;
            }
            Some(Exception::WallBehind) if n == 0 => {
                let stale = self.lease_cfg.iter().map(|c| c.stale_after_ms).max();
                skew = -((stale.unwrap_or(0) + 10 * self.cfg.ttl(0)) as i64);
            }
            _ => {}
        }
        let wall = (BASE_WALL + wall_t).saturating_add_signed(skew);
        Now {
            mono_ms: mono,
            wall_ms: wall,
        }
    }

    /// Whether node `n` believes it holds the cell in place now.
    pub(crate) fn believes(&self, w: &World, n: usize) -> bool {
        self.believes_in(w, &w.cell_view(w.in_place), n)
    }

    /// Whether node `n` believes it holds cell `v` now.
    pub(crate) fn believes_in(&self, w: &World, v: &CellView<'_>, n: usize) -> bool {
        let node = &w.nodes[n];
        let held = node
            .lease
            .as_ref()
            .is_some_and(|l| l.is_held(self.now(w, n)));
        node.alive && held && v.acting(n)
    }

    fn fresh_node(&self, incarnation: u8) -> Node {
        Node {
            alive: true,
            incarnation,
            acquisitions: 0,
            lease: None,
            wake: None,
            lease_busy: false,
            cell: self.fresh_cell(),
            seen: vec![None; self.cfg.nodes],
            paused_until: None,
            suspended: false,
            paused_at: 0,
            lag: 0,
            nonces: 0,
            register: Register::default(),
            on_side: false,
            vouched: None,
        }
    }
}

impl Node {
    fn paused(&self) -> bool {
        self.paused_until.is_some()
    }

    fn nonce(&mut self, n: usize) -> String {
        self.nonces += 1;
        format!("n{n}p{}-{}", self.incarnation, self.nonces)
    }

    fn generation(&self) -> Option<String> {
        self.lease.as_ref().map(|l| l.holder().generation.clone())
    }
}

/// The id of node `n`'s data write number `k` (1-based).
fn data_id(n: usize, k: u8) -> u8 {
    (n as u8) * 16 + k
}

/// The payload of data write `id`.
pub(crate) fn payload(id: u8) -> CellPayload {
    CellPayload::Inline(format!("d{id}").into())
}

/// The data write a payload is, if any.
pub(crate) fn id_of(p: &CellPayload) -> Option<u8> {
    match p {
        CellPayload::Inline(b) => std::str::from_utf8(b).ok()?.strip_prefix('d')?.parse().ok(),
        CellPayload::Blob(b) => b.name.rsplit_once("-d")?.1.parse().ok(),
        CellPayload::Empty => None,
    }
}

/// The payload of data write `id` at `epoch`, kept in a payload object named as fence names
/// them (`<epoch>-<unique>`).
fn blob_payload(epoch: u64, id: u8) -> CellPayload {
    CellPayload::Blob(BlobRef {
        name: format!("{epoch}-d{id}"),
        len: 2,
    })
}

/// Log record `id`'s bytes.
pub(crate) fn record(id: u8) -> bytes::Bytes {
    format!("r{id}").into()
}

/// The id of record number `k` (1-based) of node `n`'s process `incarnation`: distinct for
/// up to 3 nodes, 7 processes each and 3 records per process (larger scopes share ids, which
/// the log property would report).
fn record_id(n: usize, incarnation: u8, k: u8) -> u8 {
    let id = 100 + (n as u32) * 32 + u32::from(incarnation) * 4 + u32::from(k);
    u8::try_from(id).unwrap_or(u8::MAX)
}

/// The key the log's head is decoded under (names only the error).
fn head_key() -> Key {
    Key::new("cells/c/own.json").unwrap_or_else(|_| unreachable!("a valid key"))
}

/// The log head a cell head holds (`None`: it holds something else).
pub(crate) fn log_head(head: &CellHead) -> Option<LogHead> {
    let bytes = match &head.payload {
        CellPayload::Inline(b) => b.clone(),
        CellPayload::Empty => Default::default(),
        CellPayload::Blob(_) => return None,
    };
    LogHead::decode(&head_key(), &bytes, head.epoch).ok()
}

enum Next {
    Claim(ClaimStep),
    Write(WriteStep),
    Cell(CellStep),
    Append(AppendStep),
    Seal(SealStep),
}

impl FenceModel {
    fn send(&self, w: &mut World, n: usize, thread: Thread, op: Op, timeout_ms: u64) {
        let (incarnation, mono) = if n == CO as usize {
            (0, w.time)
        } else {
            (w.nodes[n].incarnation, self.now(w, n).mono_ms)
        };
        let side = n != CO as usize && w.nodes[n].on_side;
        let thread = if side && thread == Thread::Task {
            Thread::Side
        } else {
            thread
        };
        w.net.push(Req {
            from: n as u8,
            // A lease keeper's requests are no cell's.
            cell: if thread == Thread::Lease {
                0
            } else {
                w.in_place
            },
            incarnation,
            thread,
            op,
            state: ReqState::InFlight,
            slow: false,
            deadline: mono + timeout_ms.max(1),
        });
    }

    /// The bound of a claim's request (the runtime's `request_bound_ms`).
    fn bound(&self, w: &World, n: usize) -> u64 {
        let cfg = &self.lease_cfg[n];
        let left = w.nodes[n]
            .lease
            .as_ref()
            .map_or(0, |l| l.remaining_ms(self.now(w, n)));
        cfg.attempt_timeout(left).max(cfg.attempt_min_ms)
    }

    // ----- the lease keeper ------------------------------------------------------------

    fn lease_step(&self, w: &mut World, n: usize, event: LeaseEvent) {
        let now = self.now(w, n);
        let Some(core) = w.nodes[n].lease.as_mut() else {
            return;
        };
        let effects = core.step(now, event);
        for e in effects {
            match e {
                LeaseEffect::Write {
                    guard,
                    record,
                    nonce,
                    timeout_ms,
                } => {
                    let obj = LeaseObj {
                        record,
                        nonce,
                        ttl_ms: self.cfg.ttl(n),
                    };
                    w.nodes[n].lease_busy = true;
                    self.send(w, n, Thread::Lease, Op::PutLease { guard, obj }, timeout_ms);
                }
                LeaseEffect::Read { timeout_ms } => {
                    w.nodes[n].lease_busy = true;
                    let op = Op::GetLease { node: n as u8 };
                    self.send(w, n, Thread::Lease, op, timeout_ms);
                }
                LeaseEffect::WakeAt(t) => w.nodes[n].wake = Some(t),
                LeaseEffect::Status(_) => {}
            }
        }
        self.drop_claim_if_lease_over(w, n);
    }

    /// Node `n`'s lease is over: every claim of it whose task is idle ends, in each cell.
    fn drop_claim_if_lease_over(&self, w: &mut World, n: usize) {
        let over = w.nodes[n].lease.as_ref().is_some_and(|l| l.is_finished());
        if !over {
            return;
        }
        self.each_cell(w, |w| {
            if w.nodes[n].cell.task.is_none() {
                self.end_claim(w, n);
            }
            let node = &mut w.nodes[n];
            if node.cell.side.task.is_none() {
                node.cell.side.claim = None;
            }
        });
    }

    /// Node `n`'s claim is over in its process: it leaves the lease's register.
    fn end_claim(&self, w: &mut World, n: usize) {
        let cell = w.cell_name();
        let node = &mut w.nodes[n];
        if let Some(c) = node.cell.claim.take() {
            if c.registered {
                node.register.leave(cell, c.epoch);
            }
        }
    }

    /// Runs `f` on node `n`'s second task and its claim, swapped in for the first.
    fn on_side(&self, w: &mut World, n: usize, f: impl FnOnce(&mut World)) {
        let swap = |node: &mut Node| {
            std::mem::swap(&mut node.cell.task, &mut node.cell.side.task);
            std::mem::swap(&mut node.cell.claim, &mut node.cell.side.claim);
            node.on_side = !node.on_side;
        };
        swap(&mut w.nodes[n]);
        f(w);
        swap(&mut w.nodes[n]);
    }

    fn acquire(&self, w: &mut World, n: usize) {
        self.acquire_as(w, n, None);
    }

    /// Acquires node `n`'s lease, as the successor of its lapsed generation `predecessor`.
    fn acquire_as(&self, w: &mut World, n: usize, predecessor: Option<String>) {
        // A new lease has no claims, in any cell.
        self.each_cell(w, |w| {
            w.nodes[n].cell.claim = None;
            w.nodes[n].cell.side = Side::default();
        });
        let node = &mut w.nodes[n];
        node.acquisitions += 1;
        node.register = Register::default();
        node.vouched.clone_from(&predecessor);
        let holder = Holder {
            node: format!("n{n}"),
            addr: String::new(),
            peer_protocol: 1,
            generation: format!("n{n}p{}a{}", node.incarnation, node.acquisitions),
        };
        let mut core = LeaseCore::new(holder, self.lease_cfg[n].clone()).with_flaws(self.flaws);
        if let Some(p) = predecessor {
            core = core.succeeding(p);
        }
        node.lease = Some(core);
        node.wake = None;
        self.lease_step(w, n, LeaseEvent::Acquire { wait: true });
    }

    // ----- the task ----------------------------------------------------------------------

    fn start_claim(&self, w: &mut World, n: usize) {
        self.start_flow(w, n, false);
    }

    /// A claim (or, with `adopt`, an adoption) of the cell by node `n`'s task, reserved in
    /// its lease's register first.
    fn start_flow(&self, w: &mut World, n: usize, adopt: bool) {
        let cell = w.cell_name();
        let node = &mut w.nodes[n];
        if node.register.reserve(cell).is_err() {
            return;
        }
        let generation = node.generation().unwrap_or_default();
        let nonce = node.nonce(n);
        let vouched: Vec<String> = std::iter::once(generation.clone())
            .chain(node.vouched.clone())
            .collect();
        let flow = ClaimFlow::new(&format!("n{n}"), &generation, nonce)
            .resuming(&vouched)
            .with_flaws(self.flaws, self.cfg.ttl(n), node.cell.last_written.clone());
        let flow = if adopt { flow.adopting() } else { flow };
        node.cell.task = Some(Task {
            machine: Machine::Claim(flow),
            seal: None,
            wait: Wait::Head,
            unheld: false,
        });
        let step = match &mut w.nodes[n].cell.task {
            Some(Task {
                machine: Machine::Claim(f),
                ..
            }) => f.start(),
            _ => return,
        };
        self.run(w, n, Next::Claim(step));
    }

    fn start_change(&self, w: &mut World, n: usize, kind: ChangeKind) {
        let now = self.now(w, n);
        let held = w.nodes[n].lease.as_ref().is_some_and(|l| l.is_held(now));
        let Some(claim) = w.nodes[n].cell.claim.clone() else {
            return;
        };
        if admit(held, claim.ended, self.flaws).is_err() {
            return;
        }
        let unheld = !held;
        let change = match kind {
            ChangeKind::Write(id) => Change::Data {
                payload: payload(id),
                exact: None,
            },
            ChangeKind::Release => Change::Release,
            ChangeKind::HandOff => {
                let to = (n + 1) % self.cfg.nodes;
                // The sender stops acting before the hand-off is sent; it stays in the
                // lease's register unless the core's rule says otherwise.
                let cell = w.cell_name();
                let node = &mut w.nodes[n];
                let left = node.register.hand_off_begins(cell, claim.epoch, self.flaws);
                if let Some(c) = node.cell.claim.as_mut() {
                    c.ended = true;
                    c.registered &= !left;
                }
                Change::HandOff {
                    to: format!("n{to}"),
                    generation: w.nodes[to].generation(),
                }
            }
        };
        let node = &mut w.nodes[n];
        let generation = node.generation().unwrap_or_default();
        let nonce = node.nonce(n);
        let known = node.cell.claim.as_mut().and_then(|c| c.known.take());
        let mut cw = CellWrite::new(
            &format!("n{n}"),
            claim.epoch,
            &generation,
            nonce,
            change,
            known,
        )
        .with_flaws(self.flaws);
        let step = cw.start();
        node.cell.task = Some(Task {
            machine: Machine::Change(cw, kind),
            seal: None,
            wait: Wait::Base,
            unheld,
        });
        self.run(w, n, Next::Cell(step));
    }

    /// Performs machine steps of node `n`'s task until it waits for something or ends.
    fn run(&self, w: &mut World, n: usize, mut next: Next) {
        loop {
            let bound = self.bound(w, n);
            let mono = self.now(w, n).mono_ms;
            let Some(task) = w.nodes[n].cell.task.as_mut() else {
                return;
            };
            next = match next {
                Next::Claim(ClaimStep::ReadHead) | Next::Cell(CellStep::ReadBase) => {
                    task.wait = if matches!(next, Next::Claim(_)) {
                        Wait::Head
                    } else {
                        Wait::Base
                    };
                    return self.send(w, n, Thread::Task, Op::GetHead, bound);
                }
                Next::Claim(ClaimStep::Sleep(ms)) => {
                    task.wait = Wait::Until(mono + ms);
                    return;
                }
                Next::Claim(ClaimStep::JudgeOwner { node, .. }) => {
                    let peer = node.trim_start_matches('n').parse::<u8>().unwrap_or(0);
                    task.wait = Wait::Judge {
                        node: peer,
                        sent: mono,
                    };
                    let op = Op::GetLease { node: peer };
                    return self.send(w, n, Thread::Task, op, bound);
                }
                Next::Claim(ClaimStep::Carry { head, .. }) => match &mut task.machine {
                    Machine::Claim(f) => Next::Claim(f.on_carried(head.payload, head.extra)),
                    _ => return,
                },
                Next::Append(step) => match self.append_step(w, n, step) {
                    Some(next) => next,
                    None => return,
                },
                Next::Seal(step) => match self.seal_step(w, n, step) {
                    Some(next) => next,
                    None => return,
                },
                Next::Claim(ClaimStep::Seal { body, mut write })
                | Next::Cell(CellStep::Seal { body, mut write }) => {
                    let step = write.start();
                    task.seal = Some((write, body));
                    Next::Write(step)
                }
                Next::Write(WriteStep::Send) => {
                    task.wait = Wait::Send;
                    let Some((write, body)) = &task.seal else {
                        return;
                    };
                    let data = match task.machine {
                        Machine::Change(_, ChangeKind::Write(id)) => Some(id),
                        _ => None,
                    };
                    let op = Op::PutHead {
                        guard: write.guard().clone(),
                        head: body.clone(),
                        data,
                    };
                    return self.send(w, n, Thread::Task, op, bound);
                }
                Next::Write(WriteStep::Pause(ms)) => {
                    task.wait = Wait::Until(mono + ms);
                    return;
                }
                Next::Write(WriteStep::Read) => {
                    task.wait = Wait::Readback;
                    return self.send(w, n, Thread::Task, Op::GetHead, bound);
                }
                Next::Write(WriteStep::Done(settled)) => {
                    let Some((write, body)) = task.seal.take() else {
                        return;
                    };
                    if write.uncertain() && matches!(settled, Settled::Landed(_)) {
                        w.hist.settled_ambiguity = true;
                    }
                    let Some(task) = w.nodes[n].cell.task.as_mut() else {
                        return;
                    };
                    match &mut task.machine {
                        Machine::Claim(f) => Next::Claim(f.on_sealed(settled)),
                        Machine::Change(c, _) => Next::Cell(c.on_settled(body, settled)),
                        Machine::Log(LogTask { write: Some(c), .. }) => {
                            Next::Cell(c.on_settled(body, settled))
                        }
                        Machine::Log(_) => return,
                    }
                }
                Next::Write(WriteStep::Failed(why)) if matches!(task.machine, Machine::Log(_)) => {
                    task.seal = None;
                    let (kind, ambiguous) = unsettled_error(why);
                    match self.log_written(w, n, HeadWritten::of_error(kind, ambiguous), ambiguous)
                    {
                        Some(next) => next,
                        None => return,
                    }
                }
                Next::Write(WriteStep::Failed(_)) => {
                    let task = w.nodes[n].cell.task.take();
                    return self.task_failed(w, n, task);
                }
                Next::Cell(CellStep::Done(end)) if matches!(task.machine, Machine::Log(_)) => {
                    match self.log_cell_end(w, n, end) {
                        Some(next) => next,
                        None => return,
                    }
                }
                Next::Claim(ClaimStep::Done(end)) => {
                    w.nodes[n].cell.task = None;
                    return self.claim_ended(w, n, end);
                }
                Next::Cell(CellStep::Done(end)) => {
                    let task = w.nodes[n].cell.task.take();
                    return self.change_ended(w, n, task, end);
                }
            };
        }
    }

    fn retry_later(&self, w: &mut World, n: usize) {
        w.nodes[n].cell.retry_at = w.time + self.cfg.tick_ms;
    }

    fn task_failed(&self, w: &mut World, n: usize, task: Option<Task>) {
        match task.map(|t| t.machine) {
            Some(Machine::Claim(_)) | None => {
                let cell = w.cell_name();
                w.nodes[n].register.leave(cell, 0);
                self.retry_later(w, n)
            }
            Some(Machine::Log(t)) => self.log_failed(w, n, t),
            Some(Machine::Change(_, kind)) => {
                // No verdict: the next write reads the head first; a hand-off stays closed.
                if kind == ChangeKind::HandOff {
                    self.end_claim(w, n);
                }
            }
        }
    }

    fn claim_ended(&self, w: &mut World, n: usize, end: ClaimEnd) {
        let ClaimEnd::Claimed {
            epoch,
            body,
            version,
            resumed,
            takeover_from,
        } = end
        else {
            let cell = w.cell_name();
            w.nodes[n].register.leave(cell, 0);
            return self.retry_later(w, n);
        };
        let cell = w.cell_name();
        w.nodes[n].register.keep(cell, epoch);
        let hist = &mut w.hist;
        if !resumed {
            // (Epochs going back are judged as heads land: an answer may come late.)
            match hist.claims.binary_search(&epoch) {
                Ok(_) => hist.breach(PropertyName::OneClaimPerEpoch),
                Err(at) => hist.claims.insert(at, epoch),
            }
        } else if epoch > hist.max_claimed {
            hist.resumed_hand_off = true;
        } else if w.nodes[n].vouched.is_some() && !w.nodes[n].on_side {
            hist.resumed_after_lapse = true;
        }
        hist.max_claimed = hist.max_claimed.max(epoch);
        hist.takeover |= takeover_from.is_some();
        let node = &mut w.nodes[n];
        node.cell.claim = Some(Claim {
            epoch,
            known: Some(Base::of(body, version)),
            ended: false,
            registered: true,
        });
        // A new claim, a new `AppendLog`.
        node.cell.log_cache = None;
        node.cell.log_tag = None;
    }

    fn change_ended(&self, w: &mut World, n: usize, task: Option<Task>, end: CellEnd) {
        let Some(Task {
            machine: Machine::Change(_, kind),
            unheld,
            ..
        }) = task
        else {
            return;
        };
        match end {
            CellEnd::Written { base, .. } => {
                if unheld {
                    w.hist.breach(PropertyName::NoWriteWithoutLease);
                }
                if let ChangeKind::Write(id) = kind {
                    self.acknowledged(w, id);
                    w.nodes[n].cell.last_written = Some(payload(id));
                }
                match kind {
                    ChangeKind::Write(_) => {
                        if let Some(c) = w.nodes[n].cell.claim.as_mut() {
                            c.known = Some(base);
                        }
                    }
                    ChangeKind::Release | ChangeKind::HandOff => self.end_claim(w, n),
                }
            }
            CellEnd::Conflict { base } => {
                if let Some(c) = w.nodes[n].cell.claim.as_mut() {
                    c.known = Some(base);
                }
            }
            CellEnd::Superseded { .. } => self.end_claim(w, n),
            CellEnd::KeptMoving if kind == ChangeKind::HandOff => self.end_claim(w, n),
            CellEnd::KeptMoving => {}
        }
    }

    fn acknowledged(&self, w: &mut World, id: u8) {
        match w.hist.order_of(id) {
            Some(order) => w.hist.acked_order = w.hist.acked_order.max(order),
            None => w.hist.breach(PropertyName::NoAcknowledgedWriteLost),
        }
    }

    /// Feeds an answer (or a failure: `None`) to node `n`'s task.
    fn task_answer(&self, w: &mut World, n: usize, outcome: Option<Outcome>, refused: bool) {
        let now = self.now(w, n);
        let Some(task) = w.nodes[n].cell.task.as_mut() else {
            return;
        };
        let next = match (&task.wait, outcome) {
            (Wait::Head, Some(Outcome::Head(h))) => match &mut task.machine {
                Machine::Claim(f) => Next::Claim(f.on_head(h)),
                _ => return,
            },
            (Wait::Base, Some(Outcome::Head(h))) => match &mut task.machine {
                Machine::Change(c, _) => Next::Cell(c.on_read(h)),
                Machine::Log(LogTask { write: Some(c), .. }) => Next::Cell(c.on_read(h)),
                _ => return,
            },
            (Wait::LogRead, Some(Outcome::Head(h))) => match self.log_read(w, n, h) {
                Some(next) => next,
                None => return,
            },
            (Wait::Create, answer) => {
                let created = match answer {
                    Some(Outcome::Created(true)) => Created::Applied,
                    Some(Outcome::Created(false)) => Created::Taken,
                    _ => Created::Unknown,
                };
                match &mut task.machine {
                    Machine::Log(LogTask {
                        op: LogOp::Append { append, .. },
                        ..
                    }) => Next::Append(append.on_created(created)),
                    _ => return,
                }
            }
            (Wait::LogRead, None) => match self.log_read_failed(w, n) {
                Some(next) => next,
                None => return,
            },
            // The claim's `write_if` could not read its base: not committed, head unchanged.
            (Wait::Base, None) if matches!(task.machine, Machine::Log(_)) => {
                let answer = HeadWritten::of_error(ErrorKind::Timeout, false);
                match self.log_written(w, n, answer, false) {
                    Some(next) => next,
                    None => return,
                }
            }
            (Wait::RecordRead, answer) => match self.record_read(w, n, answer) {
                Some(next) => next,
                None => return,
            },
            (Wait::Judge { node, sent }, Some(Outcome::Lease(l))) => {
                let (peer, sent) = (*node as usize, *sent);
                let lease = l.map(|(obj, version)| observed(obj, version));
                let node = &mut w.nodes[n];
                let prior = node.seen[peer].as_ref();
                let seen = Observation::update_with(prior, lease, sent, now.mono_ms, self.flaws);
                let verdict = seen.judge(now, &self.lease_cfg[n]);
                node.seen[peer] = Some(seen);
                match &mut node.cell.task {
                    Some(Task {
                        machine: Machine::Claim(f),
                        ..
                    }) => Next::Claim(f.on_liveness(verdict)),
                    _ => return,
                }
            }
            (Wait::Send, Some(Outcome::Put(v))) => match &mut task.seal {
                Some((write, _)) => Next::Write(write.on_put(match v {
                    Some(v) => PutAnswer::Applied(v),
                    None => PutAnswer::Rejected,
                })),
                None => return,
            },
            (Wait::Send, None) => match &mut task.seal {
                Some((write, _)) => Next::Write(write.on_put(if refused {
                    PutAnswer::NotCommitted { retryable: true }
                } else {
                    PutAnswer::Ambiguous
                })),
                None => return,
            },
            (Wait::Readback, h) => match &mut task.seal {
                Some((write, _)) => Next::Write(write.on_read(match h {
                    Some(Outcome::Head(h)) => ReadAnswer::Head(h),
                    _ => ReadAnswer::Failed,
                })),
                None => return,
            },
            // A failed read ends a claim or a change: not committed.
            _ => {
                let task = w.nodes[n].cell.task.take();
                return self.task_failed(w, n, task);
            }
        };
        self.run(w, n, next);
    }

    /// Feeds an answer (`None`: a failure, `refused` if provably not sent) to node `n`'s
    /// lease keeper.
    fn lease_answer(
        &self,
        w: &mut World,
        n: usize,
        op: &Op,
        outcome: Option<Outcome>,
        refused: bool,
    ) {
        w.nodes[n].lease_busy = false;
        let event = match (outcome, op) {
            (Some(Outcome::Put(Some(v))), _) => LeaseEvent::Written(WriteResult::Applied(v)),
            (Some(Outcome::Put(None)), _) => LeaseEvent::Written(WriteResult::Rejected),
            (Some(Outcome::Lease(Some((obj, v)))), _) => {
                LeaseEvent::Read(ReadResult::Found(observed(obj, v)))
            }
            (Some(Outcome::Lease(None)), _) => LeaseEvent::Read(ReadResult::Absent),
            (
                Some(
                    Outcome::Head(_)
                    | Outcome::Done
                    | Outcome::Names(_)
                    | Outcome::Created(_)
                    | Outcome::Record(_),
                ),
                _,
            ) => return,
            (None, Op::PutLease { .. }) if refused => {
                LeaseEvent::Written(WriteResult::NotCommitted)
            }
            (None, Op::PutLease { .. }) => LeaseEvent::Written(WriteResult::Ambiguous),
            (None, _) => LeaseEvent::Read(ReadResult::Failed),
        };
        self.lease_step(w, n, event);
    }

    // ----- payload collection --------------------------------------------------------------

    /// `Claim::collect_garbage`: list the cell's payload objects, read the head, delete each
    /// object the core's rule ([`collectable`] of its [`blob_epoch`]) lets the claim's epoch
    /// delete.
    fn start_collect(&self, w: &mut World, n: usize) {
        w.nodes[n].cell.collecting = Some(None);
        let bound = self.bound(w, n);
        self.send(w, n, Thread::Gc, Op::ListBlobs, bound);
    }

    fn gc_answer(&self, w: &mut World, n: usize, outcome: Option<Outcome>) {
        let bound = self.bound(w, n);
        let node = &mut w.nodes[n];
        match (node.cell.collecting.take(), outcome) {
            (Some(None), Some(Outcome::Names(names))) => {
                node.cell.collecting = Some(Some(names));
                self.send(w, n, Thread::Gc, Op::GetHead, bound);
            }
            (Some(Some(names)), Some(Outcome::Head(head))) => {
                let Some(epoch) = node.cell.claim.as_ref().map(|c| c.epoch) else {
                    return;
                };
                let current = head.as_ref().and_then(|(h, _)| h.payload.blob().cloned());
                for name in names {
                    let is_current = current.as_ref().is_some_and(|b| b.name == name);
                    if collectable(blob_epoch(&name), epoch, is_current, self.flaws) {
                        self.send(w, n, Thread::Gc, Op::DeleteBlob { name }, bound);
                    }
                }
            }
            // A delete's answer, or a failed request (the collection gives up).
            _ => {}
        }
    }

    // ----- the co-writer -------------------------------------------------------------------

    fn co_answer(&self, w: &mut World, outcome: Option<Outcome>, refused: bool) {
        if w.co.storing {
            w.co.storing = false;
            let stored = matches!(outcome, Some(Outcome::Done));
            let step = match w.co.write.as_mut() {
                Some((write, _, _)) if stored => write.start(),
                _ => {
                    w.co.write = None;
                    return;
                }
            };
            return self.co_step(w, step);
        }
        if w.co.reading {
            w.co.reading = false;
            let Some(Outcome::Head(Some((head, version)))) = outcome else {
                return;
            };
            return self.co_build(w, head, version);
        }
        let Some((write, _, _)) = w.co.write.as_mut() else {
            return;
        };
        let step = match outcome {
            Some(Outcome::Put(Some(v))) => write.on_put(PutAnswer::Applied(v)),
            Some(Outcome::Put(None)) => write.on_put(PutAnswer::Rejected),
            Some(Outcome::Head(h)) => write.on_read(ReadAnswer::Head(h)),
            None if refused => write.on_put(PutAnswer::NotCommitted { retryable: true }),
            None => write.on_put(PutAnswer::Ambiguous),
            Some(
                Outcome::Lease(_)
                | Outcome::Done
                | Outcome::Names(_)
                | Outcome::Created(_)
                | Outcome::Record(_),
            ) => return,
        };
        self.co_step(w, step);
    }

    fn co_build(&self, w: &mut World, head: CellHead, version: Version) {
        // update_cell: only over a head naming an owner at the epoch it was handed.
        let Some(owner) = head.node.clone() else {
            return;
        };
        w.co.tries += 1;
        // With the log in the scope, the co-writer writes the log's head back as it is (a
        // second `AppendLog` of the claim sealing it, or `fence put` of the same bytes): no
        // data of its own (id 0).
        let id = if self.cfg.appends > 0 {
            0
        } else {
            200 + w.co.tries
        };
        // With collections in the scope, the co-writer's data goes to a payload object.
        let data = if self.cfg.appends > 0 {
            head.payload.clone()
        } else if self.cfg.collections > 0 {
            blob_payload(head.epoch, id)
        } else {
            payload(id)
        };
        let body = CellHead {
            nonce: format!("co-{}", w.co.tries),
            payload: data,
            format: HeadFormat::V2,
            ..head
        };
        let mut write = HeadWrite::new(
            body.nonce.clone(),
            CasGuard::Match(version),
            &owner,
            body.epoch,
        )
        .with_flaws(self.flaws);
        if let Some(blob) = body.payload.blob() {
            let op = Op::PutBlob {
                name: blob.name.clone(),
            };
            w.co.write = Some((write, body, id));
            w.co.storing = true;
            let bound = self.lease_cfg[0].attempt_max_ms;
            return self.send(w, CO as usize, Thread::Co, op, bound);
        }
        let step = write.start();
        w.co.write = Some((write, body, id));
        self.co_step(w, step);
    }

    fn co_step(&self, w: &mut World, step: WriteStep) {
        let bound = self.lease_cfg[0].attempt_max_ms;
        match step {
            WriteStep::Send | WriteStep::Pause(_) => {
                let Some((write, body, id)) = &w.co.write else {
                    return;
                };
                let op = Op::PutHead {
                    guard: write.guard().clone(),
                    head: body.clone(),
                    data: (*id != 0).then_some(*id),
                };
                self.send(w, CO as usize, Thread::Co, op, bound);
            }
            WriteStep::Read => self.send(w, CO as usize, Thread::Co, Op::GetHead, bound),
            WriteStep::Done(Settled::Landed(_)) => {
                if let Some((_, _, id)) = w.co.write.take().filter(|(_, _, id)| *id != 0) {
                    self.acknowledged(w, id);
                }
            }
            WriteStep::Done(Settled::Moved { head, version }) if w.co.tries < 3 => {
                w.co.write = None;
                self.co_build(w, head, version);
            }
            WriteStep::Done(_) | WriteStep::Failed(_) => w.co.write = None,
        }
    }
}

fn observed(obj: LeaseObj, version: Version) -> ObservedLease {
    ObservedLease {
        record: obj.record,
        version,
        nonce: obj.nonce,
        ttl_ms: Some(obj.ttl_ms),
    }
}

// ----- the store and the network ----------------------------------------------------------

impl FenceModel {
    /// Request `i` lands in the store (in its cell).
    fn land(&self, w: &mut World, i: usize) -> Outcome {
        let req = w.net[i].clone();
        self.in_cell(w, req.cell, |w| self.land_here(w, req))
    }

    fn land_here(&self, w: &mut World, req: Req) -> Outcome {
        match req.op {
            Op::GetLease { node } => Outcome::Lease(w.store.leases[node as usize].clone()),
            Op::GetHead => Outcome::Head(w.store.cell.head.clone()),
            Op::PutLease { guard, obj } => {
                let n = req.from as usize;
                let current = w.store.leases[n].as_ref().map(|(_, v)| v.clone());
                if !guard_holds(&guard, current.as_ref()) {
                    return Outcome::Put(None);
                }
                let v = w.store.lease_version(n);
                w.store.leases[n] = Some((obj, v.clone()));
                Outcome::Put(Some(v))
            }
            Op::PutHead { guard, head, data } => {
                let current = w.store.cell.head.as_ref().map(|(_, v)| v.clone());
                if !guard_holds(&guard, current.as_ref()) {
                    return Outcome::Put(None);
                }
                self.head_lands(w, &head, data);
                let v = w.store.head_version();
                w.store.cell.head = Some((head, v.clone()));
                Outcome::Put(Some(v))
            }
            Op::PutBlob { name } => {
                if let Err(at) = w.store.cell.blobs.binary_search(&name) {
                    w.store.cell.blobs.insert(at, name);
                }
                Outcome::Done
            }
            Op::ListBlobs => Outcome::Names(w.store.cell.blobs.clone()),
            Op::DeleteBlob { name } => {
                w.store.cell.blobs.retain(|b| *b != name);
                Outcome::Done
            }
            Op::PutRecord { name, id } => {
                match w.store.cell.records.binary_search_by(|(x, _)| x.cmp(&name)) {
                    Ok(_) => Outcome::Created(false),
                    Err(at) => {
                        w.store.cell.records.insert(at, (name, id));
                        Outcome::Created(true)
                    }
                }
            }
            Op::GetRecord { name } => {
                let found = w.store.cell.records.iter().find(|(x, _)| *x == name);
                Outcome::Record(found.map(|(_, id)| *id))
            }
        }
    }

    /// Checks a head write as it lands.
    fn head_lands(&self, w: &mut World, head: &CellHead, data: Option<u8>) {
        let old = w.store.cell.head.as_ref().map_or(0, |(h, _)| h.epoch);
        if head.epoch < old {
            w.hist.breach(PropertyName::EpochsNeverGoBack);
        }
        if head.epoch < w.hist.max_claimed {
            w.hist.breach(PropertyName::NoSupersededWrite);
        }
        if let Some(id) = data {
            if w.hist.order_of(id).is_some() {
                w.hist.breach(PropertyName::NoWriteAppliedTwice);
            }
            let order = w.hist.landed.len() as u8 + 1;
            w.hist.landed.push((id, order));
        }
    }

    /// Hands request `i`'s answer (or its failure) to its sender and removes it.
    fn answer(&self, w: &mut World, i: usize, outcome: Option<Outcome>, refused: bool) {
        let req = w.net.remove(i);
        self.in_cell(w, req.cell, |w| self.answer_here(w, req, outcome, refused));
    }

    fn answer_here(&self, w: &mut World, req: Req, outcome: Option<Outcome>, refused: bool) {
        let from = req.from as usize;
        if req.thread == Thread::Co {
            return self.co_answer(w, outcome, refused);
        }
        let node = &w.nodes[from];
        if !node.alive || node.incarnation != req.incarnation {
            return;
        }
        match req.thread {
            Thread::Lease => self.lease_answer(w, from, &req.op, outcome, refused),
            Thread::Task => self.task_answer(w, from, outcome, refused),
            Thread::Gc => self.gc_answer(w, from, outcome),
            Thread::Side => self.on_side(w, from, |w| self.task_answer(w, from, outcome, refused)),
            Thread::Co => {}
        }
        self.drop_claim_if_lease_over(w, from);
    }

    fn sender_paused(&self, w: &World, i: usize) -> bool {
        let from = w.net[i].from as usize;
        from != CO as usize && w.nodes.get(from).is_some_and(Node::paused)
    }
}

fn guard_holds(guard: &CasGuard, current: Option<&Version>) -> bool {
    match (guard, current) {
        (CasGuard::Absent, None) => true,
        (CasGuard::Match(want), Some(have)) => want == have,
        _ => false,
    }
}

// ----- the transitions ---------------------------------------------------------------------

impl FenceModel {
    /// Work a node must do before time may advance.
    fn due(&self, w: &World, n: usize, out: &mut Vec<Action>) {
        let node = &w.nodes[n];
        if !node.alive || node.paused() {
            return;
        }
        let now = self.now(w, n);
        let lease_over = node.lease.as_ref().is_none_or(|l| l.is_finished());
        let idle = node.idle_everywhere(n, &w.parked);
        if lease_over && idle && !node.lease_busy {
            out.push(Action::Acquire(n as u8));
            if w.budget.successions > 0 && node.lease.is_some() {
                out.push(Action::Succeed(n as u8));
            }
        }
        if !node.lease_busy && node.wake.is_some_and(|t| t <= now.mono_ms) {
            out.push(Action::Wake(n as u8));
        }
    }

    /// Work node `n`'s tasks of the cell in place must do before time may advance.
    fn due_in_cell(&self, w: &World, n: usize, out: &mut Vec<Action>) {
        let node = &w.nodes[n];
        if !node.alive || node.paused() {
            return;
        }
        let now = self.now(w, n);
        if let Some(Task {
            wait: Wait::Until(t),
            ..
        }) = &node.cell.task
        {
            if *t <= now.mono_ms {
                out.push(Action::Resume(n as u8));
            }
        }
        if let Some(Task {
            wait: Wait::Until(t),
            ..
        }) = &node.cell.side.task
        {
            if *t <= now.mono_ms {
                out.push(Action::ResumeSide(n as u8));
            }
        }
        let held = node.lease.as_ref().is_some_and(|l| l.is_held(now));
        let unclaimed =
            node.cell.claim.is_none() && node.register.epoch_of(w.cell_name()).is_none();
        if held && unclaimed && node.cell.task.is_none() && w.time >= node.cell.retry_at {
            out.push(Action::Claim(n as u8));
        }
        // The application settles an ambiguous append before anything else it does.
        if node.cell.pending.is_some() && node.cell.task.is_none() && w.time >= node.cell.retry_at {
            out.push(Action::Settle(n as u8));
        }
    }

    fn choices(&self, w: &World, n: usize, out: &mut Vec<Action>) {
        let node = &w.nodes[n];
        let b = &w.budget;
        if !node.alive {
            out.push(Action::Restart(n as u8));
            return;
        }
        if b.crashes > 0 {
            out.push(Action::Crash(n as u8));
        }
        if node.paused() {
            return;
        }
        if b.pauses > 0 {
            out.push(Action::Pause(n as u8, false));
            out.push(Action::Pause(n as u8, true));
        }
    }

    /// Node `n`'s choices in the cell in place.
    fn choices_in_cell(&self, w: &World, n: usize, out: &mut Vec<Action>) {
        let node = &w.nodes[n];
        let b = &w.budget;
        if !node.alive || node.paused() {
            return;
        }
        let idle_claim = node.cell.task.is_none()
            && node.cell.collecting.is_none()
            && node.cell.claim.as_ref().is_some_and(|c| !c.ended);
        if idle_claim {
            if node.cell.writes_left > 0 {
                out.push(Action::Write(n as u8));
            }
            if b.releases > 0 {
                out.push(Action::Release(n as u8));
            }
            if b.hand_offs > 0 {
                out.push(Action::HandOff(n as u8));
            }
            if b.collections > 0 {
                out.push(Action::Collect(n as u8));
            }
            if node.cell.appends_left > 0 && node.cell.pending.is_none() {
                out.push(Action::Append(n as u8));
            }
        }
        // An adoption in a second task, whenever the lease's register lets it start.
        let held = node
            .lease
            .as_ref()
            .is_some_and(|l| l.is_held(self.now(w, n)));
        let free = node.register.epoch_of(w.cell_name()).is_none();
        if b.adopts > 0 && held && free && node.cell.side == Side::default() {
            out.push(Action::Adopt(n as u8));
        }
    }

    fn quiet(&self, w: &World) -> bool {
        w.net
            .iter()
            .all(|r| r.slow || r.state == ReqState::Orphan || self.paused_sender(w, r))
    }

    fn paused_sender(&self, w: &World, r: &Req) -> bool {
        r.from != CO && w.nodes.get(r.from as usize).is_some_and(Node::paused)
    }

    fn tick(&self, w: &mut World) {
        w.time += self.cfg.tick_ms;
        for n in 0..w.nodes.len() {
            let node = &mut w.nodes[n];
            if node.paused_until.is_some_and(|t| t <= w.time) {
                node.paused_until = None;
                if node.suspended {
                    node.lag += w.time - node.paused_at;
                    node.suspended = false;
                }
            }
        }
        // Requests held up in the network land during the faults or never: once they are
        // over, what is still held up is lost.
        if !self.chaos(w) {
            w.net.retain(|r| r.state != ReqState::Orphan);
        }
        // Slow requests whose sender gave up.
        let mut i = 0;
        while i < w.net.len() {
            let r = &w.net[i];
            let from = r.from as usize;
            let expired = r.slow
                && r.state != ReqState::Orphan
                && !self.paused_sender(w, r)
                && (from == CO as usize || self.now(w, from).mono_ms > r.deadline);
            if expired {
                self.give_up(w, i, false);
            } else {
                i += 1;
            }
        }
    }

    /// Request `i`'s sender gives up on it (a timeout, or a refusal): not yet landed, it stays
    /// in the network as an orphan that may still land.
    fn give_up(&self, w: &mut World, i: usize, refused: bool) {
        let mut orphan = w.net[i].clone();
        let landed = matches!(orphan.state, ReqState::Landed(_));
        let write = orphan.op.is_write();
        orphan.state = ReqState::Orphan;
        self.answer(w, i, None, refused);
        if !landed && !refused && write {
            w.net.push(orphan);
        }
    }
}

impl Model for FenceModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let nodes = (0..self.cfg.nodes).map(|_| self.fresh_node(1)).collect();
        let mut w = World {
            time: 0,
            nodes,
            store: Store {
                leases: vec![None; self.cfg.nodes],
                lease_versions: vec![0; self.cfg.nodes],
                cell: CellStore::default(),
            },
            net: Vec::new(),
            co: self.fresh_co(),
            budget: Budget {
                faults: self.cfg.faults,
                pauses: self.cfg.pauses,
                crashes: self.cfg.crashes,
                releases: self.cfg.releases,
                hand_offs: self.cfg.hand_offs,
                collections: self.cfg.collections,
                adopts: self.cfg.adopts,
                successions: self.cfg.successions,
            },
            hist: History::default(),
            parked: self.fresh_parked(),
            in_place: 0,
        };
        for n in 0..self.cfg.nodes {
            self.acquire(&mut w, n);
        }
        if self.cfg.canonical {
            self.canonical(&mut w);
        }
        vec![w]
    }

    fn actions(&self, w: &World, out: &mut Vec<Action>) {
        let mut due = Vec::new();
        for n in 0..w.nodes.len() {
            self.due(w, n, &mut due);
        }
        // Each cell's own work and choices, with the cell in place (cell 0 is).
        let mut cell_choices = Vec::new();
        for c in self.cells() {
            let view;
            let v = if c == 0 {
                w
            } else {
                view = w.viewing(c);
                &view
            };
            let (mut d, mut ch) = (Vec::new(), Vec::new());
            for n in 0..v.nodes.len() {
                self.due_in_cell(v, n, &mut d);
            }
            if self.chaos(v) {
                for n in 0..self.cfg.actors.min(v.nodes.len()) {
                    self.choices_in_cell(v, n, &mut ch);
                }
                let owned = v
                    .store
                    .cell
                    .head
                    .as_ref()
                    .is_some_and(|(h, _)| h.node.is_some());
                if v.co.left > 0 && v.co.write.is_none() && !v.co.reading && owned {
                    ch.push(Action::CoWrite);
                }
            }
            let at = |a| {
                if c == 0 {
                    a
                } else {
                    Action::At(c, Box::new(a))
                }
            };
            due.extend(d.into_iter().map(at));
            cell_choices.extend(ch.into_iter().map(at));
        }
        for (i, r) in w.net.iter().enumerate() {
            let paused = self.paused_sender(w, r);
            match &r.state {
                ReqState::InFlight => {
                    out.push(Action::Deliver(i));
                    let faulty = w.budget.faults > 0 && self.chaos(w) && !paused;
                    // Reads only ever come back late: a failed read is merely retried.
                    let write = r.op.is_write();
                    if faulty && write {
                        out.push(Action::Fault(i, Fault::HoldUp));
                        out.push(Action::Fault(i, Fault::Refuse));
                    }
                    if faulty && !r.slow {
                        out.push(Action::Fault(i, Fault::Slow));
                    }
                }
                ReqState::Landed(_) if !paused => {
                    out.push(Action::Answer(i));
                    let write = r.op.is_write();
                    if w.budget.faults > 0 && self.chaos(w) && write {
                        out.push(Action::Fault(i, Fault::LoseAnswer));
                    }
                }
                ReqState::Landed(_) => {}
                // An orphan lands now, or later, or never: it is lost for good when the
                // chaos ticks end (`tick`). There is no step that loses it sooner: no
                // property and no node reads an orphan that has not landed, so a path that
                // lost it sooner is the path that never lands it, a state for a state.
                ReqState::Orphan => out.push(Action::Deliver(i)),
            }
        }
        out.extend(due.iter().cloned());
        if self.chaos(w) {
            for n in 0..self.cfg.actors.min(w.nodes.len()) {
                self.choices(w, n, out);
            }
            out.extend(cell_choices);
        } else {
            // After the chaos, crashed processes come back.
            for n in 0..w.nodes.len() {
                if !w.nodes[n].alive {
                    out.push(Action::Restart(n as u8));
                }
            }
        }
        if due.is_empty() && self.quiet(w) && w.time < self.horizon() {
            out.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut w = last.clone();
        w.hist.end_pulses();
        for p in &mut w.parked {
            p.hist.end_pulses();
        }
        if !self.apply(&mut w, action) {
            return None;
        }
        if self.cfg.canonical {
            self.canonical(&mut w);
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        props::all()
    }

    fn within_boundary(&self, w: &World) -> bool {
        w.time <= self.horizon()
    }
}

impl FenceModel {
    /// Node `n`'s task resumes after a wait; `false` if it waited for nothing.
    fn resume_task(&self, w: &mut World, n: usize) -> bool {
        let next = match &mut w.nodes[n].cell.task {
            Some(Task {
                seal: Some((write, _)),
                ..
            }) => Next::Write(write.resume()),
            Some(Task {
                machine: Machine::Claim(f),
                ..
            }) => Next::Claim(f.resume()),
            _ => return false,
        };
        self.run(w, n, next);
        true
    }

    /// Takes `action` in `w`; `false` if it does nothing.
    fn apply(&self, w: &mut World, action: Action) -> bool {
        match action {
            Action::Tick => self.tick(w),
            Action::Deliver(i) => {
                let outcome = self.land(w, i);
                match w.net[i].state {
                    ReqState::Orphan => {
                        w.net.remove(i);
                    }
                    _ if w.net[i].slow || self.sender_paused(w, i) => {
                        w.net[i].state = ReqState::Landed(outcome);
                    }
                    _ => self.answer(w, i, Some(outcome), false),
                }
            }
            Action::Answer(i) => {
                let ReqState::Landed(outcome) = w.net[i].state.clone() else {
                    return false;
                };
                self.answer(w, i, Some(outcome), false);
            }
            Action::Fault(i, fault) => {
                w.budget.faults -= 1;
                match fault {
                    Fault::Slow => w.net[i].slow = true,
                    Fault::LoseAnswer | Fault::HoldUp => self.give_up(w, i, false),
                    Fault::Refuse => self.give_up(w, i, true),
                }
            }
            Action::Wake(n) => {
                w.nodes[n as usize].wake = None;
                self.lease_step(w, n as usize, LeaseEvent::Tick);
            }
            Action::Resume(n) => {
                if !self.resume_task(w, n as usize) {
                    return false;
                }
            }
            Action::Acquire(n) => self.acquire(w, n as usize),
            Action::Succeed(n) => {
                w.budget.successions -= 1;
                let n = n as usize;
                let lapsed = w.nodes[n].generation();
                self.acquire_as(w, n, lapsed);
            }
            Action::Adopt(n) => {
                w.budget.adopts -= 1;
                w.hist.adopted = true;
                let n = n as usize;
                self.on_side(w, n, |w| self.start_flow(w, n, true));
            }
            Action::ResumeSide(n) => {
                let n = n as usize;
                let mut resumed = false;
                self.on_side(w, n, |w| resumed = self.resume_task(w, n));
                if !resumed {
                    return false;
                }
            }
            Action::Claim(n) => self.start_claim(w, n as usize),
            Action::Write(n) => {
                let n = n as usize;
                let k = self.cfg.writes - w.nodes[n].cell.writes_left + 1;
                w.nodes[n].cell.writes_left -= 1;
                self.start_change(w, n, ChangeKind::Write(data_id(n, k)));
            }
            Action::Release(n) => {
                w.budget.releases -= 1;
                self.start_change(w, n as usize, ChangeKind::Release);
            }
            Action::HandOff(n) => {
                w.budget.hand_offs -= 1;
                self.start_change(w, n as usize, ChangeKind::HandOff);
            }
            Action::Collect(n) => {
                w.budget.collections -= 1;
                self.start_collect(w, n as usize);
            }
            Action::Append(n) => self.start_append(w, n as usize),
            Action::Settle(n) => self.start_settle(w, n as usize),
            Action::CoWrite => {
                w.co.left -= 1;
                w.co.reading = true;
                let bound = self.lease_cfg[0].attempt_max_ms;
                self.send(w, CO as usize, Thread::Co, Op::GetHead, bound);
            }
            Action::Pause(n, suspend) => {
                w.budget.pauses -= 1;
                let until = w.time + u64::from(self.cfg.pause_ticks) * self.cfg.tick_ms;
                let node = &mut w.nodes[n as usize];
                node.paused_until = Some(until);
                node.suspended = suspend;
                node.paused_at = w.time;
            }
            Action::Crash(n) => {
                w.budget.crashes -= 1;
                self.crash(w, n as usize);
            }
            Action::Restart(n) => {
                let n = n as usize;
                let incarnation = w.nodes[n].incarnation + 1;
                self.reset_node(w, n, incarnation, true);
                self.acquire(w, n);
            }
            Action::At(c, action) => return self.in_cell(w, c, |w| self.apply(w, *action)),
        }
        true
    }

    fn crash(&self, w: &mut World, n: usize) {
        self.each_cell(w, |w| {
            let node = &mut w.nodes[n];
            node.cell.task = None;
            node.cell.claim = None;
            node.cell.side = Side::default();
            node.cell.collecting = None;
        });
        let node = &mut w.nodes[n];
        node.alive = false;
        node.lease = None;
        node.paused_until = None;
        node.suspended = false;
        let from = n as u8;
        // Its requests still travel: unlanded writes may land; answers go nowhere.
        w.net.retain_mut(|r| {
            if r.from != from || r.thread == Thread::Co {
                return true;
            }
            let write = r.op.is_write();
            let keep = r.state == ReqState::InFlight && write || r.state == ReqState::Orphan;
            r.state = ReqState::Orphan;
            keep
        });
    }
}
