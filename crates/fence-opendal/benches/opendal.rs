//! OpendalStore CAS latency against raw OpenDAL conditional writes (`write_with(..).if_match`,
//! the same operator settings, OpenDAL's own reqwest transport), measured interleaved on the
//! same server in one run, printed as median / p99 and their ratios. Goal: ≤ 1.05× on
//! SeaweedFS.
//!
//! Needs the servers of `scripts/servers/*.sh` (source their env files); without them it
//! prints a notice and exits 0. `FENCE_OPENDAL_BENCH_OPS` sets the updates per side (default
//! 300).
#![allow(clippy::disallowed_methods)] // a benchmark must read the real monotonic clock

use std::time::{Duration, Instant};

use fence_core::{CasGuard, ConditionalStore, Entropy, Key, PutOutcome, Version};
use fence_opendal::emulator;
use fence_opendal::OpendalStore;
use opendal::{HttpTransporter, OperationContext, Operator};
use opendal_http_transport_reqwest::ReqwestTransport;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// (name, operator factory for a root) of every server in the environment.
fn targets() -> Vec<(&'static str, emulator::Open)> {
    ["seaweedfs", "moto", "azurite"]
        .into_iter()
        .filter_map(|name| Some((name, emulator::from_test_env(name)?)))
        .collect()
}

fn main() {
    let targets = targets();
    if targets.is_empty() {
        println!("opendal bench: no FENCE_S3_* / FENCE_AZURE_* variables (run scripts/servers/*.sh start); skipped");
        return;
    }
    let ops: usize = var("FENCE_OPENDAL_BENCH_OPS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    for (name, open) in targets {
        runtime.block_on(bench_target(name, &open, ops));
    }
}

/// The same operator with OpenDAL's plain reqwest transport: what a user of OpenDAL alone
/// would send.
fn raw(op: Operator) -> Operator {
    let transport = HttpTransporter::new(ReqwestTransport::new(reqwest::Client::new()));
    op.with_context(OperationContext::new().with_http_transport(transport))
}

async fn bench_target(name: &str, open: &emulator::Open, ops: usize) {
    let root = format!(
        "/fence-opendal-bench/{:016x}",
        Entropy::from_os().next_u64()
    );
    let fence = OpendalStore::new(open(&root).expect("operator")).expect("store");
    let raw = raw(open(&root).expect("operator"));
    let key = Key::new("fence").expect("key");
    let mut version = fence_put(&fence, &key, 0, CasGuard::Absent).await.1;
    let mut etag = raw_put(&raw, 0, None).await.1;
    for i in 0..20 {
        // warm-up: connections, server caches
        version = fence_put(&fence, &key, i, CasGuard::Match(version)).await.1;
        etag = raw_put(&raw, i, Some(&etag)).await.1;
    }
    let (mut fence_ns, mut raw_ns) = (Vec::with_capacity(ops), Vec::with_capacity(ops));
    for i in 0..ops {
        // Alternate which side goes first, so neither always meets a warmer server.
        let first_fence = i % 2 == 0;
        if !first_fence {
            let (r, e) = raw_put(&raw, i, Some(&etag)).await;
            (raw_ns, etag) = (push(raw_ns, r), e);
        }
        let (d, v) = fence_put(&fence, &key, i, CasGuard::Match(version)).await;
        (fence_ns, version) = (push(fence_ns, d), v);
        if first_fence {
            let (r, e) = raw_put(&raw, i, Some(&etag)).await;
            (raw_ns, etag) = (push(raw_ns, r), e);
        }
    }
    report(name, ops, &mut fence_ns, &mut raw_ns);
}

fn push(mut v: Vec<Duration>, d: Duration) -> Vec<Duration> {
    v.push(d);
    v
}

fn body(i: usize) -> String {
    format!("{{\"node\":\"n1\",\"seq\":{i},\"expires_ms\":1700000000000}}")
}

async fn fence_put(
    store: &OpendalStore,
    key: &Key,
    i: usize,
    guard: CasGuard,
) -> (Duration, Version) {
    let start = Instant::now();
    let outcome = store.put(key, body(i).into(), guard).await;
    let took = start.elapsed();
    match outcome {
        Ok(PutOutcome::Applied(v)) => (took, v),
        other => panic!("OpendalStore CAS failed: {other:?}"),
    }
}

async fn raw_put(op: &Operator, i: usize, etag: Option<&str>) -> (Duration, String) {
    let start = Instant::now();
    let write = op.write_with("raw", body(i));
    let result = match etag {
        Some(tag) => write.if_match(tag).await,
        None => write.if_not_exists(true).await,
    };
    let took = start.elapsed();
    let meta = result.expect("raw conditional write");
    (took, meta.etag().expect("etag").to_string())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn report(name: &str, ops: usize, fence: &mut [Duration], raw: &mut [Duration]) {
    fence.sort();
    raw.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (fm, fp) = (percentile(fence, 0.5), percentile(fence, 0.99));
    let (rm, rp) = (percentile(raw, 0.5), percentile(raw, 0.99));
    println!(
        "opendal-{name}: {ops} If-Match CAS each, interleaved | OpendalStore median {:.3} ms \
         p99 {:.3} ms | raw OpenDAL write_with(if_match) median {:.3} ms p99 {:.3} ms | ratio \
         median {:.3}x p99 {:.3}x",
        ms(fm),
        ms(fp),
        ms(rm),
        ms(rp),
        ms(fm) / ms(rm),
        ms(fp) / ms(rp),
    );
}
