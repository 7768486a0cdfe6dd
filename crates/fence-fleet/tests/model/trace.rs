//! A counterexample as a readable trace: each step, then the store and the nodes after it.

use fence_testkit::model::Counterexample;
use stateright::Path;

use super::world::{node_name, Action, FleetModel, Node, World};

/// The trace of `path` (fence-testkit's [`Counterexample`], which the fleet's model check
/// shares with fence's), cut at its first state where `holds` is false.
pub fn counterexample(
    model: &FleetModel,
    property: &'static str,
    path: Path<World, Action>,
    holds: Option<fn(&FleetModel, &World) -> bool>,
) -> Counterexample {
    let mut steps = Vec::new();
    for (state, action) in path.into_vec() {
        let broken = holds.is_some_and(|h| !h(model, &state));
        steps.push(format!("   {}", describe(model, &state)));
        match action {
            Some(a) if !broken => steps.push(format!("t={:>2}: {}", state.tick, what(&a))),
            _ => break,
        }
    }
    Counterexample {
        property,
        depth: steps.len() / 2,
        steps,
    }
}

fn what(a: &Action) -> String {
    let fault = |f: &Option<super::world::Fault>| match f {
        Some(f) => format!(" (FAULT: store answer #{} {:?})", f.at, f.kind),
        None => String::new(),
    };
    match a {
        Action::Tick => "time passes a tick; running nodes renew their leases".into(),
        Action::Act(n, f) => format!(
            "n{n}: its watcher reads the leases due, its task runs{}",
            fault(f)
        ),
        Action::Kill(n) => format!("n{n} is killed"),
        Action::Drain(n, f) => format!("n{n} drains{}", fault(f)),
        Action::Start(n) => format!("n{n} starts (joins)"),
    }
}

/// The heads, and what each node holds.
fn describe(m: &FleetModel, w: &World) -> String {
    let heads: Vec<String> = m
        .cells
        .iter()
        .map(|c| {
            let h = w.store.head(c);
            format!("{c}={}@{}", h.owner.as_deref().unwrap_or("-"), h.epoch)
        })
        .collect();
    let nodes: Vec<String> = w
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| match node {
            Node::Down => format!("{} down", node_name(n)),
            Node::Dead => format!("{} dead", node_name(n)),
            Node::Left => format!("{} left", node_name(n)),
            Node::Up(u) => {
                let held: Vec<String> = u.core.held().map(|(c, e)| format!("{c}@{e}")).collect();
                let lead = u
                    .core
                    .leader()
                    .map_or(String::new(), |l| format!(" leads@{}", l.term()));
                format!("{} holds [{}]{lead}", node_name(n), held.join(" "))
            }
        })
        .collect();
    format!("heads {} | {}", heads.join(" "), nodes.join("; "))
}
