//! The model's world: nodes running fence's pure machines, a store, a network, clocks, and
//! the faults — and its transitions. Each concern has a module of its own:
//!
//! - this one: the state ([`World`]), the actions, the model's scope and each node's clocks;
//! - `store`: the store, its versions per key, and how a request lands in it;
//! - `net`: the requests in flight, landed or orphaned, the faults, and the answers;
//! - `node`: a node's process, its lease keeper ([`LeaseCore`]) and its claims;
//! - `task`: a node's task, driving the claim and change machines of fence-core;
//! - `log`: the append log's operations, driving fence-core's `Append` and `Seal`;
//! - `writers`: payload collection and the co-writer at the cell's epoch;
//! - `history`: what the properties need of the past, judged as steps happen;
//! - `step`: the transitions (what may happen in a state, and each action taken);
//! - `cells`: more than one cell, each swapped in place for its steps;
//! - `canon`: the canonical form of a state.

use fence_core::decide::claim::{ClaimEnd, ClaimFlow, ClaimStep};
use fence_core::decide::claimed::{
    admit, blob_epoch, collectable, Base, CellEnd, CellStep, CellWrite, Change, Standing,
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

mod canon;
mod cells;
mod history;
mod log;
mod net;
mod node;
mod step;
mod store;
mod task;
mod writers;

use self::log::unsettled_error;
use super::props::{self, PropertyName};
use super::{Exception, ModelConfig};

pub(crate) use self::cells::{cell_name, CellView};
pub use self::cells::{CellStore, NodeCell, Parked};
pub use self::history::History;
pub use self::log::{LogOp, LogTask, Pending};
pub use self::net::{Fault, Op, Outcome, Req, ReqState, Thread};
use self::node::observed;
pub use self::node::{Claim, Node, Side};
use self::step::Budget;
pub use self::store::{LeaseObj, Store};
use self::task::Next;
pub use self::task::{ChangeKind, Machine, Task, Wait};
pub use self::writers::CoWriter;

/// The wall clock at model time 0.
const BASE_WALL: u64 = 1_700_000_000_000;
/// The sender of the co-writer's requests.
pub(crate) const CO: u8 = u8::MAX;

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
            Some(Exception::SlowClock { ppm }) if n == 0 => {
                let slow = |t: u64| t - t * u64::from(ppm) / 1_000_000;
                mono = slow(mono);
                wall_t = slow(wall_t);
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
            register: Register::default().with_flaws(self.flaws),
            on_side: false,
            vouched: None,
            authority_sent: None,
        }
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
