//! Prints the trace of one seed:
//! `cargo run -p fence-testkit --example simtrace -- <seed> [<sabotage-switch-name>]`.
use fence_testkit::sim::{run_seed_traced, Sabotage, SimConfig};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let sabotage = args
        .get(2)
        .and_then(|name| Sabotage::ALL.into_iter().find(|s| s.name() == name));
    let cfg = SimConfig {
        sabotage,
        ..SimConfig::default()
    };
    let (outcome, events) = run_seed_traced(seed, &cfg);
    for e in &events {
        println!("{e:?}");
    }
    println!("{outcome}");
}
