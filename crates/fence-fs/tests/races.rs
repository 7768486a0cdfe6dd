//! Reads and creates racing deletes: a key that is being deleted and created again is
//! present or absent to every reader at every instant, never an error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use fence_core::{CasGuard, ConditionalStore, DeleteOutcome, Key, PutOutcome};
use fence_fs::FsStore;

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// A directory in memory where there is one (the race is about system-call order, and
/// `fsync` there costs nothing), else a temp directory.
fn scratch() -> tempfile::TempDir {
    match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    }
}

/// Rounds of create-then-delete by one thread while others read and create the same key.
const ROUNDS: usize = 500;

/// Reads the key and replaces what it read, if anything.
async fn update(store: &FsStore, k: &Key) -> Result<(), fence_core::Error> {
    if let Some(stored) = store.get(k).await? {
        let guard = CasGuard::Match(stored.version);
        store.put(k, Bytes::from_static(b"u"), guard).await?;
    }
    Ok(())
}

/// One thread creates and deletes a key over and over (each delete retires the incarnation
/// and removes its files); readers and creators on other handles race it. A reader or a
/// creator that opened the incarnation just before it was retired must answer as if the key
/// were absent (it was, from the delete on), never `Corrupt` ("an incarnation without
/// versions", "its version chain is broken"); a replace racing the retirement is rejected,
/// not an error.
#[test]
fn reads_and_creates_racing_a_delete_never_fail() {
    let dir = scratch();
    let k = Key::new("races/k").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let racers: Vec<_> = (0..4)
        .map(|i| {
            let (store, k, done) = (FsStore::open(dir.path()).unwrap(), k.clone(), done.clone());
            std::thread::spawn(move || {
                let mut errors = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let answer = block(async {
                        match i {
                            0 => store
                                .put(&k, Bytes::from_static(b"c"), CasGuard::Absent)
                                .await
                                .map(|_| ()),
                            1 => store.get(&k).await.map(|_| ()),
                            _ => update(&store, &k).await,
                        }
                    });
                    if let Err(e) = answer {
                        errors.push(e);
                    }
                }
                errors
            })
        })
        .collect();
    let store = FsStore::open(dir.path()).unwrap();
    for _ in 0..ROUNDS {
        block(async {
            let current = match store
                .put(&k, Bytes::from_static(b"w"), CasGuard::Absent)
                .await
            {
                Ok(PutOutcome::Applied(v)) => Some(v),
                Ok(_) => store.get(&k).await.unwrap().map(|s| s.version),
                Err(e) => panic!("create failed: {e}"),
            };
            if let Some(v) = current {
                let outcome = store.delete(&k, &v).await.unwrap();
                assert!(matches!(
                    outcome,
                    DeleteOutcome::Deleted | DeleteOutcome::Rejected
                ));
            }
        });
    }
    done.store(true, Ordering::Relaxed);
    let errors: Vec<_> = racers.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let kinds: Vec<_> = errors.iter().map(|e| (e.kind(), e.to_string())).collect();
    assert!(
        kinds.is_empty(),
        "{} errors: {:?}",
        kinds.len(),
        &kinds[..kinds.len().min(5)]
    );
}
