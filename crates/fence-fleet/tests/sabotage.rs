//! Every fleet sabotage switch must be caught by the fleet's simulation — the real fleet on
//! the in-memory store, in virtual time — as by the model check (tests/model): a join, then
//! a drain, and the checks the fleet's guarantees make (docs/fleet.md).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use fence_core::Key;
use fence_fleet::decide::record::Assignment;
use fence_fleet::sabotage::Sabotage;
use support::*;

/// A check the fleet's guarantees make.
const PLACEMENT: &str = "no record of one term places a cell on two nodes";
const SETTLES: &str = "every cell is held again, each node its fair share";
const STICKY: &str = "a join moves only the cells the joiner takes";
const DRAIN: &str = "a drain hands every cell on, and they are held again at once";

/// The records in the store, by node.
async fn records(
    store: &std::sync::Arc<dyn fence_core::ConditionalStore>,
) -> BTreeMap<String, Assignment> {
    let mut out = BTreeMap::new();
    let folder = Key::new("fleet/nodes").unwrap();
    for key in store.list(Some(&folder)).await.unwrap() {
        let node = key
            .as_str()
            .rsplit('/')
            .next()
            .unwrap()
            .trim_end_matches(".json")
            .to_owned();
        let body = store.get(&key).await.unwrap().unwrap().body;
        if let Ok(a) = Assignment::decode(&key, &node, &body) {
            out.insert(node, a);
        }
    }
    out
}

/// Whether the records of the latest term place every cell on one node at most.
fn placed_once(records: &BTreeMap<String, Assignment>) -> bool {
    let term = records.values().map(|a| a.term).max().unwrap_or(0);
    let mut seen = std::collections::BTreeSet::new();
    let latest = records.values().filter(|a| a.term == term);
    latest
        .flat_map(|a| a.cells.iter())
        .all(|c| seen.insert(c.clone()))
}

/// A join and a drain among three nodes with `switch` on; the checks that failed.
async fn scenario(switch: Option<Sabotage>) -> Vec<&'static str> {
    let store = store();
    let cells = cells(12);
    let (a, b, c) = (node(&store, "a"), node(&store, "b"), node(&store, "c"));
    let start = |n: &Node| {
        let builder = n.fleet(&cells);
        match switch {
            Some(s) => builder.sabotage(s),
            None => builder,
        }
    };
    let mut failed = Vec::new();
    let (fa, _ea) = start(&a).start().await.unwrap();
    let (fb, _eb) = start(&b).start().await.unwrap();
    let Ok(two) = converges(&store, &cells, &[&fa, &fb], 20_000).await else {
        return vec![SETTLES];
    };
    // c joins: it takes its fair share (4 of 12), and nothing else moves.
    let (fc, _ec) = start(&c).start().await.unwrap();
    let joined = converges(&store, &cells, &[&fa, &fb, &fc], 20_000).await;
    if !placed_once(&records(&store).await) {
        failed.push(PLACEMENT);
    }
    let Ok(three) = joined else {
        failed.push(SETTLES);
        return failed;
    };
    if moves(&two, &three) != (4, 1) {
        failed.push(STICKY);
    }
    // c drains: it hands every cell on, and they are held again within a few intervals.
    let held = fc.held().len();
    let drained = fc.drain(Duration::from_secs(5)).await;
    let again = converges(&store, &cells, &[&fa, &fb], 4 * 200).await;
    if drained.handed_off.len() != held || again.is_err() {
        failed.push(DRAIN);
    }
    failed
}

#[tokio::test(start_paused = true)]
async fn the_clean_fleet_passes_every_check_of_the_sabotage_scenario() {
    let failed = scenario(None).await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// Each switch is caught: a check of the scenario fails with it on.
#[tokio::test(start_paused = true)]
async fn every_fleet_sabotage_switch_is_caught_by_the_fleets_simulation() {
    let only = std::env::var("FENCE_FLEET_SIM_SWITCH").ok();
    let switches = Sabotage::selected(only.as_deref()).unwrap_or_else(|e| panic!("{e}"));
    let mut missed = Vec::new();
    for switch in switches {
        let failed = scenario(Some(switch)).await;
        if failed.is_empty() {
            println!("sabotage {switch}: NOT caught by the fleet's simulation");
            missed.push(switch.name());
        } else {
            println!(
                "sabotage {switch}: caught by the fleet's simulation ({})",
                failed.join("; ")
            );
        }
    }
    assert!(
        missed.is_empty(),
        "not caught by the fleet's simulation: {missed:?}"
    );
}
