//! fence-fs CAS cost against a plain durable write loop (temp file, fsync, rename, directory
//! fsync) and object_store's `LocalFileSystem` with `PutMode::Create`, in one run, printed as
//! ratios. Not a test: it asserts nothing about speed.
//!
//! The headline ratio pairs the contenders **op by op**: one plain write, the same plain
//! write run on Tokio's blocking pool and awaited (as fence-fs runs its file work), one
//! fence-fs CAS, and one CAS of the previous implementation (fence-fs's first layout: a
//! per-key `flock` held across read, check, temp write and rename, re-enacted system call
//! by system call by the tests' `support/legacy.rs`, run on the blocking pool as its
//! `FsStore` ran it), in a rotating order, so that the disk's drift (other processes' I/O on a
//! shared machine swings fsync latency several-fold within seconds) hits all alike. The
//! middle contender splits fence-fs's cost into the thread hop and its own file work; the
//! median, p90 and p99 of each show whether a gap is in the typical op or in the tail. The
//! other contenders run in interleaved rounds.
//!
//! `cargo bench -p fence-fs` (`FENCE_BENCH_OPS` sets the pairs, `FENCE_BENCH_DIR` the
//! directory; default: the system's temp directory).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{CasGuard, ConditionalStore, Key, PutOutcome};
use fence_fs::FsStore;
use object_store::{local::LocalFileSystem, path::Path as ObjectPath, ObjectStore, PutMode};

/// The first layout, as the tests make and write it.
#[path = "../tests/support/legacy.rs"]
mod legacy;

const ROUNDS: usize = 10;
const ROUND_OPS: usize = 30;

fn body(i: usize) -> Vec<u8> {
    let mut b = format!("{{\"seq\":{i},\"pad\":\"").into_bytes();
    b.resize(250, b'x');
    b.extend_from_slice(b"\"}");
    b
}

#[allow(clippy::disallowed_methods)] // a benchmark must read the clock
fn clock() -> std::time::Instant {
    std::time::Instant::now()
}

fn since(start: std::time::Instant) -> Duration {
    start.elapsed()
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = clock();
    f();
    since(start)
}

/// The plain durable write: what any careful program does to replace a file.
struct PlainWriter {
    dir: PathBuf,
    dir_fd: File,
}

impl PlainWriter {
    fn new(dir: &Path) -> Self {
        PlainWriter {
            dir: dir.to_path_buf(),
            dir_fd: File::open(dir).unwrap(),
        }
    }

    fn write(&self, i: usize) {
        let tmp = self.dir.join("record.tmp");
        let mut f = File::create(&tmp).unwrap();
        f.write_all(&body(i)).unwrap();
        f.sync_all().unwrap();
        std::fs::rename(&tmp, self.dir.join("record")).unwrap();
        self.dir_fd.sync_all().unwrap();
    }
}

/// One link of a `Match` chain on `key`: the guard is the version the last link wrote.
async fn chain_link(store: &FsStore, key: &Key, guard: &mut CasGuard, i: usize) {
    let body = Bytes::from(body(i));
    match store.put(key, body, guard.clone()).await.unwrap() {
        PutOutcome::Applied(v) => *guard = CasGuard::Match(v),
        PutOutcome::Rejected => panic!("an uncontended CAS chain was rejected"),
    }
}

async fn fence_read_modify_cas(store: &FsStore, key: &Key, ops: usize) {
    for i in 0..ops {
        let guard = match store.get(key).await.unwrap() {
            Some(s) => CasGuard::Match(s.version),
            None => CasGuard::Absent,
        };
        assert!(matches!(
            store.put(key, Bytes::from(body(i)), guard).await.unwrap(),
            PutOutcome::Applied(_)
        ));
    }
}

async fn object_store_creates(store: &LocalFileSystem, round: usize, ops: usize) {
    for i in 0..ops {
        let path = ObjectPath::from(format!("r{round}/obj-{i}"));
        let opts = object_store::PutOptions::from(PutMode::Create);
        store.put_opts(&path, body(i).into(), opts).await.unwrap();
    }
}

fn rate(ops: usize, d: Duration) -> f64 {
    ops as f64 / d.as_secs_f64()
}

/// Per-op latencies of the paired run.
#[derive(Default)]
struct Paired {
    plain: Vec<Duration>,
    /// The same plain write, run on Tokio's blocking pool and awaited, as fence-fs runs its
    /// file work: the cost of the thread hop alone.
    hop: Vec<Duration>,
    fence: Vec<Duration>,
    /// One CAS of the first layout on the blocking pool: the previous implementation.
    first: Vec<Duration>,
}

impl Paired {
    fn total(d: &[Duration]) -> Duration {
        d.iter().sum()
    }

    fn median(d: &[Duration]) -> Duration {
        Paired::quantile(d, 0.5)
    }

    fn quantile(d: &[Duration], q: f64) -> Duration {
        let mut sorted = d.to_vec();
        sorted.sort();
        sorted[((sorted.len() - 1) as f64 * q) as usize]
    }
}

/// One plain write on the blocking pool, awaited.
async fn hopped(plain: &Arc<PlainWriter>, i: usize) -> Duration {
    let plain = Arc::clone(plain);
    let start = clock();
    tokio::task::spawn_blocking(move || plain.write(i))
        .await
        .unwrap();
    since(start)
}

/// A `Match` chain of the first layout on one key (its root made by `legacy::open_root`).
struct FirstLayoutChain {
    root: PathBuf,
    key: Key,
    version: Option<String>,
}

impl FirstLayoutChain {
    /// One link, on the blocking pool, awaited.
    async fn link(&mut self, i: usize) -> Duration {
        let (root, key, guard) = (self.root.clone(), self.key.clone(), self.version.take());
        let start = clock();
        let applied = tokio::task::spawn_blocking(move || {
            legacy::put(&root, &key, &body(i), guard.as_deref(), i as u128)
        })
        .await
        .unwrap();
        let took = since(start);
        let applied = applied.expect("a first-layout write failed");
        self.version = Some(applied.expect("an uncontended first-layout chain was rejected"));
        took
    }
}

/// The paired run: `pairs` rounds of one plain write, one plain write through the blocking
/// pool, one chain link and one first-layout chain link, in a rotating order, all driven
/// by the thread that drives the runtime (as a program awaiting its store calls would).
async fn paired(
    plain: &Arc<PlainWriter>,
    store: &FsStore,
    key: &Key,
    first: &mut FirstLayoutChain,
    pairs: usize,
) -> Paired {
    let mut guard = CasGuard::Absent;
    let mut out = Paired::default();
    for i in 0..pairs {
        for turn in 0..4 {
            match (i + turn) % 4 {
                0 => out.plain.push(timed(|| plain.write(i))),
                1 => out.hop.push(hopped(plain, i).await),
                2 => out.first.push(first.link(i).await),
                _ => {
                    let start = clock();
                    chain_link(store, key, &mut guard, i).await;
                    out.fence.push(since(start));
                }
            }
        }
    }
    out
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median, p90 and p99 of `d`, in microseconds.
fn spread(d: &[Duration]) -> String {
    format!(
        "median {:>6.0} us, p90 {:>6.0} us, p99 {:>6.0} us",
        us(Paired::median(d)),
        us(Paired::quantile(d, 0.9)),
        us(Paired::quantile(d, 0.99))
    )
}

fn main() {
    let pairs: usize = std::env::var("FENCE_BENCH_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000);
    let base = match std::env::var("FENCE_BENCH_DIR") {
        Ok(dir) => tempfile::tempdir_in(dir).unwrap(),
        Err(_) => tempfile::tempdir().unwrap(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let plain_dir = base.path().join("plain");
    let os_dir = base.path().join("object_store");
    let fs_dir = base.path().join("fence");
    let first_dir = base.path().join("first");
    for d in [&plain_dir, &os_dir, &fs_dir, &first_dir] {
        std::fs::create_dir(d).unwrap();
    }
    legacy::open_root(&first_dir);
    let store = FsStore::open(&fs_dir).unwrap();
    let local = LocalFileSystem::new_with_prefix(&os_dir).unwrap();
    let plain = Arc::new(PlainWriter::new(&plain_dir));
    let (chain_key, rmw_key) = (
        Key::new("cells/c1/own.json").unwrap(),
        Key::new("cells/c2/own.json").unwrap(),
    );
    let mut first = FirstLayoutChain {
        root: first_dir,
        key: chain_key.clone(),
        version: None,
    };
    let pair = runtime.block_on(paired(&plain, &store, &chain_key, &mut first, pairs.max(1)));
    let (mut t_rmw, mut t_os, mut t_plain_rounds) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    // Interleaved rounds, so drift of the disk affects every contender alike.
    for round in 0..ROUNDS {
        t_plain_rounds += timed(|| (0..ROUND_OPS).for_each(|i| plain.write(i)));
        t_rmw += timed(|| runtime.block_on(fence_read_modify_cas(&store, &rmw_key, ROUND_OPS)));
        t_os += timed(|| runtime.block_on(object_store_creates(&local, round, ROUND_OPS)));
    }
    let (plain_rate, hop_rate, chain, first_rate) = (
        rate(pairs, Paired::total(&pair.plain)),
        rate(pairs, Paired::total(&pair.hop)),
        rate(pairs, Paired::total(&pair.fence)),
        rate(pairs, Paired::total(&pair.first)),
    );
    let (plain_median, fence_median) = (Paired::median(&pair.plain), Paired::median(&pair.fence));
    let round_ops = ROUNDS * ROUND_OPS;
    let (plain_rounds, rmw, os) = (
        rate(round_ops, t_plain_rounds),
        rate(round_ops, t_rmw),
        rate(round_ops, t_os),
    );
    println!(
        "fence-fs bench: 256-byte bodies, dir {}\n\
         paired, op by op ({pairs} rounds of one op each, rotating order):",
        base.path().display()
    );
    println!("  plain durable loop (tmp+fsync+rename+dir fsync): {plain_rate:>9.0} ops/s");
    println!("  plain durable loop on the blocking pool:         {hop_rate:>9.0} ops/s");
    println!("  fence-fs CAS, Match chain:                       {chain:>9.0} ops/s");
    println!("  first layout (previous implementation) chain:    {first_rate:>9.0} ops/s");
    println!(
        "  ratio fence-fs chain / plain durable loop: {:.3}x (goal >= 0.95x)",
        chain / plain_rate
    );
    println!(
        "  median latency: plain {:.0} us, fence-fs {:.0} us; ratio plain / fence-fs: {:.3}x",
        plain_median.as_secs_f64() * 1e6,
        fence_median.as_secs_f64() * 1e6,
        plain_median.as_secs_f64() / fence_median.as_secs_f64()
    );
    println!(
        "  ratio fence-fs chain / first layout chain: {:.3}x (goal >= 0.95x the old speed)",
        chain / first_rate
    );
    println!(
        "  median latency: first layout {:.0} us; ratio first layout / fence-fs: {:.3}x",
        us(Paired::median(&pair.first)),
        Paired::median(&pair.first).as_secs_f64() / fence_median.as_secs_f64()
    );
    println!(
        "  ratio plain on the blocking pool / plain: {:.3}x (the thread hop alone)",
        hop_rate / plain_rate
    );
    println!(
        "  ratio fence-fs chain / plain on the blocking pool: {:.3}x (fence-fs's own work)",
        chain / hop_rate
    );
    println!("  plain:        {}", spread(&pair.plain));
    println!("  blocking pool:{}", spread(&pair.hop));
    println!("  fence-fs:     {}", spread(&pair.fence));
    println!("  first layout: {}", spread(&pair.first));
    println!("interleaved rounds ({ROUNDS} x {ROUND_OPS} ops):");
    println!("  plain durable loop:                              {plain_rounds:>9.0} ops/s");
    println!("  fence-fs CAS, read-modify-CAS:                   {rmw:>9.0} ops/s");
    println!("  object_store LocalFileSystem PutMode::Create:    {os:>9.0} ops/s");
    println!(
        "  ratio fence-fs read-modify-CAS / plain:    {:.2}x",
        rmw / plain_rounds
    );
    println!(
        "  ratio fence-fs chain / object_store Create: {:.2}x",
        chain / os
    );
    let rows = runtime
        .block_on(async {
            let store = std::sync::Arc::new(FsStore::open(&fs_dir).unwrap());
            fence_testkit::round_trips::measure(
                store,
                &Key::new("rt").unwrap(),
                std::time::Duration::from_secs(3),
            )
            .await
        })
        .expect("round trips");
    print!("{rows}");
}
