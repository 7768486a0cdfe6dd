//! Requests per operation, counted through the public API (issue 13's goal column): one
//! [`CountingStore`] per fence, so one node's renewals never count in another's operation,
//! on virtual time, so renewals happen only where a test lets time pass.
//!
//! | operation | requests |
//! |---|---|
//! | fresh acquire of a node lease | 1 |
//! | renewal | 1 |
//! | claim of an absent, a released or an own cell | 2, and 1 listing in the background |
//! | takeover, first cell of a dead node | 3, and 1 listing in the background |
//! | takeover, each further cell of that node (also through `claim_many`) | 2, and 1 listing |
//! | fenced write, inline / with a payload object | 1 / 2 |
//! | release | 1 |
//! | a lost compare-and-swap (a stale write): the write and a read / on a store whose rejections carry the current head (DynamoDB) | 2 / 1 |
//! | a write whose answer was lost: and a read / on such a store, sent again | +1 / +1 (no read) |
//!
//! Timings are the benchmark's (`crates/fence-s3/benches/claims.rs`); counts are exact. Two
//! tests are ignored: goals the core misses today, each said in its doc (run them with
//! `--ignored`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::*;
use fence_testkit::sim::PausableStore;
use fence_testkit::{CountingStore, FaultyStore, OpCounts, OpKind, RandomFaults};

const TTL: Duration = Duration::from_secs(2);
/// A full TTL of observation, ending between two of the observer's own renewals (every
/// TTL/3), so none of them falls inside a counted operation.
const OBSERVE: Duration = Duration::from_millis(2_100);

/// One node: its fence, and the counter of the requests it sends.
struct Node {
    fence: Fence,
    sent: Arc<CountingStore>,
}

impl Node {
    fn on(store: Arc<dyn ConditionalStore>, name: &str) -> Self {
        let sent = Arc::new(CountingStore::new(store));
        let fence = Fence::builder(sent.clone(), name)
            .ttl(TTL)
            .clock(Clock::virtual_at(1_700_000_000_000))
            .build()
            .unwrap();
        Node { fence, sent }
    }

    async fn acquire(&self) -> LeaseKeeper {
        self.fence.acquire().await.unwrap()
    }

    /// The requests since the last call, once background work (payload collection) ran.
    async fn counted(&self) -> OpCounts {
        settle().await;
        self.sent.reset()
    }
}

/// Lets spawned work finish without letting a renewal come due (TTL/3 is far off).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// The requests of `n` claims at a new epoch: `get` and `put`, and one listing of each
/// cell's payload objects, which every such claim collects in the background (nothing to
/// delete here).
fn claimed(get: u64, put: u64, n: u64) -> OpCounts {
    OpCounts {
        list: n,
        ..requests(get, put)
    }
}

fn requests(get: u64, put: u64) -> OpCounts {
    OpCounts {
        get,
        put,
        ..OpCounts::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_fresh_acquire_is_one_create_and_a_renewal_one_cas() {
    let a = Node::on(Arc::new(MemoryStore::new()), "a");
    let lease = a.acquire().await;
    assert_eq!(a.counted().await, requests(0, 1));
    tokio::time::sleep(TTL / 3).await;
    assert_eq!(a.counted().await, requests(0, 1), "one renewal, at TTL/3");
    lease.release().await;
}

#[tokio::test(start_paused = true)]
async fn claims_of_absent_released_and_own_cells_are_two_requests() {
    let a = Node::on(Arc::new(MemoryStore::new()), "a");
    let lease = a.acquire().await;
    a.counted().await;
    let cell = lease.claim("c").await.unwrap();
    assert_eq!(a.counted().await, claimed(1, 1, 1), "absent cell");
    cell.release().await.unwrap();
    assert_eq!(a.counted().await, requests(0, 1), "release");
    let cell = lease.claim("c").await.unwrap();
    assert_eq!(a.counted().await, claimed(1, 1, 1), "released cell");
    assert_eq!(cell.epoch(), 2);
    drop(cell);
    let cell = lease.claim("c").await.unwrap();
    assert_eq!(
        a.counted().await,
        claimed(1, 1, 1),
        "own cell, claim dropped"
    );
    assert_eq!(cell.epoch(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_fenced_write_is_one_cas_and_a_payload_object_one_create_more() {
    let a = Node::on(Arc::new(MemoryStore::new()), "a");
    let lease = a.acquire().await;
    let cell = lease.claim("c").await.unwrap();
    a.counted().await;
    cell.write(vec![7u8; 1024]).await.unwrap();
    assert_eq!(a.counted().await, requests(0, 1), "inline write");
    cell.write(vec![7u8; 64 * 1024]).await.unwrap();
    assert_eq!(
        a.counted().await,
        requests(0, 2),
        "payload object over an inline head"
    );
    cell.write(vec![8u8; 64 * 1024]).await.unwrap();
    let replaced = OpCounts {
        delete: 1,
        ..requests(0, 2)
    };
    assert_eq!(
        a.counted().await,
        replaced,
        "a payload object replacing another: its collection is one delete, in the background"
    );
    assert_eq!(
        &cell.read().await.unwrap().unwrap().payload[..],
        &[8u8; 64 * 1024][..]
    );
}

/// Node `a` holds `cells` and dies (its path to the store is cut, its lease record stays as
/// it last wrote it); node `b` has acquired its own lease and observed `a`'s lease once,
/// through a claim answered `Busy`, which costs a head read and a lease read.
async fn dead_owner(cells: &[String]) -> (Node, LeaseKeeper) {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let a = Node::on(path.clone(), "a");
    let lease_a = a.acquire().await;
    for (cell, claimed) in lease_a.claim_many(cells.iter().cloned(), 8).await {
        claimed.unwrap_or_else(|e| panic!("{cell}: {e}"));
    }
    path.kill();
    let b = Node::on(store, "b");
    let lease_b = b.acquire().await;
    b.counted().await;
    let busy = lease_b.claim(&cells[0]).await.unwrap_err();
    assert_eq!(
        busy.kind(),
        ErrorKind::Busy,
        "a's lease is not yet observed for a TTL"
    );
    assert_eq!(b.counted().await, requests(2, 0), "claim answered Busy");
    tokio::time::sleep(OBSERVE).await;
    b.sent.reset();
    drop(lease_a);
    (b, lease_b)
}

fn cells(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("c{i}")).collect()
}

#[tokio::test(start_paused = true)]
async fn a_takeover_is_three_requests_for_the_first_cell_of_a_node_two_for_each_further() {
    let cells = cells(10);
    let (b, lease) = dead_owner(&cells).await;
    let first = lease.claim(&cells[0]).await.unwrap();
    assert_eq!(first.epoch(), 2);
    assert_eq!(
        b.counted().await,
        claimed(2, 1, 1),
        "first cell: head, lease, CAS"
    );
    let second = lease.claim(&cells[1]).await.unwrap();
    assert_eq!(
        b.counted().await,
        claimed(1, 1, 1),
        "further cell: head, CAS"
    );
    let rest = lease.claim_many(cells[2..].iter().cloned(), 4).await;
    assert!(rest
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|c| c.epoch() == 2)));
    assert_eq!(
        b.counted().await,
        claimed(8, 8, 8),
        "claim_many of 8 further cells"
    );
    drop((first, second));
}

/// The same through `claim_many` alone, with every request taking time (up to 5 ms, seeded),
/// so the claims are really in flight together: the lease read should be shared by all of
/// them. (MemoryStore answers at once, so in the test above `claim_many`'s claims run one
/// after another.)
///
/// Ignored: the core misses this today. Claims in flight together each find no fresh
/// observation and each read the lease (`Observer::liveness` has no shared in-flight read):
/// 37 reads instead of 33 here, about one per claim in flight on SeaweedFS (see the bench).
#[tokio::test(start_paused = true)]
async fn claim_many_shares_one_lease_read_among_claims_in_flight() {
    let cells = cells(32);
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let slow = Arc::new(FaultyStore::new(store.clone(), 13));
    let latency = RandomFaults {
        latency: 1.0,
        latency_max: Duration::from_millis(5),
        ..RandomFaults::default()
    };
    slow.set_random(OpKind::Get, latency);
    slow.set_random(OpKind::Put, latency);
    let path = Arc::new(PausableStore::new(store));
    let a = Node::on(path.clone(), "a");
    let lease_a = a.acquire().await;
    for (_, claimed) in lease_a.claim_many(cells.iter().cloned(), 8).await {
        claimed.unwrap();
    }
    path.kill();
    let b = Node::on(slow, "b");
    let lease = b.acquire().await;
    assert_eq!(
        lease.claim(&cells[0]).await.unwrap_err().kind(),
        ErrorKind::Busy
    );
    tokio::time::sleep(OBSERVE).await;
    b.sent.reset();
    let taken = lease.claim_many(cells.iter().cloned(), 16).await;
    assert!(taken.iter().all(|(_, r)| r.is_ok()), "{taken:?}");
    let n = cells.len() as u64;
    assert_eq!(
        b.counted().await,
        claimed(n + 1, n, n),
        "2n + 1 for n cells"
    );
    drop(lease_a);
}

#[tokio::test(start_paused = true)]
async fn a_claim_moves_the_head_never_the_payload() {
    // The 16 MB payload is over the default 5 MiB record limit.
    let a = Node::on(
        Arc::new(MemoryStore::new().with_record_limit(32 << 20)),
        "a",
    );
    let lease = a.acquire().await;
    let cell = lease.claim("big").await.unwrap();
    cell.write(vec![5u8; 16 << 20]).await.unwrap();
    drop(cell);
    a.counted().await;
    let cell = lease.claim("big").await.unwrap();
    let own = a.sent.bytes();
    assert_eq!(a.counted().await, claimed(1, 1, 1));
    cell.release().await.unwrap();
    a.counted().await;
    let cell = lease.claim("big").await.unwrap();
    let released = a.sent.bytes();
    assert_eq!(a.counted().await, claimed(1, 1, 1));
    for (what, moved) in [("own", own), ("released", released)] {
        assert!(
            moved.total() < 64 * 1024,
            "claim of an {what} 16 MB cell moved {moved:?}"
        );
    }
    let data = cell.read().await.unwrap().unwrap();
    assert_eq!((data.epoch, data.payload.len()), (3, 16 << 20));
}

/// The worst inline payload: `inline_max` bytes that are valid UTF-8 but JSON-escaped six
/// to one (control characters) travel in the head, twice per claim.
///
/// Ignored: the core misses this today. The inline bound counts raw bytes and valid UTF-8 is
/// written as a JSON string, so 8 KiB of control characters make a 48 KiB head: 2 × 49,265 B
/// per claim. (Base64 for payloads that escape worse than 4/3 would make it 2 × 11 KiB.)
#[tokio::test(start_paused = true)]
async fn a_claim_of_the_largest_inline_payload_moves_less_than_64_kib() {
    let a = Node::on(Arc::new(MemoryStore::new()), "a");
    let lease = a.acquire().await;
    let cell = lease.claim("c").await.unwrap();
    cell.write(vec![1u8; 8 * 1024]).await.unwrap();
    drop(cell);
    a.counted().await;
    let _cell = lease.claim("c").await.unwrap();
    let moved = a.sent.bytes();
    assert!(moved.total() < 64 * 1024, "moved {moved:?}");
}

/// A store whose rejections carry the object the condition was checked against, as
/// DynamoDB's do (`ALL_OLD`), over a MemoryStore: the object is read right after the rejection
/// through the inner store (in the same round trip on DynamoDB). The next `lose` writes that
/// ask for it land and lose their answers.
#[derive(Debug, Default)]
struct Telling {
    inner: MemoryStore,
    lose: AtomicUsize,
}

#[async_trait]
impl ConditionalStore for Telling {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.inner.put(key, body, guard).await
    }
    async fn put_with_current(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        let outcome = self.inner.put(key, body, guard).await?;
        let lost = self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if lost.is_ok() {
            return Err(Error::new(ErrorKind::Timeout, "answer lost"));
        }
        let current = match (&outcome, self.inner.get(key).await?) {
            (PutOutcome::Applied(_), _) => Current::Untold,
            (PutOutcome::Rejected, None) => Current::Absent,
            (PutOutcome::Rejected, Some(found)) => Current::Found(found),
        };
        Ok((outcome, current))
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_current_on_reject()
    }
}

/// `a` claims `c`, then node `b` takes the cell over behind its back: `a`'s next write is a
/// lost compare-and-swap. Returns what that write cost `a`.
async fn stale_write(store: Arc<dyn ConditionalStore>) -> OpCounts {
    let a = Node::on(store.clone(), "a");
    let lease = a.acquire().await;
    let cell = lease.claim("c").await.unwrap();
    let b = Ownership::new(store, "b");
    let (_, version) = b.read_head("c").await.unwrap().unwrap();
    let taken = b.cas_owner("c", CasGuard::Match(version), 2).await.unwrap();
    assert_eq!(taken, CasOutcome::Applied);
    a.counted().await;
    let stale = cell.write("late").await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::Fenced);
    a.counted().await
}

#[tokio::test(start_paused = true)]
async fn a_lost_compare_and_swap_costs_one_request_where_the_rejection_carries_the_head() {
    let told = stale_write(Arc::new(Telling::default())).await;
    assert_eq!(
        told,
        requests(0, 1),
        "the rejection's head is the read-back"
    );
    let untold = stale_write(Arc::new(MemoryStore::new())).await;
    assert_eq!(untold, requests(1, 1), "a store without it needs a read");
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_is_settled_by_sending_again_where_the_rejection_carries_the_head() {
    let store = Arc::new(Telling::default());
    let a = Node::on(store.clone(), "a");
    let lease = a.acquire().await;
    let cell = lease.claim("c").await.unwrap();
    a.counted().await;
    store.lose.store(1, Ordering::SeqCst);
    cell.write("ours").await.unwrap();
    assert_eq!(
        a.counted().await,
        requests(0, 2),
        "the write landed, its answer was lost; sent again, it is rejected carrying ours"
    );
    assert_eq!(&cell.read().await.unwrap().unwrap().payload[..], b"ours");
}
