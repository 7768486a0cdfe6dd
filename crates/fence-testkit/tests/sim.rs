//! The deterministic simulation: many seeds hold every property, a seed replays to the same
//! trace, and each sabotaged core is caught by the property it breaks.
//!
//! `FENCE_SIM_SEED=<seed>` replays one seed (printing its outcome); `FENCE_SIM_SEEDS=<n>`
//! changes how many seeds the main test runs (default 1,000).

use fence_testkit::sim::{
    replay_seed, run_seed, run_seeds, Property, Sabotage, SimConfig, SimSummary, SkewMode,
};

const DEFAULT_SEEDS: u64 = 1_000;

fn seed_count() -> u64 {
    std::env::var("FENCE_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEEDS)
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
    let summary = run_seeds(seeds, cfg, 2);
    println!(
        "simulation [{label}]: {} seeds in {:.1} s wall time, {} failed; {} acknowledged writes, {} faults, {} crashes; longest settle {} virtual ms (bound {} ms)",
        summary.runs,
        started.elapsed().as_secs_f64(),
        summary.failures.len(),
        summary.acks,
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
    let summary = run_and_report("skew within margin", 0..seed_count(), &SimConfig::default());
    assert_clean(&summary);
    assert!(summary.acks > 0, "the nodes got writes acknowledged");
}

#[test]
fn safety_holds_with_skew_beyond_the_margin() {
    let cfg = SimConfig {
        skew: SkewMode::BeyondMargin,
        ..SimConfig::default()
    };
    let n = (seed_count() / 5).max(1);
    let summary = run_and_report("skew beyond margin", 1_000_000..1_000_000 + n, &cfg);
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

/// Every seed of a handful, with `sabotage`, must violate `property`.
fn sabotage_is_caught(sabotage: Sabotage, property: Property) {
    let cfg = SimConfig {
        sabotage: Some(sabotage),
        ..SimConfig::default()
    };
    for seed in 0..5 {
        let outcome = run_seed(seed, &cfg);
        println!("{sabotage:?}: {outcome}");
        assert!(
            outcome.violated(property),
            "{sabotage:?} not caught by {}: {outcome}",
            property.label()
        );
        assert!(outcome
            .to_string()
            .contains(&format!("FENCE_SIM_SEED={seed}")));
    }
}

#[test]
fn a_core_that_skips_the_epoch_bump_is_caught() {
    sabotage_is_caught(Sabotage::SkipEpochBump, Property::OneWriterPerEpoch);
}

#[test]
fn a_renewal_that_does_not_fence_after_expiry_is_caught() {
    sabotage_is_caught(
        Sabotage::NoFenceAfterExpiry,
        Property::NoExpiredLeaseComesBack,
    );
}
