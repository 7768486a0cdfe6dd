//! The properties the model check proves over every state of its scope.

use stateright::Property;

use super::world::{id_of, log_head, CellView, FenceModel, World};

/// A property, by the name the report and the CI lines print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PropertyName {
    /// At most one claim lands per (cell, epoch).
    OneClaimPerEpoch,
    /// Epochs never go back (claims and heads).
    EpochsNeverGoBack,
    /// No write under a superseded epoch lands.
    NoSupersededWrite,
    /// No acknowledged write is lost or rolled back, and none is acknowledged unlanded.
    NoAcknowledgedWriteLost,
    /// No write is applied twice.
    NoWriteAppliedTwice,
    /// No write sent once the writer's lease was no longer held is acknowledged.
    NoWriteWithoutLease,
    /// No data write its writer was told was not committed ever lands.
    RefusedNotWritten,
    /// A claim resumes a head at its epoch only when its caller vouched for the generation
    /// that wrote it.
    ResumeVouched,
}

impl PropertyName {
    /// The property's name.
    pub fn name(self) -> &'static str {
        match self {
            PropertyName::OneClaimPerEpoch => "at most one claim per epoch",
            PropertyName::EpochsNeverGoBack => "epochs never go back",
            PropertyName::NoSupersededWrite => "no write under a superseded epoch lands",
            PropertyName::NoAcknowledgedWriteLost => "no acknowledged write lost or rolled back",
            PropertyName::NoWriteAppliedTwice => "no write applied twice",
            PropertyName::NoWriteWithoutLease => {
                "no write sent without a held lease is acknowledged"
            }
            PropertyName::RefusedNotWritten => "a write refused as not committed never lands",
            PropertyName::ResumeVouched => "a resume resumes only a head its caller vouched for",
        }
    }
}

/// The name of the property that readers never find the cell corrupt: the head never points
/// at a payload object that is not (or no longer) in the store.
pub const NO_DANGLING_HEAD: &str = "no head points at a missing payload object";

/// The name of the log property.
pub const LOG: &str =
    "the log: no record twice, no acknowledged record lost, every answer true, readable";

/// The name of the `sometimes` property that an ambiguous append is settled.
pub const LOG_SETTLED: &str = "an ambiguous append is settled by a seal";

/// The name of the `sometimes` property that an ambiguous append is settled by the head of a
/// later epoch (the seal refused: the cell moved on).
pub const LOG_SETTLED_LATER: &str = "an ambiguous append is settled by a later epoch's head";

/// The records the cell's log commits, in order (`None`: the head is not a log head, or a
/// committed record object is missing).
pub(crate) fn committed_log(v: &CellView<'_>) -> Option<Vec<u8>> {
    let Some((h, _)) = &v.store.head else {
        return Some(Vec::new());
    };
    let head = log_head(h)?;
    (0..head.next)
        .map(|seq| {
            let name = head.name_of(seq)?;
            let found = v.store.records.iter().find(|(x, _)| *x == name);
            found.map(|(_, id)| *id)
        })
        .collect()
}

/// No record twice, every acknowledged record committed, no record the log said never lands
/// committed, and every head and committed record readable.
fn log_intact(v: &CellView<'_>) -> bool {
    let Some(log) = committed_log(v).filter(|_| !v.hist.log_corrupt) else {
        return false;
    };
    let once = log.iter().enumerate().all(|(i, id)| !log[..i].contains(id));
    let kept = v.hist.log_acked.iter().all(|id| log.contains(id));
    let true_no = v.hist.log_denied.iter().all(|id| !log.contains(id));
    once && kept && true_no
}

/// The name of the `sometimes` property that one node holds two cells at once.
pub const ONE_LEASE_TWO_CELLS: &str = "one lease holds two cells at once";

/// The name of the exclusion property.
pub const EXCLUSION: &str = "no two nodes believe they hold the cell at once";

/// The name of the property that bounds a holder's own authority: a node believes it holds
/// its lease only before the send of the latest lease write of that lease the store applied,
/// plus the TTL, by its own monotonic clock (docs/design.md: authority is anchored before
/// the write is sent).
pub const AUTHORITY: &str =
    "a node believes its lease only until a TTL after sending its latest applied lease write";

/// The name of the register's property: one lease holds at most one claim of a cell (its
/// register refuses a second claim, resume or adoption while one stands).
pub const ONE_CLAIM_PER_LEASE: &str = "a lease holds at most one claim of a cell";

/// Whether node `n` believes it holds its lease now only within its authority.
fn within_authority(m: &FenceModel, w: &World, n: usize) -> bool {
    let node = &w.nodes[n];
    let now = m.now(w, n);
    let held = node.alive && node.lease.as_ref().is_some_and(|l| l.is_held(now));
    let until = node.authority_sent.map(|s| s + m.cfg.ttl(n));
    !held || until.is_some_and(|u| now.mono_ms < u)
}

fn holds(v: &CellView<'_>, p: PropertyName) -> bool {
    v.hist.broken != Some(p)
}

/// The head's data is at least as recent as every acknowledged write.
fn nothing_rolled_back(v: &CellView<'_>) -> bool {
    let head = v.store.head.as_ref().map(|(h, _)| &h.payload);
    let order = head.and_then(id_of).and_then(|id| v.hist.order_of(id));
    v.hist.acked_order == 0 || order.is_some_and(|o| o >= v.hist.acked_order)
}

/// `p` holds of every cell.
fn every_cell(m: &FenceModel, w: &World, p: impl Fn(&CellView<'_>) -> bool) -> bool {
    m.cells().all(|c| p(&w.cell_view(c)))
}

/// `p` holds of some cell.
fn some_cell(m: &FenceModel, w: &World, p: impl Fn(&CellView<'_>) -> bool) -> bool {
    m.cells().any(|c| p(&w.cell_view(c)))
}

/// Every property, each judged per cell: an `always` and the `eventually` of every cell, a
/// `sometimes` of some cell.
pub(crate) fn all() -> Vec<Property<FenceModel>> {
    use PropertyName::*;
    vec![
        Property::always(OneClaimPerEpoch.name(), |m, w| {
            every_cell(m, w, |v| holds(v, OneClaimPerEpoch))
        }),
        Property::always(EpochsNeverGoBack.name(), |m, w| {
            every_cell(m, w, |v| holds(v, EpochsNeverGoBack))
        }),
        Property::always(NoSupersededWrite.name(), |m, w| {
            every_cell(m, w, |v| holds(v, NoSupersededWrite))
        }),
        Property::always(NoAcknowledgedWriteLost.name(), |m, w| {
            every_cell(m, w, |v| {
                holds(v, NoAcknowledgedWriteLost) && nothing_rolled_back(v)
            })
        }),
        Property::always(NoWriteAppliedTwice.name(), |m, w| {
            every_cell(m, w, |v| holds(v, NoWriteAppliedTwice))
        }),
        Property::always(NoWriteWithoutLease.name(), |m, w| {
            every_cell(m, w, |v| holds(v, NoWriteWithoutLease))
        }),
        Property::always(RefusedNotWritten.name(), |m, w| {
            every_cell(m, w, |v| holds(v, RefusedNotWritten))
        }),
        Property::always(ResumeVouched.name(), |m, w| {
            every_cell(m, w, |v| holds(v, ResumeVouched))
        }),
        Property::always(AUTHORITY, |m: &FenceModel, w: &World| {
            (0..w.nodes.len()).all(|n| within_authority(m, w, n))
        }),
        Property::always(ONE_CLAIM_PER_LEASE, |m, w| {
            every_cell(m, w, |v| (0..w.nodes.len()).all(|n| v.claims(n) <= 1))
        }),
        Property::always(NO_DANGLING_HEAD, |m, w| {
            every_cell(m, w, |v| {
                let blob = v.store.head.as_ref().and_then(|(h, _)| h.payload.blob());
                blob.is_none_or(|b| v.store.blobs.contains(&b.name))
            })
        }),
        Property::always(LOG, |m, w| {
            m.cfg.appends == 0 || every_cell(m, w, log_intact)
        }),
        Property::always(EXCLUSION, |m, w| {
            every_cell(m, w, |v| {
                (0..w.nodes.len())
                    .filter(|n| m.believes_in(w, v, *n))
                    .count()
                    <= 1
            })
        }),
        Property::eventually(
            "a live node holds the cell once the faults are over",
            |m, w| {
                m.after_chaos(w)
                    && every_cell(m, w, |v| (0..w.nodes.len()).any(|n| m.believes_in(w, v, n)))
            },
        ),
        Property::sometimes("a takeover happens", |m, w| {
            some_cell(m, w, |v| v.hist.takeover)
        }),
        Property::sometimes("an ambiguous write is settled by evidence", |m, w| {
            some_cell(m, w, |v| v.hist.settled_ambiguity)
        }),
        Property::sometimes("a write is acknowledged", |m, w| {
            some_cell(m, w, |v| v.hist.acked_order > 0)
        }),
        Property::sometimes("a hand-off is resumed by its receiver", |m, w| {
            some_cell(m, w, |v| v.hist.resumed_hand_off)
        }),
        Property::sometimes("a record is appended", |m, w| {
            some_cell(m, w, |v| !v.hist.log_acked.is_empty())
        }),
        Property::sometimes(LOG_SETTLED, |m, w| some_cell(m, w, |v| v.hist.log_settled)),
        Property::sometimes(LOG_SETTLED_LATER, |m, w| {
            some_cell(m, w, |v| v.hist.log_settled_later)
        }),
        Property::sometimes("a node resumes its cell after its lease lapsed", |m, w| {
            some_cell(m, w, |v| v.hist.resumed_after_lapse)
        }),
        Property::sometimes("an adoption runs beside a claim or hand-off", |m, w| {
            some_cell(m, w, |v| v.hist.adopted)
        }),
        // Two cells under one lease and its one register of claims (scopes of two or more
        // cells): what a second cell adds is exercised, not only present.
        Property::sometimes(ONE_LEASE_TWO_CELLS, |m: &FenceModel, w: &World| {
            m.cfg.cells > 1
                && (0..w.nodes.len()).any(|n| {
                    let held = m.cells().filter(|c| m.believes_in(w, &w.cell_view(*c), n));
                    held.count() >= 2
                })
        }),
    ]
}
