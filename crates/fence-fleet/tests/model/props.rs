//! The properties the fleet's model check proves over every state of its scope.

use std::collections::BTreeSet;

use stateright::Property;

use super::world::{FleetModel, World};

/// No assignment of one leader names a cell for two nodes.
pub const ASSIGNMENT: &str = "no assignment places a cell on two nodes";
/// Once the chaos settled, every cell is held by exactly one live node, each its fair share.
pub const SETTLED: &str = "after the chaos every cell is held by exactly one live node";
/// A cell moves only when its node died, left or drains, or the balance needs it.
pub const MOVES: &str = "a cell moves only when its node goes or the balance needs it";
/// A cell given up is held again within the bound.
pub const HAND_OFF_GAP: &str = "a cell given up is held again within the hand-off bound";

pub fn all() -> Vec<Property<FleetModel>> {
    vec![
        Property::always(ASSIGNMENT, |_, w: &World| one_node_per_cell(w)),
        Property::always(SETTLED, |m: &FleetModel, w: &World| {
            w.tick < m.horizon() || m.settled(w)
        }),
        Property::always(MOVES, |_, w: &World| w.hist.bad_move.is_none()),
        Property::always(HAND_OFF_GAP, |m: &FleetModel, w: &World| {
            // A cell handed to a node that died meanwhile is the failover's to bound.
            w.hist.given.iter().all(|(c, t)| {
                m.owner_dead(w, c) || w.tick.saturating_sub(*t) <= m.cfg.hand_off_bound_ticks
            })
        }),
        Property::sometimes("a dead node's cell is taken over", |_, w: &World| {
            w.hist.took_over
        }),
        Property::sometimes("a drain hands a cell off", |_, w: &World| {
            w.hist.drain_handed
        }),
        Property::sometimes("a joiner takes a cell", |_, w: &World| w.hist.joiner_took),
        Property::sometimes("a hand-off without an answer is settled", |_, w: &World| {
            w.hist.settled
        }),
    ]
}

/// Every leader's parts place each cell on one node at most.
fn one_node_per_cell(w: &World) -> bool {
    w.nodes.iter().filter_map(|n| n.up()).all(|u| {
        let Some(l) = u.core.leader() else {
            return true;
        };
        let mut seen = BTreeSet::new();
        l.parts()
            .values()
            .flat_map(|p| p.cells.iter())
            .all(|c| seen.insert(c.clone()))
    })
}

/// Whether `name` (a `sometimes` property) can show in the scope.
pub fn reachable(name: &str, m: &FleetModel) -> bool {
    let cfg = &m.cfg;
    match name {
        "a dead node's cell is taken over" => cfg.kills > 0,
        "a drain hands a cell off" => cfg.drains > 0,
        "a joiner takes a cell" => cfg.joiners > 0 && cfg.cells >= cfg.nodes,
        // A placement's hand-off (a join's) meeting the fault, settled in a later round.
        "a hand-off without an answer is settled" => {
            cfg.faults > 0 && cfg.joiners > 0 && cfg.chaos_ticks >= 5
        }
        _ => true,
    }
}
