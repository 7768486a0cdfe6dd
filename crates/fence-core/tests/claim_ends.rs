//! How a claim ends, told by evidence: a claim stopped in the middle of its seal while
//! another process took the cell (issue 35 item 5), and a claim that has sent its release
//! (issue 40).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::*;
use support::{clock, TTL};
use tokio::sync::Notify;

/// One process's path to the store whose first write of a cell head is held: the process
/// stops (its clock's timers with it) as the request leaves, and when the test lets it go
/// the request is lost in flight (an ambiguous timeout; nothing lands) — a process stopped
/// while its write was on the wire, whose deadline fired as it continued.
#[derive(Debug)]
struct HeldHeadWrite {
    inner: Arc<MemoryStore>,
    stop: Arc<Stop>,
    armed: AtomicBool,
    held: Notify,
    go: Notify,
}

impl HeldHeadWrite {
    fn new(inner: Arc<MemoryStore>, stop: Arc<Stop>) -> Arc<Self> {
        Arc::new(HeldHeadWrite {
            inner,
            stop,
            armed: AtomicBool::new(true),
            held: Notify::new(),
            go: Notify::new(),
        })
    }
}

#[async_trait]
impl ConditionalStore for HeldHeadWrite {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        if key.as_str().ends_with("own.json") && self.armed.swap(false, Ordering::SeqCst) {
            let go = self.go.notified();
            self.stop.stop();
            self.held.notify_one();
            go.await;
            return Err(Error::new(ErrorKind::Timeout, "request lost in flight"));
        }
        self.inner.put(key, body, guard).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// Issue 35 item 5. A `fence run` stopped while its claim's seal was in flight; a waiter —
/// another process of the same node `run.NAME` — took the lease and claimed the cell at the
/// same epoch; the stopped run continued, its seal timed out, and its read-back found the
/// waiter's head. That head is another process's claim, so the stopped run lost the race:
/// it said "conflicting conditional write … the write may have landed; no evidence settled
/// it" instead. Takes about 10 ms (virtual time).
#[tokio::test(start_paused = true)]
async fn a_claim_stopped_in_its_seal_learns_that_a_waiter_took_the_cell() {
    let store = Arc::new(MemoryStore::new());
    let stop = Arc::new(Stop::default());
    let path = HeldHeadWrite::new(store.clone(), stop.clone());
    let stopped = Fence::builder(path.clone(), "run.x")
        .ttl(TTL)
        .clock(clock().with_stop(stop.clone()))
        .build()
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let held = path.held.notified();
    let claim = tokio::spawn(async move {
        let r = stopped.claim("x").await.map(|c| c.epoch());
        (r, stopped)
    });
    held.await;
    let waiter = Fence::builder(store.clone(), "run.x")
        .ttl(TTL)
        .clock(clock())
        .build()
        .unwrap()
        .acquire_wait(Duration::from_secs(30))
        .await
        .expect("the waiter takes the lease of the stopped run");
    let theirs = waiter.claim("x").await.unwrap();
    assert_eq!(theirs.epoch(), 1);
    stop.resume();
    path.go.notify_one();
    let (lost, _stopped) = claim.await.unwrap();
    let err = lost.expect_err("the waiter holds the cell");
    assert!(
        matches!(err.kind(), ErrorKind::Busy | ErrorKind::Fenced),
        "an answer the head settles, not an unsettled conflict: {err}"
    );
    assert!(theirs.is_held());
    theirs.write("the waiter's").await.unwrap();
}
