//! The properties the model check proves over every state of its scope.

use stateright::Property;

use super::world::{id_of, log_head, FenceModel, World};

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
pub(crate) fn committed_log(w: &World) -> Option<Vec<u8>> {
    let Some((h, _)) = &w.store.head else {
        return Some(Vec::new());
    };
    let head = log_head(h)?;
    (0..head.next)
        .map(|seq| {
            let name = head.name_of(seq)?;
            let found = w.store.records.iter().find(|(x, _)| *x == name);
            found.map(|(_, id)| *id)
        })
        .collect()
}

/// No record twice, every acknowledged record committed, no record the log said never lands
/// committed, and every head and committed record readable.
fn log_intact(w: &World) -> bool {
    let Some(log) = committed_log(w).filter(|_| !w.hist.log_corrupt) else {
        return false;
    };
    let once = log.iter().enumerate().all(|(i, id)| !log[..i].contains(id));
    let kept = w.hist.log_acked.iter().all(|id| log.contains(id));
    let true_no = w.hist.log_denied.iter().all(|id| !log.contains(id));
    once && kept && true_no
}

/// The name of the exclusion property.
pub const EXCLUSION: &str = "no two nodes believe they hold the cell at once";

fn holds(w: &World, p: PropertyName) -> bool {
    w.hist.broken != Some(p)
}

/// The head's data is at least as recent as every acknowledged write.
fn nothing_rolled_back(w: &World) -> bool {
    let head = w.store.head.as_ref().map(|(h, _)| &h.payload);
    let order = head.and_then(id_of).and_then(|id| w.hist.order_of(id));
    w.hist.acked_order == 0 || order.is_some_and(|o| o >= w.hist.acked_order)
}

/// Every property.
pub(crate) fn all() -> Vec<Property<FenceModel>> {
    use PropertyName::*;
    vec![
        Property::always(OneClaimPerEpoch.name(), |_, w: &World| {
            holds(w, OneClaimPerEpoch)
        }),
        Property::always(EpochsNeverGoBack.name(), |_, w: &World| {
            holds(w, EpochsNeverGoBack)
        }),
        Property::always(NoSupersededWrite.name(), |_, w: &World| {
            holds(w, NoSupersededWrite)
        }),
        Property::always(NoAcknowledgedWriteLost.name(), |_, w: &World| {
            holds(w, NoAcknowledgedWriteLost) && nothing_rolled_back(w)
        }),
        Property::always(NoWriteAppliedTwice.name(), |_, w: &World| {
            holds(w, NoWriteAppliedTwice)
        }),
        Property::always(NoWriteWithoutLease.name(), |_, w: &World| {
            holds(w, NoWriteWithoutLease)
        }),
        Property::always(NO_DANGLING_HEAD, |_, w: &World| {
            let blob = w.store.head.as_ref().and_then(|(h, _)| h.payload.blob());
            blob.is_none_or(|b| w.store.blobs.contains(&b.name))
        }),
        Property::always(LOG, |m: &FenceModel, w: &World| {
            m.cfg.appends == 0 || log_intact(w)
        }),
        Property::always(EXCLUSION, |m: &FenceModel, w: &World| {
            (0..w.nodes.len()).filter(|n| m.believes(w, *n)).count() <= 1
        }),
        Property::eventually(
            "a live node holds the cell once the faults are over",
            |m: &FenceModel, w: &World| {
                m.after_chaos(w) && (0..w.nodes.len()).any(|n| m.believes(w, n))
            },
        ),
        Property::sometimes("a takeover happens", |_, w: &World| w.hist.takeover),
        Property::sometimes(
            "an ambiguous write is settled by evidence",
            |_, w: &World| w.hist.settled_ambiguity,
        ),
        Property::sometimes("a write is acknowledged", |_, w: &World| {
            w.hist.acked_order > 0
        }),
        Property::sometimes("a hand-off is resumed by its receiver", |_, w: &World| {
            w.hist.resumed_hand_off
        }),
        Property::sometimes("a record is appended", |_, w: &World| {
            !w.hist.log_acked.is_empty()
        }),
        Property::sometimes(LOG_SETTLED, |_, w: &World| w.hist.log_settled),
        Property::sometimes(LOG_SETTLED_LATER, |_, w: &World| w.hist.log_settled_later),
        Property::sometimes(
            "a node resumes its cell after its lease lapsed",
            |_, w: &World| w.hist.resumed_after_lapse,
        ),
        Property::sometimes(
            "an adoption runs beside a claim or hand-off",
            |_, w: &World| w.hist.adopted,
        ),
    ]
}
