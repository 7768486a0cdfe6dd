//! More than one cell: what the world holds of each cell, and how one is put in place.
//!
//! Everything the model knows of a cell — its head, payload and log record objects in the
//! store, each node's task, claim and second task for it, its co-writer and its history (the
//! properties are judged per cell) — sits in the world's flat fields for the cell *in
//! place*, and in a [`Parked`] slot for every other cell. A step of cell `c` runs with `c`
//! swapped in place ([`FenceModel::in_cell`]) and swapped back after it, so every rule of
//! the single-cell model runs unchanged for each cell. What is a node's, not a cell's, stays
//! put: its process, its lease, its observations of peers' leases, and the lease's register
//! of claims (one per lease, keyed by the cell's name, as in the runtime). A state at rest
//! always has cell 0 in place.

use fence_core::record::CellHead;
use fence_core::Version;

use super::{Claim, CoWriter, FenceModel, History, Node, Side, Store, Task, World};

/// Each cell's name in a lease's register of claims (a scope has at most this many).
pub(crate) const CELL_NAMES: [&str; 4] = ["c", "c1", "c2", "c3"];

/// Cell `c`'s name.
pub(crate) fn cell_name(c: u8) -> &'static str {
    CELL_NAMES[usize::from(c)]
}

/// A cell that is not in place.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Parked {
    pub(crate) store: CellStore,
    pub(crate) nodes: Vec<NodeCell>,
    pub(crate) co: CoWriter,
    pub(crate) hist: History,
}

/// A cell's part of the store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CellStore {
    head: Option<(CellHead, Version)>,
    blobs: Vec<String>,
    records: Vec<(String, u8)>,
    head_versions: u16,
}

/// A node's part of a cell: its tasks and claims of it, and what the application does with
/// it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeCell {
    pub(crate) task: Option<Task>,
    pub(crate) claim: Option<Claim>,
    pub(crate) writes_left: u8,
    pub(crate) retry_at: u64,
    pub(crate) last_written: Option<fence_core::record::CellPayload>,
    pub(crate) collecting: Option<Option<Vec<String>>>,
    pub(crate) appends_left: u8,
    pub(crate) log_cache: Option<fence_core::decide::log::SeenHead>,
    pub(crate) log_tag: Option<String>,
    pub(crate) pending: Option<super::Pending>,
    pub(crate) side: Side,
}

impl Store {
    /// Swaps the cell part of the store with `c`.
    fn exchange(&mut self, c: &mut CellStore) {
        // Every field is named: a new one must be sorted into the store's or the cell's.
        let Store {
            leases: _,
            lease_versions: _,
            head,
            blobs,
            records,
            head_versions,
        } = self;
        std::mem::swap(head, &mut c.head);
        std::mem::swap(blobs, &mut c.blobs);
        std::mem::swap(records, &mut c.records);
        std::mem::swap(head_versions, &mut c.head_versions);
    }
}

impl Node {
    /// Swaps the node's part of the cell in place with `c`.
    fn exchange(&mut self, c: &mut NodeCell) {
        // Every field is named: a new one must be sorted into the node's (kept) or the
        // cell's (swapped).
        let Node {
            alive: _,
            incarnation: _,
            acquisitions: _,
            lease: _,
            wake: _,
            lease_busy: _,
            seen: _,
            paused_until: _,
            suspended: _,
            paused_at: _,
            lag: _,
            nonces: _,
            register: _,
            on_side: _,
            vouched: _,
            task,
            claim,
            writes_left,
            retry_at,
            last_written,
            collecting,
            appends_left,
            log_cache,
            log_tag,
            pending,
            side,
        } = self;
        std::mem::swap(task, &mut c.task);
        std::mem::swap(claim, &mut c.claim);
        std::mem::swap(writes_left, &mut c.writes_left);
        std::mem::swap(retry_at, &mut c.retry_at);
        std::mem::swap(last_written, &mut c.last_written);
        std::mem::swap(collecting, &mut c.collecting);
        std::mem::swap(appends_left, &mut c.appends_left);
        std::mem::swap(log_cache, &mut c.log_cache);
        std::mem::swap(log_tag, &mut c.log_tag);
        std::mem::swap(pending, &mut c.pending);
        std::mem::swap(side, &mut c.side);
    }

    /// Node's tasks of every cell are idle (the one in place and the parked ones).
    pub(crate) fn idle_everywhere(&self, n: usize, parked: &[Parked]) -> bool {
        let idle = |task: &Option<Task>, side: &Side| task.is_none() && side.task.is_none();
        idle(&self.task, &self.side)
            && parked
                .iter()
                .all(|p| idle(&p.nodes[n].task, &p.nodes[n].side))
    }
}

/// What the properties read of one cell, borrowed from a state (whichever cell is in
/// place): judging a cell needs no copy of the state.
pub(crate) struct CellView<'a> {
    pub(crate) head: &'a Option<(CellHead, Version)>,
    pub(crate) blobs: &'a [String],
    pub(crate) records: &'a [(String, u8)],
    pub(crate) hist: &'a History,
    /// The nodes' parts of the cell: in place in the nodes, or parked.
    nodes: Slots<'a>,
}

enum Slots<'a> {
    InPlace(&'a [Node]),
    Parked(&'a [NodeCell]),
}

impl CellView<'_> {
    /// Whether node `n` acts on a claim of the cell (its first or its second task's).
    pub(crate) fn acting(&self, n: usize) -> bool {
        let (claim, side) = match self.nodes {
            Slots::InPlace(nodes) => (&nodes[n].claim, &nodes[n].side.claim),
            Slots::Parked(nodes) => (&nodes[n].claim, &nodes[n].side.claim),
        };
        let acting = |c: &Option<Claim>| c.as_ref().is_some_and(|c| !c.ended);
        acting(claim) || acting(side)
    }
}

impl World {
    /// Cell `c` of this state, as the properties read it.
    pub(crate) fn cell_view(&self, c: u8) -> CellView<'_> {
        // Cell `c` is in place, or parked: in its own slot, or (cell 0, while another is in
        // place) in the slot of the cell in place.
        let parked = if c == self.cell {
            None
        } else if c == 0 {
            Some(&self.parked[usize::from(self.cell) - 1])
        } else {
            Some(&self.parked[usize::from(c) - 1])
        };
        match parked {
            None => CellView {
                head: &self.store.head,
                blobs: &self.store.blobs,
                records: &self.store.records,
                hist: &self.hist,
                nodes: Slots::InPlace(&self.nodes),
            },
            Some(p) => CellView {
                head: &p.store.head,
                blobs: &p.store.blobs,
                records: &p.store.records,
                hist: &p.hist,
                nodes: Slots::Parked(&p.nodes),
            },
        }
    }

    /// Swaps cell `c` (1 or more) with cell 0's slots in place, or back.
    fn exchange(&mut self, c: u8) {
        let p = &mut self.parked[usize::from(c) - 1];
        self.store.exchange(&mut p.store);
        for (node, slot) in self.nodes.iter_mut().zip(&mut p.nodes) {
            node.exchange(slot);
        }
        std::mem::swap(&mut self.co, &mut p.co);
        std::mem::swap(&mut self.hist, &mut p.hist);
    }

    /// Puts cell `c` in place (cell 0 back first, if another is).
    pub(crate) fn set_cell(&mut self, c: u8) {
        if self.cell == c {
            return;
        }
        if self.cell != 0 {
            self.exchange(self.cell);
        }
        if c != 0 {
            self.exchange(c);
        }
        self.cell = c;
    }

    /// This state with cell `c` in place (for judging and printing cell `c`).
    pub(crate) fn viewing(&self, c: u8) -> World {
        let mut v = self.clone();
        v.set_cell(c);
        v
    }

    /// The name of the cell in place, in a lease's register of claims.
    pub(crate) fn cell_name(&self) -> &'static str {
        cell_name(self.cell)
    }
}

impl FenceModel {
    /// The cells of the scope.
    pub(crate) fn cells(&self) -> std::ops::Range<u8> {
        0..self.cfg.cells as u8
    }

    /// Runs `f` with cell `c` in place, then puts back the cell that was.
    pub(crate) fn in_cell<R>(&self, w: &mut World, c: u8, f: impl FnOnce(&mut World) -> R) -> R {
        let prev = w.cell;
        w.set_cell(c);
        let r = f(w);
        w.set_cell(prev);
        r
    }

    /// Runs `f` once for each cell in place.
    pub(crate) fn each_cell(&self, w: &mut World, mut f: impl FnMut(&mut World)) {
        for c in self.cells() {
            self.in_cell(w, c, &mut f);
        }
    }

    /// A node's part of a cell in a fresh process.
    pub(crate) fn fresh_cell(&self) -> NodeCell {
        NodeCell {
            task: None,
            claim: None,
            writes_left: self.cfg.writes,
            retry_at: 0,
            last_written: None,
            collecting: None,
            appends_left: self.cfg.appends,
            log_cache: None,
            log_tag: None,
            pending: None,
            side: Side::default(),
        }
    }

    /// A co-writer that has not written yet.
    pub(crate) fn fresh_co(&self) -> CoWriter {
        CoWriter {
            left: self.cfg.co_writes,
            storing: false,
            write: None,
            reading: false,
            tries: 0,
        }
    }

    /// The cells other than cell 0, as a fresh world holds them.
    pub(crate) fn fresh_parked(&self) -> Vec<Parked> {
        (1..self.cfg.cells)
            .map(|_| Parked {
                store: CellStore::default(),
                nodes: (0..self.cfg.nodes).map(|_| self.fresh_cell()).collect(),
                co: self.fresh_co(),
                hist: History::default(),
            })
            .collect()
    }

    /// Node `n` as a fresh process `incarnation` (`alive` or not), in every cell.
    pub(crate) fn reset_node(&self, w: &mut World, n: usize, incarnation: u8, alive: bool) {
        let node = Node {
            alive,
            ..self.fresh_node(n, incarnation)
        };
        self.each_cell(w, |w| w.nodes[n] = node.clone());
    }
}
