//! S3Store CAS latency against raw object_store `put_opts` with the same `PutMode`, measured
//! interleaved on the same server in one run, printed as median / p99 and a ratio.
//!
//! Needs the servers of `scripts/servers/s3.sh` (source `$FENCE_SERVERS_DIR/s3.env`);
//! without them it prints a notice and exits 0. `FENCE_S3_BENCH_OPS` sets the updates per
//! side (default 300).
#![allow(clippy::disallowed_methods)] // a benchmark must read the real monotonic clock

use std::time::{Duration, Instant};

use fence_core::{CasGuard, ConditionalStore, Entropy, Key, PutOutcome, Version};
use fence_s3::S3Store;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, RetryConfig, UpdateVersion};

struct Target {
    name: &'static str,
    endpoint: String,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn main() {
    let Some(bucket) = var("FENCE_S3_BUCKET") else {
        println!("s3 bench: no FENCE_S3_* variables (run scripts/servers/s3.sh start); skipped");
        return;
    };
    let ops: usize = var("FENCE_S3_BENCH_OPS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let targets = [
        ("seaweedfs", "FENCE_S3_SEAWEED_ENDPOINT"),
        ("moto", "FENCE_S3_MOTO_ENDPOINT"),
    ]
    .into_iter()
    .filter_map(|(name, v)| {
        Some(Target {
            name,
            endpoint: var(v)?,
        })
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    for target in targets {
        runtime.block_on(bench_target(&target, &bucket, ops));
    }
}

fn credentials() -> (String, String, String) {
    (
        var("FENCE_S3_ACCESS_KEY_ID").unwrap_or_default(),
        var("FENCE_S3_SECRET_ACCESS_KEY").unwrap_or_default(),
        var("FENCE_S3_REGION").unwrap_or_else(|| "us-east-1".into()),
    )
}

fn fence_store(t: &Target, bucket: &str, prefix: &str) -> S3Store {
    let (access, secret, region) = credentials();
    S3Store::builder()
        .with_bucket(bucket)
        .with_prefix(prefix)
        .with_endpoint(&t.endpoint)
        .with_allow_http(true)
        .with_region(region)
        .with_credentials(&access, &secret)
        .build()
        .expect("store")
}

/// The raw client configured like S3Store's CAS client (no retries).
fn raw_store(t: &Target, bucket: &str) -> AmazonS3 {
    let (access, secret, region) = credentials();
    AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_endpoint(&t.endpoint)
        .with_allow_http(true)
        .with_region(region)
        .with_access_key_id(access)
        .with_secret_access_key(secret)
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
        .build()
        .expect("raw store")
}

async fn bench_target(t: &Target, bucket: &str, ops: usize) {
    let prefix = format!("fence-s3-bench/{:016x}", Entropy::from_os().next_u64());
    let fence = fence_store(t, bucket, &prefix);
    let raw = raw_store(t, bucket);
    let key = Key::new("fence").expect("key");
    let path = Path::from(format!("{prefix}/raw"));
    let mut version = fence_put(&fence, &key, 0, CasGuard::Absent).await.1;
    let mut e_tag = raw_put(&raw, &path, 0, PutMode::Create).await.1;
    for i in 0..20 {
        // warm-up: connections, server caches
        version = fence_put(&fence, &key, i, CasGuard::Match(version)).await.1;
        e_tag = raw_put(&raw, &path, i, update(e_tag)).await.1;
    }
    let (mut fence_ns, mut raw_ns) = (Vec::with_capacity(ops), Vec::with_capacity(ops));
    for i in 0..ops {
        // Alternate which side goes first, so neither always meets a warmer server.
        if i % 2 == 0 {
            let (d, v) = fence_put(&fence, &key, i, CasGuard::Match(version)).await;
            let (r, e) = raw_put(&raw, &path, i, update(e_tag)).await;
            (version, e_tag) = (v, e);
            fence_ns.push(d);
            raw_ns.push(r);
        } else {
            let (r, e) = raw_put(&raw, &path, i, update(e_tag)).await;
            let (d, v) = fence_put(&fence, &key, i, CasGuard::Match(version)).await;
            (version, e_tag) = (v, e);
            fence_ns.push(d);
            raw_ns.push(r);
        }
    }
    report(t.name, ops, &mut fence_ns, &mut raw_ns);
    let rows = fence_testkit::round_trips::measure(
        std::sync::Arc::new(fence),
        &Key::new("rt").expect("key"),
        Duration::from_secs(3),
    )
    .await
    .expect("round trips");
    print!("{}: {rows}", t.name);
}

fn update(e_tag: String) -> PutMode {
    PutMode::Update(UpdateVersion {
        e_tag: Some(e_tag),
        version: None,
    })
}

fn body(i: usize) -> String {
    format!("{{\"node\":\"n1\",\"seq\":{i},\"expires_ms\":1700000000000}}")
}

async fn fence_put(store: &S3Store, key: &Key, i: usize, guard: CasGuard) -> (Duration, Version) {
    let start = Instant::now();
    let outcome = store.put(key, body(i).into(), guard).await;
    let took = start.elapsed();
    match outcome {
        Ok(PutOutcome::Applied(v)) => (took, v),
        other => panic!("S3Store CAS failed: {other:?}"),
    }
}

async fn raw_put(store: &AmazonS3, path: &Path, i: usize, mode: PutMode) -> (Duration, String) {
    let opts = PutOptions {
        mode,
        ..PutOptions::default()
    };
    let start = Instant::now();
    let result = store.put_opts(path, body(i).into(), opts).await;
    let took = start.elapsed();
    (took, result.expect("raw put_opts").e_tag.expect("e_tag"))
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
        "{name}: {ops} If-Match CAS each, interleaved | S3Store median {:.3} ms p99 {:.3} ms | \
         raw put_opts median {:.3} ms p99 {:.3} ms | ratio median {:.3}x p99 {:.3}x",
        ms(fm),
        ms(fp),
        ms(rm),
        ms(rp),
        ms(fm) / ms(rm),
        ms(fp) / ms(rp),
    );
}
