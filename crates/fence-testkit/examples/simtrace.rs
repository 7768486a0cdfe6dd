//! Prints the trace of one seed:
//! `cargo run -p fence-testkit --example simtrace -- <seed>`, or with
//! `--features sabotage -- <seed> <sabotage-switch-name>` for a broken core.
use fence_testkit::sim::{run_seed_traced, SimConfig};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    #[allow(unused_mut)]
    let mut cfg = SimConfig::default();
    #[cfg(feature = "sabotage")]
    {
        cfg.sabotage = args.get(2).and_then(|name| {
            fence_testkit::sim::Sabotage::ALL
                .into_iter()
                .find(|s| s.name() == name)
        });
    }
    let (outcome, events) = run_seed_traced(seed, &cfg);
    for e in &events {
        println!("{e:?}");
    }
    println!("{outcome}");
}
