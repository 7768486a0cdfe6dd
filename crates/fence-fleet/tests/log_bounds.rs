//! The append log at its bounds: a log head at the end of the sequence is refused, not a
//! panic, and an append never replaces a record it did not see. From fence-fleet's third
//! review: each test failed on main 3114028 for the reason its doc comment states and now
//! asserts the fixed behaviour.

mod support;

use std::sync::Arc;

use fence_core::ErrorKind;
use fence_fleet::log::AppendLog;
use support::*;

/// R3-3. HELPERS.md: "no panics on input from the store", and log.rs `LogHead::decode` is
/// the log's only check of a head read from the store. It accepts `next: u64::MAX` (its
/// checks are run order, coverage of seq 0 and tags), and `append_with` then computes
/// `head.appended(seq, ..)` → `next.next = seq + 1`: an overflow — a panic in a debug build,
/// and in a release build a wrap to `next: 0`, which commits a head under which every
/// acknowledged record (this one included) reads as absent. Correct code answers
/// `ErrorKind::Corrupt` (or refuses the append) and writes nothing.
#[tokio::test(start_paused = true)]
async fn a_log_head_at_the_end_of_the_sequence_is_refused_not_a_panic() {
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    let claim = Arc::new(lease.claim("orders").await.unwrap());
    // A head some other writer (or a damaged bucket) left: it parses and passes `decode`.
    let hostile = format!(r#"{{"next":{},"runs":[[0,1]]}}"#, u64::MAX);
    claim.write(hostile).await.unwrap();
    let log = AppendLog::new(&a.fence, claim.clone());
    let appended = tokio::spawn(async move { log.append("one more").await }).await;
    let err = match appended {
        Err(panic) => panic!("append panicked on a head read from the store: {panic}"),
        Ok(Ok(a)) => panic!("acknowledged seq {} on an exhausted log", a.seq),
        Ok(Err(e)) => e,
    };
    assert_eq!(err.kind(), ErrorKind::Corrupt);
}

/// Found by audit1 after review 3: `append_with` built its head on the head it last read and
/// wrote it with `CellClaim::write`, which lands over any head of this claim's epoch. A head
/// that moved meanwhile — an ambiguous append landing late, or (here, deterministically)
/// another log on the same claim — was replaced: the other log's acknowledged record 0 was
/// gone from the log. Now the head write lands only over the head it was built on
/// (`CellClaim::write_if`), and a moved head makes the append take the next number.
#[tokio::test(start_paused = true)]
async fn an_append_never_replaces_a_record_it_did_not_see() {
    let store = store();
    let a = node(&store, "a");
    let lease = a.fence.acquire().await.unwrap();
    let claim = Arc::new(lease.claim("orders").await.unwrap());
    let slow = AppendLog::new(&a.fence, claim.clone());
    let other = AppendLog::new(&a.fence, claim.clone());
    assert_eq!(slow.next_seq().await.unwrap(), 0);
    let first = other.append("theirs").await.unwrap();
    assert_eq!(first.seq, 0);
    let second = slow.append("mine").await.unwrap();
    assert_eq!(
        second.seq, 1,
        "rebuilt on the head as it is now, not the one it had seen"
    );
    let log = fence_fleet::log::read_log(&a.fence, "orders", 0)
        .await
        .unwrap();
    let records: Vec<(u64, &[u8])> = log.records.iter().map(|(s, b)| (*s, &b[..])).collect();
    assert_eq!(records, [(0, &b"theirs"[..]), (1, &b"mine"[..])]);
}
