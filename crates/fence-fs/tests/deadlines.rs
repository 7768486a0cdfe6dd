//! A write lands before its caller gives up, or never.

use std::time::Duration;

use bytes::Bytes;
use fence_core::{CasGuard, ConditionalStore, Entropy, Key, PutOutcome, Version};
use fence_fs::FsStore;

fn key(s: &str) -> Key {
    Key::new(s).unwrap()
}

async fn create(store: &FsStore, k: &Key, body: &'static str) -> Version {
    match store.put(k, body.into(), CasGuard::Absent).await.unwrap() {
        PutOutcome::Applied(v) => v,
        PutOutcome::Rejected => panic!("create of {k} rejected"),
    }
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

/// Creates given up at random moments (before, during or after the build of the new object
/// directory and its rename): one that was given up never shows up afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_given_up_at_any_moment_never_lands_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let entropy = Entropy::from_os();
    let (mut given_up, mut landed) = (0, 0);
    for round in 0..40 {
        let k = key(&format!("fresh/{round}"));
        let body = Bytes::from(vec![b'x'; 1 << 20]);
        let patience = Duration::from_micros(entropy.below(10_000));
        let outcome = tokio::time::timeout(patience, store.put(&k, body, CasGuard::Absent)).await;
        let seen = store.get(&k).await.unwrap().map(|s| s.version);
        match outcome {
            Ok(Ok(PutOutcome::Applied(v))) => {
                landed += 1;
                assert_eq!(
                    seen,
                    Some(v),
                    "round {round}: an applied create is not visible"
                );
            }
            Ok(other) => panic!("round {round}: an uncontended create failed: {other:?}"),
            Err(_) => given_up += 1,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let later = store.get(&k).await.unwrap().map(|s| s.version);
        assert_eq!(
            seen, later,
            "round {round}: a create landed after its caller gave up"
        );
    }
    println!("{given_up} creates given up, {landed} landed in time");
    assert!(given_up > 0, "no create was given up: nothing was tested");
}
