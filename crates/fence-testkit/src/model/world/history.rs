//! What the properties need of the past, and the breaches judged as steps happen (a head
//! write landing, a write acknowledged).

use super::*;

/// What the properties need of the past.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// The epochs claimed (not resumed), sorted: which node claimed one is not needed.
    pub(super) claims: Vec<u64>,
    pub(crate) max_claimed: u64,
    /// Data writes landed: (id, order of landing).
    pub(super) landed: Vec<(u8, u8)>,
    /// Data writes whose writer was told they were not committed, as a sorted set: none of
    /// them may ever land.
    pub(super) refused: Vec<u8>,
    pub(crate) acked_order: u8,
    pub(crate) broken: Option<PropertyName>,
    /// The `sometimes` events, as pulses: true only in the state right after the step that
    /// made one happen (see [`FenceModel::canonical`]).
    pub(crate) takeover: bool,
    pub(crate) settled_ambiguity: bool,
    pub(crate) resumed_hand_off: bool,
    /// An ambiguous append was settled (a pulse).
    pub(crate) log_settled: bool,
    /// An ambiguous append was settled by a later epoch's head (a pulse).
    pub(crate) log_settled_later: bool,
    /// Log records acknowledged (appended, or settled as landed), as a sorted set.
    pub(crate) log_acked: Vec<u8>,
    /// Log records the log said never landed and never will, as a sorted set.
    pub(crate) log_denied: Vec<u8>,
    /// A log head or a committed record was found unreadable.
    pub(crate) log_corrupt: bool,
    /// A node resumed its cell as the successor of its own lapsed lease.
    pub(crate) resumed_after_lapse: bool,
    /// An adoption (a second task) started.
    pub(crate) adopted: bool,
}

impl History {
    pub(crate) fn order_of(&self, id: u8) -> Option<u8> {
        self.landed.iter().find(|(i, _)| *i == id).map(|(_, o)| *o)
    }

    /// Data write `id`'s writer was told it was not committed: it must not have landed, and
    /// never may.
    pub(super) fn refused(&mut self, id: u8) {
        if self.order_of(id).is_some() {
            self.breach(PropertyName::RefusedNotWritten);
        }
        if let Err(at) = self.refused.binary_search(&id) {
            self.refused.insert(at, id);
        }
    }

    pub(super) fn breach(&mut self, p: PropertyName) {
        self.broken.get_or_insert(p);
    }

    /// The `sometimes` events of the last step are over.
    pub(super) fn end_pulses(&mut self) {
        self.takeover = false;
        self.settled_ambiguity = false;
        self.resumed_hand_off = false;
        self.resumed_after_lapse = false;
        self.adopted = false;
        self.log_settled = false;
        self.log_settled_later = false;
    }

    /// What the log told the application of record `id` (`true`: it counts).
    pub(crate) fn log_told(&mut self, id: u8, counts: bool) {
        let set = if counts {
            &mut self.log_acked
        } else {
            &mut self.log_denied
        };
        if let Err(at) = set.binary_search(&id) {
            set.insert(at, id);
        }
    }
}

impl FenceModel {
    /// Checks a head write as it lands.
    pub(super) fn head_lands(&self, w: &mut World, head: &CellHead, data: Option<u8>) {
        let old = w.store.cell.head.as_ref().map_or(0, |(h, _)| h.epoch);
        if head.epoch < old {
            w.hist.breach(PropertyName::EpochsNeverGoBack);
        }
        if head.epoch < w.hist.max_claimed {
            w.hist.breach(PropertyName::NoSupersededWrite);
        }
        if let Some(id) = data {
            if w.hist.order_of(id).is_some() {
                w.hist.breach(PropertyName::NoWriteAppliedTwice);
            }
            if w.hist.refused.binary_search(&id).is_ok() {
                w.hist.breach(PropertyName::RefusedNotWritten);
            }
            let order = w.hist.landed.len() as u8 + 1;
            w.hist.landed.push((id, order));
        }
    }

    pub(super) fn acknowledged(&self, w: &mut World, id: u8) {
        match w.hist.order_of(id) {
            Some(order) => w.hist.acked_order = w.hist.acked_order.max(order),
            None => w.hist.breach(PropertyName::NoAcknowledgedWriteLost),
        }
    }
}
