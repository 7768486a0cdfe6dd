//! The guarantees of issue 11, one test per broken edge: no acknowledged write is ever lost,
//! "refused" means "not written", a read-back that settles nothing stays ambiguous, a late
//! renewal attempt does not fence a healthy node, hostile records are errors, and peers take
//! over only by observation, whatever their wall clocks say.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::*;
use fence_testkit::sim::PausableStore;
use support::{advance, clock, fence, key, Steered, Step, TTL};

async fn payload(own: &Ownership, cell: &str) -> Bytes {
    read_cell(own, cell)
        .await
        .unwrap()
        .map(|d| d.payload)
        .unwrap_or_default()
}

/// Edge 1: W1 lands but its answer is lost, and its read-back is slow; W2 is issued through
/// the same claim meanwhile. W1 must never be applied again over W2.
#[tokio::test(start_paused = true)]
async fn an_ambiguous_write_is_never_reapplied_over_a_later_one() {
    let store = Steered::new();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    store.puts("own.json", [Step::LoseAnswer]);
    store.gets("own.json", [Step::Delay(Duration::from_millis(100))]);
    let w2 = async {
        tokio::task::yield_now().await;
        cell.write("w2").await
    };
    let (r1, r2) = tokio::join!(cell.write("w1"), w2);
    let w2 = r2.expect("w2 acknowledged");
    let heads: Vec<Bytes> = store.applied("own.json");
    let w1_landings = heads
        .iter()
        .filter(|b| b.windows(2).any(|w| w == b"w1"))
        .count();
    assert_eq!(w1_landings, 1, "w1 applied once: {heads:?}");
    assert_eq!(
        payload(a.ownership(), "c").await,
        "w2",
        "the last acknowledged write is current"
    );
    assert!(r1.is_ok(), "w1's own nonce settles it as landed: {r1:?}");
    assert_eq!(w2.epoch, 1);
}

fn counter(cur: &Bytes) -> Result<Bytes, Error> {
    let n: u64 = std::str::from_utf8(cur)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(Bytes::from((n + 1).to_string()))
}

/// Edge 1 for `update_cell`: two increments by two writers at one epoch, the first one's
/// answer lost and its read-back slow. The counter must not reach 3.
#[tokio::test(start_paused = true)]
async fn update_cell_never_runs_an_update_twice_for_one_landed_write() {
    let store = Steered::new();
    let own = Ownership::new(store.clone(), "a");
    own.cas_owner("c", CasGuard::Absent, 1).await.unwrap();
    store.puts("own.json", [Step::LoseAnswer]);
    store.gets(
        "own.json",
        [Step::Pass, Step::Delay(Duration::from_millis(100))],
    );
    let t = Duration::from_secs(5);
    let second = async {
        tokio::task::yield_now().await;
        update_cell(&own, "c", 1, t, counter).await
    };
    let (u1, u2) = tokio::join!(update_cell(&own, "c", 1, t, counter), second);
    assert!(u2.is_ok(), "{u2:?}");
    let e = u1.expect_err("the first increment's outcome cannot be settled");
    assert!(e.is_ambiguous(), "{e:?}");
    assert_eq!(
        payload(&own, "c").await,
        "2",
        "two increments, each applied once"
    );
}

/// Edge 2: a put under an epoch nobody holds — released, or never claimed — is refused and
/// writes nothing; a put at current + 1 does not fence the live owner.
#[tokio::test(start_paused = true)]
async fn a_write_under_an_epoch_nobody_holds_is_refused_and_writes_nothing() {
    let store = Steered::new();
    let own = Ownership::new(store.clone(), "a");
    let t = Duration::from_secs(5);
    own.cas_owner("c", CasGuard::Absent, 1).await.unwrap();
    update_cell(&own, "c", 1, t, |_| Ok("v1".into()))
        .await
        .unwrap();
    own.release_owner("c", 1).await.unwrap();
    let writes = store.applied("own.json").len();
    for epoch in [1, 2] {
        let e = update_cell(&own, "c", epoch, t, |_| Ok("stale".into()))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Fenced, "epoch {epoch}");
    }
    assert_eq!(store.applied("own.json").len(), writes, "nothing written");
    assert_eq!(payload(&own, "c").await, "v1");

    let b = fence(store.clone(), "b");
    let lease = b.acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    assert_eq!(cell.epoch(), 2);
    let e = update_cell(&own, "c", 3, t, |_| Ok("ahead".into()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced);
    assert_eq!(
        cell.write("b1").await.unwrap().epoch,
        2,
        "the live owner is not fenced"
    );
    assert_eq!(payload(&own, "c").await, "b1");
}

/// Edge 3: a claim whose write is stuck in the network (it lands long after the caller gave
/// up) is never reported "not committed": a read-back that still shows the guard's version
/// proves nothing.
#[tokio::test(start_paused = true)]
async fn a_claim_stuck_in_flight_is_never_called_not_committed() {
    let store = Steered::new();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    store.puts("own.json", [Step::Late(Duration::from_secs(6)); 4]);
    let claimed = lease.claim("c").await;
    advance(7_000).await;
    let owner = a.ownership().read_owner("c").await.unwrap();
    match claimed {
        Ok(c) => assert_eq!(owner.map(|o| o.epoch), Some(c.epoch())),
        Err(e) => {
            assert!(e.is_ambiguous(), "the claim may have landed: {e:?}");
            assert_eq!(
                owner.and_then(|o| o.node).as_deref(),
                Some("a"),
                "and it did"
            );
        }
    }
}

/// Edge 4: the first renewal attempt is held up in the network past its timeout and lands
/// before the retry, which is then rejected. The read-back finds the first attempt: the
/// lease is still held.
#[tokio::test(start_paused = true)]
async fn a_late_first_renewal_attempt_does_not_fence_a_healthy_node() {
    let store = Steered::new();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    // Renewal at 666 ms; its attempt times out at ~1333 ms; the attempt lands at ~1383 ms.
    store.puts("nodes/a.json", [Step::Late(Duration::from_millis(717))]);
    advance(1_600).await;
    assert_eq!(lease.status(), LeaseStatus::Held, "{:?}", lease.status());
    advance(3_000).await;
    assert!(lease.is_held(), "renewals go on: {:?}", lease.status());
}

/// Edge 5: parseable but hostile records are errors, never panics or wraps.
#[tokio::test(start_paused = true)]
async fn hostile_records_are_corrupt_not_panics() {
    let store = Steered::new();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    let max = format!(r#"{{"v":1,"node":null,"epoch":{},"nonce":"x"}}"#, u64::MAX);
    let own = key("cells/c/own.json");
    store
        .raw()
        .put(&own, max.into(), CasGuard::Absent)
        .await
        .unwrap();
    let e = lease.claim("c").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    // A lease record claiming an endless TTL: edges.rs
    // `a_record_claiming_an_endless_ttl_does_not_block_takeover_forever`.
}

/// Edge 6: unknown fields of the head survive a claim and a fenced write, and so do those of
/// a version-1 data head that a claim migrates.
#[tokio::test(start_paused = true)]
async fn writes_keep_unknown_fields() {
    let store = Steered::new();
    let v1_owner = r#"{"v":1,"node":null,"epoch":3,"nonce":"x","zone":"eu-1"}"#;
    store
        .raw()
        .put(&key("cells/c/own.json"), v1_owner.into(), CasGuard::Absent)
        .await
        .unwrap();
    let v1_data = "{\"v\":1,\"epoch\":3,\"node\":\"z\",\"nonce\":\"q\",\"note\":\"keep\"}\nold";
    store
        .raw()
        .put(&key("cells/c/data"), v1_data.into(), CasGuard::Absent)
        .await
        .unwrap();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    assert_eq!(cell.epoch(), 4);
    assert_eq!(
        payload(a.ownership(), "c").await,
        "old",
        "the claim carried the data"
    );
    cell.write("new").await.unwrap();
    let raw = store
        .raw()
        .get(&key("cells/c/own.json"))
        .await
        .unwrap()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&raw.body).unwrap();
    assert_eq!(
        (json["zone"].as_str(), json["note"].as_str()),
        (Some("eu-1"), Some("keep"))
    );
    assert_eq!(json["data"], "new");
}

/// An update whose closure fails writes nothing (`fence put` on a head that is not a key
/// map).
#[tokio::test(start_paused = true)]
async fn a_failing_update_writes_nothing() {
    let store = Steered::new();
    let own = Ownership::new(store.clone(), "a");
    own.cas_owner("c", CasGuard::Absent, 1).await.unwrap();
    let before = store.applied("own.json").len();
    let refuse = |_: &Bytes| Err(Error::new(ErrorKind::InvalidInput, "not a key map"));
    let e = update_cell(&own, "c", 1, Duration::from_secs(5), refuse)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(store.applied("own.json").len(), before);
}

/// Exclusion that does not depend on wall clocks: the holder's clock runs a minute slow, so
/// its lease looks expired to a peer with a correct clock. The peer still takes nothing
/// while the holder renews, and takes over only a full TTL after the holder went silent.
#[tokio::test(start_paused = true)]
async fn a_peer_takes_over_only_by_observation_whatever_the_clocks_say() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let a = Fence::builder(path.clone(), "a")
        .ttl(TTL)
        .clock(clock().with_skew_ms(-60_000))
        .build()
        .unwrap();
    let lease_a = a.acquire().await.unwrap();
    let cell_a = lease_a.claim("c").await.unwrap();
    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    for _ in 0..10 {
        advance(300).await;
        let e = lease_b.claim("c").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy, "a is alive and renewing");
        assert!(cell_a.is_held());
    }
    path.kill();
    let killed = b.clock().mono_ms();
    let claimed = loop {
        advance(50).await;
        if let Ok(c) = lease_b.claim("c").await {
            break c;
        }
    };
    let waited = b.clock().mono_ms() - killed;
    assert!(!lease_a.is_held(), "a's authority ended before b took over");
    assert!(waited >= TTL.as_millis() as u64 - 700, "waited {waited} ms");
    assert!(waited <= TTL.as_millis() as u64 + 400, "waited {waited} ms");
    assert_eq!(claimed.epoch(), 2);
}

/// What readers see: a version-1 cell whose data head is older than its owner record is
/// shown as stale; after a claim, the data lives in the head and is current.
#[tokio::test(start_paused = true)]
async fn readers_never_show_stale_data_as_current() {
    let store = Steered::new();
    let owner = r#"{"v":1,"node":null,"epoch":3,"nonce":"x"}"#;
    store
        .raw()
        .put(&key("cells/c/own.json"), owner.into(), CasGuard::Absent)
        .await
        .unwrap();
    let data = "{\"v\":1,\"epoch\":2,\"node\":\"z\",\"nonce\":\"q\"}\nolder";
    store
        .raw()
        .put(&key("cells/c/data"), data.into(), CasGuard::Absent)
        .await
        .unwrap();
    let a = fence(store.clone(), "a");
    let shown = read_cell(a.ownership(), "c").await.unwrap().unwrap();
    assert!(shown.stale && shown.epoch == 3, "{shown:?}");
    let lease = a.acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    let shown = cell.read().await.unwrap().unwrap();
    assert_eq!(
        (shown.stale, shown.epoch, &shown.payload[..]),
        (false, 4, &b"older"[..])
    );
}

/// Edge 7: nothing is retained per cell once its claim is dropped, and what a fence
/// remembers of other nodes is bounded.
#[tokio::test(start_paused = true)]
async fn memory_is_bounded() {
    let store = Steered::new();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    for i in 0..50 {
        let c = lease.claim(&format!("c{i}")).await.unwrap();
        drop(c);
        // A dropped claim no longer blocks claiming the cell again.
        assert_eq!(lease.claim(&format!("c{i}")).await.unwrap().epoch(), 2);
    }
    for i in 0..4_200 {
        a.observer()
            .observe(&a, &format!("n{i}"), 1_000)
            .await
            .unwrap();
    }
    assert!(a.observer().len() <= 4_096, "{}", a.observer().len());
}

/// Large payloads live in write-once objects: a claim never moves them, a replaced one is
/// deleted, and the next claim at a new epoch removes what a crash left behind at earlier
/// epochs (so an explicit `collect_garbage` finds nothing left).
#[tokio::test(start_paused = true)]
async fn payload_objects_are_carried_by_pointer_and_collected() {
    let store = Steered::new();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    let big = |c: u8| Bytes::from(vec![c; 64 * 1024]);
    cell.write(big(b'x')).await.unwrap();
    cell.write(big(b'y')).await.unwrap();
    advance(10).await; // the replaced object is deleted in the background
    let blobs =
        |s: Arc<Steered>| async move { s.raw().list(Some(&key("cells/c/blobs"))).await.unwrap() };
    assert_eq!(
        blobs(store.clone()).await.len(),
        1,
        "the replaced object is gone"
    );
    // An object left behind by a crash at epoch 1 (never referenced).
    let orphan = key("cells/c/blobs/1-orphan");
    store
        .raw()
        .put(&orphan, big(b'z'), CasGuard::Absent)
        .await
        .unwrap();
    drop(cell);
    let cell = lease.claim("c").await.unwrap();
    assert_eq!(cell.epoch(), 2);
    let claim_bytes = store.applied("own.json").last().unwrap().len();
    assert!(
        claim_bytes < 1_024,
        "the claim carried a pointer, {claim_bytes} bytes"
    );
    advance(10).await; // the claim's collection runs in the background
    assert_eq!(blobs(store.clone()).await.len(), 1, "the orphan is gone");
    assert_eq!(cell.collect_garbage().await.unwrap(), 0);
    assert_eq!(cell.read().await.unwrap().unwrap().payload, big(b'y'));
}

/// The seed API's compare-and-swap of a version-1 head moves its large data into a payload
/// object named with the epoch it writes, as payload collection expects of every object (it
/// was named with epoch 0 under a head at epoch 4).
#[tokio::test(start_paused = true)]
async fn a_migrated_payload_object_is_named_with_the_epoch_of_its_head() {
    let store = Steered::new();
    let owner = r#"{"v":1,"node":null,"epoch":3,"nonce":"x"}"#;
    let put = store
        .raw()
        .put(&key("cells/c/own.json"), owner.into(), CasGuard::Absent)
        .await
        .unwrap();
    let PutOutcome::Applied(version) = put else {
        panic!("{put:?}");
    };
    let big = "d".repeat(ownership::INLINE_MAX_DEFAULT + 1);
    let data = format!("{{\"v\":1,\"epoch\":3,\"node\":\"z\",\"nonce\":\"q\"}}\n{big}");
    store
        .raw()
        .put(&key("cells/c/data"), data.into(), CasGuard::Absent)
        .await
        .unwrap();
    let own = Ownership::new(store.clone(), "a");
    let cas = own
        .cas_owner("c", CasGuard::Match(version), 4)
        .await
        .unwrap();
    assert!(matches!(cas, CasOutcome::Applied), "{cas:?}");
    let listed = store.raw().list(Some(&key("cells/c/blobs"))).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|k| k.as_str()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("cells/c/blobs/4-"), "{names:?}");
    assert_eq!(payload(&own, "c").await.len(), big.len());
}
