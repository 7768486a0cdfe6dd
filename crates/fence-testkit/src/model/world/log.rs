//! The append log in the model: a node's application appends records through its claim with
//! fence-core's [`Append`] machine — the one `AppendLog::append_with` drives — and settles an
//! ambiguous append with the [`Seal`] machine and [`logrules::landed`], as
//! `AppendLog::landed` does. Head writes go through the claim's `write_if`: a [`CellWrite`]
//! of exact data, settled by [`HeadWrite`](fence_core::decide::write::HeadWrite) like every
//! other head write of the model.
//!
//! The application's policy: it appends records `r<id>`, one id per record, never the same
//! bytes twice; an acknowledged append is acknowledged, an error that is not ambiguous means
//! the record never counts, and an ambiguous one is settled before anything else is
//! appended. The history keeps what the log told the application, for the log property.

use super::*;

/// The append log's work: `AppendLog::append` or `AppendLog::landed`, driving fence-core's
/// [`Append`] and [`Seal`] machines.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LogTask {
    pub(crate) op: LogOp,
    /// The head write under way (the claim's `write_if`), if any.
    pub(super) write: Option<CellWrite>,
    /// The last head write's failure may have landed.
    pub(super) ambiguous: bool,
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

/// How an append ended, for the application.
enum Told {
    /// Appended.
    Acked,
    /// Never counts.
    Denied,
    /// May have landed: settle it.
    Ambiguous,
}

/// The error a head write that settled on no verdict gives (its kind, and whether it may
/// have landed), as the runtime's `HeadWrite::failed` makes it.
pub(super) fn unsettled_error(why: Unsettled) -> (ErrorKind, bool) {
    match why {
        Unsettled::NoVerdict { ambiguous } => (ErrorKind::Unavailable, ambiguous),
        Unsettled::ReadFailed => (ErrorKind::Timeout, false),
        Unsettled::GuardStillHolds => (ErrorKind::Unavailable, false),
        Unsettled::MovedAfterAmbiguity => (ErrorKind::Conflict, true),
    }
}

impl LogTask {
    /// A node's task running `op`, before its first request.
    fn start(op: LogOp) -> Task {
        Task {
            machine: Machine::Log(LogTask {
                op,
                write: None,
                ambiguous: false,
            }),
            seal: None,
            wait: Wait::LogRead,
            unheld: false,
        }
    }
}

impl FenceModel {
    fn log_task(w: &mut World, n: usize) -> Option<&mut LogTask> {
        match &mut w.nodes[n].cell.task {
            Some(Task {
                machine: Machine::Log(t),
                ..
            }) => Some(t),
            _ => None,
        }
    }

    fn set_wait(w: &mut World, n: usize, wait: Wait) {
        if let Some(t) = w.nodes[n].cell.task.as_mut() {
            t.wait = wait;
        }
    }

    fn log_request(&self, w: &mut World, n: usize, wait: Wait, op: Op) -> Option<Next> {
        Self::set_wait(w, n, wait);
        // `AppendLog` bounds each request of an append and of a seal like the claim's own
        // (`CellClaim::request_bound`); `landed`'s reads after the seal (the cell, the
        // committed record), which a lapsed lease must still be able to make, by the
        // fence's longest attempt timeout.
        let settling = matches!(
            Self::log_task(w, n).map(|t| &t.op),
            Some(LogOp::MovedPast { .. } | LogOp::Compare { .. })
        );
        let bound = if settling {
            self.lease_cfg[n].attempt_max_ms
        } else {
            self.bound(w, n)
        };
        self.send(w, n, Thread::Task, op, bound);
        None
    }

    /// `AppendLog::append` of node `n`'s next record.
    pub(super) fn start_append(&self, w: &mut World, n: usize) {
        let node = &mut w.nodes[n];
        node.cell.appends_left = node.cell.appends_left.saturating_sub(1);
        let Some(epoch) = node.cell.claim.as_ref().map(|c| c.epoch) else {
            return;
        };
        let id = record_id(
            n,
            node.incarnation,
            self.cfg.appends - node.cell.appends_left,
        );
        // As `AppendLog::append_with`: the cache is taken, the tag cloned.
        let mut append = Append::new(epoch, node.cell.log_cache.take(), node.cell.log_tag.clone())
            .with_flaws(self.flaws);
        let step = append.start();
        node.cell.task = Some(LogTask::start(LogOp::Append { append, id }));
        self.run(w, n, Next::Append(step));
    }

    /// `AppendLog::landed` of node `n`'s ambiguous append.
    pub(super) fn start_settle(&self, w: &mut World, n: usize) {
        let node = &mut w.nodes[n];
        let Some(pending) = node.cell.pending else {
            return;
        };
        let mut seal = Seal::new();
        let step = seal.start();
        node.cell.task = Some(LogTask::start(LogOp::Settle { seal, pending }));
        self.run(w, n, Next::Seal(step));
    }

    pub(super) fn append_step(&self, w: &mut World, n: usize, step: AppendStep) -> Option<Next> {
        match step {
            AppendStep::ReadHead => self.log_request(w, n, Wait::LogRead, Op::GetHead),
            AppendStep::Build { .. } => {
                // `claim.is_held()`: the lease held now, the claim not ended.
                let now = self.now(w, n);
                let epoch = match &Self::log_task(w, n)?.op {
                    LogOp::Append { append, .. } => append.epoch(),
                    _ => return None,
                };
                let node = &w.nodes[n];
                let held = node.lease.as_ref().is_some_and(|l| l.is_held(now))
                    && node
                        .cell
                        .claim
                        .as_ref()
                        .is_some_and(|c| !c.ended() && c.epoch == epoch);
                if !held {
                    return self.append_over(w, n, Told::Denied);
                }
                match &mut Self::log_task(w, n)?.op {
                    LogOp::Append { append, id } => {
                        Some(Next::Append(append.on_built(record(*id))))
                    }
                    _ => None,
                }
            }
            AppendStep::Create { name } => {
                let id = match &Self::log_task(w, n)?.op {
                    LogOp::Append { id, .. } => *id,
                    _ => return None,
                };
                self.log_request(w, n, Wait::Create, Op::PutRecord { name, id })
            }
            AppendStep::ReadRecord { name } => {
                self.log_request(w, n, Wait::RecordRead, Op::GetRecord { name })
            }
            AppendStep::Retag => {
                let node = &mut w.nodes[n];
                node.nonces += 1;
                let tag = format!("t{n}p{}x{}", node.incarnation, node.nonces);
                match &mut Self::log_task(w, n)?.op {
                    LogOp::Append { append, .. } => Some(Next::Append(append.on_tag(tag))),
                    _ => None,
                }
            }
            AppendStep::WriteHead { head, expected } => self.start_log_write(w, n, &head, expected),
            AppendStep::Done(end) => {
                let ambiguous = Self::log_task(w, n).is_some_and(|t| t.ambiguous);
                let told = match end {
                    AppendEnd::Appended { .. } => Told::Acked,
                    AppendEnd::HeadFailed if ambiguous => Told::Ambiguous,
                    AppendEnd::HeadFailed | AppendEnd::RecordFailed | AppendEnd::Full => {
                        Told::Denied
                    }
                };
                self.append_over(w, n, told)
            }
        }
    }

    /// Node `n`'s append ended, with what the application was told.
    fn append_over(&self, w: &mut World, n: usize, told: Told) -> Option<Next> {
        let task = w.nodes[n].cell.task.take();
        let Some(Task {
            machine:
                Machine::Log(LogTask {
                    op: LogOp::Append { append, id },
                    ..
                }),
            ..
        }) = task
        else {
            return None;
        };
        let node = &mut w.nodes[n];
        node.cell.log_cache = append.cache();
        node.cell.log_tag = append.tag();
        match told {
            Told::Acked => w.hist.log_told(id, true),
            Told::Denied => w.hist.log_told(id, false),
            Told::Ambiguous => {
                node.cell.pending = Some(Pending {
                    seq: append.seq(),
                    id,
                    epoch: append.epoch(),
                })
            }
        }
        None
    }

    pub(super) fn seal_step(&self, w: &mut World, n: usize, step: SealStep) -> Option<Next> {
        match step {
            SealStep::ReadHead => self.log_request(w, n, Wait::LogRead, Op::GetHead),
            SealStep::WriteHead { head, expected } => self.start_log_write(w, n, &head, expected),
            SealStep::Sealed(head, version) => {
                w.nodes[n].cell.log_cache = Some((head.clone(), Some(version)));
                self.verdict(w, n, &head)
            }
            SealStep::Failed { .. } => self.moved_past(w, n),
        }
    }

    /// `landed` after a failed seal: read the cell; a later epoch settles it.
    fn moved_past(&self, w: &mut World, n: usize) -> Option<Next> {
        let t = Self::log_task(w, n)?;
        let pending = match &t.op {
            LogOp::Settle { pending, .. } => *pending,
            _ => return None,
        };
        t.op = LogOp::MovedPast { pending };
        self.log_request(w, n, Wait::LogRead, Op::GetHead)
    }

    /// The verdict of a settling head on node `n`'s pending append.
    fn verdict(&self, w: &mut World, n: usize, head: &LogHead) -> Option<Next> {
        let t = Self::log_task(w, n)?;
        let pending = match &t.op {
            LogOp::Settle { pending, .. } | LogOp::MovedPast { pending } => *pending,
            _ => return None,
        };
        match logrules::landed_with(head, pending.seq, pending.epoch, self.flaws) {
            logrules::Landed::No => self.settled(w, n, Some(false)),
            logrules::Landed::Compare { name } => {
                t.op = LogOp::Compare { pending };
                self.log_request(w, n, Wait::RecordRead, Op::GetRecord { name })
            }
        }
    }

    /// Node `n`'s settlement ended: landed or not, or (`None`) nothing settled (asked again
    /// a tick later).
    fn settled(&self, w: &mut World, n: usize, landed: Option<bool>) -> Option<Next> {
        w.nodes[n].cell.task = None;
        let Some(landed) = landed else {
            self.retry_later(w, n);
            return None;
        };
        let pending = w.nodes[n].cell.pending.take()?;
        w.hist.log_settled = true;
        w.hist.log_told(pending.id, landed);
        None
    }

    /// The claim's `write_if(expected, head)`: refused locally unless the claim acts (its
    /// lease held, not ended, still at the log's epoch).
    fn start_log_write(
        &self,
        w: &mut World,
        n: usize,
        head: &LogHead,
        expected: Option<Version>,
    ) -> Option<Next> {
        let epoch = match &Self::log_task(w, n)?.op {
            LogOp::Append { append, .. } => append.epoch(),
            LogOp::Settle { pending, .. } => pending.epoch,
            _ => return None,
        };
        let now = self.now(w, n);
        let node = &mut w.nodes[n];
        let held = node.lease.as_ref().is_some_and(|l| l.is_held(now));
        let ours = node.cell.claim.as_ref().filter(|c| c.epoch == epoch);
        let ended = ours.is_none_or(Claim::ended);
        if admit(held, ended, self.flaws).is_err() {
            let refused = HeadWritten::of_error(ErrorKind::Fenced, false);
            return self.log_written(w, n, refused, false);
        }
        let generation = node.generation().unwrap_or_default();
        let nonce = node.nonce(n);
        let known = node.cell.claim.as_mut().and_then(|c| c.known.take());
        let change = Change::Data {
            payload: CellPayload::Inline(head.encode()),
            exact: Some(expected),
        };
        let mut cw = CellWrite::new(&format!("n{n}"), epoch, &generation, nonce, change, known)
            .with_flaws(self.flaws);
        let step = cw.start();
        let task = node.cell.task.as_mut()?;
        task.unheld = !held;
        if let Machine::Log(t) = &mut task.machine {
            t.write = Some(cw);
            t.ambiguous = false;
        }
        Some(Next::Cell(step))
    }

    /// The head write's end, as the runtime's `write_on` turns it into the claim's state and
    /// an answer.
    pub(super) fn log_cell_end(&self, w: &mut World, n: usize, end: CellEnd) -> Option<Next> {
        let unheld = w.nodes[n].cell.task.as_ref().is_some_and(|t| t.unheld);
        let node = &mut w.nodes[n];
        let (answer, ambiguous) = match end {
            CellEnd::Written { base, .. } => {
                if unheld {
                    w.hist.breach(PropertyName::NoWriteWithoutLease);
                }
                let v = base.version.clone();
                if let Some(c) = node.cell.claim.as_mut() {
                    c.known = Some(base);
                }
                (HeadWritten::Landed(v), false)
            }
            CellEnd::Conflict { base } => {
                if let Some(c) = node.cell.claim.as_mut() {
                    c.known = Some(base);
                }
                (HeadWritten::of_error(ErrorKind::Conflict, false), false)
            }
            CellEnd::Superseded { maybe_landed, .. } => {
                // The runtime's `CellClaim::end`: the claim ends and leaves the register.
                self.end_claim(w, n);
                let e = HeadWritten::of_error(ErrorKind::Fenced, maybe_landed);
                (e, maybe_landed)
            }
            CellEnd::KeptMoving => (HeadWritten::of_error(ErrorKind::Busy, false), false),
        };
        self.log_written(w, n, answer, ambiguous)
    }

    /// Feeds a head write's answer to node `n`'s log operation.
    pub(super) fn log_written(
        &self,
        w: &mut World,
        n: usize,
        answer: HeadWritten,
        ambiguous: bool,
    ) -> Option<Next> {
        let t = Self::log_task(w, n)?;
        t.write = None;
        t.ambiguous = ambiguous;
        match &mut t.op {
            LogOp::Append { append, .. } => Some(Next::Append(append.on_head_written(answer))),
            LogOp::Settle { seal, .. } => Some(Next::Seal(seal.on_written(answer))),
            _ => None,
        }
    }

    /// A head read for the log came back (`claim.read()`).
    pub(super) fn log_read(
        &self,
        w: &mut World,
        n: usize,
        h: Option<(CellHead, Version)>,
    ) -> Option<Next> {
        let decoded = match &h {
            None => Some((LogHead::default(), None)),
            Some((head, v)) => log_head(head).map(|l| (l, Some(v.clone()))),
        };
        if decoded.is_none() {
            w.hist.log_corrupt = true;
        }
        let t = Self::log_task(w, n)?;
        match (&mut t.op, decoded) {
            (LogOp::Append { append, .. }, Some((l, v))) => {
                Some(Next::Append(append.on_head(l, v)))
            }
            (LogOp::Append { .. }, None) => self.append_over(w, n, Told::Denied),
            (LogOp::Settle { seal, .. }, Some((l, v))) => Some(Next::Seal(seal.on_head(l, v))),
            (LogOp::Settle { .. }, None) => self.moved_past(w, n),
            (LogOp::MovedPast { pending }, _) => {
                let later = h
                    .as_ref()
                    .filter(|(head, _)| head.epoch > pending.epoch)
                    .and_then(|(head, _)| log_head(head));
                match later {
                    Some(l) => {
                        w.hist.log_settled_later = true;
                        self.verdict(w, n, &l)
                    }
                    None => self.settled(w, n, None),
                }
            }
            (LogOp::Compare { .. }, _) => None,
        }
    }

    /// A head read for the log failed.
    pub(super) fn log_read_failed(&self, w: &mut World, n: usize) -> Option<Next> {
        match &Self::log_task(w, n)?.op {
            LogOp::Append { .. } => self.append_over(w, n, Told::Denied),
            LogOp::Settle { .. } => self.moved_past(w, n),
            LogOp::MovedPast { .. } | LogOp::Compare { .. } => self.settled(w, n, None),
        }
    }

    /// A log record object's read came back (`None`: it failed).
    pub(super) fn record_read(
        &self,
        w: &mut World,
        n: usize,
        answer: Option<Outcome>,
    ) -> Option<Next> {
        let t = Self::log_task(w, n)?;
        match &mut t.op {
            LogOp::Append { append, .. } => {
                let read = match answer {
                    Some(Outcome::Record(Some(id))) => RecordRead::Found(record(id)),
                    Some(Outcome::Record(None)) => RecordRead::Absent,
                    _ => RecordRead::Failed,
                };
                Some(Next::Append(append.on_record(read)))
            }
            LogOp::Compare { pending } => {
                let pending = *pending;
                match answer {
                    Some(Outcome::Record(Some(id))) => {
                        self.settled(w, n, Some(record(id) == record(pending.id)))
                    }
                    Some(Outcome::Record(None)) => {
                        // A committed record is missing: the log is corrupt.
                        w.hist.log_corrupt = true;
                        self.settled(w, n, None)
                    }
                    _ => self.settled(w, n, None),
                }
            }
            _ => None,
        }
    }

    /// A failure that ended node `n`'s log task outright.
    pub(super) fn log_failed(&self, w: &mut World, n: usize, t: LogTask) {
        match t.op {
            LogOp::Append { append, id } => {
                let node = &mut w.nodes[n];
                node.cell.log_cache = append.cache();
                node.cell.log_tag = append.tag();
                w.hist.log_told(id, false);
            }
            _ => self.retry_later(w, n),
        }
    }
}
