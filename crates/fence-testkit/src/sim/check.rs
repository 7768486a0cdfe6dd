//! The properties, checked on a finished run's events and the store's final state.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use bytes::Bytes;

use super::trace::Event;

/// A checked property of the simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Property {
    /// (a) No two nodes (or two processes) ever claim, write or acknowledge at the same
    /// `(cell, epoch)` — except a process that resumed the epoch of a generation it vouched
    /// for — and a claim is returned only after the store applied a head naming its node at
    /// its epoch (the claim's seal); a resume only after the store applied, after the resume
    /// was asked for, a head naming its node and its own generation at that epoch.
    OneWriterPerEpoch,
    /// (b) Per cell, every applied head keeps or raises the epoch; a head at a new epoch is
    /// a claim; at the same epoch only the owner writes or releases. (Claims may *return*
    /// out of order: a stopped process learns of its claim late.)
    EpochsIncrease,
    /// (c) Every acknowledged write landed before it was acknowledged; no write answered
    /// "not committed" ever landed; every head carries the previous head's payload forward or
    /// holds a payload written for the first time (no write applied twice, nothing rolled
    /// back); readers never find a cell corrupt — none did, no head points at a payload
    /// object already deleted, and no payload object is deleted while the head points at
    /// it; the final head is the last one applied.
    NoAckedWriteLost,
    /// (d) No process says it holds a lease whose authority — counted from the issue of its
    /// latest lease write that the store *applied* — ended by its own monotonic clock, and no
    /// write through a claim first *sent* after that (dated when it entered the process's
    /// path, not when the application asked) is acknowledged. (An acknowledgement may *arrive*
    /// after a takeover — a stopped process learns late — but (b) and (c) together say the
    /// acknowledged write landed before it.)
    NoExpiredLeaseComesBack,
    /// (e) After the last fault, every cell is owned by a live node within a bounded time.
    OwnershipSettles,
    /// (f) No two processes believe they own one cell at the same instant of real time: no
    /// process acts on its claim after another process's claim at a later epoch returned —
    /// also not a process whose monotonic clock was suspended (its wall clock ends its
    /// authority).
    ExclusiveBelief,
}

impl Property {
    /// The short label used in reports: `(a)`…`(f)` and a name.
    pub fn label(self) -> &'static str {
        match self {
            Property::OneWriterPerEpoch => "(a) one writer per epoch",
            Property::EpochsIncrease => "(b) epochs increase",
            Property::NoAckedWriteLost => "(c) no acknowledged write lost",
            Property::NoExpiredLeaseComesBack => "(d) no expired lease comes back",
            Property::OwnershipSettles => "(e) ownership settles",
            Property::ExclusiveBelief => "(f) one believer per cell",
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

/// The final head of a cell as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FinalHead {
    pub(crate) epoch: u64,
    pub(crate) payload: Bytes,
}

fn violation(out: &mut Vec<Violation>, property: Property, detail: String) {
    out.push(Violation { property, detail });
}

fn show(payload: &Bytes) -> String {
    let s = String::from_utf8_lossy(payload);
    s.trim_end_matches('-').to_owned()
}

/// Checks (a)–(d) and (f); (e) is judged by the driver while the run is still going.
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
    exclusive_belief(events, &mut out);
    out
}

fn one_writer_per_epoch(events: &[Event], out: &mut Vec<Violation>) {
    let mut nodes: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    let mut gens: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    let mut sealed: HashSet<(&str, u64, &str)> = HashSet::new();
    // When (virtual time, log index) a head naming (cell, epoch, node, generation) was last
    // applied.
    let mut sealed_by: HashMap<(&str, u64, &str, &str), (u64, usize)> = HashMap::new();
    // Generations that joined an epoch by resuming it from a generation they vouched for,
    // and every generation seen at an epoch with where in the log it was first seen (a head
    // naming it counts: a resume whose caller gave up may still have sealed).
    let mut joined: HashSet<(&str, u64, &str)> = HashSet::new();
    let mut present: HashMap<(&str, u64), HashMap<&str, usize>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let (cell, epoch, node, gen) = match e {
            Event::Claimed {
                t,
                cell,
                epoch,
                node,
                gen,
            } => {
                if !sealed.contains(&(cell.as_str(), *epoch, node.as_str())) {
                    let detail = format!("cell {cell} at {t} ms: {node} was given epoch {epoch}, but the store never applied a head naming it at that epoch");
                    violation(out, Property::OneWriterPerEpoch, detail);
                }
                (cell, *epoch, node, Some(gen))
            }
            Event::Acked {
                cell,
                epoch,
                node,
                gen,
                ..
            } => (cell, *epoch, node, Some(gen)),
            Event::Resumed {
                t,
                since,
                cell,
                epoch,
                node,
                gen,
                vouched,
            } => {
                let seal = sealed_by.get(&(cell.as_str(), *epoch, node.as_str(), gen.as_str()));
                if seal.is_none_or(|(at, _)| at < since) {
                    let detail = format!("cell {cell} at {t} ms: {node} ({gen}) resumed epoch {epoch}, but the store applied no head naming it and its generation at that epoch after {since} ms (the resume's seal)");
                    violation(out, Property::OneWriterPerEpoch, detail);
                }
                // Vouched for a generation the epoch had before the resume's own seal.
                let seal_at = seal.map_or(i, |(_, idx)| *idx);
                let before = present.get(&(cell.as_str(), *epoch));
                let vouched_holder = before.is_some_and(|b| {
                    vouched
                        .iter()
                        .any(|v| b.get(v.as_str()).is_some_and(|at| *at < seal_at))
                });
                if vouched_holder {
                    joined.insert((cell.as_str(), *epoch, gen.as_str()));
                }
                (cell, *epoch, node, Some(gen))
            }
            Event::HeadApplied {
                t,
                cell,
                node: Some(node),
                epoch,
                gen,
                ..
            } => {
                sealed.insert((cell.as_str(), *epoch, node.as_str()));
                if let Some(g) = gen {
                    sealed_by.insert((cell.as_str(), *epoch, node.as_str(), g.as_str()), (*t, i));
                    present
                        .entry((cell, *epoch))
                        .or_default()
                        .entry(g)
                        .or_insert(i);
                }
                (cell, *epoch, node, None)
            }
            _ => continue,
        };
        nodes.entry((cell, epoch)).or_default().insert(node);
        if let Some(g) = gen {
            present
                .entry((cell, epoch))
                .or_default()
                .entry(g)
                .or_insert(i);
            gens.entry((cell, epoch)).or_default().insert(g);
        }
    }
    for ((cell, epoch), set) in nodes.iter().filter(|(_, s)| s.len() > 1) {
        let detail = format!("cell {cell} epoch {epoch} written or claimed by nodes {set:?}");
        violation(out, Property::OneWriterPerEpoch, detail);
    }
    for ((cell, epoch), set) in &gens {
        let own: Vec<&&str> = set
            .iter()
            .filter(|g| !joined.contains(&(*cell, *epoch, **g)))
            .collect();
        if own.len() > 1 {
            let detail =
                format!("cell {cell} epoch {epoch} claimed or acknowledged by processes {set:?}");
            violation(out, Property::OneWriterPerEpoch, detail);
        }
    }
}

fn epochs_increase(events: &[Event], out: &mut Vec<Violation>) {
    let mut head: BTreeMap<&str, (Option<&str>, u64)> = BTreeMap::new();
    for e in events {
        let Event::HeadApplied {
            t,
            cell,
            node,
            epoch,
            ..
        } = e
        else {
            continue;
        };
        let (prior_node, prior) = head.get(cell.as_str()).copied().unwrap_or((None, 0));
        let node = node.as_deref();
        let bad = if *epoch < prior {
            Some(format!("epoch {epoch} replaced {prior}"))
        } else if *epoch > prior.saturating_add(1) {
            Some(format!("epoch {epoch} skipped past {prior} + 1"))
        } else if *epoch > prior && node.is_none() {
            Some(format!(
                "a release raised the epoch from {prior} to {epoch}"
            ))
        } else if *epoch == prior && node.is_some() && node != prior_node {
            Some(format!(
                "{node:?} wrote epoch {epoch} over {prior_node:?} without raising it"
            ))
        } else {
            None
        };
        if let Some(why) = bad {
            violation(
                out,
                Property::EpochsIncrease,
                format!("cell {cell} at {t} ms: {why}"),
            );
        }
        head.insert(cell, (node, *epoch));
    }
}

/// Per cell: the head chain (index in the log, epoch, payload) and the acknowledgements.
#[derive(Default)]
struct CellHistory<'a> {
    chain: Vec<(usize, u64, &'a Bytes)>,
    acks: Vec<(usize, u64, &'a Bytes, &'a str)>,
}

fn cell_histories(events: &[Event]) -> BTreeMap<&str, CellHistory<'_>> {
    let mut cells: BTreeMap<&str, CellHistory<'_>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::HeadApplied {
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
                gen,
                ..
            } => cells
                .entry(cell)
                .or_default()
                .acks
                .push((i, *epoch, payload, gen)),
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
    let attempted: HashSet<&Bytes> = events
        .iter()
        .filter_map(|e| match e {
            Event::Attempt { payload, .. } => Some(payload),
            _ => None,
        })
        .collect();
    let cells = cell_histories(events);
    payload_objects_exist(events, out);
    for e in events {
        match e {
            Event::Refused {
                t,
                cell,
                payload,
                kind,
            } => {
                let landed = cells
                    .get(cell.as_str())
                    .is_some_and(|h| h.chain.iter().any(|(_, _, p)| *p == payload));
                if landed {
                    let detail = format!(
                        "cell {cell} at {t} ms: write {} was answered {kind}, not committed, but it landed",
                        show(payload)
                    );
                    violation(out, Property::NoAckedWriteLost, detail);
                }
            }
            Event::ReadFailed { t, cell, error } => {
                let detail = format!("cell {cell} at {t} ms: a reader got {error}");
                violation(out, Property::NoAckedWriteLost, detail);
            }
            _ => {}
        }
    }
    for (cell, h) in &cells {
        chain_is_sound(cell, h, &attempted, out);
        // Landed before it was acknowledged: so a write acknowledged before another was
        // attempted is before it in the chain. Writes that overlapped (a co-writer's beside
        // the claim's) may be acknowledged in either order: a read-back's answer can arrive
        // late.
        for (ack_at, epoch, payload, gen) in &h.acks {
            let landed = h
                .chain
                .iter()
                .any(|(i, e, p)| i < ack_at && e == epoch && p == payload);
            if !landed {
                let detail = format!(
                    "cell {cell}: {gen}'s acknowledged write {} at epoch {epoch} never landed",
                    show(payload)
                );
                violation(out, Property::NoAckedWriteLost, detail);
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
                "cell {cell}: the final head {head:?} is not the last one the store applied"
            );
            violation(out, Property::NoAckedWriteLost, detail);
        }
    }
}

/// Readers never find a cell corrupt for want of its payload object: no head the store
/// applies points at an object already deleted, and no object is deleted while the cell's
/// head points at it (a payload collection, or a write's clean-up, that took a live object
/// for garbage). Checked at every step of the store's history, not only when a reader
/// happened to look.
fn payload_objects_exist(events: &[Event], out: &mut Vec<Violation>) {
    let mut deleted: HashMap<(&str, &str), u64> = HashMap::new();
    let mut current: HashMap<&str, &str> = HashMap::new();
    for e in events {
        match e {
            Event::HeadApplied {
                t,
                cell,
                epoch,
                blob,
                ..
            } => {
                let Some(name) = blob else {
                    current.remove(cell.as_str());
                    continue;
                };
                if let Some(at) = deleted.get(&(cell.as_str(), name.as_str())) {
                    let detail = format!("cell {cell} at {t} ms: a head at epoch {epoch} points at payload object {name:?}, deleted at {at} ms (readers find the cell corrupt)");
                    violation(out, Property::NoAckedWriteLost, detail);
                }
                current.insert(cell, name);
            }
            Event::BlobDeleted { t, cell, name } => {
                if current.get(cell.as_str()) == Some(&name.as_str()) {
                    let detail = format!("cell {cell} at {t} ms: payload object {name:?} deleted while the head points at it (readers find the cell corrupt)");
                    violation(out, Property::NoAckedWriteLost, detail);
                }
                deleted.insert((cell, name), *t);
            }
            _ => {}
        }
    }
}

/// Every head carries the previous head's payload forward, or holds a payload some writer
/// attempted and no earlier head held: a payload that comes back is a write applied twice or
/// a rollback of whatever was written after it.
fn chain_is_sound(
    cell: &str,
    h: &CellHistory<'_>,
    attempted: &HashSet<&Bytes>,
    out: &mut Vec<Violation>,
) {
    let empty = Bytes::new();
    let mut seen: HashSet<&Bytes> = HashSet::from([&empty]);
    let mut prev: &Bytes = &empty;
    for (_, epoch, payload) in &h.chain {
        if *payload != prev {
            if seen.contains(payload) {
                let detail = format!(
                    "cell {cell}: head at epoch {epoch} brought back {:?} over {:?} (applied twice, or rolled back)",
                    show(payload),
                    show(prev)
                );
                violation(out, Property::NoAckedWriteLost, detail);
            } else if !attempted.contains(payload) {
                let detail = format!(
                    "cell {cell}: head {} is neither carried forward nor written by anyone",
                    show(payload)
                );
                violation(out, Property::NoAckedWriteLost, detail);
            }
        }
        seen.insert(payload);
        prev = payload;
    }
}

fn no_expired_lease_comes_back(events: &[Event], ttl_ms: u64, out: &mut Vec<Violation>) {
    // When each lease write entered its process's path (by that process's clock), and the
    // issue time of each process's latest write the store applied: its authority's anchor
    // can be no later than that.
    let mut issued: HashMap<&str, u64> = HashMap::new();
    let mut anchor: BTreeMap<&str, u64> = BTreeMap::new();
    let mut sends = SendDates::default();
    for e in events {
        match e {
            Event::LeaseIssued {
                nonce,
                mono,
                node,
                gen,
                ..
            } => {
                issued.insert(nonce, *mono);
                sends.node_of.insert(gen, node);
            }
            Event::LeaseApplied { gen, nonce, .. } => {
                if let Some(mono) = issued.get(nonce.as_str()) {
                    anchor.insert(gen, *mono);
                }
            }
            Event::Acked {
                t,
                cell,
                payload,
                gen,
                ..
            } => {
                if let Some((mono, last)) = sends.late.get(payload) {
                    let detail = format!("cell {cell} at {t} ms: {gen} sent a write at its monotonic {mono} ms, after its authority ended (its latest applied lease write was issued at {last:?}, TTL {ttl_ms} ms), and it was acknowledged");
                    violation(out, Property::NoExpiredLeaseComesBack, detail);
                }
            }
            Event::Attempt {
                cell,
                payload,
                mono,
                by_claim: true,
                ..
            } => {
                sends.unsent.insert(payload, (cell, *mono));
            }
            Event::HeadRead {
                node, cell, mono, ..
            } => {
                sends.read.insert((node, cell), *mono);
            }
            Event::HeadSent {
                payload,
                gen: Some(gen),
                mono,
                ..
            } => {
                let last = anchor.get(gen.as_str()).copied();
                sends.sent(payload, gen, *mono, last, ttl_ms);
            }
            Event::Held {
                t, node, gen, mono, ..
            } => {
                let last = anchor.get(gen.as_str());
                if last.is_none_or(|p| *mono >= p + ttl_ms) {
                    let detail = format!("{node} ({gen}) at {t} ms said it holds its lease at its monotonic {mono} ms; its latest applied lease write was issued at {last:?} (TTL {ttl_ms} ms)");
                    violation(out, Property::NoExpiredLeaseComesBack, detail);
                }
            }
            _ => {}
        }
    }
}

/// When each write through a claim was first *sent*, for rule (d): a write is dated by
/// the moment it entered its process's path, not by when the application asked. One
/// exception, the runtime's own: a write whose claim did not know the head reads it first
/// (its base), and sends the moment the answer comes. That read was checked against the
/// authority, but its answer may come after it ended (a process stopped while the read
/// travelled), so a write is late only when sent after its authority with no read of its
/// cell's head sent, within the authority, since the write was asked for. A write queued
/// behind another and not checked again when its turn came has no such read.
#[derive(Default)]
struct SendDates<'a> {
    /// Each lease generation's node.
    node_of: HashMap<&'a str, &'a str>,
    /// Claim writes asked for and not yet sent: their cell, and when they were asked for.
    unsent: HashMap<&'a Bytes, (&'a str, u64)>,
    /// The latest head read of each (node, cell), by the node's clock.
    read: HashMap<(&'a str, &'a str), u64>,
    /// Claim writes first sent after their authority: when, and its anchor's issue.
    late: HashMap<&'a Bytes, (u64, Option<u64>)>,
}

impl<'a> SendDates<'a> {
    /// `payload` entered `gen`'s path at `mono`; `gen`'s latest applied lease write was
    /// issued at `anchor` (None: none), its authority lasting `ttl_ms` from then.
    fn sent(
        &mut self,
        payload: &'a Bytes,
        gen: &'a str,
        mono: u64,
        anchor: Option<u64>,
        ttl_ms: u64,
    ) {
        let Some((cell, asked)) = self.unsent.remove(payload) else {
            return;
        };
        let until = anchor.map(|a| a + ttl_ms);
        if until.is_some_and(|u| mono < u) {
            return;
        }
        let node = self.node_of.get(gen).copied().unwrap_or_default();
        let read = self.read.get(&(node, cell)).copied();
        let based = read.is_some_and(|r| r >= asked && until.is_some_and(|u| r < u));
        if !based {
            self.late.insert(payload, (mono, anchor));
        }
    }
}

fn exclusive_belief(events: &[Event], out: &mut Vec<Violation>) {
    let mut claims: BTreeMap<&str, Vec<(u64, u64, &str, &str)>> = BTreeMap::new();
    let mut reported: HashSet<(&str, u64, &str)> = HashSet::new();
    for e in events {
        match e {
            Event::Claimed {
                t,
                cell,
                epoch,
                node,
                gen,
            }
            | Event::Resumed {
                t,
                cell,
                epoch,
                node,
                gen,
                ..
            } => claims
                .entry(cell)
                .or_default()
                .push((*t, *epoch, node, gen)),
            Event::Believes {
                t,
                cell,
                epoch,
                node,
                gen,
                ..
            } => {
                let later = claims.get(cell.as_str()).and_then(|c| {
                    c.iter()
                        .find(|(_, e2, _, g2)| e2 > epoch && *g2 != gen.as_str())
                });
                if let Some((t2, e2, n2, _)) = later {
                    if reported.insert((cell, *epoch, gen)) {
                        let detail = format!("cell {cell} at {t} ms: {node} ({gen}) acts on its claim at epoch {epoch}, but {n2} claimed epoch {e2} at {t2} ms");
                        violation(out, Property::ExclusiveBelief, detail);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
