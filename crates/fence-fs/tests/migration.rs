//! Stores of the first layout (one file per key under a `flock`, commit 56f0a6d) after an
//! upgrade: the first write of a key moves it to the current layout with its version and
//! bytes, exactly once among concurrent writers, after any writer of the earlier version in
//! flight, and a process of the earlier version is refused afterwards. The first layout's
//! files are made by `support::legacy`, system call by system call as its code did.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use bytes::Bytes;
use fence_core::{
    CasGuard, Commit, ConditionalStore, DeleteOutcome, ErrorKind, Key, PutOutcome, Version,
};
use fence_fs::FsStore;
use support::legacy::{self, Refused};
use support::{block, files_below, version_files};

mod support;

fn key(s: &str) -> Key {
    Key::new(s).unwrap()
}

/// A store of the earlier version at a fresh root, `k` written three times there (create,
/// two updates): the root, and the versions in order.
fn first_layout_store(k: &Key, body: &[u8]) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    legacy::open_root(dir.path());
    let v1 = legacy::put(dir.path(), k, b"one", None, 0xa1)
        .unwrap()
        .unwrap();
    let v2 = legacy::put(dir.path(), k, b"two", Some(&v1), 0xa2)
        .unwrap()
        .unwrap();
    let v3 = legacy::put(dir.path(), k, body, Some(&v2), 0xa3)
        .unwrap()
        .unwrap();
    (dir, vec![v1, v2, v3])
}

/// A put that tries again while it fails with `Timeout`, not committed: a migrating write
/// waits a bounded time for the first layout's lock, and a loaded machine can make the
/// holder (another migrator, or a writer of the earlier version) take longer than that.
/// Nothing was written by a try that timed out.
fn put_retrying(store: &FsStore, k: &Key, body: Bytes, guard: CasGuard) -> PutOutcome {
    loop {
        match block(store.put(k, body.clone(), guard.clone())) {
            Err(e) if e.kind() == ErrorKind::Timeout && e.commit() == Commit::NotCommitted => {}
            other => return other.unwrap(),
        }
    }
}

fn version(v: &str) -> Version {
    Version::new(v).unwrap()
}

/// Every path below `root` with its bytes (files) or `None` (directories).
fn snapshot(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut paths = Vec::new();
    files_below(root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let bytes = p.is_file().then(|| std::fs::read(&p).unwrap());
            (p, bytes)
        })
        .collect()
}

/// The names in the `.fence` of `k`'s directory.
fn scratch(root: &Path, k: &Key) -> Vec<String> {
    let (dir, _) = legacy::paths(root, k);
    let mut names: Vec<String> = std::fs::read_dir(dir.join(".fence"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The first write guarded on a first-layout record's version migrates it and applies once:
/// the version and bytes of the record are kept (the write's predecessor is exactly the old
/// record, at its generation), a second write on that version is rejected, a stale version
/// is rejected without migrating, and nothing is left but the old lock file.
#[tokio::test]
async fn the_first_write_migrates_a_record_keeping_its_version_and_bytes() {
    let k = key("cells/c1/own.json");
    let (dir, versions) = first_layout_store(&k, b"{\"epoch\":3}");
    let store = FsStore::open(dir.path()).unwrap();
    let v3 = version(&versions[2]);
    let stored = store.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (&stored.body[..], &stored.version),
        (&b"{\"epoch\":3}"[..], &v3)
    );

    let stale = store.put(&k, "x".into(), CasGuard::Match(version(&versions[1])));
    assert_eq!(stale.await.unwrap(), PutOutcome::Rejected);
    assert!(
        legacy::record_file(dir.path(), &k).is_file(),
        "a rejected write migrates nothing"
    );

    let applied = store.put(&k, "{\"epoch\":4}".into(), CasGuard::Match(v3.clone()));
    let PutOutcome::Applied(v4) = applied.await.unwrap() else {
        panic!("a write on the first layout's current version must apply")
    };
    assert!(v4.as_str().starts_with("4-"), "{v4:?}");
    let files = version_files(dir.path(), &k);
    let base = format!("fence-fs 2 {} - put 11 c\n{{\"epoch\":3}}", versions[2]);
    assert_eq!(
        (files.len(), std::fs::read(&files[0]).unwrap()),
        (2, base.into_bytes())
    );
    assert!(files[0].ends_with("3"), "{files:?}");
    let again = store
        .put(&k, "y".into(), CasGuard::Match(v3))
        .await
        .unwrap();
    assert_eq!(again, PutOutcome::Rejected, "the old version applies once");
    let forged = format!("3-{:032x}", 0xa3_u128 + 1);
    for stale in [&versions[0], &versions[1], &forged] {
        let put = store.put(&k, "z".into(), CasGuard::Match(version(stale)));
        assert_eq!(put.await.unwrap(), PutOutcome::Rejected, "{stale} is stale");
        let delete = store.delete(&k, &version(stale)).await.unwrap();
        assert_eq!(delete, DeleteOutcome::Rejected, "{stale} is stale");
    }
    let stored = store.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (&stored.body[..], stored.version),
        (&b"{\"epoch\":4}"[..], v4)
    );
    assert_eq!(scratch(dir.path(), &k), ["own.json.fence", "tmp"]);
    assert_eq!(store.list(None).await.unwrap(), [k]);
}

/// A delete guarded on a first-layout record's version migrates and deletes it.
#[tokio::test]
async fn a_delete_migrates_and_deletes_a_record() {
    let k = key("d/rec");
    let (dir, versions) = first_layout_store(&k, b"three");
    let store = FsStore::open(dir.path()).unwrap();
    let stale = store.delete(&k, &version(&versions[0])).await.unwrap();
    assert_eq!(stale, DeleteOutcome::Rejected);
    let deleted = store.delete(&k, &version(&versions[2])).await.unwrap();
    assert_eq!(deleted, DeleteOutcome::Deleted);
    assert_eq!(store.get(&k).await.unwrap(), None);
    assert!(!legacy::record_file(dir.path(), &k).exists());
    assert_eq!(store.list(None).await.unwrap(), Vec::<Key>::new());
    let again = store.put(&k, "new".into(), CasGuard::Absent).await.unwrap();
    assert!(matches!(again, PutOutcome::Applied(_)));
}

/// Writers of one first-layout record racing with its version (separate handles, as
/// separate processes are): exactly one applies, and readers racing with them always see
/// the old record or the winner's, never an error or an absent key.
#[test]
fn concurrent_migrators_of_one_record_have_one_winner() {
    const WRITERS: usize = 6;
    const READERS: usize = 2;
    let dir = tempfile::tempdir().unwrap();
    legacy::open_root(dir.path());
    let root = dir.path().to_path_buf();
    for round in 0..20u128 {
        let k = key(&format!("race/r{round}"));
        let old = legacy::put(&root, &k, b"old", None, round)
            .unwrap()
            .unwrap();
        let start = Arc::new(Barrier::new(WRITERS + READERS));
        let done = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (root, k, old, start) = (root.clone(), k.clone(), old.clone(), start.clone());
                std::thread::spawn(move || {
                    let store = FsStore::open(&root).unwrap();
                    start.wait();
                    let guard = CasGuard::Match(version(&old));
                    let body = Bytes::from(format!("w{i}"));
                    put_retrying(&store, &k, body, guard)
                })
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let (root, k, start, done) = (root.clone(), k.clone(), start.clone(), done.clone());
                std::thread::spawn(move || {
                    let store = FsStore::open(&root).unwrap();
                    start.wait();
                    let mut seen = Vec::new();
                    while !done.load(Ordering::SeqCst) {
                        seen.push(block(store.get(&k)).unwrap().expect("never absent"));
                    }
                    seen
                })
            })
            .collect();
        let outcomes: Vec<PutOutcome> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        done.store(true, Ordering::SeqCst);
        let winners: Vec<&Version> = outcomes
            .iter()
            .filter_map(|o| match o {
                PutOutcome::Applied(v) => Some(v),
                PutOutcome::Rejected => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        let store = FsStore::open(&root).unwrap();
        let last = block(store.get(&k)).unwrap().unwrap();
        assert_eq!(&last.version, winners[0]);
        for reader in readers {
            for seen in reader.join().unwrap() {
                let old_record = seen.version.as_str() == old && &seen.body[..] == b"old";
                assert!(
                    old_record || seen == last,
                    "round {round}: read {seen:?}, neither the old record nor the winner's"
                );
            }
        }
    }
}

/// A writer of the earlier version in the middle of its write (holding the record's lock)
/// finishes first: the migration waits for the lock, then migrates what that writer wrote,
/// so the write in flight is kept and the write guarded on the version before it is
/// rejected.
#[test]
fn a_first_layout_writer_in_flight_finishes_before_the_migration() {
    let k = key("flight/rec");
    let (dir, versions) = first_layout_store(&k, b"three");
    let root = dir.path().to_path_buf();
    let (in_flight_tx, in_flight_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let old_writer = {
        let (root, k, v3) = (root.clone(), k.clone(), versions[2].clone());
        std::thread::spawn(move || {
            let mut in_flight = || {
                in_flight_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            };
            legacy::put_with(&root, &k, b"four", Some(&v3), 0xa4, &mut in_flight)
        })
    };
    in_flight_rx.recv().unwrap();
    let new_writer = {
        let (root, k, v3) = (root.clone(), k.clone(), versions[2].clone());
        std::thread::spawn(move || {
            let store = FsStore::open(&root).unwrap();
            put_retrying(&store, &k, "mine".into(), CasGuard::Match(version(&v3)))
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !new_writer.is_finished(),
        "the migration must wait for the earlier version's writer"
    );
    go_tx.send(()).unwrap();
    let v4 = old_writer
        .join()
        .unwrap()
        .unwrap()
        .expect("the old write applies");
    let outcome = new_writer.join().unwrap();
    assert_eq!(outcome, PutOutcome::Rejected, "its guard went stale");
    let store = FsStore::open(&root).unwrap();
    let stored = block(store.get(&k)).unwrap().unwrap();
    assert_eq!(
        (&stored.body[..], stored.version.as_str()),
        (&b"four"[..], &*v4)
    );
    let next = block(store.put(&k, "five".into(), CasGuard::Match(stored.version)));
    assert!(matches!(next.unwrap(), PutOutcome::Applied(_)));
    assert!(
        version_files(&root, &k)[0].ends_with("4"),
        "v4 was migrated"
    );
}

/// A process of the earlier version stopped while it holds a record's lock: the migrating
/// write gives up after the bounded wait with `Timeout`, not committed, having changed
/// nothing; once the lock is free the write applies.
#[tokio::test]
async fn a_stopped_first_layout_writer_times_the_migration_out() {
    let k = key("stuck/rec");
    let (dir, versions) = first_layout_store(&k, b"three");
    let store = FsStore::open(dir.path()).unwrap();
    let lock = legacy::hold_lock(dir.path(), &k);
    let before = snapshot(dir.path());
    let guard = CasGuard::Match(version(&versions[2]));
    let err = store
        .put(&k, "mine".into(), guard.clone())
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Timeout, Commit::NotCommitted)
    );
    assert!(err.is_retryable());
    assert_eq!(snapshot(dir.path()), before, "nothing changed");
    drop(lock);
    let outcome = store.put(&k, "mine".into(), guard).await.unwrap();
    assert!(matches!(outcome, PutOutcome::Applied(_)));
}

/// After the migration, a process of the earlier version still running is refused on the
/// key — reads, writes on any version, creates and deletes fail as `Corrupt` — and changes
/// nothing: it can never write a second record beside the migrated one.
#[tokio::test]
async fn a_first_layout_process_is_refused_after_the_migration() {
    let k = key("after/rec");
    let (dir, versions) = first_layout_store(&k, b"three");
    let root = dir.path();
    let store = FsStore::open(root).unwrap();
    let guard = CasGuard::Match(version(&versions[2]));
    let PutOutcome::Applied(v4) = store.put(&k, "four".into(), guard).await.unwrap() else {
        panic!("the migrating write must apply")
    };
    let before = snapshot(root);
    let corrupt = |r: Result<_, Refused>| matches!(r, Err(Refused::Corrupt(_)));
    assert!(corrupt(legacy::get(root, &k).map(drop)));
    for guard in [Some(versions[2].as_str()), Some(v4.as_str()), None] {
        assert!(corrupt(legacy::put(root, &k, b"old", guard, 7).map(drop)));
    }
    assert!(corrupt(legacy::delete(root, &k, &versions[2]).map(drop)));
    assert!(corrupt(legacy::delete(root, &k, v4.as_str()).map(drop)));
    assert_eq!(
        snapshot(root),
        before,
        "the earlier version changed nothing"
    );
    let stored = store.get(&k).await.unwrap().unwrap();
    assert_eq!((&stored.body[..], stored.version), (&b"four"[..], v4));
}

/// A create of the earlier version and one of this version racing on an absent key: one
/// wins, the other is rejected (or refused, for the earlier version), and the key holds the
/// winner's record — never two.
#[test]
fn creates_of_both_layouts_on_one_key_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    legacy::open_root(dir.path());
    let root = dir.path().to_path_buf();
    let store = FsStore::open(&root).unwrap();
    for round in 0..30u128 {
        let k = key(&format!("both/r{round}"));
        let start = Arc::new(Barrier::new(2));
        let old = {
            let (root, k, start) = (root.clone(), k.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                legacy::put(&root, &k, b"old", None, round)
            })
        };
        start.wait();
        let new = block(store.put(&k, "new".into(), CasGuard::Absent)).unwrap();
        let old = old.join().unwrap();
        let stored = block(store.get(&k)).unwrap().unwrap();
        match (&old, &new) {
            (Ok(Some(v)), PutOutcome::Rejected) => {
                assert_eq!(
                    (&stored.body[..], stored.version.as_str()),
                    (&b"old"[..], &**v)
                );
            }
            (Ok(None) | Err(Refused::Corrupt(_)), PutOutcome::Applied(v)) => {
                assert_eq!((&stored.body[..], &stored.version), (&b"new"[..], v));
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
}

/// First-layout records this version cannot take over stay as they are, with a clear
/// error: one longer than the record limit (`Corrupt`, also for reads), one whose version
/// is not `<generation>-<hex>` (only a file made by hand has one).
#[tokio::test]
async fn records_that_cannot_be_migrated_are_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    legacy::open_root(dir.path());
    let (big, odd) = (key("x/big"), key("x/odd"));
    let v = legacy::put(dir.path(), &big, &[b'b'; 2000], None, 1)
        .unwrap()
        .unwrap();
    std::fs::write(
        legacy::record_file(dir.path(), &odd),
        legacy::record_bytes("abc", b"odd"),
    )
    .unwrap();
    let store = FsStore::open(dir.path()).unwrap().with_record_limit(1000);
    let before = snapshot(dir.path());
    let err = store.get(&big).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    let err = store
        .put(&big, "x".into(), CasGuard::Match(version(&v)))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Corrupt, Commit::NotCommitted)
    );
    let stored = store.get(&odd).await.unwrap().unwrap();
    assert_eq!(stored.version.as_str(), "abc");
    let err = store
        .put(&odd, "x".into(), CasGuard::Match(stored.version))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Corrupt, Commit::NotCommitted)
    );
    let mut after = snapshot(dir.path());
    // The lock file the migration of the hand-made record took.
    after.retain(|(p, _)| !p.ends_with("x/.fence/odd.fence"));
    assert_eq!(after, before);
    assert_eq!(legacy::get(dir.path(), &odd).unwrap().unwrap().1, b"odd");
}

/// Against the real earlier version (opt-in: `FENCE_FS_OLD_WORKER` names a
/// `fence-fs-worker` built from commit 56f0a6d): its counter is migrated by this version's
/// increments, and its own increments are refused afterwards, changing nothing.
#[test]
fn the_earlier_versions_worker_is_refused_after_the_migration() {
    let Ok(old) = std::env::var("FENCE_FS_OLD_WORKER") else {
        println!("FENCE_FS_OLD_WORKER not set: the earlier version's binary is NOT run");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let run = |bin: &str, n: &str| {
        std::process::Command::new(bin)
            .args(["incr", root, "c/counter", n])
            .output()
            .unwrap()
    };
    assert!(run(&old, "5").status.success(), "the old worker counts");
    let new = run(env!("CARGO_BIN_EXE_fence-fs-worker"), "5");
    assert!(new.status.success(), "{new:?}");
    let before = snapshot(dir.path());
    let refused = run(&old, "1");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("not a regular file"), "{said}");
    assert_eq!(snapshot(dir.path()), before);
    let store = FsStore::open(dir.path()).unwrap();
    let stored = block(store.get(&key("c/counter"))).unwrap().unwrap();
    assert_eq!(&stored.body[..], b"10");
}

/// The object directory a migration of record `v` (generation 1) of `k` would build, made
/// by hand in the `.fence` of `k`'s directory: its path.
fn migrated_by_hand(root: &Path, k: &Key, v: &str, body: &[u8]) -> PathBuf {
    let (dir, _) = legacy::paths(root, k);
    let built = dir.join(".fence/new-00ff");
    std::fs::create_dir_all(built.join("i00ff")).unwrap();
    let mut base = format!("fence-fs 2 {v} - put {} c\n", body.len()).into_bytes();
    base.extend_from_slice(body);
    std::fs::write(built.join("i00ff/1"), base).unwrap();
    built
}

/// A first-layout store holding record `x/k` (body `body`) and, built by hand beside it, the
/// object directory its migration would exchange it for: root, key, version, that directory.
fn ready_to_exchange() -> (tempfile::TempDir, Key, String, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    legacy::open_root(dir.path());
    let k = key("x/k");
    let v = legacy::put(dir.path(), &k, b"body", None, 9)
        .unwrap()
        .unwrap();
    let built = migrated_by_hand(dir.path(), &k, &v, b"body");
    (dir, k, v, built)
}

/// A writer waiting for the first layout's lock to migrate a record goes on, without the
/// lock, as soon as the record is migrated by another (who may still hold the lock for its
/// last syncs, or be stopped there): a directory is out of reach of the earlier version.
/// Here the lock stays held throughout and the exchange is made by hand while the writer
/// waits; without that check the write failed with `Timeout` after the whole lock wait.
#[test]
fn a_writer_waiting_to_migrate_goes_on_once_another_migrated() {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    let (dir, k, v, built) = ready_to_exchange();
    let _lock = legacy::hold_lock(dir.path(), &k);
    let writer = {
        let (root, k, v) = (dir.path().to_path_buf(), k.clone(), v.clone());
        std::thread::spawn(move || {
            let store = FsStore::open(&root).unwrap();
            block(store.put(&k, "next".into(), CasGuard::Match(version(&v))))
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let record = legacy::record_file(dir.path(), &k);
    renameat_with(CWD, &built, CWD, &record, RenameFlags::EXCHANGE).unwrap();
    let outcome = writer.join().unwrap().unwrap();
    assert!(matches!(outcome, PutOutcome::Applied(_)), "{outcome:?}");
    let store = FsStore::open(dir.path()).unwrap();
    assert_eq!(&block(store.get(&k)).unwrap().unwrap().body[..], b"next");
}

/// Reads racing the one step of a migration — the exchange of the record file for its
/// object directory — always find the record, as a file before and as a version after,
/// never an error: a read that saw a file and then finds a directory looks again. (Each
/// round exchanges once while a reader reads in a loop; 300 rounds; without the second
/// look, runs failed within their first few dozen rounds.)
#[test]
fn reads_racing_the_exchange_always_find_the_record() {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    let (dir, k, v, built) = ready_to_exchange();
    let record = legacy::record_file(dir.path(), &k);
    let store = FsStore::open(dir.path()).unwrap();
    let exchange = || renameat_with(CWD, &built, CWD, &record, RenameFlags::EXCHANGE).unwrap();
    for round in 0..300 {
        let (count, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let reader = {
            let (store, k, count, done) = (store.clone(), k.clone(), count.clone(), done.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let mut reads = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    reads.push(runtime.block_on(store.get(&k)));
                    count.fetch_add(1, Ordering::SeqCst);
                }
                reads
            })
        };
        // Exchange while the reader is in the middle of its reads.
        while count.load(Ordering::SeqCst) < 1 + round % 3 {
            std::thread::yield_now();
        }
        exchange();
        while count.load(Ordering::SeqCst) < 4 {
            std::thread::yield_now();
        }
        done.store(true, Ordering::SeqCst);
        for read in reader.join().unwrap() {
            let stored = read
                .unwrap_or_else(|e| panic!("round {round}: {e}"))
                .unwrap();
            assert_eq!(
                (&stored.body[..], stored.version.as_str()),
                (&b"body"[..], &*v)
            );
        }
        exchange();
    }
}
