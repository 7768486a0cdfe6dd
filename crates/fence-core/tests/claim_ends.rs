//! How a claim ends, told by evidence: a claim stopped in the middle of its seal while
//! another process took the cell (issue 35 item 5), and a claim that has sent its release
//! (issue 40).

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::*;
use support::{clock, fence_on};
use tokio::sync::Notify;

/// How the next write of a cell head is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// The process stops as the request leaves, and the request is lost in flight when the
    /// test lets it go (an ambiguous timeout; nothing lands): a process stopped while its
    /// write was on the wire, whose deadline fired as it continued.
    LostInFlight,
    /// The write lands, and its answer waits until the test lets it go: a process suspended
    /// right after sending it.
    AnswerHeld,
}

/// One process's path to the store whose next write of a cell head is held ([`Hold`]).
#[derive(Debug)]
struct HeldHeadWrite {
    inner: Arc<MemoryStore>,
    stop: Arc<Stop>,
    armed: std::sync::Mutex<Option<Hold>>,
    held: Notify,
    go: Notify,
}

impl HeldHeadWrite {
    fn new(inner: Arc<MemoryStore>, stop: Arc<Stop>) -> Arc<Self> {
        Arc::new(HeldHeadWrite {
            inner,
            stop,
            armed: std::sync::Mutex::new(None),
            held: Notify::new(),
            go: Notify::new(),
        })
    }

    /// Holds the next write of a cell head.
    fn arm(&self, hold: Hold) {
        *self.armed.lock().unwrap() = Some(hold);
    }

    /// Stops the process and waits for the test's go.
    async fn hold(&self) {
        let go = self.go.notified();
        self.stop.stop();
        self.held.notify_one();
        go.await;
    }
}

#[async_trait]
impl ConditionalStore for HeldHeadWrite {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let hold = match key.as_str().ends_with("own.json") {
            true => self.armed.lock().unwrap().take(),
            false => None,
        };
        match hold {
            None => self.inner.put(key, body, guard).await,
            Some(Hold::LostInFlight) => {
                self.hold().await;
                Err(Error::new(ErrorKind::Timeout, "request lost in flight"))
            }
            Some(Hold::AnswerHeld) => {
                let answer = self.inner.put(key, body, guard).await;
                self.hold().await;
                answer
            }
        }
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
    path.arm(Hold::LostInFlight);
    let stopped = fence_on(path.clone(), "run.x", clock().with_stop(stop.clone()))
        .acquire()
        .await
        .unwrap();
    let held = path.held.notified();
    let claim = tokio::spawn(async move {
        let r = stopped.claim("x").await.map(|c| c.epoch());
        (r, stopped)
    });
    held.await;
    let waiter = support::fence(store.clone(), "run.x")
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

/// Issue 40. `release_shared` did not stop acting before it sent, unlike a hand-off: its
/// release landed while the process was suspended, another node claimed the cell at the next
/// epoch, and the released claim still said `is_held()`, `status()` Held and `lost()`
/// pending — two owners, for anything that acts on that belief outside the store. From the
/// moment the release is sent it believes nothing. Takes about 10 ms (virtual time).
#[tokio::test(start_paused = true)]
async fn a_released_claim_holds_nothing_from_the_moment_its_release_is_sent() {
    let store = Arc::new(MemoryStore::new());
    let stop = Arc::new(Stop::default());
    let path = HeldHeadWrite::new(store.clone(), stop.clone());
    let a = fence_on(path.clone(), "a", clock().with_stop(stop.clone()))
        .acquire()
        .await
        .unwrap();
    let claim = Arc::new(a.claim("c").await.unwrap());
    path.arm(Hold::AnswerHeld);
    let held = path.held.notified();
    let release = tokio::spawn({
        let claim = claim.clone();
        async move { claim.release_shared().await }
    });
    held.await; // sent and landed; the process is suspended before it hears so
    assert!(
        !claim.is_held(),
        "a claim whose release is on its way holds nothing"
    );
    assert_eq!(claim.status(), ClaimStatus::Closed);
    let b = support::fence(store.clone(), "b").acquire().await.unwrap();
    let theirs = b.claim("c").await.unwrap();
    assert_eq!(theirs.epoch(), 2);
    assert!(theirs.is_held() && !claim.is_held(), "one owner");
    let lost = tokio::time::timeout(Duration::from_millis(1), claim.lost()).await;
    assert_eq!(lost.ok(), Some(ClaimStatus::Closed));
    let refused = claim.write("after the release").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Fenced);
    assert_eq!(refused.commit(), Commit::NotCommitted);
    stop.resume();
    path.go.notify_one();
    release.await.unwrap().unwrap();
    assert_eq!(claim.status(), ClaimStatus::Released);
}
