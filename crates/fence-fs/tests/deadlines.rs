//! Bounded waits: a write lands before its caller gives up or never, no thread outlives its
//! caller, and writers stuck behind one held lock do not starve anyone else.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{
    CasGuard, Commit, ConditionalStore, Entropy, ErrorKind, Fence, Key, PutOutcome, Version,
};
use fence_fs::FsStore;
use support::hold_lock;

mod support;

fn key(s: &str) -> Key {
    Key::new(s).unwrap()
}

async fn create(store: &FsStore, k: &Key, body: &'static str) -> Version {
    match store.put(k, body.into(), CasGuard::Absent).await.unwrap() {
        PutOutcome::Applied(v) => v,
        PutOutcome::Rejected => panic!("create of {k} rejected"),
    }
}

/// How many threads of this process carry `name` (Linux: `/proc/self/task/*/comm`).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_given_up_at_any_moment_never_lands_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let k = key("big/record");
    let mut version = create(&store, &k, "start").await;
    let entropy = Entropy::from_os();
    let (mut given_up, mut landed) = (0, 0);
    for round in 0..30 {
        // Large enough that writing and syncing it takes a while: the give-up falls before
        // the lock, during the write, at the rename or after it.
        let body = Bytes::from(vec![b'a' + (round % 26) as u8; 4 << 20]);
        let put = store.put(&k, body, CasGuard::Match(version.clone()));
        let patience = Duration::from_micros(entropy.below(20_000));
        let outcome = tokio::time::timeout(patience, put).await;
        let seen = store.get(&k).await.unwrap().unwrap().version;
        match outcome {
            Ok(Ok(PutOutcome::Applied(v))) => {
                landed += 1;
                assert_eq!(seen, v, "round {round}: an applied put is not visible");
            }
            Ok(other) => panic!("round {round}: an uncontended put failed: {other:?}"),
            Err(_) => given_up += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let later = store.get(&k).await.unwrap().unwrap().version;
        assert_eq!(
            seen, later,
            "round {round}: a put landed after its caller gave up"
        );
        version = later;
    }
    println!("{given_up} puts given up, {landed} landed in time");
    assert!(given_up > 0, "no put was given up: nothing was tested");
}

#[test]
fn puts_given_up_on_a_held_lock_leave_no_thread_behind() {
    const NAME: &str = "fence-fs-probe";
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .thread_name(NAME)
        .thread_keep_alive(Duration::from_millis(100))
        .build()
        .unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let k = key("jobs/held");
    let v = runtime.block_on(create(&store, &k, "x"));
    let holder = hold_lock(dir.path(), &k);
    runtime.block_on(async {
        let puts = (0..200).map(|i| {
            let put = store.put(&k, Bytes::from(format!("{i}")), CasGuard::Match(v.clone()));
            tokio::time::timeout(Duration::from_millis(50), put)
        });
        let outcomes = futures::future::join_all(puts).await;
        assert!(
            outcomes.iter().all(Result::is_err),
            "a put passed a held lock"
        );
        // Idle threads leave after the keep-alive; threads still stuck in a write stay.
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if threads_named(NAME) <= 1 {
                break;
            }
        }
    });
    let left = threads_named(NAME);
    drop(holder);
    assert!(
        left <= 1,
        "{left} threads outlived the puts their callers gave up"
    );
    let stored = runtime.block_on(store.get(&k)).unwrap().unwrap();
    assert_eq!(stored.version, v, "a given-up put landed");
}

#[test]
fn a_thousand_stuck_puts_do_not_starve_a_lease_keeper() {
    let dir = tempfile::tempdir().unwrap();
    // Tokio's default blocking pool: 512 threads.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = FsStore::open(dir.path())
        .unwrap()
        .with_lock_wait(Duration::from_secs(3));
    let k = key("jobs/stuck");
    let v = runtime.block_on(create(&store, &k, "x"));
    let holder = hold_lock(dir.path(), &k);
    runtime.block_on(async move {
        let fence = Fence::builder(Arc::new(store.clone()), "n1")
            .ttl(Duration::from_millis(1_500))
            .build()
            .unwrap();
        let keeper = fence.acquire().await.unwrap();
        let spawn_put = |i: usize, patience: Option<Duration>| {
            let (store, k, guard) = (store.clone(), k.clone(), CasGuard::Match(v.clone()));
            tokio::spawn(async move {
                let put = store.put(&k, Bytes::from(format!("{i}")), guard);
                match patience {
                    Some(p) => tokio::time::timeout(p, put).await.ok(),
                    None => Some(put.await),
                }
            })
        };
        let pending: Vec<_> = (0..1_000).map(|i| spawn_put(i, None)).collect();
        let given_up: Vec<_> = (0..1_000)
            .map(|i| spawn_put(i, Some(Duration::from_millis(20))))
            .collect();
        // Two TTLs and more: renewals of the lease's key must get through meanwhile.
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                keeper.is_held(),
                "the lease was lost: {:?}",
                keeper.status()
            );
        }
        for put in pending {
            let err = put.await.unwrap().unwrap().unwrap_err();
            assert_eq!(
                (err.kind(), err.commit()),
                (ErrorKind::Timeout, Commit::NotCommitted)
            );
        }
        for put in given_up {
            assert!(put.await.unwrap().is_none(), "a put passed a held lock");
        }
        assert!(
            keeper.is_held(),
            "the lease was lost: {:?}",
            keeper.status()
        );
        drop(holder);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stored = store.get(&k).await.unwrap().unwrap();
        assert_eq!(
            stored.version, v,
            "a stuck put landed after its caller gave up"
        );
        keeper.release().await;
    });
}
