//! When a watcher reads the lease of the node it watches, and whom a confirmed death is told.
//!
//! A death is confirmed by the core's observation rule: the record seen unchanged for a full
//! TTL, counted from the first read that returned it. So a watcher that first sees the dead
//! node's last renewal late confirms the death late. Reading every few hundred milliseconds
//! would see it at once, at a price; this watcher reads once per renewal period instead,
//! just after the renewal is due: the record's `expires_ms` (the holder's wall clock at its
//! renewal, plus its TTL) says when the holder sends the next one — `expires_ms - TTL +
//! TTL/3` by its clock. A read that comes too early (the renewal not there yet: clocks that
//! disagree, a slow store) is repeated a margin later, and the lateness learned shifts later
//! reads; a record whose clock is far off is simply read once per renewal period. Clocks only
//! decide when to read, never what a read proves.

use std::collections::BTreeMap;

use fence_core::decide::{Liveness, Now, Observation};

use super::record::{Notice, NoticeKind};

/// Early reads in a row after which the watcher stops re-reading and waits for the moment
/// the observation rule can confirm a death.
const EARLY_RETRIES: u32 = 2;

/// A record unchanged for this many renewal periods (in halves) is overdue: its heirs are
/// told to watch their records closely.
const OVERDUE_HALF_PERIODS: u64 = 3;

/// The schedule of reads of one watched node's lease.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// When (monotonic ms) to read next; 0: at once.
    pub next_mono: u64,
    /// Reads in a row that found the record unchanged.
    early: u32,
    /// How much later than the record's schedule renewals have been landing, learned.
    lateness_ms: u64,
    /// The record state (version, nonce) last read.
    last: Option<(String, String)>,
    /// The heirs were told the renewal is overdue (until the record changes).
    pub suspected: bool,
}

impl Schedule {
    /// Whether a read is due at `now_mono`.
    pub fn due(&self, now_mono: u64) -> bool {
        now_mono >= self.next_mono
    }

    /// Plans the next read after one that returned `seen`, judged `verdict`, at `now`.
    /// `ttl_ms` is ours (used when the record states none); `margin_ms` is how long after a
    /// renewal's due time a read should come.
    pub fn after_read(
        &mut self,
        seen: &Observation,
        verdict: Liveness,
        now: Now,
        ttl_ms: u64,
        margin_ms: u64,
    ) {
        let Liveness::Live { until_mono } = verdict else {
            self.next_mono = u64::MAX;
            return;
        };
        let state = seen
            .lease
            .as_ref()
            .map(|l| (l.version.as_str().to_owned(), l.nonce.clone()));
        let renewed = state != self.last;
        self.last = state;
        let ttl = seen.lease.as_ref().and_then(|l| l.ttl_ms).unwrap_or(ttl_ms);
        let period = (ttl / 3).max(1);
        let overdue_at = seen.first_seen_mono + OVERDUE_HALF_PERIODS * period / 2;
        let next = if renewed {
            self.early = 0;
            self.suspected = false;
            self.lateness_ms -= self.lateness_ms / 8;
            let due_wall = seen.lease.as_ref().map_or(0, |l| {
                l.record
                    .expires_ms
                    .saturating_sub(ttl)
                    .saturating_add(period)
            });
            let wait = due_wall.saturating_sub(now.wall_ms);
            let aligned = now.mono_ms + wait + margin_ms + self.lateness_ms;
            aligned.clamp(now.mono_ms + margin_ms, now.mono_ms + period + margin_ms)
        } else if self.early < EARLY_RETRIES {
            self.early += 1;
            self.lateness_ms = (self.lateness_ms + margin_ms).min(period / 2);
            now.mono_ms + margin_ms
        } else if !self.suspected && now.mono_ms < overdue_at {
            overdue_at
        } else {
            until_mono
        };
        // The moment the rule can confirm a death is never skipped.
        self.next_mono = next.min(until_mono).max(now.mono_ms + 1);
    }

    /// Whether the record read last (first seen at `first_seen_mono`) is overdue at
    /// `now_mono` and the heirs were not told yet.
    pub fn overdue(&self, seen: &Observation, now_mono: u64, ttl_ms: u64) -> bool {
        let ttl = seen.lease.as_ref().and_then(|l| l.ttl_ms).unwrap_or(ttl_ms);
        let period = (ttl / 3).max(1);
        let overdue_at = seen.first_seen_mono + OVERDUE_HALF_PERIODS * period / 2;
        !self.suspected && now_mono >= overdue_at
    }

    /// After a read that failed: try again a margin later.
    pub fn after_failure(&mut self, now_mono: u64, margin_ms: u64) {
        self.next_mono = now_mono + margin_ms.max(1);
    }
}

/// What a watcher does after a read of the watched node's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchStep {
    /// Nothing: read again when the schedule says.
    Wait,
    /// The renewal is overdue: tell the heirs to read their records closely.
    WarnHeirs,
    /// Dead by the observation rule: tombstone its lease and tell whom [`burial`] says.
    Bury,
}

impl Schedule {
    /// The rule after a read that returned `seen` at `now`: judged by the observation rule
    /// (`cfg`), the next read planned (`margin_ms` after each renewal is due), the heirs
    /// warned once it is overdue, and a death confirmed — told again each `scan_ms` until
    /// the leader re-plans without it.
    pub fn on_read(
        &mut self,
        seen: &Observation,
        now: Now,
        cfg: &fence_core::LeaseConfig,
        margin_ms: u64,
        scan_ms: u64,
    ) -> WatchStep {
        let verdict = seen.judge(now, cfg);
        self.after_read(seen, verdict, now, cfg.ttl_ms, margin_ms);
        if verdict != Liveness::Dead && self.overdue(seen, now.mono_ms, cfg.ttl_ms) {
            self.suspected = true;
            return WatchStep::WarnHeirs;
        }
        if verdict != Liveness::Dead || seen.lease.is_none() {
            return WatchStep::Wait;
        }
        self.next_mono = now.mono_ms.saturating_add(scan_ms);
        WatchStep::Bury
    }
}

/// Whom a confirmed death of `dead` is told, by node: each heir of its cells (`heirs`: cell
/// → heir; only cells of this fleet, `known`) is told to [inherit](NoticeKind::Inherit) its
/// cells — unless the dead node released its lease itself (`released`: it handed or
/// released its cells) — and the `leader` is told it is [gone](NoticeKind::Gone) (unless
/// that is this node, `me`, or the dead one). Returns the notices for other nodes, and the
/// cells `me` inherits itself.
pub fn burial(
    me: &str,
    dead: &str,
    heirs: &BTreeMap<String, String>,
    known: impl Fn(&str) -> bool,
    released: bool,
    leader: &str,
    at_wall: u64,
) -> (BTreeMap<String, Vec<Notice>>, Vec<String>) {
    let notice = |kind, cell: &str| Notice {
        at: at_wall,
        kind,
        cell: cell.to_owned(),
        node: dead.to_owned(),
    };
    let mut told: BTreeMap<String, Vec<Notice>> = BTreeMap::new();
    let mut mine = Vec::new();
    if !released {
        for (cell, heir) in heirs.iter().filter(|(c, _)| known(c)) {
            if heir == me {
                mine.push(cell.clone());
            } else {
                let n = notice(NoticeKind::Inherit, cell);
                told.entry(heir.clone()).or_default().push(n);
            }
        }
    }
    if !leader.is_empty() && leader != me && leader != dead {
        told.entry(leader.to_owned())
            .or_default()
            .push(notice(NoticeKind::Gone, ""));
    }
    (told, mine)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fence_core::decide::ObservedLease;
    use fence_core::{NodeLeaseRecord, Version};

    fn seen(version: &str, expires_ms: u64, first_seen: u64) -> Observation {
        Observation {
            lease: Some(ObservedLease {
                record: NodeLeaseRecord {
                    node: "n".into(),
                    expires_ms,
                    addr: String::new(),
                    peer_protocol: 1,
                    generation: "g".into(),
                },
                version: Version::new(version).unwrap(),
                nonce: version.into(),
                ttl_ms: Some(9_000),
            }),
            first_seen_mono: first_seen,
            read_mono: first_seen,
        }
    }

    fn at(mono_ms: u64, wall_ms: u64) -> Now {
        Now { mono_ms, wall_ms }
    }

    #[test]
    fn reads_come_just_after_each_renewal_is_due_and_early_ones_are_repeated() {
        let mut s = Schedule::default();
        let live = |u| Liveness::Live { until_mono: u };
        // A renewal at wall 10_000 (expires 19_000, TTL 9 s): the next is due at 13_000.
        s.after_read(
            &seen("v1", 19_000, 100),
            live(9_100),
            at(100, 10_050),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, 100 + 2_950 + 200);
        // Read then, it is not there yet: again a margin later, and later from now on.
        s.after_read(
            &seen("v1", 19_000, 100),
            live(9_100),
            at(3_250, 13_200),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, 3_450);
        s.after_read(
            &seen("v2", 22_000, 3_450),
            live(12_450),
            at(3_450, 13_400),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, 3_450 + 2_600 + 200 + 175);
        // A record whose clock is an hour ahead is read once per renewal period.
        let mut far = Schedule::default();
        far.after_read(&seen("v1", 3_700_000, 0), live(9_000), at(0, 0), 9_000, 200);
        assert_eq!(far.next_mono, 3_000 + 200);
    }

    #[test]
    fn a_silent_node_is_read_again_exactly_when_its_death_can_be_confirmed() {
        let mut s = Schedule::default();
        let live = |u| Liveness::Live { until_mono: u };
        s.after_read(
            &seen("v1", 19_000, 100),
            live(9_118),
            at(100, 10_050),
            9_000,
            200,
        );
        for t in [3_250, 3_450, 3_650] {
            s.after_read(
                &seen("v1", 19_000, 100),
                live(9_118),
                at(t, 13_000),
                9_000,
                200,
            );
        }
        // After two early reads, one when it is overdue (a renewal period and a half: its
        // heirs are told), then the confirming one.
        assert_eq!(s.next_mono, 100 + 4_500);
        assert!(!s.overdue(&seen("v1", 19_000, 100), 4_599, 9_000));
        assert!(s.overdue(&seen("v1", 19_000, 100), 4_600, 9_000));
        s.suspected = true;
        s.after_read(
            &seen("v1", 19_000, 100),
            live(9_118),
            at(4_600, 14_000),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, 9_118);
        s.after_read(
            &seen("v1", 19_000, 100),
            Liveness::Dead,
            at(9_118, 0),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, u64::MAX);
    }
}
