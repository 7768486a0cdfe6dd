//! AzureStore's conditional write against raw object_store `put_opts` with the same
//! `PutMode::Update`, on the same Azurite in one run, the two sides interleaved (alternating
//! which goes first); prints median and p99 of each and their ratios, then the requests per
//! fence operation.
//!
//! Needs the Azurite of `scripts/servers/azure.sh` (source `$FENCE_SERVERS_DIR/azure.env`);
//! without it it prints a notice and exits 0. `FENCE_AZURE_BENCH_OPS` sets the writes per
//! side (default 400).
#![allow(clippy::disallowed_methods)] // a benchmark must read the real monotonic clock

use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_azure::{AzureStore, EMULATOR_ACCOUNT};
use fence_core::{CasGuard, ConditionalStore, Entropy, Key, PutOutcome, Version};
use object_store::azure::{MicrosoftAzure, MicrosoftAzureBuilder};
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, RetryConfig, UpdateVersion};

/// The development account's published key (Azurite only).
const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn main() {
    let (Some(endpoint), Some(container)) =
        (var("FENCE_AZURE_ENDPOINT"), var("FENCE_AZURE_CONTAINER"))
    else {
        println!(
            "azure bench: no FENCE_AZURE_* variables (run scripts/servers/azure.sh start); skipped"
        );
        return;
    };
    let ops = var("FENCE_AZURE_BENCH_OPS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(bench(&endpoint, &container, ops));
}

/// The raw client, configured like AzureStore's conditional-write client (no retries).
fn raw_client(endpoint: &str, container: &str) -> MicrosoftAzure {
    MicrosoftAzureBuilder::new()
        .with_account(EMULATOR_ACCOUNT)
        .with_access_key(EMULATOR_KEY)
        .with_endpoint(format!("{endpoint}/{EMULATOR_ACCOUNT}"))
        .with_allow_http(true)
        .with_container_name(container)
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
        .build()
        .expect("raw client")
}

/// One side of the comparison: a conditional write chain on its own blob.
enum Side {
    Fence {
        store: AzureStore,
        key: Key,
        version: Version,
    },
    Raw {
        client: MicrosoftAzure,
        path: Path,
        e_tag: String,
    },
}

impl Side {
    /// One `If-Match` write of a fresh record; returns how long it took.
    async fn write(&mut self, seq: usize) -> Duration {
        let body = record(seq);
        match self {
            Side::Fence {
                store,
                key,
                version,
            } => {
                let guard = CasGuard::Match(version.clone());
                let start = Instant::now();
                let outcome = store.put(key, body.into(), guard).await;
                let took = start.elapsed();
                match outcome {
                    Ok(PutOutcome::Applied(v)) => *version = v,
                    other => panic!("AzureStore CAS failed: {other:?}"),
                }
                took
            }
            Side::Raw {
                client,
                path,
                e_tag,
            } => {
                let mode = PutMode::Update(UpdateVersion {
                    e_tag: Some(e_tag.clone()),
                    version: None,
                });
                let opts = PutOptions {
                    mode,
                    ..PutOptions::default()
                };
                let start = Instant::now();
                let result = client.put_opts(path, body.into(), opts).await;
                let took = start.elapsed();
                *e_tag = result.expect("raw put_opts").e_tag.expect("e_tag");
                took
            }
        }
    }
}

fn record(seq: usize) -> String {
    format!("{{\"node\":\"n1\",\"seq\":{seq},\"expires_ms\":1700000000000}}")
}

async fn bench(endpoint: &str, container: &str, ops: usize) {
    let prefix = format!("fence-azure-bench/{:016x}", Entropy::from_os().next_u64());
    let store = AzureStore::builder()
        .with_emulator(endpoint)
        .with_container(container)
        .with_prefix(&prefix)
        .build()
        .expect("store");
    let key = Key::new("fence").expect("key");
    let version = match store.put(&key, record(0).into(), CasGuard::Absent).await {
        Ok(PutOutcome::Applied(v)) => v,
        other => panic!("create failed: {other:?}"),
    };
    let client = raw_client(endpoint, container);
    let path = Path::from(format!("{prefix}/raw"));
    let created = client
        .put_opts(&path, record(0).into(), PutMode::Create.into())
        .await
        .expect("raw create");
    let e_tag = created.e_tag.expect("e_tag");
    let mut fence = Side::Fence {
        store,
        key,
        version,
    };
    let mut raw = Side::Raw {
        client,
        path,
        e_tag,
    };
    let (fence_times, raw_times) = interleave(&mut fence, &mut raw, ops).await;
    print_comparison(ops, fence_times, raw_times);
    let Side::Fence { store, .. } = fence else {
        unreachable!()
    };
    let rows = fence_testkit::round_trips::measure(
        Arc::new(store),
        &Key::new("rt").expect("key"),
        Duration::from_secs(3),
    )
    .await
    .expect("round trips");
    print!("azurite: {rows}");
}

/// Warms both sides up, then times `ops` writes each, alternating which side goes first.
async fn interleave(
    fence: &mut Side,
    raw: &mut Side,
    ops: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    for seq in 1..=30 {
        fence.write(seq).await;
        raw.write(seq).await;
    }
    let mut times = (Vec::with_capacity(ops), Vec::with_capacity(ops));
    for seq in 0..ops {
        if seq % 2 == 0 {
            times.0.push(fence.write(seq).await);
            times.1.push(raw.write(seq).await);
        } else {
            times.1.push(raw.write(seq).await);
            times.0.push(fence.write(seq).await);
        }
    }
    times
}

/// The value at quantile `q` of `samples` (sorted here).
fn quantile(samples: &mut [Duration], q: f64) -> f64 {
    samples.sort_unstable();
    let at = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[at].as_secs_f64() * 1e3
}

fn print_comparison(ops: usize, mut fence: Vec<Duration>, mut raw: Vec<Duration>) {
    let (fence_p50, raw_p50) = (quantile(&mut fence, 0.5), quantile(&mut raw, 0.5));
    let (fence_p99, raw_p99) = (quantile(&mut fence, 0.99), quantile(&mut raw, 0.99));
    println!(
        "azurite: {ops} If-Match writes per side, interleaved\n\
         \x20 AzureStore.put       median {fence_p50:.3} ms  p99 {fence_p99:.3} ms\n\
         \x20 raw put_opts(Update) median {raw_p50:.3} ms  p99 {raw_p99:.3} ms\n\
         \x20 ratio (AzureStore / raw): median {:.3}x  p99 {:.3}x",
        fence_p50 / raw_p50,
        fence_p99 / raw_p99,
    );
}
