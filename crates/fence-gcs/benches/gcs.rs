//! CAS latency of `GcsStore` against a raw reqwest request of the same shape (one JSON-API
//! multipart upload with `ifGenerationMatch`) on the same fake-gcs-server, interleaved in one
//! run; plus HTTP round trips per lease operation.
//!
//! Needs `FENCE_GCS_ENDPOINT` and `FENCE_GCS_BUCKET` (from `scripts/servers/gcs.sh start`);
//! without them it prints a notice and exits 0. `FENCE_BENCH_ITERS` sets the sample count.
#![allow(clippy::disallowed_methods)] // a benchmark must read the monotonic clock itself

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fence_core::{CasGuard, ConditionalStore, Entropy, Key, PutOutcome};
use fence_gcs::GcsStore;

struct Raw {
    http: reqwest::Client,
    endpoint: String,
    bucket: String,
    name: String,
}

impl Raw {
    /// One multipart upload with `ifGenerationMatch`, its generation parsed from the answer.
    async fn cas(&self, generation: &str, body: &[u8]) -> String {
        let boundary = "fence_bench_boundary";
        let mut payload = format!(
            "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{}\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n",
            serde_json::json!({ "name": self.name })
        )
        .into_bytes();
        payload.extend_from_slice(body);
        payload.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=multipart&ifGenerationMatch={generation}",
            self.endpoint, self.bucket
        );
        let resp = self
            .http
            .post(url)
            .header(
                "content-type",
                format!("multipart/related; boundary={boundary}"),
            )
            .body(payload)
            .send()
            .await
            .expect("raw upload");
        assert_eq!(resp.status().as_u16(), 200, "raw CAS applies");
        let json: serde_json::Value =
            serde_json::from_slice(&resp.bytes().await.expect("body")).expect("json");
        json["generation"].as_str().expect("generation").to_owned()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn summary(label: &str, samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    let (med, p99) = (percentile(samples, 0.5), percentile(samples, 0.99));
    println!(
        "{label:<28} n={:<5} median {:>8.3} ms   p99 {:>8.3} ms",
        samples.len(),
        med.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    (med, p99)
}

async fn cas_latency(store: &GcsStore, raw: &Raw, iters: usize) {
    let key = Key::new("bench/cas.json").unwrap();
    let body = |i: usize| {
        Bytes::from(format!(
            "{{\"renewal\":{i},\"pad\":\"{}\"}}",
            "x".repeat(200)
        ))
    };
    let PutOutcome::Applied(mut version) =
        store.put(&key, body(0), CasGuard::Absent).await.unwrap()
    else {
        panic!("fresh key")
    };
    let mut raw_gen = raw.cas("0", &body(0)).await;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 1..=iters {
        let run_store_first = i % 2 == 0;
        for turn in 0..2 {
            if (turn == 0) == run_store_first {
                let t = Instant::now();
                let out = store
                    .put(&key, body(i), CasGuard::Match(version.clone()))
                    .await;
                ours.push(t.elapsed());
                version = match out.unwrap() {
                    PutOutcome::Applied(v) => v,
                    PutOutcome::Rejected => panic!("bench CAS rejected"),
                };
            } else {
                let t = Instant::now();
                raw_gen = raw.cas(&raw_gen, &body(i)).await;
                theirs.push(t.elapsed());
            }
        }
    }
    let (m1, p1) = summary("GcsStore CAS (put Match)", &mut ours);
    let (m2, p2) = summary("raw reqwest multipart CAS", &mut theirs);
    println!(
        "ratio GcsStore/raw: median {:.2}x, p99 {:.2}x",
        m1.as_secs_f64() / m2.as_secs_f64(),
        p1.as_secs_f64() / p2.as_secs_f64()
    );
}

/// Round trips of each lease operation through the runtime (fence-testkit), and the HTTP
/// requests they took on the wire (equal: the adapter never retries a write).
async fn round_trips(store: Arc<GcsStore>) {
    let before = store.requests_sent();
    let prefix = Key::new("rt").unwrap();
    let rows = fence_testkit::round_trips::measure(store.clone(), &prefix, Duration::from_secs(3))
        .await
        .expect("round trips");
    print!("{rows}");
    println!(
        "HTTP requests on the wire for these operations and background renewals: {}",
        store.requests_sent() - before
    );
}

fn main() {
    let (Ok(endpoint), Ok(bucket)) = (
        std::env::var("FENCE_GCS_ENDPOINT"),
        std::env::var("FENCE_GCS_BUCKET"),
    ) else {
        println!("gcs bench skipped: FENCE_GCS_ENDPOINT/FENCE_GCS_BUCKET unset (run scripts/servers/gcs.sh start)");
        return;
    };
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` this is a smoke run.
    let full = std::env::args().any(|a| a == "--bench");
    let iters = std::env::var("FENCE_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 500 } else { 10 });
    let prefix = format!("fence-gcs-bench/run-{:016x}", Entropy::from_os().next_u64());
    let store = GcsStore::builder()
        .with_url(format!("gs://{bucket}/{prefix}"))
        .with_endpoint(&endpoint)
        .with_anonymous()
        .build()
        .expect("store");
    let raw = Raw {
        http: reqwest::Client::new(),
        endpoint,
        bucket,
        name: format!("{prefix}/bench/raw.json"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("fence-gcs bench: {iters} interleaved CAS pairs on fake-gcs-server");
        cas_latency(&store, &raw, iters).await;
        round_trips(Arc::new(store)).await;
    });
}
