//! The library footguns of issue 17, each pinned: claiming twice, per-claim state, dropping
//! the keeper, status agreeing with `is_held`, release after the lease, re-exports, and an
//! append pattern whose writes do not grow with the log.

mod support;

use std::sync::Arc;
use std::time::Duration;

// Every type the runtime API returns, from the crate root.
use fence_core::{
    read_cell, CasGuard, CellData, ClaimStatus, Clock, ErrorKind, FenceReason, LeaseConfig,
    LeaseStatus, Ownership, WriteAck,
};
use fence_fleet::log::{read_log, AppendLog, Run};
use support::*;

#[tokio::test(start_paused = true)]
async fn claiming_a_cell_already_held_is_a_clear_error_and_fences_nothing() {
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    let claim = lease.claim("c").await.unwrap();
    let again = lease.claim("c").await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::InvalidInput);
    assert_eq!(
        lease.adopt("c").await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let ack: WriteAck = claim.write("still mine").await.unwrap();
    assert_eq!(ack.epoch, 1, "no new epoch was taken");
    // Once the claim has ended, the cell can be claimed again.
    claim.release().await.unwrap();
    assert_eq!(lease.claim("c").await.unwrap().epoch(), 2);
}

#[tokio::test(start_paused = true)]
async fn each_claim_reports_its_own_cell_not_the_lease() {
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    let (c1, c2) = (
        lease.claim("c1").await.unwrap(),
        lease.claim("c2").await.unwrap(),
    );
    let intruder = Ownership::new(store.clone(), "x");
    let head = intruder.read_owner("c1").await.unwrap().unwrap();
    intruder
        .cas_owner("c1", CasGuard::Match(head.etag), 2)
        .await
        .unwrap();
    assert_eq!(
        c1.write("late").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    assert_eq!(c1.status(), ClaimStatus::Superseded { epoch: 2 });
    assert!(!c1.is_held() && c2.is_held() && lease.is_held());
    assert_eq!(c1.lost().await, ClaimStatus::Superseded { epoch: 2 });
}

#[tokio::test(start_paused = true)]
async fn status_and_is_held_agree_at_every_instant() {
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    a.path.freeze(); // renewals stop landing
    let mut saw_loss = false;
    for _ in 0..(3 * TTL_MS) {
        let (held, status) = (lease.is_held(), lease.status());
        assert_eq!(
            held,
            status == LeaseStatus::Held,
            "is_held {held}, status {status}"
        );
        saw_loss |= !held;
        advance(1).await;
    }
    assert!(saw_loss);
    let LeaseStatus::Fenced { reason } = lease.status() else {
        panic!("not fenced: {}", lease.status());
    };
    let _: FenceReason = reason;
}

#[tokio::test(start_paused = true)]
async fn a_claim_is_not_released_after_its_lease() {
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    let claim = lease.claim("c").await.unwrap();
    lease.release().await;
    assert_eq!(claim.release().await.unwrap_err().kind(), ErrorKind::Fenced);
    let data: Option<CellData> = read_cell(a.fence.ownership(), "c").await.unwrap();
    assert!(data.is_none(), "nothing was written");
    let head = Ownership::new(store, "r")
        .read_owner("c")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        head.node.as_deref(),
        Some("a"),
        "the released lease lets peers take it at once"
    );
}

/// What docs/fleet.md and `LeaseKeeper`'s docs say: dropping a keeper on a runtime that keeps
/// running releases the lease; dropping it as the runtime ends writes nothing.
#[test]
fn dropping_the_keeper_does_exactly_what_the_docs_say() {
    let store = store();
    let reader = Ownership::new(store.clone(), "r");
    let fence = |id: &str| {
        fence_core::runtime::Fence::builder(store.clone(), id)
            .ttl(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let rt = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    // The runtime keeps running: the released record is written.
    let a = fence("a");
    rt().block_on(async {
        let lease = a.acquire().await.unwrap();
        drop(lease);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let l = reader.read_node_lease("a").await.unwrap().unwrap();
        assert_eq!(l.record.expires_ms, 0, "released");
    });
    // `main` returns right after the drop: the runtime ends before the task runs.
    let b = fence("b");
    let kept = rt().block_on(async {
        let lease = b.acquire().await.unwrap();
        let before = reader.read_node_lease("b").await.unwrap().unwrap();
        drop(lease);
        before
    });
    let after = rt().block_on(reader.read_node_lease("b")).unwrap().unwrap();
    assert_eq!(after.etag, kept.etag, "nothing was written");
    assert!(
        after.record.expires_ms > 0,
        "the lease stays live until it expires"
    );
}

#[test]
fn the_lease_config_is_reexported_with_the_runtime_types() {
    let cfg = LeaseConfig::with_ttl_ms(3_000);
    assert_eq!(cfg.renew_at(0), 1_000);
}

#[tokio::test(start_paused = true)]
async fn appends_write_immutable_records_and_a_head_that_does_not_grow() {
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    let log = AppendLog::new(&a.fence, Arc::new(lease.claim("c").await.unwrap()));
    let record = "x".repeat(1_000);
    let mut head_len = Vec::new();
    for i in 0..300u64 {
        let a = log.append(record.clone()).await.unwrap();
        assert_eq!(a.seq, i);
        if i == 9 || i == 299 {
            let d = read_cell(lease.fence().ownership(), "c")
                .await
                .unwrap()
                .unwrap();
            head_len.push(d.payload.len());
        }
    }
    // 300 KB of records; the head stays tens of bytes (only the digits of `next` grow).
    assert!(
        head_len[1] <= head_len[0] + 2 && head_len[1] < 64,
        "{head_len:?}"
    );
    let read = read_log(&a.fence, "c", 295).await.unwrap();
    assert_eq!(read.records.len(), 5);
    assert_eq!(read.records[0].0, 295);
}

#[tokio::test(start_paused = true)]
async fn a_stale_writers_records_are_orphans_the_log_never_shows() {
    let store = store();
    // a's wall clock runs an hour late: b takes its cell over at once while a still
    // believes it holds it.
    let a = fence_core::runtime::Fence::builder(store.clone(), "a")
        .ttl(Duration::from_millis(TTL_MS))
        .clock(Clock::virtual_at(BASE_WALL).with_skew_ms(-3_600_000))
        .build()
        .unwrap();
    let lease_a = a.acquire().await.unwrap();
    let log_a = AppendLog::new(&a, Arc::new(lease_a.claim("c").await.unwrap()));
    for _ in 0..3 {
        log_a.append("a").await.unwrap();
    }
    let b = node(&store, "b");
    let lease_b = b.fence.acquire().await.unwrap();
    let log_b = AppendLog::new(&b.fence, Arc::new(lease_b.claim("c").await.unwrap()));
    assert_eq!(log_b.append("b").await.unwrap().seq, 3);
    assert!(lease_a.is_held(), "a still believes it holds");
    let late = log_a.append("a-late").await.unwrap_err();
    assert_eq!(late.kind(), ErrorKind::Fenced);
    assert_eq!(log_b.append("b").await.unwrap().seq, 4);
    let read = read_log(&b.fence, "c", 0).await.unwrap();
    let bodies: Vec<&[u8]> = read.records.iter().map(|(_, r)| &r[..]).collect();
    assert_eq!(bodies, [&b"a"[..], b"a", b"a", b"b", b"b"]);
    // The stale record exists — as an object no head names.
    let orphan = b
        .fence
        .ownership()
        .log_key("c", "00000000000000000003-1")
        .unwrap();
    assert!(store.get(&orphan).await.unwrap().is_some());
    assert_eq!(read.head.runs, vec![Run::new(0, 1), Run::new(3, 2)]);
}
