//! Issue 30, items 2, 3 and 5: an append log whose ambiguity is settled by evidence. Each
//! test failed on main 56f0a6d for the reason its doc comment states.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::runtime::{update_cell, Fence};
use fence_core::*;
use fence_fleet::log::{read_log, AppendLog};

/// What to do to the next write of a cell head.
#[derive(Clone, Copy, Debug)]
enum Put {
    /// Apply, then lose the answer.
    LoseAnswer,
    /// Hold it up in the network: it lands this many ms later, its caller times out.
    Late(u64),
    /// Lose the request: nothing lands, the caller times out.
    Lost,
}

/// A store whose head writes a test steers, and whose next head read can first let a
/// co-writer at the same epoch (`update_cell`, as `fence put` does) write the head.
#[derive(Debug, Default)]
struct Steered {
    inner: Arc<MemoryStore>,
    puts: Mutex<VecDeque<Put>>,
    co_write_before_read: Mutex<bool>,
    /// The next head read times out.
    fail_head_read: Mutex<bool>,
}

impl Steered {
    fn head_put(&self, key: &Key) -> Option<Put> {
        if !key.as_str().ends_with("own.json") {
            return None;
        }
        self.puts.lock().unwrap().pop_front()
    }

    async fn co_write(&self, key: &Key) {
        let own = Ownership::new(self.inner.clone(), "co");
        let cell = key
            .as_str()
            .split('/')
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let epoch = own.read_head(&cell).await.unwrap().unwrap().0.epoch;
        let same = |b: &Bytes| Ok(b.clone());
        update_cell(&own, &cell, epoch, Duration::from_secs(1), same)
            .await
            .unwrap();
    }
}

fn lost() -> Error {
    Error::new(ErrorKind::Timeout, "answer lost")
}

#[async_trait]
impl ConditionalStore for Steered {
    async fn get(&self, key: &Key) -> Result<Option<Stored>> {
        let co = key.as_str().ends_with("own.json")
            && std::mem::take(&mut *self.co_write_before_read.lock().unwrap());
        if co {
            self.co_write(key).await;
        }
        let fail = key.as_str().ends_with("own.json")
            && std::mem::take(&mut *self.fail_head_read.lock().unwrap());
        if fail {
            return Err(lost());
        }
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome> {
        match self.head_put(key) {
            None => self.inner.put(key, body, guard).await,
            Some(Put::LoseAnswer) => {
                self.inner.put(key, body, guard).await?;
                Err(lost())
            }
            Some(Put::Late(ms)) => {
                let (inner, key) = (self.inner.clone(), key.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let _ = inner.put(&key, body, guard).await;
                });
                std::future::pending().await
            }
            Some(Put::Lost) => std::future::pending().await,
        }
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome> {
        self.inner.delete(key, version).await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<()> {
        self.inner.delete_immutable(key).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

fn fence(store: Arc<Steered>) -> Fence {
    Fence::builder(store, "a")
        .clock(Clock::virtual_at(1_700_000_000_000))
        .build()
        .unwrap()
}

async fn records(fence: &Fence) -> Vec<String> {
    let log = read_log(fence, "orders", 0).await.unwrap();
    let text = |(s, b): &(u64, Bytes)| format!("{s}:{}", String::from_utf8_lossy(b));
    log.records.iter().map(text).collect()
}

/// Item 2. docs/fleet.md promised "an ambiguous append landed exactly when `next_seq()`
/// moved past its sequence number". A head write held up in the network landed *after*
/// `next_seq()` said it had not, and the documented retry appended the record twice:
/// `["0:order-0", "1:order-1", "2:order-1"]`. Now `next_seq()` seals the log first, so its
/// answer stays true, and `landed` says for certain.
#[tokio::test(start_paused = true)]
async fn an_ambiguous_append_is_settled_and_never_appended_twice() {
    let store = Arc::new(Steered::default());
    let fence = fence(store.clone());
    let lease = fence.acquire().await.unwrap();
    let log = AppendLog::new(&fence, Arc::new(lease.claim("orders").await.unwrap()));
    log.append("order-0").await.unwrap();
    // Every send of the next head write is held up or lost; the first lands a minute later.
    let held = [Put::Late(60_000), Put::Lost, Put::Lost, Put::Lost];
    store.puts.lock().unwrap().extend(held);
    let err = log.append("order-1").await.unwrap_err();
    assert!(err.is_ambiguous(), "{err}");
    let next = log.next_seq().await.unwrap();
    let landed = log.landed(1, b"order-1").await.unwrap();
    assert_eq!(
        (next, landed),
        (1, false),
        "sealed before the held-up write"
    );
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert_eq!(
        log.next_seq().await.unwrap(),
        1,
        "the held-up write never landed"
    );
    log.append("order-1").await.unwrap();
    assert_eq!(records(&fence).await, ["0:order-0", "1:order-1"]);
}

/// Item 3. `append_with` retried on every `Conflict`, the ambiguous one included: with a
/// co-writer at the claim's epoch (`update_cell`, which is what `fence put` is) moving the
/// head after an append's write landed with its answer lost, the record landed twice and
/// the caller was told it was appended once. Now that error is the caller's, and `landed`
/// settles it.
#[tokio::test(start_paused = true)]
async fn a_co_writer_after_an_ambiguous_append_never_duplicates_the_record() {
    let store = Arc::new(Steered::default());
    let fence = fence(store.clone());
    let lease = fence.acquire().await.unwrap();
    let log = AppendLog::new(&fence, Arc::new(lease.claim("orders").await.unwrap()));
    log.append("A-0").await.unwrap();
    store.puts.lock().unwrap().push_back(Put::LoseAnswer);
    *store.co_write_before_read.lock().unwrap() = true;
    let outcome = log.append("A-1").await;
    let err = outcome.expect_err("the append's outcome is not known: it must not be acknowledged");
    assert!(err.is_ambiguous(), "{err}");
    assert!(log.landed(1, b"A-1").await.unwrap(), "it did land");
    assert_eq!(records(&fence).await, ["0:A-0", "1:A-1"]);
}

/// Item 5. `LogHead::decode` accepted a run naming an epoch above the cell's; the next
/// append was acknowledged and wrote a head `decode` itself refused, so the acknowledged
/// record could never be read. Now the hostile head is `Corrupt` at once, and nothing is
/// acknowledged.
#[tokio::test(start_paused = true)]
async fn a_log_head_naming_a_later_epoch_is_corrupt() {
    let store = Arc::new(Steered::default());
    let fence = fence(store);
    let lease = fence.acquire().await.unwrap();
    let claim = Arc::new(lease.claim("orders").await.unwrap());
    claim.write(r#"{"next":1,"runs":[[0,5]]}"#).await.unwrap();
    let log = AppendLog::new(&fence, claim);
    let err = log.append("record").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    let read = read_log(&fence, "orders", 0).await.unwrap_err();
    assert_eq!(read.kind(), ErrorKind::Corrupt);
}

/// An append that fails before its head write is sent (here its read of the head times out)
/// never counts, and says so: the error is not committed, not ambiguous (a timeout alone
/// reads as ambiguous, which sent callers to settle a record that could not have landed).
#[tokio::test(start_paused = true)]
async fn an_append_that_fails_before_its_head_write_is_not_committed() {
    let store = Arc::new(Steered::default());
    let fence = fence(store.clone());
    let lease = fence.acquire().await.unwrap();
    let claim = Arc::new(lease.claim("orders").await.unwrap());
    AppendLog::new(&fence, claim.clone())
        .append("order-0")
        .await
        .unwrap();
    // A new log of the claim reads the head first; that read times out.
    *store.fail_head_read.lock().unwrap() = true;
    let log = AppendLog::new(&fence, claim);
    let err = log.append("order-1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(!err.is_ambiguous(), "{err}");
    assert_eq!(records(&fence).await, ["0:order-0"]);
}
