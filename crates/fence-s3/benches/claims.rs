//! Claims at the minimum (issue 13), measured side by side in one run on MemoryStore, FsStore
//! and SeaweedFS:
//!
//! 1. requests per operation (one counting wrapper per fence; a fence's own lease renewals
//!    pass uncounted, so they never land in a measured operation);
//! 2. claim time of a cell holding a 16 MB payload against one holding 1 KB (goal ≤ 1.2×),
//!    and the body bytes a claim moves (goal < 64 KiB);
//! 3. mass takeover of a dead node's cells (64 in flight) against as many plain GET + PUT
//!    pairs on the same store in the same run (goal ≤ 1.2× on SeaweedFS);
//! 4. heap per held claim and per cell after its claim is dropped, counted by the global
//!    allocator of this binary (goal ≤ 256 B held, nothing retained).
//!
//! ```text
//! set -a; . /work/servers-shared/s3.env; set +a   # or $FENCE_SERVERS_DIR/s3.env
//! cargo bench -p fence-s3 --bench claims
//! ```
//!
//! Without `FENCE_S3_SEAWEED_ENDPOINT` (or when the server does not answer) it says so and
//! measures MemoryStore and FsStore only. `FENCE_CLAIMS_BENCH_CELLS` sets the cells of the
//! mass takeover (default 1000), `FENCE_CLAIMS_BENCH_ROUNDS` the claims per payload size
//! (default 100). Takes about a minute.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real monotonic clock

use std::alloc::System;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fence_core::{
    CasGuard, CellClaim, ConditionalStore, Entropy, ErrorKind, Fence, Key, LeaseKeeper,
    MemoryStore, Ownership, PutOutcome,
};
use fence_fs::FsStore;
use fence_s3::S3Store;
use fence_testkit::sim::PausableStore;
use fence_testkit::{BodyBytes, CountingStore, OpCounts};
use futures::StreamExt;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Lease TTL of the nodes that take over (the observation lasts one TTL).
const TAKEOVER_TTL: Duration = Duration::from_secs(2);
/// Lease TTL where nothing waits on one: renewals come due rarely.
const LONG_TTL: Duration = Duration::from_secs(10);
const IN_FLIGHT: usize = 64;
/// Mass takeovers per backend (each of its own dead node).
const TAKEOVERS: usize = 3;

struct Backend {
    name: &'static str,
    store: Arc<dyn ConditionalStore>,
    /// FsStore's root, removed when the run ends.
    _dir: Option<tempfile::TempDir>,
    /// Whether what the run writes outlives it (a shared server: the run deletes it).
    lasting: bool,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_count(name: &str, default: usize) -> usize {
    var(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cells = env_count("FENCE_CLAIMS_BENCH_CELLS", 1_000);
    let rounds = env_count("FENCE_CLAIMS_BENCH_ROUNDS", 100);
    let backends = runtime.block_on(backends());
    println!("claims bench: backends {}", names(&backends));
    runtime.block_on(async {
        requests_table(&backends).await;
        for b in &backends {
            payload_ratio(b, rounds).await;
        }
        for b in &backends {
            mass_takeover(b, cells).await;
        }
        for b in backends.iter().filter(|b| b.lasting) {
            clean_up(b).await;
        }
        drop(backends);
    });
    // Nothing of the first runtime may allocate while the heap is counted.
    runtime.shutdown_timeout(Duration::from_secs(1));
    memory_per_claim();
}

fn names(backends: &[Backend]) -> String {
    let v: Vec<_> = backends.iter().map(|b| b.name).collect();
    v.join(", ")
}

async fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().expect("temp dir");
    let fs = FsStore::open(dir.path()).expect("fs store");
    let mut all = vec![
        Backend {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            _dir: None,
            lasting: false,
        },
        Backend {
            name: "fs",
            store: Arc::new(fs),
            _dir: Some(dir),
            lasting: false,
        },
    ];
    if let Some(store) = seaweedfs().await {
        all.push(Backend {
            name: "seaweedfs",
            store,
            _dir: None,
            lasting: true,
        });
    }
    all
}

/// The shared SeaweedFS under a fresh prefix, if its variables are set and it answers.
async fn seaweedfs() -> Option<Arc<dyn ConditionalStore>> {
    let (Some(endpoint), Some(bucket)) = (var("FENCE_S3_SEAWEED_ENDPOINT"), var("FENCE_S3_BUCKET"))
    else {
        println!(
            "seaweedfs: FENCE_S3_SEAWEED_ENDPOINT / FENCE_S3_BUCKET not set (load the servers' \
             s3.env); SeaweedFS is NOT measured"
        );
        return None;
    };
    let prefix = format!("fence-claims-bench/{:016x}", Entropy::from_os().next_u64());
    let store = S3Store::builder()
        .with_bucket(bucket)
        .with_prefix(prefix)
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_region(var("FENCE_S3_REGION").unwrap_or_else(|| "us-east-1".into()))
        .with_credentials(
            &var("FENCE_S3_ACCESS_KEY_ID").unwrap_or_default(),
            &var("FENCE_S3_SECRET_ACCESS_KEY").unwrap_or_default(),
        )
        // The 16 MB cell's payload object is over the default 5 MiB record limit.
        .with_record_limit(32 << 20)
        .build();
    let store = match store {
        Ok(s) => s,
        Err(e) => {
            println!("seaweedfs: cannot configure a client ({e}); SeaweedFS is NOT measured");
            return None;
        }
    };
    let probe = Key::new("probe").expect("key");
    let write = async {
        store.put(&probe, "probe".into(), CasGuard::Absent).await?;
        store.get(&probe).await
    };
    match tokio::time::timeout(Duration::from_secs(5), write).await {
        Ok(Ok(Some(_))) => Some(Arc::new(store)),
        Ok(Ok(None)) => {
            println!("seaweedfs at {endpoint}: a write did not show; SeaweedFS is NOT measured");
            None
        }
        Ok(Err(e)) => {
            println!("seaweedfs at {endpoint}: {e}; SeaweedFS is NOT measured");
            None
        }
        Err(_) => {
            println!("seaweedfs at {endpoint}: no answer in 5 s; SeaweedFS is NOT measured");
            None
        }
    }
}

/// Deletes what the run wrote (the server is shared; SeaweedFS refuses writes when its disk
/// runs low).
async fn clean_up(b: &Backend) {
    let Ok(keys) = b.store.list(None).await else {
        println!(
            "{}: could not list what the run wrote; left in place",
            b.name
        );
        return;
    };
    futures::stream::iter(keys.iter())
        .map(|k| b.store.delete_immutable(k))
        .buffer_unordered(IN_FLIGHT)
        .for_each(|_| async {})
        .await;
    let left = b.store.list(None).await.map_or(keys.len(), |k| k.len());
    println!(
        "\n{}: deleted {} of the {} objects the run wrote",
        b.name,
        keys.len() - left,
        keys.len()
    );
}

/// One node: its fence, and the counter of the requests it sends (requests to its own lease
/// pass uncounted unless `count_lease`).
struct Node {
    fence: Fence,
    sent: Arc<CountingStore>,
}

impl Node {
    fn new(store: Arc<dyn ConditionalStore>, name: &str, ttl: Duration, count_lease: bool) -> Self {
        let mut counting = CountingStore::new(store.clone());
        if !count_lease {
            let lease = Ownership::new(store, name)
                .lease_key(name)
                .expect("lease key");
            counting = counting.ignoring(lease);
        }
        let sent = Arc::new(counting);
        let fence = Fence::builder(sent.clone(), name)
            .ttl(ttl)
            .build()
            .expect("fence");
        Node { fence, sent }
    }

    async fn acquire(&self) -> LeaseKeeper {
        let lease = self.fence.acquire().await.expect("acquire");
        self.sent.reset();
        lease
    }

    /// The requests since the last call, once background work (payload collection) ran.
    async fn counted(&self) -> OpCounts {
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.sent.reset()
    }
}

/// Claims `cells` with `IN_FLIGHT` in flight and keeps the claims.
async fn claim_all(lease: &LeaseKeeper, cells: &[String]) -> Vec<CellClaim> {
    let claimed = lease.claim_many(cells.iter().cloned(), IN_FLIGHT).await;
    claimed
        .into_iter()
        .map(|(cell, r)| r.unwrap_or_else(|e| panic!("claim {cell}: {e}")))
        .collect()
}

fn cell_names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// A node `name` that holds `cells` and then dies: its path to the store is cut, its lease
/// record stays as it last wrote it.
async fn dead_node(store: &Arc<dyn ConditionalStore>, name: &str, cells: &[String]) {
    let path = Arc::new(PausableStore::new(store.clone()));
    let node = Node::new(path.clone(), name, TAKEOVER_TTL, false);
    let lease = node.acquire().await;
    drop(claim_all(&lease, cells).await);
    path.kill();
}

/// `heir` observes the lease of the owner of `cell` once: a claim answered `Busy`. A full TTL
/// later, its next read of that lease confirms the owner's death.
async fn observe_owner(heir: &LeaseKeeper, cell: &str) {
    let busy = heir.claim(cell).await.expect_err("a live-looking owner");
    assert_eq!(busy.kind(), ErrorKind::Busy, "{busy}");
}

async fn wait_observation() {
    tokio::time::sleep(TAKEOVER_TTL + Duration::from_millis(50)).await;
}

struct Row {
    operation: &'static str,
    goal: &'static str,
    counts: OpCounts,
    /// How many operations the counts are for.
    per: u64,
}

fn row(operation: &'static str, goal: &'static str, counts: OpCounts) -> Row {
    Row {
        operation,
        goal,
        counts,
        per: 1,
    }
}

async fn requests_table(backends: &[Backend]) {
    let mut columns = Vec::new();
    for b in backends {
        columns.push(requests(&b.store).await);
    }
    println!("\nrequests per operation (get/put/delete), one counter per fence:");
    print!("  {:<46} {:<5}", "operation", "goal");
    for b in backends {
        print!(" {:>12}", b.name);
    }
    println!();
    for (i, r) in columns[0].iter().enumerate() {
        print!("  {:<46} {:<5}", r.operation, r.goal);
        for column in &columns {
            print!(" {:>12}", cell(&column[i]));
        }
        println!();
    }
}

fn cell(r: &Row) -> String {
    let c = r.counts;
    let total = c.total() as f64 / r.per as f64;
    format!("{total} ({}/{}/{})", c.get, c.put, c.delete)
}

async fn requests(store: &Arc<dyn ConditionalStore>) -> Vec<Row> {
    let fresh = Node::new(store.clone(), "fresh", LONG_TTL, true);
    let lease = fresh.fence.acquire().await.expect("acquire");
    let mut rows = vec![row(
        "fresh acquire of a node lease",
        "1",
        fresh.sent.reset(),
    )];
    lease.release().await;
    rows.extend(cell_rows(store).await);
    rows.extend(takeover_rows(store).await);
    rows
}

async fn cell_rows(store: &Arc<dyn ConditionalStore>) -> Vec<Row> {
    let a = Node::new(store.clone(), "a", LONG_TTL, false);
    let lease = a.acquire().await;
    let cell = lease.claim("c").await.expect("claim");
    let mut rows = vec![row("claim of an absent cell", "2", a.counted().await)];
    cell.write(vec![1u8; 1024]).await.expect("write");
    rows.push(row("fenced write, 1 KB inline", "1", a.counted().await));
    cell.write(vec![2u8; 64 * 1024]).await.expect("write");
    rows.push(row(
        "fenced write, 64 KB payload object",
        "2",
        a.counted().await,
    ));
    cell.write(vec![3u8; 64 * 1024]).await.expect("write");
    let replaced = a.counted().await;
    rows.push(row(
        "  … replacing a payload object (+collect)",
        "2",
        replaced,
    ));
    cell.release().await.expect("release");
    rows.push(row("release", "1", a.counted().await));
    let cell = lease.claim("c").await.expect("claim");
    rows.push(row("re-claim of a released cell", "2", a.counted().await));
    drop(cell);
    let cell = lease.claim("c").await.expect("claim");
    rows.push(row(
        "re-claim of an own cell (claim dropped)",
        "2",
        a.counted().await,
    ));
    cell.release().await.expect("release");
    lease.release().await;
    rows
}

async fn takeover_rows(store: &Arc<dyn ConditionalStore>) -> Vec<Row> {
    let cells = cell_names("t", 10);
    dead_node(store, "dead-few", &cells).await;
    let b = Node::new(store.clone(), "heir-few", TAKEOVER_TTL, false);
    let lease = b.acquire().await;
    observe_owner(&lease, &cells[0]).await;
    wait_observation().await;
    // Counted at once: a claim leaves nothing running, and the shared lease read must stay
    // younger than `poll_ms` for the further cells.
    b.sent.reset();
    let first = lease.claim(&cells[0]).await.expect("takeover");
    let mut rows = vec![row(
        "takeover, first cell of a dead node",
        "3",
        b.sent.reset(),
    )];
    let second = lease.claim(&cells[1]).await.expect("takeover");
    rows.push(row("takeover, a further cell", "2", b.sent.reset()));
    let rest = claim_all(&lease, &cells[2..]).await;
    rows.push(Row {
        per: rest.len() as u64,
        ..row(
            "takeover, further cells via claim_many (each)",
            "2",
            b.sent.reset(),
        )
    });
    drop((first, second, rest));
    lease.release().await;
    rows
}

async fn timed<T>(op: impl Future<Output = T>) -> (Duration, T) {
    let start = Instant::now();
    let out = op.await;
    (start.elapsed(), out)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Re-claims (claim, drop, claim again: two requests each) of a cell holding a 16 MB
/// payload and of one holding 1 KB, interleaved, alternating which goes first.
async fn payload_ratio(b: &Backend, rounds: usize) {
    let node = Node::new(b.store.clone(), "payload", LONG_TTL, false);
    let lease = node.acquire().await;
    for (cell, len) in [("small", 1024), ("large", 16 << 20)] {
        let claim = lease.claim(cell).await.expect("claim");
        claim.write(vec![9u8; len]).await.expect("write");
    }
    let mut times = [Vec::new(), Vec::new()];
    let mut moved = [BodyBytes::default(); 2];
    for i in 0..rounds + 5 {
        for k in [i % 2, 1 - i % 2] {
            let cell = ["small", "large"][k];
            node.sent.reset();
            let (took, claim) = timed(lease.claim(cell)).await;
            drop(claim.expect("re-claim"));
            let bytes = node.sent.bytes();
            if i >= 5 {
                times[k].push(took);
                moved[k] = max_bytes(moved[k], bytes);
            }
        }
    }
    let (small, large) = (median(&mut times[0]), median(&mut times[1]));
    println!(
        "\n{}: re-claim, median of {rounds}: 1 KB cell {:.3} ms, 16 MB cell {:.3} ms, ratio {:.2}x \
         (goal <= 1.2) | bytes moved per claim (most seen): 1 KB cell {} B, 16 MB cell {} B \
         (goal < 65536)",
        b.name,
        ms(small),
        ms(large),
        ms(large) / ms(small),
        moved[0].total(),
        moved[1].total(),
    );
    lease.release().await;
}

fn max_bytes(a: BodyBytes, b: BodyBytes) -> BodyBytes {
    if b.total() > a.total() {
        b
    } else {
        a
    }
}

/// Takeovers of `n` cells of a dead node with `IN_FLIGHT` in flight, each against `n` GET +
/// `n` conditional PUT of as many keys on the same store with as many in flight, measured
/// just before and just after it; `TAKEOVERS` times (one dead node each), alternating.
async fn mass_takeover(b: &Backend, n: usize) {
    let groups: Vec<Vec<String>> = (0..TAKEOVERS)
        .map(|g| cell_names(&format!("m{g}-"), n))
        .collect();
    let heir = Node::new(b.store.clone(), "heir-many", TAKEOVER_TTL, false);
    let lease = heir.acquire().await;
    for (g, cells) in groups.iter().enumerate() {
        dead_node(&b.store, &format!("dead-many-{g}"), cells).await;
        observe_owner(&lease, &cells[0]).await;
    }
    wait_observation().await;
    let plain = plain_keys(&b.store, n).await;
    let mut baseline = get_put_each(&b.store, &plain).await;
    let mut ratios = Vec::new();
    println!();
    for cells in &groups {
        heir.sent.reset();
        let (took, claims) = timed(claim_all(&lease, cells)).await;
        let sent = heir.sent.reset();
        let after = get_put_each(&b.store, &plain).await;
        let ratio = ms(took) / ((ms(baseline) + ms(after)) / 2.0);
        ratios.push(ratio);
        println!(
            "{}: takeover of {n} cells of a dead node, {IN_FLIGHT} in flight: {:.1} ms, {} requests \
             ({} get, {} put) | {n} GET + {n} PUT: {:.1} ms before, {:.1} ms after | ratio {ratio:.2}x",
            b.name,
            ms(took),
            sent.total(),
            sent.get,
            sent.put,
            ms(baseline),
            ms(after),
        );
        baseline = after;
        drop(claims);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "{}: mass takeover, median ratio of {TAKEOVERS}: {:.2}x (goal <= 1.2 on seaweedfs)",
        b.name,
        ratios[ratios.len() / 2]
    );
    lease.release().await;
}

/// `n` keys holding a body the size of a cell head.
async fn plain_keys(store: &Arc<dyn ConditionalStore>, n: usize) -> Vec<Key> {
    let keys: Vec<Key> = (0..n)
        .map(|i| Key::new(format!("plain/{i}/own.json")).expect("key"))
        .collect();
    let e = Entropy::from_os();
    futures::stream::iter(keys.iter())
        .map(|k| store.put(k, head_sized(&e, 1), CasGuard::Absent))
        .buffer_unordered(IN_FLIGHT)
        .for_each(|r| async move {
            assert!(matches!(r, Ok(PutOutcome::Applied(_))), "{r:?}");
        })
        .await;
    keys
}

/// A body like a cell head's (about the same size; a fresh nonce, as every fence write has).
fn head_sized(e: &Entropy, epoch: u64) -> Bytes {
    let nonce = format!("{:016x}{:016x}", e.next_u64(), e.next_u64());
    format!(
        "{{\"v\":2,\"node\":\"heir-many\",\"epoch\":{epoch},\"nonce\":\"{nonce}\",\
         \"generation\":\"{:016x}\"}}",
        e.next_u64()
    )
    .into()
}

/// One GET and one PUT guarded on the version it returned, per key.
async fn get_put_each(store: &Arc<dyn ConditionalStore>, keys: &[Key]) -> Duration {
    let e = &Entropy::from_os();
    let start = Instant::now();
    futures::stream::iter(keys.iter())
        .map(|k| async move {
            let found = store.get(k).await.expect("get").expect("present");
            let put = store.put(k, head_sized(e, 2), CasGuard::Match(found.version));
            assert!(matches!(put.await, Ok(PutOutcome::Applied(_))));
        })
        .buffer_unordered(IN_FLIGHT)
        .for_each(|()| async {})
        .await;
    start.elapsed()
}

/// Bytes allocated and not yet freed, by the whole process (`stats_alloc` already adds a
/// reallocation's growth to `bytes_allocated` and its shrinking to `bytes_deallocated`).
fn live_bytes() -> i64 {
    let s = GLOBAL.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

/// Heap per held claim and per cell after its claim is dropped, on MemoryStore, on a
/// current-thread runtime (so nothing else allocates meanwhile), twice: the second round
/// shows what the first left behind.
fn memory_per_claim() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
        let fence = Fence::builder(store, "mem").ttl(Duration::from_secs(600));
        let lease = fence
            .build()
            .expect("fence")
            .acquire()
            .await
            .expect("acquire");
        println!(
            "\nmemory (MemoryStore; a CellClaim is {} B where the caller keeps it, counted below):",
            std::mem::size_of::<CellClaim>()
        );
        let empty = cell_names("e", 10_000);
        let filled = cell_names("f", 2_000);
        for cell in &filled {
            let claim = lease.claim(cell).await.expect("claim");
            claim.write(vec![4u8; 1024]).await.expect("write");
        }
        for (what, cells) in [("empty cells", &empty), ("cells with 1 KB inline", &filled)] {
            for cell in cells.iter() {
                drop(lease.claim(cell).await.expect("claim"));
            }
            for round in 1..=2 {
                let (held, retained) = claim_round(&lease, cells).await;
                println!(
                    "  {what}, round {round}: {held:.0} B per held claim (goal <= 256), \
                     {retained:.1} B per cell after the claims were dropped (goal 0)",
                );
            }
        }
    });
}

/// Claims every cell, keeps the claims, drops them: (bytes per held claim, bytes per cell
/// still allocated after the drop).
async fn claim_round(lease: &LeaseKeeper, cells: &[String]) -> (f64, f64) {
    let mut held = Vec::with_capacity(cells.len());
    let start = live_bytes();
    for cell in cells {
        held.push(lease.claim(cell).await.expect("claim"));
    }
    let holding = live_bytes();
    held.clear();
    let dropped = live_bytes();
    let n = cells.len() as f64;
    let inline = std::mem::size_of::<CellClaim>() as f64;
    (
        (holding - dropped) as f64 / n + inline,
        (dropped - start) as f64 / n,
    )
}
