//! How a peer judges someone else's lease: by observation, not by wall clocks.
//!
//! A holder's authority ends at most one TTL after its last write was *sent* (it anchors on
//! its monotonic clock before sending). A write lands after it is sent, and a reader sees it
//! after it lands. So a peer that has seen one version of the lease record **unchanged for a
//! full TTL on its own monotonic clock** — a read that returned at `first_seen`, and a later
//! read, sent at `first_seen + TTL` or after, that still returns it — knows the authority
//! that version gave has ended, whatever the two machines' wall clocks say (client-go's
//! leader election judges the same way). A renewal that lands after that confirming read
//! cannot revive it: it lands after the holder's authority ended, so the holder's answer comes
//! too late and it fences itself. Elapsed time alone never confirms: a renewal may have
//! landed since the last read.
//!
//! Two exceptions take over at once: a record the holder **released** (`expires_ms: 0`,
//! written after it stopped acting), and a record whose `expires_ms` lies more than
//! [`LeaseConfig::stale_after_ms`] in the past by our wall clock (a process that died long
//! ago; this one trusts clocks to agree within that bound). The cost: a freshly started peer
//! waits one TTL before it takes over from a holder that died recently.
//!
//! ```
//! use fence_core::decide::{LeaseConfig, Liveness, Now, Observation};
//! let cfg = LeaseConfig::with_ttl_ms(2_000);
//! let seen = Observation::first(None, 100); // no lease record, first seen at mono 100
//! let now = Now { mono_ms: 2_500, wall_ms: 5_000_000 };
//! // Time alone does not confirm: a read sent a TTL (+0.2 %) later must still show it.
//! assert_eq!(seen.judge(now, &cfg), Liveness::Live { until_mono: 2_104 });
//! let early = Observation::update(Some(&seen), None, 2_103, 2_110);
//! assert_eq!(early.judge(now, &cfg), Liveness::Live { until_mono: 2_104 });
//! let confirmed = Observation::update(Some(&early), None, 2_104, 2_120);
//! assert_eq!(confirmed.judge(now, &cfg), Liveness::Dead);
//! ```

use super::{LeaseConfig, Now};
use crate::flaws::{sabotaged, Flaws};
use crate::record::NodeLeaseRecord;
use crate::store::Version;

/// The longest TTL a lease record is believed to state: a century, the longest TTL a
/// [`FenceBuilder`](crate::FenceBuilder) accepts. A record's own `ttl_ms` up to this is
/// believed whatever the observer's settings, so no mix of TTLs across a fleet lets a peer
/// take over a holder whose authority has not ended. A record stating more was written by
/// no fence (hostile, or a unit mistake): its `ttl_ms` is ignored, as a seed record's
/// missing one is, and the observer's own TTL applies.
pub const MAX_RECORD_TTL_MS: u64 = 100 * 365 * 24 * 3_600_000;

/// A lease record as a peer reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObservedLease {
    /// The record.
    pub record: NodeLeaseRecord,
    /// Its version.
    pub version: Version,
    /// Its write nonce (`""` for a seed record).
    pub nonce: String,
    /// The holder's TTL as the record states it.
    pub ttl_ms: Option<u64>,
}

/// What a peer has seen of one lease key over time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Observation {
    /// The record, or `None` when there is none.
    pub lease: Option<ObservedLease>,
    /// Our monotonic time when a read first returned exactly this state.
    pub first_seen_mono: u64,
    /// Our monotonic time when the last read that returned it was *sent*.
    pub read_mono: u64,
}

/// A peer's verdict on a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// The holder may still act, at the latest until our monotonic `until_mono`.
    Live {
        /// When (our monotonic clock) the observed state will have lasted a full TTL.
        until_mono: u64,
    },
    /// The holder's authority has ended: released, stale, or observed unchanged for a TTL.
    Dead,
}

impl Observation {
    /// The first observation of `lease`, by a read that returned at `mono_ms` (taken as its
    /// send time too: that only delays the verdict).
    pub fn first(lease: Option<ObservedLease>, mono_ms: u64) -> Self {
        Observation::read(lease, mono_ms, mono_ms)
    }

    fn read(lease: Option<ObservedLease>, sent_mono: u64, returned_mono: u64) -> Self {
        Observation {
            lease,
            first_seen_mono: returned_mono,
            read_mono: sent_mono.min(returned_mono),
        }
    }

    /// `prior` updated by a read sent at `sent_mono` that returned `lease` at
    /// `returned_mono`: the clock keeps running only while the state (version and write
    /// identity, or absence) is the same.
    pub fn update(
        prior: Option<&Observation>,
        lease: Option<ObservedLease>,
        sent_mono: u64,
        returned_mono: u64,
    ) -> Self {
        Observation::update_with(prior, lease, sent_mono, returned_mono, Flaws::default())
    }

    /// [`update`](Self::update) with sabotage `flaws` (only ever set with the `sabotage`
    /// feature).
    pub fn update_with(
        prior: Option<&Observation>,
        lease: Option<ObservedLease>,
        sent_mono: u64,
        returned_mono: u64,
        flaws: Flaws,
    ) -> Self {
        // A confirmation counts from when its read was sent: a renewal may land while it
        // travels back.
        let sent_mono = if sabotaged!(flaws, ConfirmAtReturn) {
            returned_mono
        } else {
            sent_mono
        };
        let lease = if sabotaged!(flaws, ObserverIgnoresStatedTtl) {
            lease.map(|l| ObservedLease { ttl_ms: None, ..l })
        } else {
            lease
        };
        let same = prior.is_some_and(|p| same_state(p.lease.as_ref(), lease.as_ref()));
        match prior {
            Some(p) if same => Observation {
                lease,
                first_seen_mono: p.first_seen_mono,
                read_mono: sent_mono.max(p.read_mono),
            },
            _ => Observation::read(lease, sent_mono, returned_mono),
        }
    }

    /// How long the holder's authority can last from the first sighting: the longer of our
    /// TTL and the one the record states — believed whatever our own settings, unless it
    /// exceeds the fixed [`MAX_RECORD_TTL_MS`] (a century, the longest TTL a fence accepts:
    /// no fence wrote it, and it is ignored) — plus 0.2 % for monotonic clocks that tick at
    /// different rates (NTP slews them by up to 0.05 %).
    pub fn hold_ms(&self, cfg: &LeaseConfig) -> u64 {
        let stated = self.lease.as_ref().and_then(|l| l.ttl_ms);
        let theirs = stated.filter(|t| *t <= MAX_RECORD_TTL_MS).unwrap_or(0);
        let hold = cfg.ttl_ms.max(theirs);
        hold.saturating_add(hold.div_ceil(500))
    }

    /// The verdict at `now`. `Dead` by observation needs a read sent at `until_mono` or
    /// later: `Live { until_mono }` with `until_mono <= now` means "read once more to
    /// confirm".
    pub fn judge(&self, now: Now, cfg: &LeaseConfig) -> Liveness {
        if let Some(l) = &self.lease {
            if l.record.is_released() {
                return Liveness::Dead;
            }
            let stale_from = l.record.expires_ms.saturating_add(cfg.stale_after_ms);
            if now.wall_ms > stale_from {
                return Liveness::Dead;
            }
        }
        let until_mono = self.first_seen_mono.saturating_add(self.hold_ms(cfg));
        if self.read_mono >= until_mono {
            Liveness::Dead
        } else {
            Liveness::Live { until_mono }
        }
    }

    /// The verdict at `now` from memory, without a read, or `None` when only a read can
    /// give one:
    /// - the last read that returned this state was sent more than
    ///   [`poll_ms`](LeaseConfig::poll_ms) ago;
    /// - the head being judged was written by a process generation (`writer`) other than the
    ///   one this record names: a newer process of the node may have acquired since;
    /// - a `Live` verdict whose full hold has passed: only a read sent from now on can
    ///   confirm it.
    ///
    /// The runtime's observer and the model check both ask this before reading.
    pub fn from_memory(
        &self,
        now: Now,
        cfg: &LeaseConfig,
        writer: Option<&str>,
    ) -> Option<Liveness> {
        let same_writer = match (writer, &self.lease) {
            (Some(w), Some(l)) => l.record.generation == w,
            _ => true,
        };
        if !same_writer || now.mono_ms.saturating_sub(self.read_mono) > cfg.poll_ms() {
            return None;
        }
        match self.judge(now, cfg) {
            Liveness::Live { until_mono } if until_mono <= now.mono_ms => None,
            verdict => Some(verdict),
        }
    }
}

fn same_state(a: Option<&ObservedLease>, b: Option<&ObservedLease>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.version == b.version && a.nonce == b.nonce,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(version: &str, expires_ms: u64) -> ObservedLease {
        ObservedLease {
            record: NodeLeaseRecord {
                node: "n".into(),
                expires_ms,
                addr: String::new(),
                peer_protocol: 1,
                generation: "g".into(),
            },
            version: Version::new(version).unwrap(),
            nonce: version.into(),
            ttl_ms: Some(1_000),
        }
    }

    fn at(mono_ms: u64, wall_ms: u64) -> Now {
        Now { mono_ms, wall_ms }
    }

    #[test]
    fn a_live_looking_record_dies_only_after_a_full_ttl_unchanged() {
        let cfg = LeaseConfig::with_ttl_ms(1_000);
        // The holder's wall clock runs an hour ahead: its record looks alive for an hour.
        let ahead = 10_000_000 + 3_600_000;
        let o = Observation::first(Some(lease("v1", ahead)), 0);
        let o = Observation::update(Some(&o), Some(lease("v1", ahead)), 1_001, 1_005);
        assert_eq!(
            o.judge(at(1_005, 10_000_000), &cfg),
            Liveness::Live { until_mono: 1_002 }
        );
        let o = Observation::update(Some(&o), Some(lease("v1", ahead)), 1_002, 1_005);
        assert_eq!(o.judge(at(1_005, 10_000_000), &cfg), Liveness::Dead);
        // A record that looks expired by wall clock (the holder's clock runs behind) is
        // still live until observed for a TTL.
        let behind = Observation::first(Some(lease("v1", 9_999_000)), 0);
        assert!(matches!(
            behind.judge(at(10, 10_000_000), &cfg),
            Liveness::Live { .. }
        ));
    }

    #[test]
    fn a_changed_record_restarts_the_clock_an_unchanged_one_does_not() {
        let cfg = LeaseConfig::with_ttl_ms(1_000);
        let o = Observation::first(Some(lease("v1", 5)), 0);
        let same = Observation::update(Some(&o), Some(lease("v1", 5)), 800, 810);
        assert_eq!((same.first_seen_mono, same.read_mono), (0, 800));
        let renewed = Observation::update(Some(&same), Some(lease("v2", 5)), 1_200, 1_250);
        assert_eq!((renewed.first_seen_mono, renewed.read_mono), (1_250, 1_200));
        let gone = Observation::update(Some(&renewed), None, 1_300, 1_310);
        assert_eq!(gone.first_seen_mono, 1_310);
        assert!(matches!(
            gone.judge(at(5_000, 0), &cfg),
            Liveness::Live { .. }
        ));
    }

    #[test]
    fn released_and_long_stale_records_die_at_once_and_a_longer_holder_ttl_counts() {
        let cfg = LeaseConfig::with_ttl_ms(1_000);
        let released = Observation::first(Some(lease("v", 0)), 0);
        assert_eq!(released.judge(at(1, 1), &cfg), Liveness::Dead);
        let stale = Observation::first(Some(lease("v", 1_000)), 0);
        let wall = 1_000 + cfg.stale_after_ms + 1;
        assert_eq!(stale.judge(at(1, wall), &cfg), Liveness::Dead);
        let mut long = lease("v", 10_000);
        long.ttl_ms = Some(5_000);
        let o = Observation::first(Some(long.clone()), 0);
        let o = Observation::update(Some(&o), Some(long), 4_999, 5_000);
        assert!(matches!(o.judge(at(5_000, 0), &cfg), Liveness::Live { .. }));
        let hostile = ObservedLease {
            ttl_ms: Some(u64::MAX),
            ..lease("v", u64::MAX)
        };
        // A record claiming an endless TTL (no fence writes one) is held for our own TTL.
        let o = Observation::first(Some(hostile), 7);
        let cap = cfg.ttl_ms + cfg.ttl_ms / 500;
        assert_eq!(
            o.judge(at(u64::MAX - 1, u64::MAX), &cfg),
            Liveness::Live {
                until_mono: 7 + cap
            }
        );
    }

    #[test]
    fn a_verdict_from_memory_needs_a_recent_read_of_the_same_writer() {
        let cfg = LeaseConfig::with_ttl_ms(1_000); // poll_ms 100
        let seen = Observation::update(None, Some(lease("v1", 5_000)), 0, 0);
        let live = Some(Liveness::Live { until_mono: 1_002 });
        assert_eq!(seen.from_memory(at(50, 1_000), &cfg, Some("g")), live);
        assert_eq!(seen.from_memory(at(100, 1_000), &cfg, None), live);
        // The head was written by another process generation of the node: a newer process
        // may have acquired since the read.
        assert_eq!(seen.from_memory(at(50, 1_000), &cfg, Some("g2")), None);
        // The read is older than poll_ms: read again.
        assert_eq!(seen.from_memory(at(101, 1_000), &cfg, Some("g")), None);
    }

    #[test]
    fn a_live_verdict_whose_hold_has_passed_is_never_given_from_memory() {
        let cfg = LeaseConfig::with_ttl_ms(1_000);
        let first = Observation::update(None, Some(lease("v1", 5_000)), 0, 0);
        let again = Observation::update(Some(&first), Some(lease("v1", 5_000)), 995, 998);
        // Within poll_ms of the read, but the hold (1,002 ms) has passed: only a read sent
        // from now on can confirm it.
        assert_eq!(again.from_memory(at(1_010, 1_000), &cfg, Some("g")), None);
        let confirmed = Observation::update(Some(&again), Some(lease("v1", 5_000)), 1_002, 1_005);
        assert_eq!(
            confirmed.from_memory(at(1_050, 1_000), &cfg, Some("g")),
            Some(Liveness::Dead)
        );
    }
}
