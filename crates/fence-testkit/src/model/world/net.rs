//! The network: requests in flight, landed with their answer on the way back, or orphaned
//! (their sender gave up and they may still land); the faults that hold one up, lose its
//! answer, refuse it or slow it down; and how an answer reaches its sender.

use super::*;

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
    PutLease {
        guard: CasGuard,
        obj: LeaseObj,
        /// The sender's monotonic time when it sent the write (the core anchors its
        /// authority no later).
        sent_mono: u64,
    },
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
    pub(super) fn is_write(&self) -> bool {
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

impl FenceModel {
    pub(super) fn send(&self, w: &mut World, n: usize, thread: Thread, op: Op, timeout_ms: u64) {
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
    pub(super) fn bound(&self, w: &World, n: usize) -> u64 {
        let cfg = &self.lease_cfg[n];
        let left = w.nodes[n]
            .lease
            .as_ref()
            .map_or(0, |l| l.remaining_ms(self.now(w, n)));
        cfg.attempt_timeout(left).max(cfg.attempt_min_ms)
    }

    /// Hands request `i`'s answer (or its failure) to its sender and removes it.
    pub(super) fn answer(&self, w: &mut World, i: usize, outcome: Option<Outcome>, refused: bool) {
        let req = w.net.remove(i);
        self.in_cell(w, req.cell, |w| self.answer_here(w, req, outcome, refused));
    }

    fn answer_here(&self, w: &mut World, req: Req, outcome: Option<Outcome>, refused: bool) {
        let from = req.from as usize;
        if req.thread == Thread::Co {
            // The co-writer's deletes are not awaited (the runtime's run in the background).
            if matches!(req.op, Op::DeleteBlob { .. }) {
                return;
            }
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

    pub(super) fn sender_paused(&self, w: &World, i: usize) -> bool {
        let from = w.net[i].from as usize;
        from != CO as usize && w.nodes.get(from).is_some_and(Node::paused)
    }

    pub(super) fn quiet(&self, w: &World) -> bool {
        w.net
            .iter()
            .all(|r| r.slow || r.state == ReqState::Orphan || self.paused_sender(w, r))
    }

    pub(super) fn paused_sender(&self, w: &World, r: &Req) -> bool {
        r.from != CO && w.nodes.get(r.from as usize).is_some_and(Node::paused)
    }

    /// Request `i`'s sender gives up on it (a timeout, or a refusal): not yet landed, it stays
    /// in the network as an orphan that may still land.
    pub(super) fn give_up(&self, w: &mut World, i: usize, refused: bool) {
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
