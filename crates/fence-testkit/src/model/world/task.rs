//! A node's task: the claims, resumes, adoptions and changes of a cell, each driving
//! fence-core's step machines ([`ClaimFlow`], [`CellWrite`], [`HeadWrite`]) request by
//! request, and the answers fed back to them.

use super::*;

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

pub(super) enum Next {
    Claim(ClaimStep),
    Write(WriteStep),
    Cell(CellStep),
    Append(AppendStep),
    Seal(SealStep),
}

impl FenceModel {
    pub(super) fn start_claim(&self, w: &mut World, n: usize) {
        self.start_flow(w, n, false);
    }

    /// A claim (or, with `adopt`, an adoption) of the cell by node `n`'s task, reserved in
    /// its lease's register first.
    pub(super) fn start_flow(&self, w: &mut World, n: usize, adopt: bool) {
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

    pub(super) fn start_change(&self, w: &mut World, n: usize, kind: ChangeKind) {
        let now = self.now(w, n);
        let held = w.nodes[n].lease.as_ref().is_some_and(|l| l.is_held(now));
        let Some(claim) = w.nodes[n].cell.claim.clone() else {
            return;
        };
        if claim.standing.admit(held, self.flaws).is_err() {
            // Refused locally: not committed.
            if let ChangeKind::Write(id) = kind {
                w.hist.refused(id);
            }
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
                // The sender stays in the lease's register unless the core's rule says
                // otherwise.
                let cell = w.cell_name();
                let node = &mut w.nodes[n];
                let left = node.register.hand_off_begins(cell, claim.epoch, self.flaws);
                if let Some(c) = node.cell.claim.as_mut() {
                    c.registered &= !left;
                }
                Change::HandOff {
                    to: format!("n{to}"),
                    generation: w.nodes[to].generation(),
                }
            }
        };
        let node = &mut w.nodes[n];
        // A release or a hand-off stops the claim acting before it is sent (the core's rule).
        if change.stops_acting(self.flaws) {
            if let Some(c) = node.cell.claim.as_mut() {
                c.standing.stop_acting();
            }
        }
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
    pub(super) fn run(&self, w: &mut World, n: usize, mut next: Next) {
        loop {
            let bound = self.bound(w, n);
            let now = self.now(w, n);
            let mono = now.mono_ms;
            // A judgement the runtime's observer gives from memory, without a read
            // (`Observation::from_memory`, the same rule).
            let remembered = match &next {
                Next::Claim(ClaimStep::JudgeOwner { node, writer }) => {
                    let peer = peer_of(node);
                    let seen = w.nodes[n].seen.get(peer).and_then(Option::as_ref);
                    seen.and_then(|o| o.from_memory(now, &self.lease_cfg[n], writer.as_deref()))
                }
                _ => None,
            };
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
                Next::Claim(ClaimStep::JudgeOwner { .. }) if remembered.is_some() => {
                    match (&mut task.machine, remembered) {
                        (Machine::Claim(f), Some(verdict)) => Next::Claim(f.on_liveness(verdict)),
                        _ => return,
                    }
                }
                Next::Claim(ClaimStep::JudgeOwner { node, .. }) => {
                    let peer = peer_of(&node) as u8;
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
                Next::Write(WriteStep::Failed(why)) => {
                    let task = w.nodes[n].cell.task.take();
                    let (_, ambiguous) = unsettled_error(why);
                    return self.task_failed(w, n, task, ambiguous);
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

    pub(super) fn retry_later(&self, w: &mut World, n: usize) {
        w.nodes[n].cell.retry_at = w.time + self.cfg.tick_ms;
    }

    /// Node `n`'s task ended in an error (`ambiguous`: its write may have landed).
    fn task_failed(&self, w: &mut World, n: usize, task: Option<Task>, ambiguous: bool) {
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
                if let (ChangeKind::Write(id), false) = (kind, ambiguous) {
                    w.hist.refused(id);
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
            standing: Standing::default(),
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
                self.refused(w, kind);
            }
            CellEnd::Superseded { maybe_landed, .. } => {
                self.end_claim(w, n);
                if !maybe_landed {
                    self.refused(w, kind);
                }
            }
            CellEnd::KeptMoving if kind == ChangeKind::HandOff => self.end_claim(w, n),
            CellEnd::KeptMoving => self.refused(w, kind),
        }
    }

    /// The application was told a change of kind `kind` was not committed.
    fn refused(&self, w: &mut World, kind: ChangeKind) {
        if let ChangeKind::Write(id) = kind {
            w.hist.refused(id);
        }
    }

    /// A claim (not an adoption, which resumes any head of its node by design) resumes a
    /// head at its epoch only when the caller vouched for the generation that wrote it: its
    /// own lease's (a hand-off to it, its own closed claim) or a lapsed lease it succeeded.
    /// `step` is what the claim machine made of the head `read`.
    fn judge_resume(&self, w: &mut World, n: usize, read: Option<&CellHead>, step: &ClaimStep) {
        let Some(read) = read else {
            return;
        };
        let resumes = match step {
            ClaimStep::Seal { body, .. } => body.epoch == read.epoch,
            ClaimStep::Done(ClaimEnd::Claimed { resumed, .. }) => *resumed,
            _ => false,
        };
        let node = &w.nodes[n];
        if !resumes || node.on_side {
            return;
        }
        let writer = read.generation.as_ref();
        let vouched = writer.is_some_and(|g| {
            node.generation().as_ref() == Some(g) || node.vouched.as_ref() == Some(g)
        });
        if !vouched {
            w.hist.breach(PropertyName::ResumeVouched);
        }
    }

    /// Feeds an answer (or a failure: `None`) to node `n`'s task.
    pub(super) fn task_answer(
        &self,
        w: &mut World,
        n: usize,
        outcome: Option<Outcome>,
        refused: bool,
    ) {
        let now = self.now(w, n);
        let Some(task) = w.nodes[n].cell.task.as_mut() else {
            return;
        };
        let next = match (&task.wait, outcome) {
            (Wait::Head, Some(Outcome::Head(h))) => match &mut task.machine {
                Machine::Claim(f) => {
                    let step = f.on_head(h.clone());
                    self.judge_resume(w, n, h.as_ref().map(|(h, _)| h), &step);
                    Next::Claim(step)
                }
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
                return self.task_failed(w, n, task, false);
            }
        };
        self.run(w, n, next);
    }

    /// Node `n`'s task resumes after a wait; `false` if it waited for nothing.
    pub(super) fn resume_task(&self, w: &mut World, n: usize) -> bool {
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
}

/// The model's node index a lease's node name (`n0`, `n1`, …) names.
fn peer_of(node: &str) -> usize {
    node.trim_start_matches('n').parse::<usize>().unwrap_or(0)
}
