//! Payload collection: what a claim deletes once it sealed a new epoch (issue 35 item 2), and
//! what no write ever deletes — the payload object of a write whose fate is unknown (issue 40).

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::*;
use support::{advance, fence, key, Steered, Step};

fn big(c: u8) -> Bytes {
    Bytes::from(vec![c; 12 * 1024])
}

async fn blob_names(store: &MemoryStore, cell: &str) -> Vec<String> {
    let prefix = key(&format!("cells/{cell}/blobs"));
    let listed = store.list(Some(&prefix)).await.unwrap();
    let names = listed
        .iter()
        .map(|k| k.as_str().rsplit('/').next().unwrap().to_owned());
    names.collect()
}

/// Issue 35 item 2. Writers killed between creating their payload object and their head write
/// left objects that nothing collected: only the objects of replaced heads were. The next
/// claim at a new epoch now deletes every object of an earlier epoch its head does not name,
/// and keeps the one it names (its data, carried forward), the objects of its own epoch (a
/// co-writer's head write may be on its way) and names fence does not write. The lease's
/// release waits for that collection. Takes about 10 ms (virtual time).
#[tokio::test(start_paused = true)]
async fn a_claim_collects_what_killed_writers_of_earlier_epochs_left() {
    let store = Arc::new(MemoryStore::new());
    let lease = fence(store.clone(), "a").acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    cell.write(big(b'v')).await.unwrap();
    let carried = blob_names(&store, "c").await;
    assert_eq!(carried.len(), 1);
    // Killed `fence put`s of epoch 1, an early object of epoch 2, and a name fence never gives.
    let left = ["1-killed-a", "1-killed-b", "1-killed-c", "2-early", "notes"];
    for name in left {
        let k = key(&format!("cells/c/blobs/{name}"));
        store.put(&k, big(b'o'), CasGuard::Absent).await.unwrap();
    }
    cell.release().await.unwrap();
    let again = lease.claim("c").await.unwrap();
    assert_eq!(again.epoch(), 2);
    drop(again);
    lease.release().await;
    let mut kept = blob_names(&store, "c").await;
    kept.sort();
    let mut want = vec![carried[0].clone(), "2-early".into(), "notes".into()];
    want.sort();
    assert_eq!(kept, want);
    let data = read_cell(&Ownership::new(store.clone(), "r"), "c").await;
    assert_eq!(data.unwrap().unwrap().payload, big(b'v'));
}

/// Writes whose head write landed but whose answer was lost, and whose every read-back failed:
/// the head may name their payload object, so it is never deleted (issue 40: deleting it left
/// the cell unreadable, and nothing but this test would see it).
async fn assert_unknown_fate_keeps_its_object(
    store: &Arc<Steered>,
    write: impl std::future::Future<Output = Result<WriteAck, Error>>,
) {
    let err = write.await.expect_err("no evidence settled the write");
    assert!(err.is_ambiguous(), "{err}");
    advance(100).await; // background deletes, if any, run
    let reader = Ownership::new(store.clone(), "reader");
    let data = read_cell(&reader, "c")
        .await
        .expect("the cell stays readable");
    assert_eq!(data.unwrap().payload, big(b'n'), "the write did land");
}

/// Every read-back of one write fails: one after each of its sends.
fn read_backs_fail() -> impl Iterator<Item = Step> {
    std::iter::repeat_n(Step::LoseAnswer, decide::write::MAX_SENDS.into())
}

/// A claim of cell `c` whose data is in a payload object.
async fn claimed_with_an_object(store: &Arc<Steered>) -> (LeaseKeeper, CellClaim) {
    let lease = fence(store.clone(), "a").acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    cell.write(big(b'o')).await.unwrap();
    (lease, cell)
}

/// A claim's write ([`CellClaim::write`]). Takes about 100 ms (virtual time).
#[tokio::test(start_paused = true)]
async fn a_claims_write_of_unknown_fate_keeps_its_payload_object() {
    let store = Steered::new();
    let (_lease, cell) = claimed_with_an_object(&store).await;
    // Lands, answer lost; then every read-back fails and every re-send is rejected (its
    // first attempt moved the head past its guard).
    store.puts("own.json", [Step::LoseAnswer]);
    store.gets("own.json", read_backs_fail());
    assert_unknown_fate_keeps_its_object(&store, cell.write(big(b'n'))).await;
}

/// A keeperless write (`update_cell`, as `fence put` makes). Takes about 100 ms (virtual time).
#[tokio::test(start_paused = true)]
async fn an_update_of_unknown_fate_keeps_its_payload_object() {
    let store = Steered::new();
    let (_lease, cell) = claimed_with_an_object(&store).await;
    let own = Ownership::new(store.clone(), "put");
    store.gets("own.json", [Step::Pass]); // the update's first read of the head
    store.gets("own.json", read_backs_fail());
    store.puts("own.json", [Step::LoseAnswer]);
    let bound = Duration::from_secs(1);
    let update = update_cell(&own, "c", cell.epoch(), bound, |_| Ok(big(b'n')));
    assert_unknown_fate_keeps_its_object(&store, update).await;
}
