//! The pure decision core: events in, effects out.
//!
//! No I/O, no clock reads, no randomness: time arrives as [`Now`] with every event, write
//! identities are derived from the process generation and a counter, and the shell
//! ([`crate::runtime`]) performs the effects and feeds their results back. The same core runs
//! under the tokio runtime, in unit tests and in the deterministic simulation.
//!
//! - [`lease`]: the holder's own lease — acquire (create first), renew at TTL/3, resolve
//!   ambiguous answers by write identity, fence.
//! - [`observe`]: how a peer judges someone else's lease — only after seeing it unchanged for a
//!   full TTL on its own monotonic clock, so no wall clock decides a takeover.
//! - [`cell`]: the claim rule and the evidence rules of a write on a cell head.
//! - [`claim`]: a claim, resume or adoption of a cell, as a step machine.
//! - [`claimed`]: the writes of a claimed cell (data, release, hand-off), as a step machine,
//!   and a claim's standing (what it believes it holds).
//! - [`collect`]: which payload objects may be deleted, and when.
//! - [`log`]: the append log's rules (append, seal, the verdict on an ambiguous append), as
//!   step machines.
//! - [`register`]: a lease's register of its claimed cells, and what it lets resume a cell
//!   while a hand-off is under way.
//! - [`write`](mod@write): the settlement of one head write by those rules, as a step machine.

pub mod cell;
pub mod claim;
pub mod claimed;
pub mod collect;
pub mod lease;
pub mod log;
pub mod observe;
pub mod register;
pub mod write;

pub use crate::flaws::Flaws;
pub use cell::{
    decide_claim, next_epoch, readback, readback_as, ClaimDecision, Evidence, HeadView,
};
pub use lease::{
    FenceReason, Holder, LeaseCore, LeaseEffect, LeaseEvent, LeaseStatus, ReadResult, WriteResult,
};
pub use observe::{Liveness, Observation, ObservedLease};

/// The time of an event: the process's monotonic clock and its wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Now {
    /// Monotonic milliseconds (arbitrary origin); judges authority, ours and (by observation)
    /// our peers'.
    pub mono_ms: u64,
    /// Wall-clock milliseconds since the Unix epoch; written for peers and operators.
    pub wall_ms: u64,
}

/// Lease timing. `Default` is the seed's production setting: TTL 10 s.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseConfig {
    /// Lease time to live.
    pub ttl_ms: u64,
    /// Wall-clock slack when *displaying* a foreign lease as expired
    /// ([`LeaseConfig::foreign_expired`]); takeovers never depend on it.
    pub skew_margin_ms: u64,
    /// A foreign lease whose `expires_ms` lies this far in the past by our wall clock is taken
    /// over without first being observed for a full TTL (a record left by a process that died
    /// long ago). Clocks that disagree by more than this can make two processes believe they
    /// hold at once; the store's epochs still reject the stale one's writes.
    pub stale_after_ms: u64,
    /// Writes per renewal before giving up (fencing).
    pub max_attempts: u32,
    /// Lower bound of one attempt's timeout.
    pub attempt_min_ms: u64,
    /// Upper bound of one attempt's timeout.
    pub attempt_max_ms: u64,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig::with_ttl_ms(10_000)
    }
}

impl LeaseConfig {
    /// Defaults scaled to `ttl_ms`: display skew margin ttl/10 (at most 1 s), stale after
    /// max(10 min, 30 × TTL), attempts bounded to 250 ms–2.5 s.
    pub fn with_ttl_ms(ttl_ms: u64) -> Self {
        LeaseConfig {
            ttl_ms,
            skew_margin_ms: (ttl_ms / 10).min(1_000),
            stale_after_ms: ttl_ms.saturating_mul(30).max(600_000),
            max_attempts: 4,
            attempt_min_ms: 250,
            attempt_max_ms: 2_500,
        }
    }

    /// When a lease anchored at `anchor` is renewed.
    pub fn renew_at(&self, anchor: u64) -> u64 {
        anchor.saturating_add(self.ttl_ms / 3)
    }

    /// The timeout of one write or read attempt with `remaining_ms` of authority left: about
    /// half of it, clamped to `attempt_min_ms..=attempt_max_ms`, and never beyond the
    /// remaining authority itself. A transport timeout is a correctness setting: a renewal
    /// that outlives the lease can only fence.
    pub fn attempt_timeout(&self, remaining_ms: u64) -> u64 {
        (remaining_ms / 2)
            .clamp(
                self.attempt_min_ms,
                self.attempt_max_ms.max(self.attempt_min_ms),
            )
            .min(remaining_ms)
    }

    /// How often a waiter re-reads a lease it waits for: min(TTL/10, 250 ms), at least 10 ms.
    /// A takeover after the holder died therefore comes at most TTL + this after its last
    /// renewal landed.
    pub fn poll_ms(&self) -> u64 {
        (self.ttl_ms / 10).clamp(10, 250)
    }

    /// Whether a peer's lease expiring at `expires_ms` (its wall clock) looks expired by our
    /// wall clock `now_wall_ms`, with the skew margin. For display and membership hints only:
    /// a takeover needs the observation rule ([`observe`]).
    pub fn foreign_expired(&self, expires_ms: u64, now_wall_ms: u64) -> bool {
        now_wall_ms > expires_ms.saturating_add(self.skew_margin_ms)
    }
}
