//! The exhaustive model check of the fleet's real rules, with `stateright`.
//!
//! Every node runs fence-fleet's own pure step machines — [`FleetCore`] (its record, the
//! notices it hears, the cells it wants and takes, hand-offs and their settlement,
//! releases, drains), the [`LeaderCore`] of whichever node holds the leadership cell
//! (takeover, joins, deaths, the sticky placement and each node's part), and its watcher's
//! schedule and burial rule — nothing is re-implemented. Only the world is the model's: a
//! store of heads, leases and records whose claims follow the core's claim rule (checked by
//! fence-testkit's model), time in ticks, node deaths, drains, joins, and store answers lost
//! or failed.
//!
//! Properties (module `props`): no assignment places a cell on two nodes; once the chaos
//! settled, every cell is held by exactly one live node and each node holds its fair share;
//! a cell moves only when its node died, left or drains, or the balance needs it; a cell
//! given up (a hand-off, a release, a leave) is held again within the hand-off bound.
//!
//! Needs the `sabotage` feature (`cargo test -p fence-fleet --features sabotage --test
//! model`), so that the clean check and the switches run on one build.
//! `FENCE_FLEET_MODEL_LARGE=1` also checks the larger scopes; `FENCE_FLEET_MODEL_SWITCH=<name>`
//! checks only that switch.
//!
//! [`FleetCore`]: fence_fleet::decide::FleetCore
//! [`LeaderCore`]: fence_fleet::decide::LeaderCore

mod props;
mod store;
mod trace;
mod world;

use fence_fleet::decide::Flaws;
use fence_fleet::sabotage::Sabotage;

use fence_testkit::model::{explore, ModelReport, Scope};
use world::FleetModel;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The scope of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Nodes in all.
    pub nodes: usize,
    /// Of them, those that start during the chaos (joiners); the others run from the start.
    pub joiners: usize,
    /// Cells.
    pub cells: usize,
    /// One tick, in ms: the interval, the head poll and a third of the TTL.
    pub tick_ms: u64,
    /// Store answers lost or failed, at most.
    pub faults: u8,
    /// Which store effects of an activation a fault may hit (the first this many).
    pub fault_depth: u8,
    /// Nodes killed, at most.
    pub kills: u8,
    /// Nodes drained, at most.
    pub drains: u8,
    /// Ticks during which the chaos happens.
    pub chaos_ticks: u32,
    /// Quiet ticks after it, by the end of which every cell must be held.
    pub settle_ticks: u32,
    /// How long a cell given up may stay unheld, in ticks.
    pub hand_off_bound_ticks: u32,
    /// The sabotage switch every node runs with.
    pub sabotage: Option<Sabotage>,
}

impl ModelConfig {
    /// The drain scope every CI run checks: 3 nodes, one of them joining, × 3 cells, and a
    /// drain, during the first 4 ticks; then 22 quiet ticks (more than a sweep period: a
    /// fleet whose leader went waits for one).
    pub fn ci() -> Self {
        ModelConfig {
            nodes: 3,
            joiners: 1,
            cells: 3,
            tick_ms: 300,
            faults: 0,
            fault_depth: 6,
            kills: 0,
            drains: 1,
            chaos_ticks: 4,
            settle_ticks: 22,
            hand_off_bound_ticks: 4,
            sabotage: None,
        }
    }

    /// The kill scope every CI run checks: [`ci`](Self::ci) with a kill instead of the drain.
    pub fn ci_kill() -> Self {
        ModelConfig {
            kills: 1,
            drains: 0,
            ..ModelConfig::ci()
        }
    }

    /// The fault scope every CI run checks: 2 nodes × 2 cells, one store answer lost or
    /// failed (any of the first 6 effects of an activation), and a drain.
    pub fn ci_faults() -> Self {
        ModelConfig {
            nodes: 2,
            joiners: 0,
            cells: 2,
            faults: 1,
            ..ModelConfig::ci()
        }
    }

    /// A join, a kill and a drain at once (on demand).
    pub fn join_kill_drain() -> Self {
        ModelConfig {
            kills: 1,
            ..ModelConfig::ci()
        }
    }

    /// A join and one store answer lost or failed, during 5 ticks, so that the joiner's
    /// hand-off meets the fault (on demand).
    pub fn join_faults() -> Self {
        ModelConfig {
            faults: 1,
            drains: 0,
            chaos_ticks: 5,
            ..ModelConfig::ci()
        }
    }

    /// The smallest scope that exercises what `switch` breaks.
    pub fn catching(switch: Sabotage) -> Self {
        let cfg = match switch {
            // A join moves a cell: the old node's part keeps it.
            Sabotage::PlaceTwice => ModelConfig {
                drains: 0,
                ..ModelConfig::ci()
            },
            // A join or a death reshuffles the placement.
            Sabotage::UnstickyPlacement => ModelConfig::ci_kill(),
            // A drain strands its cells: they wait for their new node's patience.
            Sabotage::LeaveStrandsCells => ModelConfig {
                joiners: 0,
                nodes: 2,
                ..ModelConfig::ci()
            },
        };
        ModelConfig {
            sabotage: Some(switch),
            ..cfg
        }
    }

    pub fn flaws(&self) -> Flaws {
        Flaws::switch(self.sabotage)
    }

    /// The scope, as the CI line prints it.
    pub fn scope(&self) -> String {
        let mut s = format!(
            "fleet of {} nodes ({} joining) x {} cells, ticks of {} ms (ttl 3 ticks), {} faults, {} kill, {} drain, {}+{} ticks, hand-off bound {} ticks",
            self.nodes,
            self.joiners,
            self.cells,
            self.tick_ms,
            self.faults,
            self.kills,
            self.drains,
            self.chaos_ticks,
            self.settle_ticks,
            self.hand_off_bound_ticks
        );
        if let Some(sw) = self.sabotage {
            s.push_str(&format!(", sabotage {sw}"));
        }
        s
    }
}

/// Checks every state of `cfg`'s scope (fence-testkit's explorer, as fence's model check),
/// until done or — with `first_failure` — until a property breaks.
pub fn run(cfg: &ModelConfig, first_failure: bool) -> ModelReport {
    let scope = Scope {
        name: cfg.scope(),
        first_failure,
        progress: "FENCE_FLEET_MODEL_PROGRESS",
    };
    explore(
        FleetModel::new(cfg.clone()),
        scope,
        props::reachable,
        trace::counterexample,
    )
}

fn assert_clean(cfg: &ModelConfig) {
    let report = run(cfg, false);
    println!("{}", report.summary());
    assert!(
        report.is_clean(),
        "{}\n{}",
        report.summary(),
        report.counterexamples()
    );
}

/// The CI scope, or (`FENCE_FLEET_MODEL_SCOPE=nodes,joiners,cells,faults,kills,drains,chaos,settle`)
/// another one for experiments.
fn ci_scope() -> ModelConfig {
    let mut cfg = ModelConfig::ci();
    if let Ok(s) = std::env::var("FENCE_FLEET_MODEL_SCOPE") {
        let v: Vec<u32> = s.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        if let [nodes, joiners, cells, faults, kills, drains, chaos, settle] = v[..] {
            cfg.nodes = nodes as usize;
            cfg.joiners = joiners as usize;
            cfg.cells = cells as usize;
            cfg.faults = faults as u8;
            cfg.kills = kills as u8;
            cfg.drains = drains as u8;
            cfg.chaos_ticks = chaos;
            cfg.settle_ticks = settle;
        }
    }
    cfg
}

/// A join and a drain among 3 nodes × 3 cells: every state of `ModelConfig::ci()` (or of
/// the scope `FENCE_FLEET_MODEL_SCOPE` names).
#[test]
fn every_state_of_the_fleet_ci_scope_holds_every_property() {
    assert_clean(&ci_scope());
}

/// A join and a kill; one lost or failed store answer and a drain: every state of
/// `ModelConfig::ci_kill()` and `ModelConfig::ci_faults()`.
#[test]
fn every_state_of_the_fleet_kill_and_fault_scopes_holds_every_property() {
    assert_clean(&ModelConfig::ci_kill());
    assert_clean(&ModelConfig::ci_faults());
}

/// The larger scopes, on demand (`FENCE_FLEET_MODEL_LARGE=1`): a join, a kill and a drain
/// at once; a join meeting a lost or failed store answer.
#[test]
fn the_larger_fleet_scopes_on_demand() {
    if std::env::var_os("FENCE_FLEET_MODEL_LARGE").is_none() {
        println!("larger fleet model scopes skipped: set FENCE_FLEET_MODEL_LARGE=1");
        return;
    }
    assert_clean(&ModelConfig::join_kill_drain());
    assert_clean(&ModelConfig::join_faults());
}

/// Every fleet sabotage switch is caught by the model check, with a readable
/// counterexample.
#[test]
fn every_fleet_sabotage_switch_is_caught_by_the_model_check() {
    let only = std::env::var("FENCE_FLEET_MODEL_SWITCH").ok();
    let switches = Sabotage::selected(only.as_deref()).unwrap_or_else(|e| panic!("{e}"));
    let mut missed = Vec::new();
    for switch in switches {
        let report = run(&ModelConfig::catching(switch), true);
        match report.violations.first() {
            Some(c) => {
                println!(
                    "sabotage {switch}: model check counterexample of \"{}\" at depth {} ({} states, {:.1} s)",
                    c.property,
                    c.depth,
                    report.states,
                    report.elapsed.as_secs_f64()
                );
                println!("{c}");
            }
            None => {
                println!("sabotage {switch}: NOT caught ({})", report.summary());
                missed.push(switch.name());
            }
        }
    }
    assert!(
        missed.is_empty(),
        "not caught by the fleet model check: {missed:?}"
    );
}
