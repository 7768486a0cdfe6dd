//! # fence-fleet
//!
//! Many cells over many nodes: each node runs a [`Fleet`] over the same set of cells and
//! keeps its fair share of them; no node's cost grows with the size of the fleet.
//!
//! - [`assign`]: where each cell should be — [`assign::plan`], the placement the fleet's
//!   leader keeps (sticky, at most `ceil(cells / nodes)` per node, an heir named for every
//!   cell), and [`assign::assign`], a pure function of the cells and the live nodes;
//! - [`Fleet`]: the node's task — reads its assignment record once per interval, takes its
//!   cells, hands cells on ([`CellClaim::hand_off`](fence_core::CellClaim::hand_off)),
//!   watches one other node and tombstones its lease when it dies, takes the cells it
//!   inherits, resumes its own cells after a restart, drains within a deadline, leads the
//!   fleet when it holds [`LEADER_CELL`], and reports its [`FleetEvent`]s through [`Events`];
//!   each held cell is a [`Shard`] ([`cell`](Shard::cell), [`epoch`](Shard::epoch),
//!   [`is_held`](Shard::is_held), a cancellation-safe [`lost`](Shard::lost));
//!   [`drain`](Fleet::drain) consumes it and returns the events nobody read;
//! - [`decide`]: the fleet's rules as a pure step machine ([`decide::FleetCore`],
//!   [`decide::LeaderCore`]), which the fleet's task drives and its model check explores;
//! - [`membership`]: who is alive by one listing of `nodes/` and a read per lease (for tools;
//!   the fleet itself reads one lease per node);
//! - [`follow()`]: a cell's owner, without claiming it; [`owners`]: many cells' owners at
//!   once; [`named_mine`]: the cells the store names as this node's;
//! - [`log`]: an append log whose writes do not grow with it.
//!
//! Every decision here is an input to the core's claims, hand-offs and fenced writes: the
//! epochs stay the fence. The guide is docs/fleet.md.
#![deny(missing_docs)]

pub mod assign;
mod assignment;
mod cells;
pub mod decide;
mod flaws;
mod fleet;
mod follow;
mod leader;
pub mod log;
pub mod membership;
mod run;
#[cfg(feature = "sabotage")]
pub mod sabotage;
mod shard;
mod watch;

pub use fleet::{Drained, Events, Fleet, FleetBuilder, MemberFilter};
pub use follow::{follow, named_mine, owners, Follow, Owner};
pub use leader::LEADER_CELL;
pub use shard::{FleetEvent, Shard, StopReason};

/// docs/fleet.md, compiled as doctests so its examples cannot rot.
#[doc = include_str!("../../../docs/fleet.md")]
#[cfg(doctest)]
pub struct FleetGuideDoctests;
