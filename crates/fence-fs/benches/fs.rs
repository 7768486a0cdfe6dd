//! fence-fs CAS throughput against (a) a plain durable write loop (temp file, fsync, rename,
//! directory fsync) and (b) object_store's `LocalFileSystem` with `PutMode::Create`, in one
//! run, printed as ratios. Not a test: it asserts nothing about speed.
//!
//! `cargo bench -p fence-fs` (set `FENCE_BENCH_OPS` to change the operations per round).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{CasGuard, ConditionalStore, Key, PutOutcome};
use fence_fs::FsStore;
use object_store::{local::LocalFileSystem, path::Path as ObjectPath, ObjectStore, PutMode};

const ROUNDS: usize = 10;

fn body(i: usize) -> Vec<u8> {
    let mut b = format!("{{\"seq\":{i},\"pad\":\"").into_bytes();
    b.resize(250, b'x');
    b.extend_from_slice(b"\"}");
    b
}

#[allow(clippy::disallowed_methods)] // a benchmark must read the clock
fn timed(f: impl FnOnce()) -> Duration {
    let start = std::time::Instant::now();
    f();
    start.elapsed()
}

fn plain_durable_loop(dir: &Path, ops: usize) {
    let dir_fd = File::open(dir).unwrap();
    for i in 0..ops {
        let tmp = dir.join("record.tmp");
        let mut f = File::create(&tmp).unwrap();
        f.write_all(&body(i)).unwrap();
        f.sync_all().unwrap();
        std::fs::rename(&tmp, dir.join("record")).unwrap();
        dir_fd.sync_all().unwrap();
    }
}

async fn fence_match_chain(store: &FsStore, key: &Key, ops: usize) {
    let mut guard = match store.get(key).await.unwrap() {
        Some(s) => CasGuard::Match(s.version),
        None => CasGuard::Absent,
    };
    for i in 0..ops {
        match store.put(key, Bytes::from(body(i)), guard).await.unwrap() {
            PutOutcome::Applied(v) => guard = CasGuard::Match(v),
            PutOutcome::Rejected => panic!("an uncontended CAS chain was rejected"),
        }
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

#[derive(Default)]
struct Totals {
    plain: Duration,
    chain: Duration,
    rmw: Duration,
    object_store: Duration,
}

fn rate(ops: usize, d: Duration) -> f64 {
    (ops * ROUNDS) as f64 / d.as_secs_f64()
}

fn main() {
    let ops: usize = std::env::var("FENCE_BENCH_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
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
    for d in [&plain_dir, &os_dir, &fs_dir] {
        std::fs::create_dir(d).unwrap();
    }
    let store = FsStore::open(&fs_dir).unwrap();
    let local = LocalFileSystem::new_with_prefix(&os_dir).unwrap();
    let (chain_key, rmw_key) = (
        Key::new("cells/c1/own.json").unwrap(),
        Key::new("cells/c2/own.json").unwrap(),
    );
    let mut t = Totals::default();
    // Interleaved rounds, so drift of the disk affects every contender alike.
    for round in 0..ROUNDS {
        t.plain += timed(|| plain_durable_loop(&plain_dir, ops));
        t.chain += timed(|| runtime.block_on(fence_match_chain(&store, &chain_key, ops)));
        t.rmw += timed(|| runtime.block_on(fence_read_modify_cas(&store, &rmw_key, ops)));
        t.object_store += timed(|| runtime.block_on(object_store_creates(&local, round, ops)));
    }
    let (plain, chain, rmw, os) = (
        rate(ops, t.plain),
        rate(ops, t.chain),
        rate(ops, t.rmw),
        rate(ops, t.object_store),
    );
    println!(
        "fence-fs bench: {ROUNDS} interleaved rounds x {ops} ops, 256-byte bodies, dir {}",
        base.path().display()
    );
    println!("plain durable loop (tmp+fsync+rename+dir fsync): {plain:>9.0} ops/s");
    println!("object_store LocalFileSystem PutMode::Create:    {os:>9.0} ops/s");
    println!("fence-fs CAS, Match chain:                       {chain:>9.0} ops/s");
    println!("fence-fs CAS, read-modify-CAS:                   {rmw:>9.0} ops/s");
    println!(
        "ratio fence-fs chain / plain durable loop: {:.2}x (goal >= 0.9x)",
        chain / plain
    );
    println!(
        "ratio fence-fs read-modify-CAS / plain:    {:.2}x",
        rmw / plain
    );
    println!(
        "ratio fence-fs chain / object_store Create: {:.2}x",
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
