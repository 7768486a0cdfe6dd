//! Store-level contract checks of FsStore.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use fence_core::{
    CasGuard, Commit, ConditionalStore, DeleteOutcome, ErrorKind, Key, PutOutcome, Version,
};
use fence_fs::FsStore;
use support::{files_below, version_files};

mod support;

fn key(s: &str) -> Key {
    Key::new(s).unwrap()
}

fn fresh() -> (tempfile::TempDir, FsStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    (dir, store)
}

async fn create(store: &FsStore, k: &Key, body: &'static str) -> Version {
    match store
        .put(k, Bytes::from(body), CasGuard::Absent)
        .await
        .unwrap()
    {
        PutOutcome::Applied(v) => v,
        PutOutcome::Rejected => panic!("create of {k} rejected"),
    }
}

async fn update(store: &FsStore, k: &Key, body: &'static str, v: &Version) -> PutOutcome {
    let guard = CasGuard::Match(v.clone());
    store.put(k, Bytes::from(body), guard).await.unwrap()
}

#[tokio::test]
async fn create_twice_second_is_rejected() {
    let (_dir, store) = fresh();
    let k = key("cells/c1/own.json");
    let v = create(&store, &k, "one").await;
    let again = store.put(&k, "two".into(), CasGuard::Absent).await.unwrap();
    assert_eq!(again, PutOutcome::Rejected);
    let stored = store.get(&k).await.unwrap().unwrap();
    assert_eq!((&stored.body[..], stored.version), (&b"one"[..], v));
}

#[tokio::test]
async fn update_current_stale_and_missing() {
    let (_dir, store) = fresh();
    let k = key("a");
    let v1 = create(&store, &k, "1").await;
    let PutOutcome::Applied(v2) = update(&store, &k, "2", &v1).await else {
        panic!("update with the current version must apply")
    };
    assert_ne!(v1, v2);
    assert_eq!(update(&store, &k, "3", &v1).await, PutOutcome::Rejected);
    assert_eq!(&store.get(&k).await.unwrap().unwrap().body[..], b"2");
    assert_eq!(
        update(&store, &key("missing/x"), "1", &v2).await,
        PutOutcome::Rejected
    );
    assert_eq!(store.get(&key("missing/x")).await.unwrap(), None);
}

#[tokio::test]
async fn identical_bytes_get_a_new_version() {
    let (_dir, store) = fresh();
    let k = key("same");
    let v1 = create(&store, &k, "x").await;
    let PutOutcome::Applied(v2) = update(&store, &k, "x", &v1).await else {
        panic!("rewrite must apply")
    };
    assert_ne!(v1, v2);
    assert_eq!(update(&store, &k, "x", &v1).await, PutOutcome::Rejected);
}

#[tokio::test]
async fn versions_differ_after_delete_recreate_and_reopen() {
    let (dir, store) = fresh();
    let k = key("d/e");
    let mut seen = HashSet::new();
    let v1 = create(&store, &k, "x").await;
    seen.insert(v1.clone());
    assert_eq!(store.delete(&k, &v1).await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(store.get(&k).await.unwrap(), None);
    let v2 = create(&store, &k, "x").await;
    assert!(
        seen.insert(v2.clone()),
        "version repeated after delete + re-create"
    );
    assert_eq!(update(&store, &k, "x", &v1).await, PutOutcome::Rejected);
    drop(store);
    let reopened = FsStore::open(dir.path()).unwrap();
    assert_eq!(reopened.get(&k).await.unwrap().unwrap().version, v2);
    assert_eq!(
        reopened.delete(&k, &v2).await.unwrap(),
        DeleteOutcome::Deleted
    );
    let v3 = create(&reopened, &k, "x").await;
    assert!(
        seen.insert(v3),
        "version repeated after reopening the store"
    );
}

#[tokio::test]
async fn delete_is_conditional() {
    let (_dir, store) = fresh();
    let k = key("del");
    let v1 = create(&store, &k, "x").await;
    let PutOutcome::Applied(v2) = update(&store, &k, "y", &v1).await else {
        panic!()
    };
    assert_eq!(
        store.delete(&k, &v1).await.unwrap(),
        DeleteOutcome::Rejected
    );
    assert!(store.get(&k).await.unwrap().is_some());
    assert_eq!(
        store.delete(&key("nope"), &v2).await.unwrap(),
        DeleteOutcome::Rejected
    );
    assert_eq!(store.delete(&k, &v2).await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(
        store.delete(&k, &v2).await.unwrap(),
        DeleteOutcome::Rejected
    );
    assert!(store.capabilities().conditional_delete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_create_race_has_one_winner() {
    let (_dir, store) = fresh();
    for round in 0..20 {
        let k = key(&format!("race/{round}"));
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let (store, k) = (store.clone(), k.clone());
                tokio::spawn(async move {
                    store
                        .put(&k, Bytes::from(format!("w{i}")), CasGuard::Absent)
                        .await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            if let PutOutcome::Applied(v) = t.await.unwrap().unwrap() {
                winners.push((i, v));
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let stored = store.get(&k).await.unwrap().unwrap();
        assert_eq!(stored.version, winners[0].1);
        assert_eq!(stored.body, Bytes::from(format!("w{}", winners[0].0)));
    }
}

#[test]
fn concurrent_updates_from_threads_lose_nothing() {
    let (_dir, store) = fresh();
    let k = key("counter");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(create(&store, &k, "0"));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (store, k) = (FsStore::open(store.root()).unwrap(), k.clone());
            let handle = runtime.handle().clone();
            std::thread::spawn(move || handle.block_on(increment_n(&store, &k, 50)))
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let body = runtime.block_on(store.get(&k)).unwrap().unwrap().body;
    assert_eq!(&body[..], b"200");
}

async fn increment_n(store: &FsStore, k: &Key, n: u32) {
    let mut done = 0;
    while done < n {
        let stored = store.get(k).await.unwrap().unwrap();
        let value: u64 = std::str::from_utf8(&stored.body).unwrap().parse().unwrap();
        let next = Bytes::from((value + 1).to_string());
        match store.put(k, next, CasGuard::Match(stored.version)).await {
            Ok(PutOutcome::Applied(_)) => done += 1,
            Ok(PutOutcome::Rejected) => {}
            Err(e) if e.is_retryable() => {}
            Err(e) => panic!("increment failed: {e}"),
        }
    }
}

/// `open(R/app)` with key `x` and `open(R)` with key `app/x` name one object: their writers
/// work on the same files. (The inner root is opened first: opened after the outer one, it is
/// refused.)
#[test]
fn two_roots_aliasing_one_file_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let inner_root = dir.path().join("app");
    std::fs::create_dir(&inner_root).unwrap();
    let inner = FsStore::open(&inner_root).unwrap();
    let outer = FsStore::open(dir.path()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(create(&inner, &key("x"), "0"));
    let writers = [
        (&inner, "x"),
        (&inner, "x"),
        (&outer, "app/x"),
        (&outer, "app/x"),
    ];
    std::thread::scope(|s| {
        for (store, k) in writers {
            let handle = runtime.handle().clone();
            s.spawn(move || handle.block_on(increment_n(store, &key(k), 100)));
        }
    });
    let body = runtime
        .block_on(outer.get(&key("app/x")))
        .unwrap()
        .unwrap()
        .body;
    assert_eq!(&body[..], b"400", "updates lost between aliasing roots");
}

#[tokio::test]
async fn list_is_sorted_and_hides_internal_files() {
    let (dir, store) = fresh();
    for k in ["b", "a/x", "a/y/z", "a", "ab", "c/d"] {
        create(&store, &key(k), "v").await;
    }
    std::fs::write(dir.path().join("a/stray.txt"), "not an object").unwrap();
    std::fs::write(dir.path().join(".fence/new-0123"), "leftover").unwrap();
    let all: Vec<String> = store
        .list(None)
        .await
        .unwrap()
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(all, ["a", "a/x", "a/y/z", "ab", "b", "c/d"]);
    let under_a: Vec<String> = store
        .list(Some(&key("a")))
        .await
        .unwrap()
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(under_a, ["a", "a/x", "a/y/z"]);
    assert!(store.list(Some(&key("zz"))).await.unwrap().is_empty());
}

/// The mode bits of `path`.
fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Asserts that every file below `root` has mode `file` and every directory mode `dir`.
fn assert_modes(root: &Path, file: u32, dir: u32) {
    let mut paths = Vec::new();
    files_below(root, &mut paths);
    assert!(paths.len() > 5, "{paths:?}");
    for path in paths {
        let is_dir = std::fs::symlink_metadata(&path).unwrap().is_dir();
        let want = if is_dir { dir } else { file };
        assert_eq!(mode_of(&path), want, "{}", path.display());
    }
}

#[tokio::test]
async fn files_are_owner_only_by_default() {
    let (dir, store) = fresh();
    create(&store, &key("m/n/o"), "secret").await;
    assert_modes(dir.path(), 0o600, 0o700);
}

/// A group shares a store as /var/lock is shared: the root belongs to the group with the
/// set-group-ID bit; every file and directory the store makes has the given modes exactly
/// (whatever the umask) and keeps the group bit on directories.
#[tokio::test]
async fn a_group_shares_a_store_with_the_modes_it_gives() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o2770)).unwrap();
    let store = FsStore::options()
        .file_mode(0o660)
        .dir_mode(0o770)
        .open(dir.path())
        .unwrap();
    let k = key("cells/c1/own.json");
    let v = create(&store, &k, "shared").await;
    assert!(matches!(
        update(&store, &k, "again", &v).await,
        PutOutcome::Applied(_)
    ));
    assert_modes(dir.path(), 0o660, 0o2770);
}

#[tokio::test]
async fn corrupt_or_truncated_records_name_the_key() {
    let (dir, store) = fresh();
    let k = key("c/rec");
    let v = create(&store, &k, "hello world").await;
    let path = version_files(dir.path(), &k).pop().unwrap();
    let whole = std::fs::read(&path).unwrap();
    for bad in [&whole[..whole.len() - 3], &whole[..5], b"garbage\nxx"] {
        std::fs::write(&path, bad).unwrap();
        let err = store.get(&k).await.unwrap_err();
        assert_eq!((err.kind(), err.key()), (ErrorKind::Corrupt, Some(&k)));
        let err = store
            .put(&k, "new".into(), CasGuard::Match(v.clone()))
            .await
            .unwrap_err();
        assert_eq!(
            (err.kind(), err.commit()),
            (ErrorKind::Corrupt, Commit::NotCommitted)
        );
    }
}

/// Only the current version and its predecessor stay: superseded versions do not pile up.
#[tokio::test]
async fn superseded_versions_do_not_pile_up() {
    let (dir, store) = fresh();
    let k = key("chain/head");
    let mut v = create(&store, &k, "0").await;
    for i in 0..50 {
        let PutOutcome::Applied(next) = update(&store, &k, "next", &v).await else {
            panic!("write {i} rejected")
        };
        v = next;
        assert!(version_files(dir.path(), &k).len() <= 2);
    }
    assert_eq!(&store.get(&k).await.unwrap().unwrap().body[..], b"next");
}

/// A record of the first layout (one file per key, `fence-fs 1` header) is read with its
/// version; a write over it is refused (`Unsupported`, not committed), a create rejected.
#[tokio::test]
async fn records_of_the_first_layout_are_read_not_rewritten() {
    let (dir, store) = fresh();
    std::fs::create_dir(dir.path().join("old")).unwrap();
    std::fs::write(
        dir.path().join("old/rec.fence"),
        "fence-fs 1 3-ab12 5\nhello",
    )
    .unwrap();
    let k = key("old/rec");
    let stored = store.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (&stored.body[..], stored.version.as_str()),
        (&b"hello"[..], "3-ab12")
    );
    let err = store
        .put(&k, "x".into(), CasGuard::Match(stored.version.clone()))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.commit()),
        (ErrorKind::Unsupported, Commit::NotCommitted)
    );
    assert_eq!(
        store.put(&k, "x".into(), CasGuard::Absent).await.unwrap(),
        PutOutcome::Rejected
    );
    assert_eq!(store.list(None).await.unwrap(), [k]);
}

/// Leftovers of writers that died while building a create or writing a named temp file (not
/// locked by anyone) and retired incarnations are reclaimed by the next create there.
#[tokio::test]
async fn dead_writers_leftovers_are_reclaimed_by_the_next_create() {
    let (dir, store) = fresh();
    let internal = dir.path().join("d/.fence");
    std::fs::create_dir_all(internal.join("new-00ff/i00ff")).unwrap();
    std::fs::write(internal.join("new-00ff/i00ff/1"), "half").unwrap();
    std::fs::write(internal.join("tmp-00ff"), "half").unwrap();
    std::fs::create_dir_all(internal.join("old-i00aa")).unwrap();
    std::fs::write(
        internal.join("old-i00aa/7"),
        "fence-fs 2 7-aa 6-aa del 0 u\n",
    )
    .unwrap();
    create(&store, &key("d/k"), "v").await;
    let left: Vec<_> = std::fs::read_dir(&internal).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn works_through_arc_dyn() {
    let (_dir, store) = fresh();
    let store: Arc<dyn ConditionalStore> = Arc::new(store);
    let k = key("dyn");
    assert!(matches!(
        store.put(&k, "x".into(), CasGuard::Absent).await.unwrap(),
        PutOutcome::Applied(_)
    ));
}

#[tokio::test]
async fn ownership_api_runs_over_fs_store() {
    use fence_core::{CasOutcome, Ownership};
    let (dir, store) = fresh();
    let a = Ownership::new(Arc::new(store), "n1");
    let b = Ownership::new(Arc::new(FsStore::open(dir.path()).unwrap()), "n2");
    assert_eq!(
        a.cas_owner("c1", CasGuard::Absent, 1).await.unwrap(),
        CasOutcome::Applied
    );
    assert_eq!(
        b.cas_owner("c1", CasGuard::Absent, 1).await.unwrap(),
        CasOutcome::Rejected
    );
    let seen = b.read_owner("c1").await.unwrap().unwrap();
    assert_eq!((seen.node.as_deref(), seen.epoch), (Some("n1"), 1));
    // Takeover guarded on the version b read; a's later write on its stale version fails.
    assert_eq!(
        b.cas_owner("c1", CasGuard::Match(seen.etag.clone()), 2)
            .await
            .unwrap(),
        CasOutcome::Applied
    );
    assert_eq!(
        a.cas_owner("c1", CasGuard::Match(seen.etag), 2)
            .await
            .unwrap(),
        CasOutcome::Rejected
    );
    assert_eq!(
        a.read_owner("c1").await.unwrap().unwrap().node.as_deref(),
        Some("n2")
    );
}

/// A handle remembers where it found the keys it wrote; another handle deleting and
/// re-creating a key meanwhile must neither hide the new record from it nor let its stale
/// version through.
#[tokio::test]
async fn a_handle_sees_what_another_deleted_and_recreated() {
    let (dir, mine) = fresh();
    let other = FsStore::open(dir.path()).unwrap();
    let k = key("cells/c1/own.json");
    let v1 = create(&mine, &k, "1").await;
    let PutOutcome::Applied(v2) = update(&mine, &k, "2", &v1).await else {
        panic!()
    };
    assert_eq!(&mine.get(&k).await.unwrap().unwrap().body[..], b"2");
    assert_eq!(other.delete(&k, &v2).await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(mine.get(&k).await.unwrap(), None);
    let w1 = create(&other, &k, "new").await;
    let seen = mine.get(&k).await.unwrap().unwrap();
    assert_eq!((&seen.body[..], &seen.version), (&b"new"[..], &w1));
    assert_eq!(update(&mine, &k, "stale", &v2).await, PutOutcome::Rejected);
    let PutOutcome::Applied(w2) = update(&mine, &k, "mine", &w1).await else {
        panic!("the current version of the new incarnation must apply")
    };
    let seen = other.get(&k).await.unwrap().unwrap();
    assert_eq!((&seen.body[..], &seen.version), (&b"mine"[..], &w2));
}
