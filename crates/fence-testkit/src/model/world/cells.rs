//! More than one cell: what the world holds of each cell, and how one is put in place.
//!
//! Everything the model knows of a cell — its head, payload and log record objects in the
//! store, each node's task, claim and second task for it, its co-writer and its history (the
//! properties are judged per cell) — sits in the world for the cell *in place* (the store's
//! [`CellStore`], each node's [`NodeCell`], the world's co-writer and history), and in a
//! [`Parked`] slot for every other cell. A step of cell `c` runs with `c`
//! swapped in place ([`FenceModel::in_cell`]) and swapped back after it, so every rule of
//! the single-cell model runs unchanged for each cell. What is a node's, not a cell's, stays
//! put: its process, its lease, its observations of peers' leases, and the lease's register
//! of claims (one per lease, keyed by the cell's name, as in the runtime). A state at rest
//! always has cell 0 in place.

use fence_core::decide::log::SeenHead;
use fence_core::record::{CellHead, CellPayload};
use fence_core::Version;

use super::{Claim, CoWriter, FenceModel, History, Node, Pending, Side, Task, World};

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
    pub(crate) head: Option<(CellHead, Version)>,
    /// The cell's payload objects, by name (sorted).
    pub(crate) blobs: Vec<String>,
    /// The cell's log record objects: name and the record (sorted by name).
    pub(crate) records: Vec<(String, u8)>,
    pub(crate) head_versions: u16,
}

/// A node's part of a cell: its tasks and claims of it, and what the application does with
/// it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeCell {
    pub(crate) task: Option<Task>,
    pub(crate) claim: Option<Claim>,
    pub(crate) writes_left: u8,
    pub(crate) retry_at: u64,
    pub(crate) last_written: Option<CellPayload>,
    /// A payload collection under way: `None` until its listing came back.
    pub(crate) collecting: Option<Option<Vec<String>>>,
    /// Appends left to start.
    pub(crate) appends_left: u8,
    /// The append log's cache: the head as it last wrote or read it, and its tag.
    pub(crate) log_cache: Option<SeenHead>,
    pub(crate) log_tag: Option<String>,
    /// An ambiguous append the application settles before it appends again.
    pub(crate) pending: Option<Pending>,
    /// The second task (an adoption), swapped in while it runs.
    pub(crate) side: Side,
}

impl NodeCell {
    /// Neither its task nor its second task is running.
    fn idle(&self) -> bool {
        self.task.is_none() && self.side.task.is_none()
    }
}

impl Node {
    /// Node `n`'s tasks of every cell are idle (the one in place and the parked ones).
    pub(crate) fn idle_everywhere(&self, n: usize, parked: &[Parked]) -> bool {
        self.cell.idle() && parked.iter().all(|p| p.nodes[n].idle())
    }
}

/// What the properties read of one cell, borrowed from a state (whichever cell is in
/// place): judging a cell needs no copy of the state.
pub(crate) struct CellView<'a> {
    pub(crate) store: &'a CellStore,
    pub(crate) hist: &'a History,
    /// The nodes' parts of the cell: in place in the nodes, or parked.
    nodes: Slots<'a>,
}

enum Slots<'a> {
    InPlace(&'a [Node]),
    Parked(&'a [NodeCell]),
}

impl CellView<'_> {
    fn slot(&self, n: usize) -> &NodeCell {
        match self.nodes {
            Slots::InPlace(nodes) => &nodes[n].cell,
            Slots::Parked(nodes) => &nodes[n],
        }
    }

    /// Whether node `n` acts on a claim of the cell (its first or its second task's).
    pub(crate) fn acting(&self, n: usize) -> bool {
        let slot = self.slot(n);
        let acting = |c: &Option<Claim>| c.as_ref().is_some_and(|c| !c.ended());
        acting(&slot.claim) || acting(&slot.side.claim)
    }

    /// How many claims of the cell node `n`'s lease holds (its first and its second task's,
    /// a claim handing the cell off included until the hand-off settled).
    pub(crate) fn claims(&self, n: usize) -> usize {
        let slot = self.slot(n);
        usize::from(slot.claim.is_some()) + usize::from(slot.side.claim.is_some())
    }
}

impl World {
    /// Cell `c` of this state, as the properties read it.
    pub(crate) fn cell_view(&self, c: u8) -> CellView<'_> {
        // Cell `c` is in place, or parked: in its own slot, or (cell 0, while another is in
        // place) in the slot of the cell in place.
        let parked = if c == self.in_place {
            None
        } else if c == 0 {
            Some(&self.parked[usize::from(self.in_place) - 1])
        } else {
            Some(&self.parked[usize::from(c) - 1])
        };
        match parked {
            None => CellView {
                store: &self.store.cell,
                hist: &self.hist,
                nodes: Slots::InPlace(&self.nodes),
            },
            Some(p) => CellView {
                store: &p.store,
                hist: &p.hist,
                nodes: Slots::Parked(&p.nodes),
            },
        }
    }

    /// Swaps cell `c` (1 or more) with cell 0's slots in place, or back.
    fn exchange(&mut self, c: u8) {
        let p = &mut self.parked[usize::from(c) - 1];
        std::mem::swap(&mut self.store.cell, &mut p.store);
        for (node, slot) in self.nodes.iter_mut().zip(&mut p.nodes) {
            std::mem::swap(&mut node.cell, slot);
        }
        std::mem::swap(&mut self.co, &mut p.co);
        std::mem::swap(&mut self.hist, &mut p.hist);
    }

    /// Puts cell `c` in place (cell 0 back first, if another is).
    pub(crate) fn set_cell(&mut self, c: u8) {
        if self.in_place == c {
            return;
        }
        if self.in_place != 0 {
            self.exchange(self.in_place);
        }
        if c != 0 {
            self.exchange(c);
        }
        self.in_place = c;
    }

    /// This state with cell `c` in place (for judging and printing cell `c`).
    pub(crate) fn viewing(&self, c: u8) -> World {
        let mut v = self.clone();
        v.set_cell(c);
        v
    }

    /// The name of the cell in place, in a lease's register of claims.
    pub(crate) fn cell_name(&self) -> &'static str {
        cell_name(self.in_place)
    }
}

impl FenceModel {
    /// The cells of the scope.
    pub(crate) fn cells(&self) -> std::ops::Range<u8> {
        0..self.cfg.cells as u8
    }

    /// Runs `f` with cell `c` in place, then puts back the cell that was.
    pub(crate) fn in_cell<R>(&self, w: &mut World, c: u8, f: impl FnOnce(&mut World) -> R) -> R {
        let prev = w.in_place;
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
            replaced: CellPayload::Empty,
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
            ..self.fresh_node(incarnation)
        };
        self.each_cell(w, |w| w.nodes[n] = node.clone());
    }
}
