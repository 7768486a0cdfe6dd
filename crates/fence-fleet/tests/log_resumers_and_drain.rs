//! A closed claim's append log never overwrites what its resumer acknowledged (also when its
//! create lands at the resumer's name), and `Fleet::drain` returns within its deadline while
//! the lease is lost. From fence-fleet's second review: each test showed a defect on main
//! 3edc867 and now asserts the fixed behaviour.

mod support;

use std::sync::Arc;

use fence_fleet::log::{read_log, AppendLog};
use support::*;

/// Q3. log.rs: "Readers read only records below `LogHead::next`, which are never rewritten",
/// and `put_record` replaces an existing `<seq>-<epoch>` object on the grounds that "only
/// this epoch's one claim writes `…-<epoch>` objects". Two claims share an epoch whenever a
/// cell is resumed — here case 2 of docs/design.md "Restart and resume", exactly what the
/// fleet's `lease_lost` does: close the claim, take the cell back at its epoch. The old
/// claim's log (its cached head one record behind) then *overwrites the committed,
/// acknowledged record* of the new one; its own head write is refused afterwards, too late.
#[tokio::test(start_paused = true)]
async fn a_closed_claims_log_never_overwrites_an_acknowledged_append_of_its_resumer() {
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    let old = Arc::new(lease.claim("orders").await.unwrap());
    let old_log = AppendLog::new(&a.fence, old.clone());
    old_log.append("r0").await.unwrap();
    // The process stops the claim and resumes the cell at its epoch (its own generation).
    old.close().await;
    let (new, resumed) = lease
        .claim_or_resume("orders", &[lease.generation()])
        .await
        .unwrap();
    assert!(resumed);
    let new_log = AppendLog::new(&a.fence, Arc::new(new));
    let acked = new_log.append("r1 acknowledged").await.unwrap();
    assert_eq!(acked.seq, 1);
    // A late append through the old log (its task had not seen the stop yet).
    let late = old_log.append("r1 from the closed claim").await;
    assert!(late.is_err(), "the closed claim's head write is refused");
    let log = read_log(&a.fence, "orders", 0).await.unwrap();
    assert_eq!(log.head.next, 2);
    assert_eq!(
        log.records[1].1, "r1 acknowledged",
        "an acknowledged append was overwritten by a refused one"
    );
}

/// Q7. `Fleet::drain(within)`: "Leaves the fleet within `within` … What is not done by the
/// deadline is left to be taken over." While the fleet's task is in `lease_lost` it loops on
/// `acquire` until it gets the lease back (run.rs `lease_lost`: it leaves the loop only when
/// the handle is dropped) and reads no command, so a drain asked during a store outage waits
/// for the outage, however long, not `within`.
#[tokio::test(start_paused = true)]
async fn drain_returns_within_its_deadline_while_the_lease_is_lost() {
    let (_store, _cells, a, fa, log) = one_node(2).await;
    a.path.freeze(); // the store stops answering a: its lease is lost a TTL later
    while stopped(&log, "shard-000").is_none() {
        advance(10).await;
    }
    // Let the fleet's task enter `lease_lost` (the next round's reap) and its acquire loop.
    advance(2 * TTL_MS).await;
    let within = std::time::Duration::from_millis(500);
    let drained = tokio::time::timeout(within * 20, fa.drain(within)).await;
    assert!(
        drained.is_ok(),
        "drain({within:?}) had not returned after {:?}",
        within * 20
    );
}

/// Q3, the race the first fix left open: the closed claim's record create was already in
/// flight when it closed (a record create is not a claim write, so `close` does not wait for
/// it), and it lands at the name the resumer's next append would use. No record object is
/// ever replaced: the resumer's create is refused, and it writes its record under a tagged
/// name in a new run — the log reads back exactly the acknowledged bytes.
#[tokio::test(start_paused = true)]
async fn a_create_landing_at_the_resumers_name_is_never_overwritten() {
    use fence_fleet::log::{record_name, LogHead, Run};
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    let old = Arc::new(lease.claim("orders").await.unwrap());
    AppendLog::new(&a.fence, old.clone())
        .append("r0")
        .await
        .unwrap();
    old.close().await;
    let (new, resumed) = lease
        .claim_or_resume("orders", &[lease.generation()])
        .await
        .unwrap();
    assert!(resumed);
    // The old claim's create of record 1 under epoch 1 lands now.
    let own = a.fence.ownership();
    let late = own.log_key("orders", &record_name(1, 1, None)).unwrap();
    let put = store
        .put(
            &late,
            "r1 from the closed claim".into(),
            fence_core::CasGuard::Absent,
        )
        .await
        .unwrap();
    assert!(matches!(put, fence_core::PutOutcome::Applied(_)));
    let new_log = AppendLog::new(&a.fence, Arc::new(new));
    assert_eq!(new_log.append("r1 acknowledged").await.unwrap().seq, 1);
    assert_eq!(new_log.append("r2 acknowledged").await.unwrap().seq, 2);
    let log = read_log(&a.fence, "orders", 0).await.unwrap();
    let bodies: Vec<&[u8]> = log.records.iter().map(|(_, r)| &r[..]).collect();
    assert_eq!(bodies, [&b"r0"[..], b"r1 acknowledged", b"r2 acknowledged"]);
    // The late object is still there, untouched, and no head names it.
    assert_eq!(
        store.get(&late).await.unwrap().unwrap().body,
        "r1 from the closed claim"
    );
    let runs: &[Run] = &log.head.runs;
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!((runs[1].first_seq, runs[1].epoch), (1, 1));
    let tag = runs[1].tag.as_deref().expect("the new run is tagged");
    assert_eq!(log.head.name_of(2), Some(record_name(2, 1, Some(tag))));
    // The tagged head round-trips through its stored form, and a bad tag is refused.
    let key = own.owner_key("orders").unwrap();
    assert_eq!(
        LogHead::decode(&key, &log.head.encode(), log.epoch).unwrap(),
        log.head
    );
    let hostile = br#"{"next":2,"runs":[[0,1],[1,1,"../x"]]}"#;
    assert_eq!(
        LogHead::decode(&key, hostile, u64::MAX - 1)
            .unwrap_err()
            .kind(),
        fence_core::ErrorKind::Corrupt
    );
    let same_run_twice = br#"{"next":2,"runs":[[0,1],[1,1]]}"#;
    assert_eq!(
        LogHead::decode(&key, same_run_twice, u64::MAX - 1)
            .unwrap_err()
            .kind(),
        fence_core::ErrorKind::Corrupt
    );
}
