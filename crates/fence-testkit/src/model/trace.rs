//! A counterexample as a readable trace: each step's node and event, the store after it, and
//! the property broken at the end.

use std::fmt;

use stateright::Path;

use super::world::{cell_name, Action, FenceModel, Op, ReqState, Thread, World, CO};

/// One broken property and the shortest path the checker found to it.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// The property broken.
    pub property: &'static str,
    /// The number of steps.
    pub depth: usize,
    /// One line per step.
    pub steps: Vec<String>,
}

impl Counterexample {
    /// The trace of `path`, cut at its first state where `holds` is false (an `always`
    /// property's failure; `None`: the whole path, for an `eventually` one).
    pub(crate) fn new(
        model: &FenceModel,
        property: &'static str,
        path: Path<World, Action>,
        holds: Option<fn(&FenceModel, &World) -> bool>,
    ) -> Self {
        let mut steps = Vec::new();
        let mut last: Option<World> = None;
        for (state, action) in path.into_vec() {
            let broken = holds.is_some_and(|h| !h(model, &state));
            match action {
                Some(a) if !broken => {
                    steps.push(describe(model, &state, &a));
                    last = Some(state);
                }
                _ => {
                    last = Some(state);
                    break;
                }
            }
        }
        if let Some(end) = &last {
            steps.push(format!("   => {}", store_state(model, end)));
        }
        Counterexample {
            property,
            depth: steps.len().saturating_sub(1),
            steps,
        }
    }
}

fn who(from: u8) -> String {
    if from == CO {
        "co-writer".into()
    } else {
        format!("n{from}")
    }
}

fn op(o: &Op) -> String {
    match o {
        Op::PutLease { guard, obj, .. } => format!(
            "put lease {} (expires {}) if {guard:?}",
            obj.record.node, obj.record.expires_ms
        ),
        Op::GetLease { node } => format!("get lease n{node}"),
        Op::PutHead { guard, head, .. } => format!(
            "put head {{{} @{} {:?}}} if {guard:?}",
            head.node.as_deref().unwrap_or("-"),
            head.epoch,
            head.payload
        ),
        Op::GetHead => "get head".into(),
        Op::PutBlob { name } => format!("create payload object {name}"),
        Op::ListBlobs => "list payload objects".into(),
        Op::DeleteBlob { name } => format!("delete payload object {name}"),
        Op::PutRecord { name, id } => format!("create log record log/{name} = r{id} if absent"),
        Op::GetRecord { name } => format!("get log record log/{name}"),
    }
}

/// What `action` does, taken in `state` (the state before it).
fn describe(model: &FenceModel, w: &World, action: &Action) -> String {
    let at = format!("t={:>5}", w.time);
    let req = |i: &usize| {
        w.net
            .get(*i)
            .map(|r| {
                let late = match r.state {
                    ReqState::Orphan => " (held up, its sender gave up)",
                    ReqState::Landed(_) => " (landed, answer on its way)",
                    ReqState::InFlight => "",
                };
                // A lease keeper's requests are no cell's (an orphan's thread is erased by
                // the canonical form; its operation is not).
                let keeper = matches!(r.op, Op::PutLease { .. })
                    || (r.thread == Thread::Lease && matches!(r.op, Op::GetLease { .. }));
                let cell = if model.cfg.cells > 1 && !keeper {
                    format!(" (cell {})", cell_name(r.cell))
                } else {
                    String::new()
                };
                format!("{}{cell}: {}{late}", who(r.from), op(&r.op))
            })
            .unwrap_or_default()
    };
    let what = match action {
        Action::Tick => format!("time passes {} ms", model.cfg.tick_ms),
        Action::Deliver(i) => format!("store serves {}", req(i)),
        Action::Answer(i) => format!("late answer reaches {}", req(i)),
        Action::Fault(i, f) => format!("FAULT {f:?} on {}", req(i)),
        Action::Wake(n) => format!("n{n}: lease keeper wakes"),
        Action::Resume(n) => format!("n{n}: task resumes"),
        Action::Acquire(n) => format!("n{n}: acquires its lease"),
        Action::Claim(n) => format!("n{n}: claims the cell"),
        Action::Write(n) => format!("n{n}: writes the cell"),
        Action::Release(n) => format!("n{n}: releases the cell"),
        Action::HandOff(n) => format!("n{n}: hands the cell off"),
        Action::CoWrite => "co-writer: update_cell at the current epoch".into(),
        Action::Collect(n) => format!("n{n}: collects unused payload objects"),
        Action::Append(n) => format!("n{n}: appends its next record to the log"),
        Action::Settle(n) => format!(
            "n{n}: settles its ambiguous append (landed? {:?})",
            w.nodes[*n as usize].cell.pending
        ),
        Action::Pause(n, true) => format!("n{n}: SUSPENDED (monotonic clock stops)"),
        Action::Pause(n, false) => format!("n{n}: STALLED"),
        Action::Crash(n) => format!("n{n}: CRASH"),
        Action::Restart(n) => format!("n{n}: restarts as a new process"),
        Action::Succeed(n) => {
            format!("n{n}: takes its lapsed lease back as its successor, vouching for its heads")
        }
        Action::Adopt(n) => format!("n{n}: adopts the cell (a second task)"),
        Action::ResumeSide(n) => format!("n{n}: second task resumes"),
        Action::At(c, action) => {
            let v = w.viewing(*c);
            return format!("{}  (cell {})", describe(model, &v, action), cell_name(*c));
        }
    };
    format!("{at}  {what}")
}

/// The store and each node's belief, in one line per cell.
fn store_state(model: &FenceModel, w: &World) -> String {
    if model.cfg.cells == 1 {
        return cell_state(model, w);
    }
    let cells: Vec<String> = model
        .cells()
        .map(|c| {
            let v = w.viewing(c);
            format!("cell {}: {}", cell_name(c), cell_state(model, &v))
        })
        .collect();
    cells.join("\n        ")
}

/// The store and each node's belief of the cell in place.
fn cell_state(model: &FenceModel, w: &World) -> String {
    let head = match &w.store.cell.head {
        Some((h, v)) => format!(
            "head {{{} @{} {:?} {v}}}",
            h.node.as_deref().unwrap_or("-"),
            h.epoch,
            h.payload
        ),
        None => "no head".into(),
    };
    let head = if model.cfg.appends == 0 {
        head
    } else {
        let records: Vec<String> = w
            .store
            .cell
            .records
            .iter()
            .map(|(name, id)| format!("{name}=r{id}"))
            .collect();
        format!(
            "{head}; log records [{}]; told: acked {:?}, never {:?}",
            records.join(", "),
            w.hist.log_acked,
            w.hist.log_denied
        )
    };
    let beliefs: Vec<String> = (0..w.nodes.len())
        .map(|n| {
            let node = &w.nodes[n];
            let claim = node.cell.claim.as_ref().map_or("no claim".to_owned(), |c| {
                format!(
                    "claim @{}{}",
                    c.epoch,
                    if c.ended() { " (ended)" } else { "" }
                )
            });
            let adopted = node
                .cell
                .side
                .claim
                .as_ref()
                .map_or(String::new(), |c| format!(", adopted claim @{}", c.epoch));
            let claim = claim + &adopted;
            let lease = node.lease.as_ref().map_or("no lease".to_owned(), |l| {
                format!(
                    "lease {}",
                    if l.is_held(model.now(w, n)) {
                        "held"
                    } else {
                        "not held"
                    }
                )
            });
            format!(
                "n{n}: {lease}, {claim}{}",
                if model.believes(w, n) {
                    " ⇒ BELIEVES IT HOLDS"
                } else {
                    ""
                }
            )
        })
        .collect();
    format!("{head}; {}", beliefs.join("; "))
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "counterexample at depth {}: {}",
            self.depth, self.property
        )?;
        for s in &self.steps {
            writeln!(f, "  {s}")?;
        }
        write!(f, "  broken: {}", self.property)
    }
}
