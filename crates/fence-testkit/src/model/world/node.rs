//! A node: its process (alive, paused, crashed), its lease keeper driving fence-core's
//! [`LeaseCore`], its claims and its lease's register of claims.

use super::*;

/// A claim a node holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Claim {
    pub(crate) epoch: u64,
    pub(crate) known: Option<Base>,
    /// How the claim stands: the core's [`Standing`], which the runtime's claim keeps too
    /// (stopped acting for a release or a hand-off, ended).
    pub(crate) standing: Standing,
    /// It stands in its lease's register of claims.
    pub(crate) registered: bool,
}

impl Claim {
    /// Whether the claim acts no more (the core's rule: [`Standing::ended`]).
    pub(crate) fn ended(&self) -> bool {
        self.standing.ended().is_some()
    }
}

/// A node's second task and the claim it made: an adoption of the cell
/// (`LeaseKeeper::adopt`) while the first task may be handing it off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Side {
    pub(crate) task: Option<Task>,
    pub(crate) claim: Option<Claim>,
}

/// One node: a process of it, its lease, its task and its claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub(crate) alive: bool,
    pub(crate) incarnation: u8,
    pub(super) acquisitions: u8,
    pub(crate) lease: Option<LeaseCore>,
    pub(super) wake: Option<u64>,
    pub(super) lease_busy: bool,
    /// Its part of the cell in place (see [`Parked`]).
    pub(crate) cell: NodeCell,
    pub(super) seen: Vec<Option<Observation>>,
    pub(crate) paused_until: Option<u64>,
    pub(super) suspended: bool,
    pub(super) paused_at: u64,
    pub(super) lag: u64,
    pub(super) nonces: u16,
    /// The lease's register of claims (the core's), one per lease.
    pub(crate) register: Register,
    /// The second task's slots are swapped in.
    pub(super) on_side: bool,
    /// A lapsed lease of ours this lease succeeded: its heads are resumed at their epochs.
    pub(super) vouched: Option<String>,
    /// When the latest lease write of its current lease that the store applied was sent,
    /// by its own monotonic clock: its authority must end a TTL after (the authority
    /// property).
    pub(crate) authority_sent: Option<u64>,
}

impl Node {
    pub(super) fn paused(&self) -> bool {
        self.paused_until.is_some()
    }

    pub(super) fn nonce(&mut self, n: usize) -> String {
        self.nonces += 1;
        format!("n{n}p{}-{}", self.incarnation, self.nonces)
    }

    pub(super) fn generation(&self) -> Option<String> {
        self.lease.as_ref().map(|l| l.holder().generation.clone())
    }
}

impl FenceModel {
    pub(super) fn lease_step(&self, w: &mut World, n: usize, event: LeaseEvent) {
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
                    let sent_mono = now.mono_ms;
                    let op = Op::PutLease {
                        guard,
                        obj,
                        sent_mono,
                    };
                    self.send(w, n, Thread::Lease, op, timeout_ms);
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
    pub(super) fn drop_claim_if_lease_over(&self, w: &mut World, n: usize) {
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
    pub(super) fn end_claim(&self, w: &mut World, n: usize) {
        let cell = w.cell_name();
        let node = &mut w.nodes[n];
        if let Some(c) = node.cell.claim.take() {
            if c.registered {
                node.register.leave(cell, c.epoch);
            }
        }
    }

    /// Runs `f` on node `n`'s second task and its claim, swapped in for the first.
    pub(super) fn on_side(&self, w: &mut World, n: usize, f: impl FnOnce(&mut World)) {
        let swap = |node: &mut Node| {
            std::mem::swap(&mut node.cell.task, &mut node.cell.side.task);
            std::mem::swap(&mut node.cell.claim, &mut node.cell.side.claim);
            node.on_side = !node.on_side;
        };
        swap(&mut w.nodes[n]);
        f(w);
        swap(&mut w.nodes[n]);
    }

    pub(super) fn acquire(&self, w: &mut World, n: usize) {
        self.acquire_as(w, n, None);
    }

    /// Acquires node `n`'s lease, as the successor of its lapsed generation `predecessor`.
    pub(super) fn acquire_as(&self, w: &mut World, n: usize, predecessor: Option<String>) {
        // A new lease has no claims, in any cell.
        self.each_cell(w, |w| {
            w.nodes[n].cell.claim = None;
            w.nodes[n].cell.side = Side::default();
        });
        let node = &mut w.nodes[n];
        node.acquisitions += 1;
        node.register = Register::default().with_flaws(self.flaws);
        node.vouched.clone_from(&predecessor);
        node.authority_sent = None;
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

    /// Feeds an answer (`None`: a failure, `refused` if provably not sent) to node `n`'s
    /// lease keeper.
    pub(super) fn lease_answer(
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
}

pub(super) fn observed(obj: LeaseObj, version: Version) -> ObservedLease {
    ObservedLease {
        record: obj.record,
        version,
        nonce: obj.nonce,
        ttl_ms: Some(obj.ttl_ms),
    }
}
