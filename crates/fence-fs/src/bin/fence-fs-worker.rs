//! A helper process for fence-fs's cross-process tests; not a user-facing tool.
//!
//! - `fence-fs-worker incr ROOT KEY N`: N compare-and-swap increments of a decimal counter;
//! - `fence-fs-worker crash-writer ROOT KEY`: rewrites KEY by CAS forever with
//!   self-describing bodies (`seq=N;len=L;` then filler), printing `ack N` once write N is
//!   acknowledged; after each write it creates a payload object `KEY.p/N` and deletes the
//!   one before (as a head's payload objects are collected), until killed;
//! - `fence-fs-worker writer ROOT KEY BYTES`: read-modify-CAS of KEY with BODY-sized
//!   bodies forever, until killed;
//! - `fence-fs-worker cycle ROOT CELL`: as node `cycler`, claims CELL's owner record at the
//!   next epoch and releases it, forever, until killed;
//! - `fence-fs-worker lease ROOT NODE`: waits for a line on stdin, then tries to acquire
//!   NODE's lease with `CasGuard::Absent` and prints `applied` or `rejected`;
//! - `fence-fs-worker create ROOT KEY BODY`: one create-if-absent put; prints `applied` or
//!   `rejected`;
//! - `fence-fs-worker create-sized ROOT KEY BYTES`: the same with a body of BYTES bytes;
//!   prints `applied`, `rejected` or `error <kind>`.

use std::io::{BufRead, Write};
use std::sync::Arc;

use bytes::Bytes;
use fence_core::{
    CasGuard, ConditionalStore, Entropy, Error, ErrorKind, Key, LeaseCasOutcome, NodeLeaseRecord,
    Ownership, PutOutcome, Stored,
};
use fence_fs::FsStore;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(run(&args));
    if let Err(e) = result {
        eprintln!("fence-fs-worker: {e}");
        std::process::exit(1);
    }
}

async fn run(args: &[String]) -> Result<(), Error> {
    let usage = || {
        Error::new(
            ErrorKind::InvalidInput,
            "usage: incr|crash-writer|writer|cycle|lease|create|create-sized ROOT ...",
        )
    };
    let (mode, root) = match args {
        [mode, root, ..] => (mode.as_str(), root),
        _ => return Err(usage()),
    };
    let store = FsStore::open(root)?;
    match (mode, &args[2..]) {
        ("incr", [key, n]) => increment(&store, &Key::new(key.as_str())?, parse(n)?).await,
        ("crash-writer", [key]) => crash_writer(&store, &Key::new(key.as_str())?).await,
        ("writer", [key, bytes]) => {
            writer(&store, &Key::new(key.as_str())?, parse(bytes)? as usize).await
        }
        ("lease", [node]) => lease(store, node).await,
        ("cycle", [cell]) => cycle(store, cell).await,
        ("create", [key, body]) => create(&store, &Key::new(key.as_str())?, body).await,
        ("create-sized", [key, bytes]) => {
            let body = "x".repeat(parse(bytes)? as usize);
            if let Err(e) = create(&store, &Key::new(key.as_str())?, &body).await {
                println!("error {:?}", e.kind());
            }
            Ok(())
        }
        _ => Err(usage()),
    }
}

fn io_error(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::new(ErrorKind::Other, what).with_source(e)
}

async fn create(store: &FsStore, key: &Key, body: &str) -> Result<(), Error> {
    let body = Bytes::from(body.to_owned());
    match store.put(key, body, CasGuard::Absent).await? {
        PutOutcome::Applied(_) => println!("applied"),
        PutOutcome::Rejected => println!("rejected"),
    }
    Ok(())
}

fn parse(n: &str) -> Result<u64, Error> {
    n.parse()
        .map_err(|_| Error::new(ErrorKind::InvalidInput, "not a number"))
}

async fn increment(store: &FsStore, key: &Key, n: u64) -> Result<(), Error> {
    let mut done = 0;
    while done < n {
        let (guard, value) = match store.get(key).await? {
            None => (CasGuard::Absent, 0),
            Some(Stored { body, version }) => (CasGuard::Match(version), counter(key, &body)?),
        };
        let next = Bytes::from((value + 1).to_string());
        match store.put(key, next, guard).await {
            Ok(PutOutcome::Applied(_)) => done += 1,
            Ok(PutOutcome::Rejected) => {}
            // The lock stayed busy for the whole lock wait: nothing written, try again.
            Err(e) if e.is_retryable() => {}
            Err(e) => return Err(e),
        }
    }
    println!("done {n}");
    Ok(())
}

fn counter(key: &Key, body: &[u8]) -> Result<u64, Error> {
    std::str::from_utf8(body)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::corrupt(key, "counter is not a decimal number"))
}

/// The body of write number `seq`, `len` bytes long (at least its prefix).
pub fn crash_body(seq: u64, len: usize) -> Vec<u8> {
    let mut body = format!("seq={seq};len={len};").into_bytes();
    let filler = b'a' + (seq % 26) as u8;
    body.resize(len.max(body.len()), filler);
    body
}

async fn crash_writer(store: &FsStore, key: &Key) -> Result<(), Error> {
    let entropy = Entropy::from_os();
    let mut out = std::io::stdout().lock();
    loop {
        let (guard, seq) = match store.get(key).await? {
            None => (CasGuard::Absent, 0),
            Some(Stored { body, version }) => (CasGuard::Match(version), crash_seq(key, &body)?),
        };
        let len = 16 + entropy.below(128 * 1024) as usize;
        let body = Bytes::from(crash_body(seq + 1, len));
        if let PutOutcome::Applied(_) = store.put(key, body, guard).await? {
            writeln!(out, "ack {}", seq + 1)
                .and_then(|()| out.flush())
                .map_err(io_error("stdout"))?;
        }
        payload_turn(store, key, seq + 1).await?;
    }
}

/// Creates payload object `KEY.p/seq` and deletes every other one, as a head's payload
/// objects are written once and collected (fence-core lists and deletes those of replaced
/// heads).
async fn payload_turn(store: &FsStore, key: &Key, seq: u64) -> Result<(), Error> {
    let prefix = Key::new(format!("{key}.p"))?;
    let current = prefix.join(&seq.to_string())?;
    store
        .put(&current, Bytes::from(crash_body(seq, 64)), CasGuard::Absent)
        .await?;
    for old in store.list(Some(&prefix)).await? {
        if old != current {
            store.delete_immutable(&old).await?;
        }
    }
    Ok(())
}

/// Read-modify-CAS of `key` forever with `bytes`-long bodies (rejections are retried).
async fn writer(store: &FsStore, key: &Key, bytes: usize) -> Result<(), Error> {
    let mut seq = 0u64;
    loop {
        let guard = match store.get(key).await? {
            None => CasGuard::Absent,
            Some(stored) => CasGuard::Match(stored.version),
        };
        seq += 1;
        store
            .put(key, Bytes::from(crash_body(seq, bytes)), guard)
            .await?;
    }
}

fn crash_seq(key: &Key, body: &[u8]) -> Result<u64, Error> {
    let text = String::from_utf8_lossy(&body[..body.len().min(40)]);
    text.strip_prefix("seq=")
        .and_then(|r| r.split(';').next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| Error::corrupt(key, "not a crash-writer body"))
}

async fn cycle(store: FsStore, cell: &str) -> Result<(), Error> {
    let ownership = Ownership::new(Arc::new(store), "cycler");
    loop {
        let (guard, epoch) = match ownership.read_owner(cell).await? {
            None => (CasGuard::Absent, 0),
            Some(owner) => (CasGuard::Match(owner.etag), owner.epoch),
        };
        ownership.cas_owner(cell, guard, epoch + 1).await?;
        ownership.release_owner(cell, epoch + 1).await?;
    }
}

async fn lease(store: FsStore, node: &str) -> Result<(), Error> {
    let ownership = Ownership::new(Arc::new(store), node);
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(io_error("stdin"))?;
    let record = NodeLeaseRecord {
        node: node.to_owned(),
        expires_ms: fence_core::now_ms() + 10_000,
        addr: format!("pid-{}", std::process::id()),
        peer_protocol: 1,
        generation: ownership.fresh_nonce(),
    };
    match ownership.cas_node_lease(CasGuard::Absent, &record).await? {
        LeaseCasOutcome::Applied { .. } => println!("applied"),
        LeaseCasOutcome::Rejected => println!("rejected"),
    }
    Ok(())
}
