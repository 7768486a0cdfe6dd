//! Real OS processes on one root: no lost update, crash safety under SIGKILL, one lease
//! winner. The processes are `fence-fs-worker` (src/bin).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use fence_core::{CasGuard, ConditionalStore, Entropy, Key, PutOutcome};
use fence_fs::FsStore;

const WORKER: &str = env!("CARGO_BIN_EXE_fence-fs-worker");

fn worker(args: &[&str]) -> Command {
    let mut cmd = Command::new(WORKER);
    cmd.args(args);
    cmd
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn eight_processes_increment_without_lost_updates() {
    const PROCESSES: usize = 8;
    const EACH: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let children: Vec<Child> = (0..PROCESSES)
        .map(|_| {
            worker(&["incr", root, "counters/shared", &EACH.to_string()])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a worker failed");
    }
    let store = FsStore::open(dir.path()).unwrap();
    let stored = block(store.get(&Key::new("counters/shared").unwrap()))
        .unwrap()
        .unwrap();
    let total: u64 = std::str::from_utf8(&stored.body).unwrap().parse().unwrap();
    assert_eq!(total, PROCESSES as u64 * EACH, "lost updates");
}

/// Checks a crash-writer body: `seq=N;len=L;` then filler up to exactly L bytes, the filler
/// byte determined by N. Returns N.
fn check_crash_body(body: &[u8]) -> u64 {
    let text = std::str::from_utf8(body).expect("body is ASCII");
    let rest = text.strip_prefix("seq=").expect("body starts with seq=");
    let (seq, rest) = rest.split_once(';').unwrap();
    let (len, filler) = rest.strip_prefix("len=").unwrap().split_once(';').unwrap();
    let (seq, len): (u64, usize) = (seq.parse().unwrap(), len.parse().unwrap());
    assert_eq!(body.len(), len, "body of write {seq} has the wrong length");
    let expected = b'a' + (seq % 26) as u8;
    assert!(
        filler.bytes().all(|b| b == expected),
        "body of write {seq} is mixed"
    );
    seq
}

#[test]
fn sigkilled_writers_never_leave_a_torn_or_lost_record() {
    const KILLS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let key = Key::new("crash/record").unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let entropy = Entropy::from_os();
    let (mut last_seq, mut killed_running) = (0, 0);
    for _ in 0..KILLS {
        let mut child = worker(&["crash-writer", root, key.as_str()])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(entropy.below(20_000)));
        if child.try_wait().unwrap().is_none() {
            killed_running += 1;
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "the crash writer must only end by SIGKILL: {status}"
        );
        if let Some(stored) = block(store.get(&key)).unwrap() {
            let seq = check_crash_body(&stored.body);
            assert!(
                seq >= last_seq,
                "record went back from write {last_seq} to {seq}"
            );
            last_seq = seq;
        }
    }
    println!("{killed_running} of {KILLS} writers killed while running; last write {last_seq}");
    assert!(
        killed_running >= KILLS * 9 / 10,
        "too few kills hit a running writer"
    );
    assert!(last_seq > 0, "no write completed");
    after_crashes_cas_still_works(&store, &key, dir.path());
}

fn after_crashes_cas_still_works(store: &FsStore, key: &Key, root: &Path) {
    let stored = block(store.get(key)).unwrap().unwrap();
    let outcome = block(store.put(
        key,
        Bytes::from("after"),
        CasGuard::Match(stored.version.clone()),
    ));
    let PutOutcome::Applied(v) = outcome.unwrap() else {
        panic!("CAS after crashes rejected")
    };
    assert_ne!(v, stored.version);
    assert_eq!(
        block(store.put(key, "x".into(), CasGuard::Match(stored.version))).unwrap(),
        PutOutcome::Rejected
    );
    let count = |d: &str| std::fs::read_dir(root.join(d)).unwrap().count();
    // The key's own temp file at most: crashed writers leave nothing that piles up.
    assert!(
        count("crash/.fence/tmp") <= 1,
        "temp files pile up: {}",
        count("crash/.fence/tmp")
    );
    // One lock file (and the temp directory) for the one key.
    assert_eq!(count("crash/.fence"), 2, "one lock file per key");
}

fn spawn_lease_contender(root: &str, node: &str) -> Child {
    worker(&["lease", root, node])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn two_processes_contending_for_one_lease_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    for round in 0..10 {
        let node = format!("n{round}");
        let mut children = [
            spawn_lease_contender(root, &node),
            spawn_lease_contender(root, &node),
        ];
        for child in &mut children {
            child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        }
        let mut answers: Vec<String> = children
            .iter_mut()
            .map(|c| {
                let mut line = String::new();
                BufReader::new(c.stdout.as_mut().unwrap())
                    .read_line(&mut line)
                    .unwrap();
                assert!(c.wait().unwrap().success());
                line.trim().to_owned()
            })
            .collect();
        answers.sort();
        assert_eq!(answers, ["applied", "rejected"], "round {round}");
    }
}

/// A `hold-lock` worker holding `key`'s file lock; released by [`release_lock`].
fn lock_in_other_process(root: &str, key: &str) -> Child {
    let mut child = worker(&["hold-lock", root, key])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    child
}

fn release_lock(mut child: Child) {
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
}

/// The runtime's claim, its owner write stuck behind a lock another process holds: whichever
/// gives up first (the store's lock wait, or the runtime's attempt timeout dropping the
/// write), the claim fails, and the owner record never shows it afterwards.
#[test]
fn a_claim_whose_owner_write_is_stuck_never_lands_later() {
    use fence_core::Fence;
    // 100 ms: the store gives up first; 10 s: the runtime's attempt timeout does.
    for lock_wait in [Duration::from_millis(100), Duration::from_secs(10)] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        let store = FsStore::open(dir.path()).unwrap().with_lock_wait(lock_wait);
        block(async {
            let fence = Fence::builder(std::sync::Arc::new(store), "n1")
                .ttl(Duration::from_secs(2))
                .build()
                .unwrap();
            let owner_key = fence.ownership().owner_key("orders").unwrap();
            let holder = lock_in_other_process(root, owner_key.as_str());
            let keeper = fence.acquire().await.unwrap();
            let err = keeper.claim("orders").await.unwrap_err();
            println!("lock wait {lock_wait:?}: claim failed with {err}");
            release_lock(holder);
            tokio::time::sleep(Duration::from_millis(500)).await;
            let owner = fence.ownership().read_owner("orders").await.unwrap();
            assert!(
                owner.is_none(),
                "lock wait {lock_wait:?}: the claim failed ({:?}, {:?}) but its owner write \
                 landed later: {owner:?}",
                err.kind(),
                err.commit()
            );
            keeper.release().await;
        });
    }
}

/// A key directory left by a writer that crashed between its `mkdir` and its `fsync`: the
/// next write below it syncs each parent before its rename. Observed with strace.
#[test]
fn a_write_below_directories_it_did_not_create_syncs_their_parents() {
    let Ok(status) = Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
    else {
        println!("SKIPPED: strace is not installed");
        return;
    };
    assert!(status.success());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    drop(FsStore::open(&root).unwrap());
    // The crashed writer's directories: made, never synced.
    std::fs::create_dir_all(root.join("cells/c1")).unwrap();
    let log = dir.path().join("strace.log");
    let out = Command::new("strace")
        .args([
            "-f",
            "-y",
            "-e",
            "trace=fsync,rename,renameat,renameat2",
            "-o",
        ])
        .arg(&log)
        .arg(WORKER)
        .args(["create", root.to_str().unwrap(), "cells/c1/own.json", "x"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "applied");
    let trace = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    // strace -f prefixes each line with the thread id: match the call anywhere in the line.
    let first = |pred: &dyn Fn(&str) -> bool| lines.iter().position(|l| pred(l));
    let rename = first(&|l| l.contains("rename") && l.contains("\"own.json.fence\""))
        .expect("the rename is traced");
    for parent in [root.clone(), root.join("cells")] {
        let fd_of_parent = format!("<{}>)", parent.display());
        let synced = first(&|l| l.contains("fsync(") && l.contains(&fd_of_parent));
        assert!(
            synced.is_some_and(|s| s < rename),
            "{} was not synced before the rename:\n{trace}",
            parent.display()
        );
    }
}
