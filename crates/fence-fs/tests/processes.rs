//! Real OS processes on one root: no lost update, crash safety under SIGKILL, one lease
//! winner, and no stopped process holding anyone up. The processes are `fence-fs-worker`
//! (src/bin).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use fence_core::{CasGuard, ConditionalStore, Entropy, Key, PutOutcome};
use fence_fs::FsStore;
use support::legacy::{self, Refused};
use support::{block, files_below, version_files};

mod support;

const WORKER: &str = env!("CARGO_BIN_EXE_fence-fs-worker");

fn worker(args: &[&str]) -> Command {
    let mut cmd = Command::new(WORKER);
    cmd.args(args);
    cmd
}

/// Runs `processes` workers that each increment counter `key` `each` times; the total.
fn increment_in_processes(root: &Path, key: &Key, processes: usize, each: u64) -> u64 {
    let root_str = root.to_str().unwrap();
    let children: Vec<Child> = (0..processes)
        .map(|_| {
            worker(&["incr", root_str, key.as_str(), &each.to_string()])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a worker failed");
    }
    let store = FsStore::open(root).unwrap();
    let stored = block(store.get(key)).unwrap().unwrap();
    std::str::from_utf8(&stored.body).unwrap().parse().unwrap()
}

#[test]
fn eight_processes_increment_without_lost_updates() {
    const PROCESSES: usize = 8;
    const EACH: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let key = Key::new("counters/shared").unwrap();
    let total = increment_in_processes(dir.path(), &key, PROCESSES, EACH);
    assert_eq!(total, PROCESSES as u64 * EACH, "lost updates");
}

/// A store of the earlier version (one file per key under a lock) holding counter `key` at
/// 5: processes of this version increment it — the first write migrates it — and lose no
/// update.
#[test]
fn processes_increment_a_first_layout_counter_without_lost_updates() {
    const PROCESSES: usize = 4;
    const EACH: u64 = 50;
    let dir = tempfile::tempdir().unwrap();
    legacy::open_root(dir.path());
    let key = Key::new("counters/old").unwrap();
    let mut version = None;
    for i in 1..=5u128 {
        let body = i.to_string().into_bytes();
        let v = legacy::put(dir.path(), &key, &body, version.as_deref(), i);
        version = v.unwrap();
    }
    let total = increment_in_processes(dir.path(), &key, PROCESSES, EACH);
    assert_eq!(total, 5 + PROCESSES as u64 * EACH, "lost updates");
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

/// Kills of the crash test: `FENCE_FS_CRASH_KILLS`, default 300 (CI's share, about 10 s on
/// a loaded 2-core machine); docs/fs.md gives the figures of a run of 1,000.
fn crash_kills() -> usize {
    std::env::var("FENCE_FS_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

/// The last write a killed crash writer acknowledged (its `ack N` lines), or 0.
fn last_ack(child: &mut Child) -> u64 {
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    out.lines()
        .filter_map(|l| l.strip_prefix("ack ")?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// SIGKILLs of a writer at random moments (in the middle of CAS writes, creates and deletes
/// of payload objects): afterwards every record parses and is whole, none went back, none
/// lost a write its writer had acknowledged, CAS still works and nothing piles up.
#[test]
fn sigkilled_writers_never_leave_a_torn_or_lost_record() {
    let kills = crash_kills();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let key = Key::new("crash/record").unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let entropy = Entropy::from_os();
    let (mut last_seq, mut killed_running, mut acked) = (0, 0, 0);
    for _ in 0..kills {
        let mut child = worker(&["crash-writer", root, key.as_str()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(5_000 + entropy.below(35_000)));
        if child.try_wait().unwrap().is_none() {
            killed_running += 1;
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "the crash writer must only end by SIGKILL: {status}"
        );
        let ack = last_ack(&mut child);
        acked = acked.max(ack);
        if let Some(stored) = block(store.get(&key)).unwrap() {
            let seq = check_crash_body(&stored.body);
            assert!(
                seq >= last_seq,
                "record went back from write {last_seq} to {seq}"
            );
            assert!(
                seq >= ack,
                "write {ack} was acknowledged, the record holds {seq}"
            );
            last_seq = seq;
        } else {
            assert_eq!(ack, 0, "write {ack} was acknowledged, the record is absent");
        }
        check_payloads(&store, &key);
    }
    println!(
        "{killed_running} of {kills} writers killed while running; last write {last_seq}, \
         last acknowledged {acked}; 0 torn, 0 lost"
    );
    assert!(
        killed_running >= kills * 9 / 10,
        "too few kills hit a running writer"
    );
    assert!(last_seq > 0, "no write completed");
    after_crashes_cas_still_works(&store, &key, dir.path());
}

/// Every payload object of the crash writer that reads back is whole.
fn check_payloads(store: &FsStore, key: &Key) {
    let prefix = Key::new(format!("{key}.p")).unwrap();
    for payload in block(store.list(Some(&prefix))).unwrap() {
        if let Some(stored) = block(store.get(&payload)).unwrap() {
            check_crash_body(&stored.body);
        }
    }
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
    // The current version and its predecessor; a write killed before removing older ones
    // leaves them to the next write, which just ran.
    assert!(
        version_files(root, key).len() <= 2,
        "{:?}",
        version_files(root, key)
    );
    // A create sweeps what killed writers left in the directory's scratch space; a collection
    // of the payload objects (a listing, deletes of all but the newest, as fence-core
    // collects those of replaced heads) tidies deletes whose deleter was killed half-way.
    let payloads = Key::new("crash/record.p").unwrap();
    let newest = payloads.join("final").unwrap();
    block(store.put(&newest, "x".into(), CasGuard::Absent)).unwrap();
    for old in block(store.list(Some(&payloads))).unwrap() {
        if old != newest {
            block(store.delete_immutable(&old)).unwrap();
        }
    }
    let mut left = Vec::new();
    files_below(&root.join("crash"), &mut left);
    let mut left: Vec<String> = left
        .iter()
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .filter(|p| !p.starts_with("crash/record.fence/"))
        .map(|p| match p.split_once("final.fence/i") {
            Some((dir, rest)) => format!("{dir}final.fence/I{}", &rest[32..]),
            None => p,
        })
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "crash/.fence",
            "crash/record.fence",
            "crash/record.p",
            "crash/record.p/.fence",
            "crash/record.p/final.fence",
            "crash/record.p/final.fence/I",
            "crash/record.p/final.fence/I/1",
        ],
        "left behind"
    );
}

/// Kills of the migration crash test: `FENCE_FS_MIGRATION_KILLS`, default 100 (CI's share,
/// about 10 s on a loaded 2-core machine).
fn migration_kills() -> usize {
    std::env::var("FENCE_FS_MIGRATION_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

/// A crash-writer body of `seq = 0` (what the earlier version wrote), `len` bytes long.
fn first_body(len: usize) -> Vec<u8> {
    let mut body = format!("seq=0;len={len};").into_bytes();
    body.resize(len, b'a');
    body
}

/// SIGKILLs of a writer at random moments of its first writes of a record of the earlier
/// version (up to 1 MiB, so that migrating it takes a while): in the middle of the
/// migration, before it or after. Each time the key holds one whole record — the old one
/// with its version and bytes, or one the writer wrote, never older than its last
/// acknowledged write — a process of the earlier version reads the old record or is
/// refused, and the record's version applies exactly once. A create in the directory then
/// sweeps every half-done migration.
#[test]
fn sigkilled_migrations_leave_one_whole_record() {
    let kills = migration_kills();
    let dir = tempfile::tempdir().unwrap();
    legacy::open_root(dir.path());
    let root = dir.path().to_str().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let entropy = Entropy::from_os();
    let (mut before, mut after, mut half_done) = (0, 0, 0);
    let internal = dir.path().join("mig/.fence");
    let scratch = |prefix: &str| {
        std::fs::read_dir(&internal)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(prefix))
            .count()
    };
    for round in 0..kills {
        let key = Key::new(format!("mig/r{round}")).unwrap();
        let body = first_body(16 + entropy.below(256 << 10) as usize);
        let random = u128::from(entropy.next_u64());
        let old = legacy::put(dir.path(), &key, &body, None, random)
            .unwrap()
            .unwrap();
        let mut child = worker(&["crash-writer", root, key.as_str()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        std::thread::sleep(Duration::from_micros(entropy.below(25_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let ack = rest
            .lines()
            .filter_map(|l| l.strip_prefix("ack ")?.parse().ok())
            .max()
            .unwrap_or(0);
        let migrated = !legacy::record_file(dir.path(), &key).is_file();
        *(if migrated { &mut after } else { &mut before }) += 1;
        half_done += usize::from(scratch("new-") > 0);
        let stored = block(store.get(&key)).unwrap().expect("never absent");
        let seq = check_crash_body(&stored.body);
        assert!(
            seq >= ack,
            "write {ack} was acknowledged, the record holds {seq}"
        );
        if seq == 0 {
            assert_eq!(
                (stored.version.as_str(), &stored.body[..]),
                (&*old, &body[..])
            );
        }
        match legacy::get(dir.path(), &key) {
            Ok(Some((v, b))) => assert!(!migrated && v == old && b == body),
            Err(Refused::Corrupt(_)) => assert!(migrated),
            other => panic!("round {round}: the earlier version read {other:?}"),
        }
        let guard = CasGuard::Match(stored.version);
        let applied = block(store.put(&key, "after".into(), guard.clone())).unwrap();
        assert!(matches!(applied, PutOutcome::Applied(_)), "round {round}");
        let again = block(store.put(&key, "again".into(), guard)).unwrap();
        assert_eq!(again, PutOutcome::Rejected, "round {round}");
    }
    block(store.put(
        &Key::new("mig/final").unwrap(),
        "x".into(),
        CasGuard::Absent,
    ))
    .unwrap();
    println!(
        "{kills} kills: {before} before the record was exchanged, {after} after; {half_done} \
         left a migration half-done; 0 torn, 0 lost, 0 split"
    );
    assert!(before > 0 && after > 0, "the kills must land on both sides");
    assert_eq!(scratch("new-"), 0, "half-done migrations are swept");
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

/// Sends `signal` (a `kill` name: STOP, CONT, KILL) to `child`.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal}");
}

/// Whether process `child` is stopped (state `T` in `/proc/PID/stat`).
fn stopped(child: &Child) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", child.id())).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('T'))
    })
}

/// Stops `child` and waits until it is stopped: a process inside a system call that cannot
/// be interrupted (an fsync) stops when the call returns.
fn stop(child: &Child) {
    signal(child, "STOP");
    for _ in 0..1_000 {
        if stopped(child) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the process did not stop");
}

/// One read-modify-CAS of `key` by this process, retried on rejection: the write a stopped
/// writer of the same key must not hold up. `Ok` once applied.
async fn read_modify_cas(store: &FsStore, key: &Key, body: &'static str) -> Result<(), String> {
    loop {
        let guard = match store.get(key).await.map_err(|e| e.to_string())? {
            Some(stored) => CasGuard::Match(stored.version),
            None => CasGuard::Absent,
        };
        match store.put(key, body.into(), guard).await {
            Ok(PutOutcome::Applied(_)) => return Ok(()),
            Ok(PutOutcome::Rejected) => {}
            Err(e) if e.is_retryable() => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// A writer process stopped (SIGSTOP) at random moments of its puts of a key — most stops
/// land in the middle of one (1 MiB bodies, so the write and its fsync take a while): a put
/// of the same key by this process completes in bounded time each time, while the writer
/// stays stopped. Continued, the stopped writer goes on, and every record stays whole. (The
/// first layout held a per-key lock across the write: a writer stopped while holding it made
/// every other write of the key time out until it was continued.)
#[test]
fn a_put_completes_while_a_writer_of_the_key_is_stopped_mid_put() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let key = Key::new("contended/record").unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let entropy = Entropy::from_os();
    for round in 0..20 {
        let writer = worker(&["writer", root, key.as_str(), "1048576"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(30 + entropy.below(50)));
        stop(&writer);
        let put = block(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                read_modify_cas(&store, &key, "mine"),
            )
            .await
        });
        let still_stopped = stopped(&writer);
        signal(&writer, "CONT");
        std::thread::sleep(Duration::from_millis(20));
        signal(&writer, "KILL");
        let mut writer = writer;
        writer.wait().unwrap();
        let put = put.unwrap_or_else(|_| panic!("round {round}: the put was held up"));
        put.unwrap_or_else(|e| panic!("round {round}: the put failed: {e}"));
        assert!(
            still_stopped,
            "round {round}: the writer was not stopped meanwhile"
        );
        let stored = block(store.get(&key)).unwrap().unwrap();
        if &stored.body[..] != b"mine" {
            check_crash_body(&stored.body);
        }
    }
}

/// The runtime's claim of a cell while another process (another node, claiming and
/// releasing the cell in a loop) is stopped in the middle of a write of the cell's owner
/// record: the claim succeeds, at the latest once the stopped node's lease-less ownership has
/// been watched for a TTL (the first layout's claims timed out behind the stopped writer's
/// lock for as long as it stayed stopped).
#[test]
fn a_claim_succeeds_while_a_writer_of_its_owner_record_is_stopped() {
    use fence_core::{ErrorKind, Fence};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let entropy = Entropy::from_os();
    for round in 0..5 {
        let cycler = worker(&["cycle", root, "orders"]).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(30 + entropy.below(50)));
        stop(&cycler);
        let claimed = block(async {
            // The claimer's own lease must not lapse on a loaded machine (its TTL is not what
            // is tested: a stopped writer must not hold up the claim's writes).
            let fence = Fence::builder(std::sync::Arc::new(store.clone()), "n1")
                .ttl(Duration::from_secs(2))
                .build()
                .unwrap();
            let keeper = fence.acquire().await.unwrap();
            let claim = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match keeper.claim("orders").await {
                        Ok(claim) => return Ok(claim.epoch()),
                        Err(e) if e.kind() == ErrorKind::Busy => {}
                        Err(e) => return Err(e),
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await;
            keeper.release().await;
            claim
        });
        signal(&cycler, "KILL");
        let mut cycler = cycler;
        cycler.wait().unwrap();
        let epoch = claimed
            .unwrap_or_else(|_| panic!("round {round}: the claim was held up"))
            .unwrap_or_else(|e| panic!("round {round}: the claim failed: {e}"));
        assert!(epoch >= 1, "round {round}: epoch {epoch}");
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

/// Runs `script` as root of a new mount namespace (a user namespace too when this process is
/// not root), so that it can mount without touching the host's mounts.
fn in_mount_namespace(script: &str) -> std::process::Output {
    use std::os::unix::fs::MetadataExt;
    let mine = tempfile::tempfile().unwrap().metadata().unwrap();
    let mut unshare = Command::new("unshare");
    if mine.uid() != 0 {
        unshare.args(["--user", "--map-root-user"]);
    }
    unshare
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .output()
        .expect("unshare (util-linux) runs")
}

/// A payload object bigger than the free space (a 2 MiB tmpfs, in a private mount namespace):
/// the create fails with `Unavailable` (ENOSPC) and leaves nothing behind — no partial temp
/// file, no half-built object (the first layout left the partial temp file for ever: no
/// later writer reused a write-once object's name). A create that fits then succeeds.
#[test]
fn a_create_that_runs_out_of_space_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display();
    let script = format!(
        "set -e; mount -t tmpfs -o size=2m tmpfs {root}; \
         {WORKER} create-sized {root} cells/c1/blobs/big 3145728; \
         {WORKER} create-sized {root} cells/c1/blobs/small 1024; \
         cd {root} && find . | sort"
    );
    let out = in_mount_namespace(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[..2], ["error Unavailable", "applied"], "{stdout}");
    let left: Vec<&str> = lines[2..]
        .iter()
        .copied()
        .filter(|p| !p.starts_with("./.fence"))
        .map(|p| p.split("/i").next().unwrap())
        .collect();
    assert_eq!(
        left,
        [
            ".",
            "./cells",
            "./cells/c1",
            "./cells/c1/blobs",
            "./cells/c1/blobs/.fence",
            "./cells/c1/blobs/small.fence",
            "./cells/c1/blobs/small.fence",
            "./cells/c1/blobs/small.fence",
        ],
        "{stdout}"
    );
}
