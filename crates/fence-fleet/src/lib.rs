//! # fence-fleet
//!
//! Many cells over many nodes, with no coordinator: each node runs a [`Fleet`] over the same
//! set of cells and keeps its fair share of them, judged from the store alone.
//!
//! - [`membership`]: who is alive — one listing of `nodes/` and one read per lease, judged
//!   by the observation rule the core's takeovers use;
//! - [`assign`]: where each cell should be — a pure function of the cells and the live
//!   nodes (rendezvous hashing, at most `ceil(cells / nodes)` per node);
//! - [`Fleet`]: the node's task — takes over dead nodes' cells with bounded concurrency,
//!   hands cells to joining nodes ([`CellClaim::hand_off`](fence_core::CellClaim::hand_off)),
//!   resumes its own cells after a restart, drains within a deadline, and reports each
//!   cell's [`CellEvent`]s; each held cell is a [`Shard`] with a cancellation-safe
//!   [`gone`](Shard::gone);
//! - [`follow()`]: a cell's owner, without claiming it; [`owners`]: many cells' owners at
//!   once; [`named_mine`]: the cells the store names as this node's;
//! - [`log`]: an append log whose writes do not grow with it.
//!
//! Every decision here is an input to the core's claims, hand-offs and fenced writes: the
//! epochs stay the fence. The guide is docs/fleet.md.
#![deny(missing_docs)]

pub mod assign;
mod assignment;
mod fleet;
mod follow;
mod leader;
pub mod log;
pub mod membership;
mod run;
mod shard;
mod watch;

pub use fleet::{Drained, Events, Fleet, FleetBuilder, MemberFilter};
pub use follow::{follow, named_mine, owners, Follow, Owner};
pub use leader::LEADER_CELL;
pub use shard::{CellEvent, Shard, StopReason};

/// docs/fleet.md, compiled as doctests so its examples cannot rot.
#[doc = include_str!("../../../docs/fleet.md")]
#[cfg(doctest)]
pub struct FleetGuideDoctests;
