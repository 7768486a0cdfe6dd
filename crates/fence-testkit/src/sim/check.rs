//! The properties, checked on a finished run's events and the store's final state.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use bytes::Bytes;

use super::trace::Event;

/// A checked property of the simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Property {
    /// (a) No two nodes (or two processes) ever claim, write or acknowledge at the same
    /// `(cell, epoch)`.
    OneWriterPerEpoch,
    /// (b) Per cell, every applied claim raises the epoch, a release keeps it, and claims
    /// return in strictly increasing epoch order.
    EpochsIncrease,
    /// (c) Every acknowledged write landed, the data head's epoch never goes back, and the
    /// final head is the last acknowledged write or something written after it.
    NoAckedWriteLost,
    /// (d) No write of a node is acknowledged at a superseded epoch after a takeover, and no
    /// process says it holds a lease whose authority ended by its own monotonic clock.
    NoExpiredLeaseComesBack,
    /// (e) After the last fault, every cell is owned by a live node within a bounded time.
    OwnershipSettles,
}

impl Property {
    /// The short label used in reports: `(a)`…`(e)` and a name.
    pub fn label(self) -> &'static str {
        match self {
            Property::OneWriterPerEpoch => "(a) one writer per epoch",
            Property::EpochsIncrease => "(b) epochs increase",
            Property::NoAckedWriteLost => "(c) no acknowledged write lost",
            Property::NoExpiredLeaseComesBack => "(d) no expired lease comes back",
            Property::OwnershipSettles => "(e) ownership settles",
        }
    }
}

/// One violated property, with what showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The property.
    pub property: Property,
    /// The evidence.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.property.label(), self.detail)
    }
}

/// The final data head of a cell as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FinalHead {
    pub(crate) epoch: u64,
    pub(crate) payload: Bytes,
}

fn violation(out: &mut Vec<Violation>, property: Property, detail: String) {
    out.push(Violation { property, detail });
}

fn show(payload: &Bytes) -> String {
    String::from_utf8_lossy(payload).into_owned()
}

/// Checks (a)–(d); (e) is judged by the driver while the run is still going.
pub(crate) fn check(
    events: &[Event],
    finals: &BTreeMap<String, Option<FinalHead>>,
    ttl_ms: u64,
) -> Vec<Violation> {
    let mut out = Vec::new();
    one_writer_per_epoch(events, &mut out);
    epochs_increase(events, &mut out);
    no_acked_write_lost(events, finals, &mut out);
    no_expired_lease_comes_back(events, ttl_ms, &mut out);
    out
}

fn one_writer_per_epoch(events: &[Event], out: &mut Vec<Violation>) {
    let mut nodes: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    let mut gens: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    for e in events {
        let (cell, epoch, node, gen) = match e {
            Event::Claimed {
                cell,
                epoch,
                node,
                gen,
                ..
            }
            | Event::Acked {
                cell,
                epoch,
                node,
                gen,
                ..
            } => (cell, *epoch, node, Some(gen)),
            Event::OwnerApplied {
                cell,
                node: Some(node),
                epoch,
                ..
            }
            | Event::DataApplied {
                cell, epoch, node, ..
            } => (cell, *epoch, node, None),
            _ => continue,
        };
        nodes.entry((cell, epoch)).or_default().insert(node);
        if let Some(g) = gen {
            gens.entry((cell, epoch)).or_default().insert(g);
        }
    }
    for ((cell, epoch), set) in nodes.iter().filter(|(_, s)| s.len() > 1) {
        let detail = format!("cell {cell} epoch {epoch} written or claimed by nodes {set:?}");
        violation(out, Property::OneWriterPerEpoch, detail);
    }
    for ((cell, epoch), set) in gens.iter().filter(|(_, s)| s.len() > 1) {
        let detail =
            format!("cell {cell} epoch {epoch} claimed or acknowledged by processes {set:?}");
        violation(out, Property::OneWriterPerEpoch, detail);
    }
}

fn epochs_increase(events: &[Event], out: &mut Vec<Violation>) {
    let mut record: BTreeMap<&str, u64> = BTreeMap::new();
    let mut claimed: BTreeMap<&str, u64> = BTreeMap::new();
    for e in events {
        match e {
            Event::OwnerApplied {
                t,
                cell,
                node,
                epoch,
            } => {
                let prior = record.insert(cell, *epoch).unwrap_or(0);
                let bad = match node {
                    Some(_) => *epoch <= prior,
                    None => *epoch != prior,
                };
                if bad {
                    let what = if node.is_some() { "claim" } else { "release" };
                    let detail = format!(
                        "cell {cell} at {t} ms: a {what} by {node:?} wrote epoch {epoch} over {prior}"
                    );
                    violation(out, Property::EpochsIncrease, detail);
                }
            }
            Event::Claimed {
                t,
                cell,
                epoch,
                node,
                ..
            } => {
                let prior = claimed.insert(cell, *epoch).unwrap_or(0);
                if *epoch <= prior {
                    let detail = format!(
                        "cell {cell} at {t} ms: {node} claimed epoch {epoch} after a claim of {prior}"
                    );
                    violation(out, Property::EpochsIncrease, detail);
                }
            }
            _ => {}
        }
    }
}

/// Per cell: the head chain (index in the log, epoch, payload) and the acknowledgements.
#[derive(Default)]
struct CellHistory<'a> {
    chain: Vec<(usize, u64, &'a Bytes)>,
    acks: Vec<(usize, u64, &'a Bytes, &'a str)>,
    attempted: BTreeSet<&'a Bytes>,
}

fn cell_histories(events: &[Event]) -> BTreeMap<&str, CellHistory<'_>> {
    let mut cells: BTreeMap<&str, CellHistory<'_>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::DataApplied {
                cell,
                epoch,
                payload,
                ..
            } => cells
                .entry(cell)
                .or_default()
                .chain
                .push((i, *epoch, payload)),
            Event::Acked {
                cell,
                epoch,
                payload,
                node,
                ..
            } => cells
                .entry(cell)
                .or_default()
                .acks
                .push((i, *epoch, payload, node)),
            Event::Attempt { cell, payload } => {
                cells.entry(cell).or_default().attempted.insert(payload);
            }
            _ => {}
        }
    }
    cells
}

fn no_acked_write_lost(
    events: &[Event],
    finals: &BTreeMap<String, Option<FinalHead>>,
    out: &mut Vec<Violation>,
) {
    let cells = cell_histories(events);
    for (cell, h) in &cells {
        chain_is_sound(cell, h, out);
        let mut last_pos = 0;
        for (ack_at, epoch, payload, node) in &h.acks {
            let landed = h
                .chain
                .iter()
                .position(|(i, e, p)| i < ack_at && e == epoch && p == payload);
            match landed {
                None => violation(
                    out,
                    Property::NoAckedWriteLost,
                    format!(
                        "cell {cell}: {node}'s acknowledged write {} at epoch {epoch} never landed",
                        show(payload)
                    ),
                ),
                Some(pos) if pos < last_pos => violation(
                    out,
                    Property::NoAckedWriteLost,
                    format!(
                        "cell {cell}: acknowledgement of {} out of the head's order",
                        show(payload)
                    ),
                ),
                Some(pos) => last_pos = pos,
            }
        }
    }
    for (cell, head) in finals {
        let last = cells.get(cell.as_str()).and_then(|h| h.chain.last());
        let same = match (head, last) {
            (None, None) => true,
            (Some(f), Some((_, e, p))) => f.epoch == *e && f.payload == **p,
            _ => false,
        };
        if !same {
            let detail = format!(
                "cell {cell}: the final head {head:?} is not the last write the store applied"
            );
            violation(out, Property::NoAckedWriteLost, detail);
        }
    }
}

/// The head chain never goes back in epoch, and every head holds either the previous head's
/// payload carried forward (a seal), or a payload some writer attempted.
fn chain_is_sound(cell: &str, h: &CellHistory<'_>, out: &mut Vec<Violation>) {
    let mut prev: Option<(u64, &Bytes)> = None;
    for (_, epoch, payload) in &h.chain {
        if let Some((pe, pp)) = prev {
            if *epoch < pe {
                let detail = format!("cell {cell}: a head at epoch {epoch} replaced one at {pe}");
                violation(out, Property::NoAckedWriteLost, detail);
            }
            if *payload != pp && !h.attempted.contains(payload) {
                let detail = format!(
                    "cell {cell}: head {} is neither carried forward nor written by anyone",
                    show(payload)
                );
                violation(out, Property::NoAckedWriteLost, detail);
            }
        }
        prev = Some((*epoch, payload));
    }
}

fn no_expired_lease_comes_back(events: &[Event], ttl_ms: u64, out: &mut Vec<Violation>) {
    // (d1) A takeover (an owner record naming another node replacing one naming N at epoch e)
    // ends N's epochs ≤ e on that cell: no acknowledgement of them may follow.
    let mut owner: BTreeMap<&str, (Option<&str>, u64)> = BTreeMap::new();
    let mut superseded: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    // (d2) The latest lease write each process issued, by its own monotonic clock.
    let mut issued: BTreeMap<&str, u64> = BTreeMap::new();
    for e in events {
        match e {
            Event::OwnerApplied {
                cell, node, epoch, ..
            } => {
                if let (Some((Some(prev), prev_epoch)), Some(next)) =
                    (owner.get(cell.as_str()), node.as_deref())
                {
                    if *prev != next {
                        let s = superseded.entry((cell, prev)).or_insert(0);
                        *s = (*s).max(*prev_epoch);
                    }
                }
                owner.insert(cell, (node.as_deref(), *epoch));
            }
            Event::Acked {
                t,
                cell,
                epoch,
                node,
                ..
            } => {
                if let Some(s) = superseded.get(&(cell.as_str(), node.as_str())) {
                    if epoch <= s {
                        let detail = format!("cell {cell} at {t} ms: {node}'s write acknowledged at epoch {epoch} after a takeover superseded epoch {s}");
                        violation(out, Property::NoExpiredLeaseComesBack, detail);
                    }
                }
            }
            Event::LeaseIssued { gen, mono, .. } => {
                issued.insert(gen, *mono);
            }
            Event::Held {
                t, node, gen, mono, ..
            } => {
                let live = issued.get(gen.as_str()).is_some_and(|p| *mono < p + ttl_ms);
                if !live {
                    let last = issued.get(gen.as_str());
                    let detail = format!("{node} ({gen}) at {t} ms said it holds its lease at its monotonic {mono} ms; its last lease write was issued at {last:?} (TTL {ttl_ms} ms)");
                    violation(out, Property::NoExpiredLeaseComesBack, detail);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(cell: &str, epoch: u64, payload: &'static str) -> Event {
        Event::DataApplied {
            t: 0,
            cell: cell.into(),
            epoch,
            node: "n".into(),
            payload: Bytes::from_static(payload.as_bytes()),
        }
    }

    fn ack(epoch: u64, payload: &'static str) -> Event {
        Event::Acked {
            t: 0,
            cell: "c".into(),
            epoch,
            node: "n".into(),
            gen: "g".into(),
            payload: Bytes::from_static(payload.as_bytes()),
        }
    }

    fn attempt(payload: &'static str) -> Event {
        Event::Attempt {
            cell: "c".into(),
            payload: Bytes::from_static(payload.as_bytes()),
        }
    }

    fn finals(epoch: u64, payload: &'static str) -> BTreeMap<String, Option<FinalHead>> {
        let head = FinalHead {
            epoch,
            payload: Bytes::from_static(payload.as_bytes()),
        };
        BTreeMap::from([("c".to_owned(), Some(head))])
    }

    fn violated(events: &[Event], f: &BTreeMap<String, Option<FinalHead>>) -> Vec<Property> {
        check(events, f, 1_000)
            .into_iter()
            .map(|v| v.property)
            .collect()
    }

    #[test]
    fn a_sound_history_passes() {
        let events = [
            attempt("x"),
            data("c", 1, "x"),
            ack(1, "x"),
            data("c", 2, "x"),
        ];
        assert!(violated(&events, &finals(2, "x")).is_empty());
    }

    #[test]
    fn an_acknowledged_write_that_never_landed_is_lost() {
        let events = [attempt("x"), data("c", 1, "x"), attempt("y"), ack(1, "y")];
        assert_eq!(
            violated(&events, &finals(1, "x")),
            [Property::NoAckedWriteLost]
        );
    }

    #[test]
    fn a_stale_epoch_replacing_the_head_is_caught() {
        let events = [
            attempt("x"),
            attempt("y"),
            data("c", 2, "x"),
            ack(2, "x"),
            data("c", 1, "y"),
        ];
        assert!(violated(&events, &finals(1, "y")).contains(&Property::NoAckedWriteLost));
    }

    #[test]
    fn holding_past_the_last_lease_write_is_caught() {
        let issued = Event::LeaseIssued {
            t: 0,
            node: "n".into(),
            gen: "g".into(),
            mono: 100,
        };
        let held = |mono| Event::Held {
            t: mono,
            node: "n".into(),
            gen: "g".into(),
            mono,
        };
        assert!(violated(&[issued.clone(), held(1_099)], &BTreeMap::new()).is_empty());
        assert_eq!(
            violated(&[issued, held(1_100)], &BTreeMap::new()),
            [Property::NoExpiredLeaseComesBack]
        );
    }
}
