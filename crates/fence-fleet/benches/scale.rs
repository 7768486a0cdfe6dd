//! The fleet at scale: requests per node per second by kind, fleet requests per second, the
//! busiest key prefix, dollars per node-month at S3 list prices and the failover time after a
//! SIGKILL — the real fleet, simulated in virtual time on one counting in-memory store.
//!
//! `cargo bench -p fence-fleet --bench scale` runs 16 and 256 nodes;
//! `FENCE_FLEET_SCALE=all` runs 3, 16, 256, 1,000 and 10,000 (the last alone took 33 minutes
//! of a busy 2-core machine and under 1 GB of memory), and
//! `FENCE_FLEET_SCALE=16,64` runs the sizes listed. `FENCE_FLEET_STORE=dynamodb` makes the
//! store's rejections carry the current object, as DynamoDB's do; every run also counts the
//! DynamoDB request units of its requests (a write unit per KB of item, a read unit per 4 KB).
#![allow(missing_docs)]

#[path = "../tests/support/scale.rs"]
mod scale;

fn sizes() -> Vec<usize> {
    match std::env::var("FENCE_FLEET_SCALE").ok().as_deref() {
        Some("all") => vec![3, 16, 256, 1_000, 10_000],
        Some(list) if !list.is_empty() => list
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .filter(|n| *n > 0)
            .collect(),
        _ => vec![16, 256],
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run the smallest.
    let sizes = if std::env::args().any(|a| a == "--bench") {
        sizes()
    } else {
        vec![16]
    };
    println!("{}", scale::ScaleReport::header());
    for n in sizes {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        let started = fence_core::clock::Stopwatch::start();
        let cfg = scale::ScaleConfig {
            telling: std::env::var("FENCE_FLEET_STORE").is_ok_and(|s| s == "dynamodb"),
            ..scale::ScaleConfig::new(n)
        };
        let report = rt.block_on(scale::run(&cfg));
        println!("{}", report.row());
        eprintln!(
            "  {n} nodes: {} cells, the killed nodes held {}, the kills moved {} (at most {} epochs each), {} moved while quiet; the leaver held {}, the leave moved {} (at most {} epochs each, all handed off: {}); the join moved {} (at most {} epochs each), the joiner holds {} (its share after {:?} ms); simulated in {:.1} s",
            report.cells,
            report.killed_cells,
            report.kill_moved,
            report.kill_most,
            report.quiet_moves,
            report.leave_held,
            report.leave_moved,
            report.leave_most,
            report.leave_handed_all,
            report.join_moved,
            report.join_most,
            report.join_held,
            report.join_ms,
            started.elapsed().as_secs_f64()
        );
    }
}
