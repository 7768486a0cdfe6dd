//! The deterministic simulation: many seeds hold every property, a seed replays to the same
//! trace, and each sabotage switch inside the real core is caught.
//!
//! `FENCE_SIM_SEED=<seed>` replays one seed (printing its outcome); `FENCE_SIM_SEEDS=<n>`
//! changes how many seeds the main test runs (default 2,000); `FENCE_SIM_SABOTAGE_SEEDS=<n>`
//! how many each sabotage switch runs (default 200; feature `sabotage`);
//! `FENCE_SIM_SWITCH=<name>` runs that switch alone.

use fence_testkit::sim::{replay_seed, run_seed, run_seeds, SimConfig, SimSummary, SkewMode};

fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `seeds` (or the replayed seed) and prints the count and the wall time taken.
fn run_and_report(label: &str, seeds: std::ops::Range<u64>, cfg: &SimConfig) -> SimSummary {
    #[allow(clippy::disallowed_methods)] // the test reports the wall time the seeds took
    let started = std::time::Instant::now();
    let seeds = match replay_seed() {
        Some(seed) => {
            println!("{}", run_seed(seed, cfg));
            seed..seed + 1
        }
        None => seeds,
    };
    let summary = run_seeds(seeds, cfg, 2, true);
    println!(
        "simulation [{label}]: {} seeds in {:.1} s wall time, {} failed; {} acknowledged writes, {} resumes, {} faults, {} crashes; longest settle {} virtual ms (bound {} ms)",
        summary.runs,
        started.elapsed().as_secs_f64(),
        summary.failures.len(),
        summary.acks,
        summary.resumes,
        summary.faults,
        summary.crashes,
        summary.max_settle_ms,
        cfg.settle_bound_ms(),
    );
    summary
}

fn assert_clean(summary: &SimSummary) {
    let lines: Vec<String> = summary.failures.iter().map(|o| o.to_string()).collect();
    assert!(summary.failures.is_empty(), "{}", lines.join("\n"));
}

#[test]
fn every_property_holds_over_many_seeds() {
    let n = env_count("FENCE_SIM_SEEDS", 2_000);
    let summary = run_and_report("skew within margin", 0..n, &SimConfig::default());
    println!(
        "real core: {} of {} seeds failed",
        summary.failures.len(),
        summary.runs
    );
    assert_clean(&summary);
    assert!(summary.acks > 0, "the nodes got writes acknowledged");
    assert!(summary.resumes > 0, "hand-offs and recoveries were resumed");
}

#[test]
fn safety_and_exclusion_hold_with_skew_beyond_the_margin() {
    let cfg = SimConfig {
        skew: SkewMode::BeyondMargin,
        ..SimConfig::default()
    };
    let n = (env_count("FENCE_SIM_SEEDS", 2_000) / 5).max(1);
    let summary = run_and_report("skew beyond margin", 1_000_000..1_000_000 + n, &cfg);
    println!(
        "real core, skew beyond margin: {} of {} seeds failed",
        summary.failures.len(),
        summary.runs
    );
    assert_clean(&summary);
}

#[test]
fn same_seed_same_trace() {
    let cfg = SimConfig::default();
    for seed in [1, 42, 4_242, 7, 99, 123_456, 31_337, 2_024] {
        let (a, b) = (run_seed(seed, &cfg), run_seed(seed, &cfg));
        println!("{a}");
        assert_eq!(
            a.trace_hash, b.trace_hash,
            "seed {seed} is not deterministic"
        );
        assert_eq!((a.events, a.acks), (b.events, b.acks));
    }
    assert_ne!(
        run_seed(1, &cfg).trace_hash,
        run_seed(2, &cfg).trace_hash,
        "different seeds drive different runs"
    );
}

/// Every switch inside the real core must be caught by some seed; the count is printed.
/// Needs the `sabotage` feature: `cargo test -p fence-testkit --features sabotage --test sim`.
/// Switches the simulation does not reach, not run here (unless `FENCE_SIM_SWITCH` names
/// one); the model check catches each. Three break the append log (`AppendLog`), which
/// lives in fence-fleet, a crate above this one; `register-admits-twice` breaks a register
/// the model check drives with the switch, and the runtime's registers carry none;
/// `observer-ignores-stated-ttl` needs nodes with different TTLs, and every node of the
/// simulation has the same one; `superseded-forgets-ambiguity` needs a write whose answer
/// was lost to be superseded before its read-back comes back (caught in 0 of 200 seeds).
#[cfg(feature = "sabotage")]
const MODEL_ONLY: [fence_testkit::sim::Sabotage; 6] = [
    fence_testkit::sim::Sabotage::SupersededForgetsAmbiguity,
    fence_testkit::sim::Sabotage::LogAcceptsForeignRecord,
    fence_testkit::sim::Sabotage::LogRunIgnoresTag,
    fence_testkit::sim::Sabotage::LogSettlesOnOwnOrphan,
    fence_testkit::sim::Sabotage::RegisterAdmitsTwice,
    fence_testkit::sim::Sabotage::ObserverIgnoresStatedTtl,
];

#[cfg(feature = "sabotage")]
#[test]
fn every_sabotage_switch_is_caught() {
    use fence_testkit::sim::Sabotage;
    let n = env_count("FENCE_SIM_SABOTAGE_SEEDS", 200);
    let only = std::env::var("FENCE_SIM_SWITCH").ok();
    let switches =
        Sabotage::selected(only.as_deref()).unwrap_or_else(|e| panic!("FENCE_SIM_SWITCH: {e}"));
    let mut missed = Vec::new();
    for sabotage in switches {
        if MODEL_ONLY.contains(&sabotage) && only.is_none() {
            println!("sabotage {sabotage}: not run (the model check's: the simulation does not reach it)");
            continue;
        }
        let cfg = SimConfig {
            sabotage: Some(sabotage),
            ..SimConfig::default()
        };
        let summary = run_seeds(5_000_000..5_000_000 + n, &cfg, 2, false);
        let caught = summary.failures.len();
        println!(
            "sabotage {sabotage}: caught in {caught} of {} seeds",
            summary.runs
        );
        if let Some(first) = summary.failures.first() {
            println!(
                "  first: {}",
                first
                    .to_string()
                    .lines()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
        if !MODEL_ONLY.contains(&sabotage) && (caught as u64) < floor(n) {
            missed.push(format!("{sabotage} ({caught} of {n})"));
        }
    }
    assert!(
        missed.is_empty(),
        "sabotage caught in fewer than {} of {n} seeds: {missed:?}",
        floor(n)
    );
}

/// The fewest seeds of `n` that must catch each switch the simulation reaches: 5 of 200
/// (at least one). Not flaky: a seed drives the whole run (virtual time, one thread, seeded
/// randomness; `same_seed_same_trace` checks it), so a fixed range of seeds catches a switch
/// in the same number of runs every time, on any machine. The count moves only when the
/// simulation or the core changes; the weakest switches were caught in 10 to 21 of 200 when
/// this floor was set (docs/testkit.md), so it leaves a margin of two and more.
#[cfg(feature = "sabotage")]
fn floor(n: u64) -> u64 {
    (n * 5 / 200).max(1)
}
