//! Bounded leftovers: nothing but the objects themselves stays behind, and a read-only store
//! is only read.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use fence_core::{CasGuard, ConditionalStore, ErrorKind, Key, PutOutcome};
use fence_fs::FsStore;
use support::files_below;

mod support;

/// Every path below `root`, relative, with incarnation names replaced by `I`.
fn tree(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    files_below(root, &mut paths);
    let mut shown: Vec<String> = paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            rel.split('/')
                .map(|seg| match seg.strip_prefix('i') {
                    Some(hex) if hex.len() == 32 => "I",
                    _ => seg,
                })
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect();
    shown.sort();
    shown
}

/// A directory on tmpfs where there is one (`/dev/shm`): what is left on disk does not
/// depend on the file system, and 1,000 creates and deletes there take a second, not the
/// minute they take with a loaded disk's fsyncs.
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    match shm.is_dir() {
        true => tempfile::tempdir_in(shm).unwrap_or_else(|_| tempfile::tempdir().unwrap()),
        false => tempfile::tempdir().unwrap(),
    }
}

/// 1,000 write-once payload objects: each leaves its object directory, its incarnation and
/// its one version file — no lock file, no temp file, nothing in `.fence` (the first layout
/// left a lock file per object). Collected (deleted), they leave nothing at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_payload_writes_leave_no_lock_or_temp_file() {
    const OBJECTS: usize = 1_000;
    let dir = scratch_dir();
    let store = FsStore::open(dir.path()).unwrap();
    let keys: Vec<Key> = (0..OBJECTS)
        .map(|i| Key::new(format!("cells/c1/blobs/{i:04}")).unwrap())
        .collect();
    for k in &keys {
        let body = Bytes::from(vec![b'p'; 9 * 1024]);
        let outcome = store.put(k, body, CasGuard::Absent).await.unwrap();
        assert!(matches!(outcome, PutOutcome::Applied(_)));
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for path in tree(dir.path()) {
        let shape = path
            .split('/')
            .map(|seg| {
                if seg.len() == 10 && seg.ends_with(".fence") {
                    "NNNN.fence"
                } else {
                    seg
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        *kinds.entry(shape).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = [
        (".fence", 1),
        (".fence/case-probe", 1),
        (".fence/norm-probe-\u{e9}", 1),
        (".fence/root", 1),
        ("cells", 1),
        ("cells/c1", 1),
        ("cells/c1/blobs", 1),
        ("cells/c1/blobs/.fence", 1),
        ("cells/c1/blobs/NNNN.fence", OBJECTS),
        ("cells/c1/blobs/NNNN.fence/I", OBJECTS),
        ("cells/c1/blobs/NNNN.fence/I/1", OBJECTS),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(kinds, expected);
    for k in &keys {
        store.delete_immutable(k).await.unwrap();
    }
    assert!(store.list(None).await.unwrap().is_empty());
    let left: Vec<String> = tree(dir.path())
        .into_iter()
        .filter(|p| !p.starts_with(".fence"))
        .collect();
    assert_eq!(
        left,
        [
            "cells",
            "cells/c1",
            "cells/c1/blobs",
            "cells/c1/blobs/.fence"
        ]
    );
}

/// A store opened read-only reads and lists what a writable handle wrote, refuses writes
/// (`PermissionDenied`, not committed), and changes nothing on disk — not even at open.
#[tokio::test]
async fn a_read_only_store_reads_lists_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let writer = FsStore::open(dir.path()).unwrap();
    let k = Key::new("cells/c1/own.json").unwrap();
    let PutOutcome::Applied(v1) = writer.put(&k, "a".into(), CasGuard::Absent).await.unwrap()
    else {
        panic!()
    };
    writer
        .put(&k, "b".into(), CasGuard::Match(v1))
        .await
        .unwrap();
    let before = tree(dir.path());
    for root in [dir.path(), fresh.path()] {
        let reader = FsStore::open_read_only(root).unwrap();
        let found = reader.get(&k).await.unwrap();
        assert_eq!(
            found.map(|s| s.body),
            (root == dir.path()).then(|| Bytes::from("b"))
        );
        let listed = reader.list(None).await.unwrap();
        assert_eq!(listed.len(), usize::from(root == dir.path()));
        for guard in [
            CasGuard::Absent,
            CasGuard::Match(fence_core::Version::new("2-ab").unwrap()),
        ] {
            let err = reader.put(&k, "c".into(), guard).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::PermissionDenied);
            assert!(!err.is_ambiguous());
        }
    }
    assert_eq!(tree(dir.path()), before);
    assert!(tree(fresh.path()).is_empty(), "a read-only open wrote");
}
