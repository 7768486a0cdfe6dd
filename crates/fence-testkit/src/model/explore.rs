//! The exhaustive checker's run of one scope, for any model: fence's model check and
//! fence-fleet's share it.

use std::time::Duration;

use stateright::{Checker, HasDiscoveries, Model};

use super::{Counterexample, ModelReport};

/// How [`explore`] runs one check.
#[derive(Debug)]
pub struct Scope {
    /// The scope's words in the CI line.
    pub name: String,
    /// Stop at the first broken property.
    pub first_failure: bool,
    /// The variable that makes the check print its progress every 10 s.
    pub progress: &'static str,
}

/// The condition of an `always` property of model `M`.
pub type Condition<M> = fn(&M, &<M as Model>::State) -> bool;

/// Checks every state of `model` (breadth first, two threads) — fence's model check and
/// fence-fleet's share it — until done or, with `first_failure`, until a property breaks;
/// `reachable(name, model)` says whether a `sometimes` property can show in this scope at
/// all, `trace` makes a counterexample of a path (cut where an `always` condition fails).
pub fn explore<M>(
    model: M,
    scope: Scope,
    reachable: impl Fn(&str, &M) -> bool,
    trace: impl Fn(
        &M,
        &'static str,
        stateright::Path<M::State, M::Action>,
        Option<Condition<M>>,
    ) -> Counterexample,
) -> ModelReport
where
    M: Model + Send + Sync + 'static,
    M::State: std::hash::Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    #[allow(clippy::disallowed_methods)] // the report says how long the check took
    let started = std::time::Instant::now();
    let props = model.properties();
    let mut builder = model.checker().threads(2);
    if scope.first_failure {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs();
    if std::env::var_os(scope.progress).is_some() {
        progress(&checker, started);
    }
    let checker = checker.join();
    let discoveries = checker.discoveries();
    let mut violations = Vec::new();
    let mut never_seen = Vec::new();
    for p in &props {
        let found = discoveries.get(p.name);
        if p.expectation.discovery_is_failure() {
            if let Some(path) = found {
                let always = p.expectation == stateright::Expectation::Always;
                let holds = always.then_some(p.condition);
                violations.push(trace(checker.model(), p.name, path.clone(), holds));
            }
        } else if found.is_none() && reachable(p.name, checker.model()) {
            never_seen.push(p.name);
        }
    }
    // Done, and not because every property was discovered (the checker's other way to
    // finish) nor because the first failure stopped it: every reachable state was seen.
    let stopped_early =
        discoveries.len() == props.len() || (scope.first_failure && !violations.is_empty());
    ModelReport {
        scope: scope.name,
        states: checker.unique_state_count(),
        exhaustive: checker.is_done() && !stopped_early,
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
        violations,
        never_seen,
    }
}

/// Prints the checker's progress every 10 s until it is done.
fn progress<M: Model>(checker: &impl Checker<M>, started: std::time::Instant) {
    while !checker.is_done() {
        std::thread::sleep(Duration::from_secs(10));
        eprintln!(
            "model check progress: {} states, depth {}, {:.0} s",
            checker.unique_state_count(),
            checker.max_depth(),
            started.elapsed().as_secs_f64()
        );
    }
}
