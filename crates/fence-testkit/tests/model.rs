//! The exhaustive model check of the real decision core.
//!
//! `FENCE_MODEL_LARGE=1` also checks the larger scopes (1 faulty answer over 3 ticks;
//! releases, hand-offs and a co-writer; succession and adoption with a pause; three nodes
//! with mixed TTLs; a takeover racing a faulty append; 2 nodes × 2 cells with a pause and
//! writes);
//! `FENCE_MODEL_PRESET=faults|ci-two-faults|three-nodes|hand-off|faulty|quick|mixed-ttls|resume|succession|adoption|collection|collection-across-epochs|collection-faults|release|log|log-takeover|log-handover|log-faults|two-cells|two-by-two`
//! runs one of them in place of the CI scope (`faults`, 2 faulty answers with a write, has not
//! been seen to finish);
//! `FENCE_MODEL_SCOPE=<chaos>,<settle>,<faults>,<pauses>,<crashes>` overrides the CI scope's
//! ticks and budgets for experiments (`FENCE_MODEL_WRITES=<n>` its data writes per node,
//! `FENCE_MODEL_CELLS=<n>` its cells, 1 to 4, `FENCE_MODEL_TTL=<ms>[,<ms>…]` its nodes'
//! TTLs); `FENCE_MODEL_SWITCH=<name>` checks only that sabotage switch (`--features
//! sabotage`).

use fence_testkit::model::{check, run, Exception, ModelConfig};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn ci_scope() -> ModelConfig {
    let mut cfg = match std::env::var("FENCE_MODEL_PRESET").as_deref() {
        Ok("hand-off") => ModelConfig::ci_hand_off(),
        Ok("faults") => ModelConfig::two_faults(),
        Ok("ci-two-faults") => ModelConfig::ci_two_faults(),
        Ok("three-nodes") => ModelConfig::three_nodes(),
        Ok("faulty") => ModelConfig::faulty(),
        Ok("resume") => ModelConfig::resume(),
        Ok("quick") => ModelConfig::quick(),
        Ok("log") => ModelConfig::log(),
        Ok("log-takeover") => ModelConfig::log_takeover(),
        Ok("log-faults") => ModelConfig::log_faults(),
        Ok("two-cells") => ModelConfig::two_cells(),
        Ok("two-by-two") => ModelConfig::two_by_two(),
        Ok("mixed-ttls") => ModelConfig::mixed_ttls(),
        Ok("log-handover") => ModelConfig::log_handover(),
        Ok("release") => ModelConfig::release(),
        Ok("collection-across-epochs") => ModelConfig::collection_across_epochs(),
        Ok("collection-faults") => ModelConfig::collection_faults(),
        Ok("succession") => ModelConfig::succession(),
        Ok("adoption") => ModelConfig::adoption(),
        Ok("collection") => ModelConfig::collection(),
        _ => ModelConfig::ci(),
    };
    if let Ok(s) = std::env::var("FENCE_MODEL_LOG") {
        let v: Vec<u32> = s.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        if let [nodes, faults, pauses, co_writes, appends] = v[..] {
            cfg = ModelConfig {
                nodes: nodes as usize,
                faults: faults as u8,
                pauses: pauses as u8,
                co_writes: co_writes as u8,
                appends: appends as u8,
                ..ModelConfig::log_takeover()
            };
        }
    }
    if let Ok(s) = std::env::var("FENCE_MODEL_SCOPE") {
        let v: Vec<u32> = s.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        if let [chaos, settle, faults, pauses, crashes] = v[..] {
            cfg.chaos_ticks = chaos;
            cfg.settle_ticks = settle;
            cfg.faults = faults as u8;
            cfg.pauses = pauses as u8;
            cfg.crashes = crashes as u8;
        }
    }
    if let Ok(s) = std::env::var("FENCE_MODEL_WRITES") {
        cfg.writes = s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("FENCE_MODEL_WRITES={s:?}: a number of writes, 0 to 255"));
    }
    if let Ok(s) = std::env::var("FENCE_MODEL_TTL") {
        cfg.ttl_ms = s
            .split(',')
            .map(|t| {
                t.trim().parse().unwrap_or_else(|_| {
                    panic!("FENCE_MODEL_TTL={s:?}: TTLs in ms, comma-separated")
                })
            })
            .collect();
    }
    if let Ok(s) = std::env::var("FENCE_MODEL_CELLS") {
        cfg.cells = s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("FENCE_MODEL_CELLS={s:?}: a number of cells, 1 to 4"));
    }
    cfg.canonical = std::env::var_os("FENCE_MODEL_NO_CANONICAL").is_none();
    cfg
}

/// Checks every state of `cfg`, prints the CI line, and fails with the counterexamples.
fn assert_clean(cfg: &ModelConfig) {
    let report = check(cfg);
    println!("{}", report.summary());
    assert!(
        report.is_clean(),
        "{}\n{}",
        report.summary(),
        report.counterexamples()
    );
}

/// A faulty answer, a pause and a crash: every state of `ModelConfig::ci()`.
#[test]
fn every_state_of_the_ci_scope_holds_every_property() {
    assert_clean(&ci_scope());
}

/// Two faulty answers, a pause and a crash: every state of `ModelConfig::ci_two_faults()`.
#[test]
fn every_state_of_the_two_fault_scope_holds_every_property() {
    assert_clean(&ModelConfig::ci_two_faults());
}

/// Choices during a third tick (no faulty answer, no crash): every state of
/// `ModelConfig::quick()`.
#[test]
fn every_state_of_the_quick_scope_holds_every_property() {
    assert_clean(&ModelConfig::quick());
}

/// A release, and a pause that may suspend node 0 with its release in flight: every state
/// of `ModelConfig::release()`.
#[test]
fn every_state_of_the_release_scope_holds_every_property() {
    assert_clean(&ModelConfig::release());
}

/// Payload collection racing a co-writer at the claim's epoch, and collection meeting the
/// current payload object of an earlier epoch (carried forward by a claim after a release):
/// every state of `ModelConfig::collection()` and `ModelConfig::collection_across_epochs()`.
#[test]
fn every_state_of_the_collection_scopes_holds_every_property() {
    assert_clean(&ModelConfig::collection());
    assert_clean(&ModelConfig::collection_across_epochs());
}

/// Node 0's TTL twice node 1's: every state of `ModelConfig::mixed_ttls()`.
#[test]
fn every_state_of_the_mixed_ttl_scope_holds_every_property() {
    assert_clean(&ModelConfig::mixed_ttls());
}

/// The append log, driven by the model: three appends, a faulty answer and a co-writer at
/// the claim's epoch, every ambiguous append settled by a seal (`ModelConfig::log()`); a
/// takeover in the middle of an append (`ModelConfig::log_takeover()`); and two appending
/// nodes, the first one's append left ambiguous by a faulty answer while the second takes
/// the cell over and appends at the same sequence number (`ModelConfig::log_handover()`).
/// Every state of each. (`ModelConfig::log_faults()`, the same race over two ticks of faults
/// with one appending node, is on demand: `FENCE_MODEL_LARGE=1`.)
#[test]
fn every_state_of_the_log_scopes_holds_every_property() {
    assert_clean(&ModelConfig::log());
    assert_clean(&ModelConfig::log_takeover());
    assert_clean(&ModelConfig::log_handover());
}

/// A lapsed node resuming its cell as its own successor while its peer takes it over, and
/// an adoption racing a hand-off of the same lease: every state of
/// `ModelConfig::succession()` and `ModelConfig::adoption()`.
#[test]
fn every_state_of_the_resume_scopes_holds_every_property() {
    assert_clean(&ModelConfig::succession());
    assert_clean(&ModelConfig::adoption());
}

/// Two cells, each claimed by both nodes under their one lease and register: every state of
/// `ModelConfig::two_cells()`. Its report must have seen one lease hold both cells at once
/// (a `sometimes` property of every scope of two cells).
#[test]
fn every_state_of_the_two_cell_scope_holds_every_property() {
    let cfg = ModelConfig::two_cells();
    assert_eq!(cfg.cells, 2);
    assert_clean(&cfg);
}

/// The larger scopes, on demand (`FENCE_MODEL_LARGE=1`): 1 faulty answer over 3 ticks;
/// releases, hand-offs and a co-writer; succession and adoption with a pause; three nodes
/// with mixed TTLs; a takeover racing a faulty append; 2 nodes × 2 cells.
#[test]
fn the_larger_scopes_on_demand() {
    if std::env::var_os("FENCE_MODEL_LARGE").is_none() {
        println!("larger model scopes skipped: set FENCE_MODEL_LARGE=1");
        return;
    }
    for cfg in [
        ModelConfig::faulty(),
        ModelConfig::ci_hand_off(),
        ModelConfig::resume(),
        ModelConfig::three_nodes(),
        ModelConfig::log_faults(),
        ModelConfig::two_by_two(),
    ] {
        assert_clean(&cfg);
    }
}

/// Each assumption docs/design.md names, broken on purpose: the check must find two nodes
/// that believe they hold the cell at once.
#[test]
fn each_admitted_exception_is_found_when_switched_on() {
    // A clock 0.25 % slow, a quarter beyond the 0.2 % margin a peer's observation allows
    // for (over a hold of three ticks, less is below the model's millisecond).
    let beyond = Exception::SlowClock { ppm: 2_500 };
    for exception in [Exception::SlowClocks, Exception::WallBehind, beyond] {
        let cfg = ModelConfig {
            exception: Some(exception),
            pauses: 1,
            ..ModelConfig::bare()
        };
        let report = run(&cfg, true);
        let found = report
            .violations
            .iter()
            .find(|c| c.property == fence_testkit::model::EXCLUSION);
        let Some(c) = found else {
            panic!(
                "{exception:?} not found: {}\n{}",
                report.summary(),
                report.counterexamples()
            );
        };
        println!(
            "exception {exception:?}: model check counterexample at depth {}",
            c.depth
        );
        println!("{c}");
    }
}

/// Every sabotage switch of `fence_core::sabotage` the model reaches must be caught by the
/// model check, in the smallest scope that exercises it, with a readable counterexample.
#[cfg(feature = "sabotage")]
#[test]
fn every_sabotage_switch_is_caught_by_the_model_check() {
    use fence_testkit::model::Sabotage;
    let mut missed = Vec::new();
    // `FENCE_MODEL_SWITCH=<name>` checks one switch only (for a developer chasing one).
    let only = std::env::var("FENCE_MODEL_SWITCH").ok();
    let switches =
        Sabotage::selected(only.as_deref()).unwrap_or_else(|e| panic!("FENCE_MODEL_SWITCH: {e}"));
    for switch in switches {
        let report = run(&ModelConfig::catching(switch), true);
        match report.violations.first() {
            Some(c) => {
                println!(
                    "sabotage {switch}: model check counterexample at depth {} ({} states, {:.1} s)",
                    c.depth,
                    report.states,
                    report.elapsed.as_secs_f64()
                );
                println!("{c}\n");
            }
            None => {
                println!("sabotage {switch}: NOT caught ({})", report.summary());
                missed.push(switch.name());
            }
        }
    }
    assert!(
        missed.is_empty(),
        "not caught by the model check: {missed:?}"
    );
}

/// The canonical form (what cannot affect the future forgotten) merges states and changes no
/// verdict: a small scope with a pause, a crash and a write, checked with and without it.
#[test]
fn the_canonical_form_merges_states_and_keeps_every_verdict() {
    let cfg = ModelConfig {
        pauses: 1,
        crashes: 1,
        writes: 1,
        chaos_ticks: 1,
        settle_ticks: 8,
        ..ModelConfig::bare()
    };
    let plain = check(&ModelConfig {
        canonical: false,
        ..cfg.clone()
    });
    let canonical = check(&cfg);
    println!("without the canonical form: {}", plain.summary());
    println!("with it: {}", canonical.summary());
    assert!(plain.is_clean(), "{}", plain.counterexamples());
    assert!(canonical.is_clean(), "{}", canonical.counterexamples());
    assert!(
        canonical.states < plain.states,
        "the canonical form merged nothing: {} states, {} without it",
        canonical.states,
        plain.states
    );
}

/// A clock rate within the margin a peer's observation allows for is no breach: node 0's
/// monotonic and wall clocks 0.2 % slow (2,000 ppm, the whole margin), one pause, every
/// state holds every property. (Beyond the margin the exception is found:
/// `each_admitted_exception_is_found_when_switched_on`.)
#[test]
fn every_state_with_a_clock_slow_within_the_margin_holds_every_property() {
    assert_clean(&ModelConfig {
        exception: Some(Exception::SlowClock { ppm: 2_000 }),
        pauses: 1,
        ..ModelConfig::bare()
    });
}
