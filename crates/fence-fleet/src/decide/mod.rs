//! The fleet's pure decision core: inputs in, effects out.
//!
//! No I/O, no clock reads, no channels: time arrives as [`Now`] with every input, and the
//! shell (the fleet's task) performs the effects — reads and writes of records and heads,
//! claims, hand-offs, releases, events — and feeds their outcomes back, as fence-core's
//! [`LeaseCore`](fence_core::decide::LeaseCore) is driven by its keeper. The same core runs
//! under the tokio runtime, in unit tests, and under the exhaustive model check
//! (`crates/fence-fleet/tests/model`), which drives these very step functions through node
//! deaths, leaves, drains and lost store answers.
//!
//! - [`FleetCore`]: one node of a fleet — what its assignment record says, the cells it
//!   wants and how it takes them ([`FleetCore::wanted`], [`free_of`](FleetCore::free_of)),
//!   the notices it hears, the cells it gives (placement moves, asks, drains) and how a
//!   hand-off whose answer was lost is settled by evidence, its timers (as deadlines fired
//!   by `now`), and (on one node) the leader.
//! - [`LeaderCore`]: the leader's rules — members as the leader knows them, the sticky
//!   placement ([`plan`](crate::assign::plan)), each member's part of it, what to write.
//! - [`record`]: the assignment record as data (docs/protocol.md §14).
//! - [`watch`]: when a watcher reads a watched lease, and whom a confirmed death is told.

mod give;
mod lead;
mod leading;
mod leave;
mod node;
pub mod record;
mod step;
mod take;
pub mod watch;

pub use fence_core::decide::Now;
pub use lead::{Death, LeadEffect, LeadInput, LeadStep, LeaderCore, Member, Part};
pub use node::{
    AdoptFor, Claimed, FleetCore, FleetEffect, FleetInput, HandOffFor, HandOffOutcome, HeadsFor,
    Mine, Read, Seen,
};

pub use crate::flaws::Flaws;

/// The timing and limits of a fleet's rules (see [`FleetBuilder`](crate::FleetBuilder) for
/// each one's meaning).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Timing {
    /// How often the node reads its record and acts on it.
    pub interval_ms: u64,
    /// How long the leader waits after a node joins before placing cells on it.
    pub settle_ms: u64,
    /// How long a cell taken is kept before it is shed again.
    pub min_hold_ms: u64,
    /// How often the heads of held cells are read (`None`: never).
    pub head_poll_ms: Option<u64>,
    /// The slow period: the leader's sweep, the check of the leadership, asks.
    pub scan_ms: u64,
    /// How often every cell's head is read (opt-in).
    pub follow_ms: Option<u64>,
    /// How long notices (and moves) live.
    pub notices_ms: u64,
    /// The lease's timing (TTL, poll period), for the observation rule.
    pub lease: fence_core::LeaseConfig,
}

impl Timing {
    /// The default timing for a lease of `lease`'s TTL: an interval of TTL/5 within
    /// [`poll_ms`](fence_core::LeaseConfig::poll_ms)…2 s, `settle` one interval, `min_hold`
    /// two, the head poll every renewal period (TTL/3), the sweep every max(3 TTL, 10
    /// intervals), notices for max(6 TTL, 60 s).
    pub fn for_lease(lease: &fence_core::LeaseConfig) -> Timing {
        let poll = lease.poll_ms();
        let interval_ms = (lease.ttl_ms / 5).clamp(poll, 2_000.max(poll));
        Timing {
            interval_ms,
            settle_ms: interval_ms,
            min_hold_ms: 2 * interval_ms,
            head_poll_ms: Some((lease.ttl_ms / 3).max(1)),
            scan_ms: (3 * lease.ttl_ms).max(10 * interval_ms),
            follow_ms: None,
            notices_ms: (6 * lease.ttl_ms).max(60_000),
            lease: lease.clone(),
        }
    }

    /// The poll period of the lease ([`poll_ms`](fence_core::LeaseConfig::poll_ms)).
    pub fn poll_ms(&self) -> u64 {
        self.lease.poll_ms()
    }
}

#[cfg(test)]
mod tests;
