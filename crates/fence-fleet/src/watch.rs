//! Watching one node's lease, cheaply and promptly.
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

use fence_core::decide::{Liveness, Now, Observation};

/// Early reads in a row after which the watcher stops re-reading and waits for the moment
/// the observation rule can confirm a death.
const EARLY_RETRIES: u32 = 2;

/// The schedule of reads of one watched node's lease.
#[derive(Clone, Debug, Default)]
pub(crate) struct Schedule {
    /// When (monotonic ms) to read next; 0: at once.
    pub(crate) next_mono: u64,
    /// Reads in a row that found the record unchanged.
    early: u32,
    /// How much later than the record's schedule renewals have been landing, learned.
    lateness_ms: u64,
    /// The record state (version, nonce) last read.
    last: Option<(String, String)>,
}

impl Schedule {
    pub(crate) fn due(&self, now_mono: u64) -> bool {
        now_mono >= self.next_mono
    }

    /// Plans the next read after one that returned `seen`, judged `verdict`, at `now`.
    /// `ttl_ms` is ours (used when the record states none); `margin_ms` is how long after a
    /// renewal's due time a read should come.
    pub(crate) fn after_read(
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
        let next = if renewed {
            self.early = 0;
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
        } else {
            until_mono
        };
        // The moment the rule can confirm a death is never skipped.
        self.next_mono = next.min(until_mono).max(now.mono_ms + 1);
    }

    /// After a read that failed: try again a margin later.
    pub(crate) fn after_failure(&mut self, now_mono: u64, margin_ms: u64) {
        self.next_mono = now_mono + margin_ms.max(1);
    }
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
        assert_eq!(
            s.next_mono, 9_118,
            "after two early reads, the confirming one"
        );
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
