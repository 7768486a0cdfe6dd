//! Many keeperless writers at one epoch (`update_cell`, as many `fence put`s of one holder
//! at once): they all land, each once, and one that cannot land within its time says so
//! truly — a timeout, nothing written — never "held by another".

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::*;
use fence_testkit::{FaultyStore, OpKind, RandomFaults};

/// Adds one mark to the payload: the payload's length counts the writes that landed.
fn mark(cur: &Bytes) -> Result<Bytes, Error> {
    Ok([cur.as_ref(), b"x"].concat().into())
}

/// Every request takes up to 5 ms, so concurrent writers really overlap.
fn slow_store(seed: u64) -> Arc<FaultyStore> {
    let store = FaultyStore::new(Arc::new(MemoryStore::new()), seed);
    let slow = RandomFaults {
        latency: 1.0,
        latency_max: Duration::from_millis(5),
        ..RandomFaults::default()
    };
    store.set_random(OpKind::Get, slow);
    store.set_random(OpKind::Put, slow);
    Arc::new(store)
}

#[tokio::test(start_paused = true)]
async fn forty_co_writers_at_one_epoch_all_land_each_once() {
    for seed in 0..3 {
        let store = slow_store(seed);
        let own = Ownership::new(store.clone(), "holder");
        own.cas_owner("c", CasGuard::Absent, 1).await.unwrap();
        let t = Duration::from_secs(10);
        let writes = (0..40).map(|_| update_cell(&own, "c", 1, t, mark));
        let results = futures::future::join_all(writes).await;
        for r in &results {
            assert!(r.is_ok(), "seed {seed}: {r:?}");
        }
        let data = read_cell(&own, "c").await.unwrap().unwrap();
        assert_eq!(
            data.payload.len(),
            40,
            "seed {seed}: each write landed once"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_writer_the_others_always_overtake_times_out_with_nothing_written() {
    let memory = Arc::new(MemoryStore::new());
    let own = Ownership::new(memory.clone(), "holder");
    own.cas_owner("c", CasGuard::Absent, 1).await.unwrap();
    let key = Key::new("cells/c/own.json").unwrap();
    let runs = AtomicU32::new(0);
    // Each time our update runs, a co-writer at the same epoch lands first.
    let overtaken = |cur: &Bytes| {
        runs.fetch_add(1, Ordering::SeqCst);
        let head = futures::executor::block_on(memory.get(&key))
            .unwrap()
            .unwrap();
        let again = memory.put(&key, head.body, CasGuard::Match(head.version));
        futures::executor::block_on(again).unwrap();
        mark(cur)
    };
    let e = update_cell(&own, "c", 1, Duration::from_secs(2), overtaken)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(e.commit(), Commit::NotCommitted, "{e}");
    assert!(
        runs.load(Ordering::SeqCst) > 8,
        "it kept trying for its time"
    );
    let data = read_cell(&own, "c").await.unwrap();
    assert!(data.is_none(), "nothing was written: {data:?}");
}
