//! Edges found by reviewing the rewritten core (issues 11 and 13): each test failed on the
//! code before its fix, and names the defect it shows.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::*;
use fence_testkit::sim::PausableStore;
use support::{advance, clock, fence, key, Steered, Step, TTL};

/// A store that counts requests per key and can answer some of them with canned errors.
#[derive(Debug, Default)]
struct Counted {
    inner: MemoryStore,
    gets: Mutex<HashMap<String, u64>>,
    puts: Mutex<HashMap<String, u64>>,
    /// Virtual latency per request (so concurrent claims really overlap).
    latency: Mutex<Option<Duration>>,
    /// Keys whose puts answer an ambiguous timeout without applying (the request is lost).
    lose_puts: Mutex<Vec<String>>,
    /// Keys whose puts fail at once, provably not committed (connection refused).
    refuse_puts: Mutex<Vec<String>>,
    /// Keys whose gets fail at once, provably not committed (connection refused).
    refuse_gets: Mutex<Vec<String>>,
}

impl Counted {
    fn gets_of(&self, k: &str) -> u64 {
        self.gets.lock().unwrap().get(k).copied().unwrap_or(0)
    }
    fn total(&self, prefix: &str) -> u64 {
        let g: u64 = self
            .gets
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
            .sum();
        let p: u64 = self
            .puts
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
            .sum();
        g + p
    }
    fn reset(&self) {
        self.gets.lock().unwrap().clear();
        self.puts.lock().unwrap().clear();
    }
    async fn lag(&self) {
        let lat = *self.latency.lock().unwrap();
        if let Some(d) = lat {
            tokio::time::sleep(d).await;
        }
    }
}

#[async_trait]
impl ConditionalStore for Counted {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        *self
            .gets
            .lock()
            .unwrap()
            .entry(key.as_str().to_owned())
            .or_default() += 1;
        if self
            .refuse_gets
            .lock()
            .unwrap()
            .iter()
            .any(|k| k == key.as_str())
        {
            return Err(Error::new(ErrorKind::Unavailable, "connection refused").not_committed());
        }
        self.lag().await;
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        *self
            .puts
            .lock()
            .unwrap()
            .entry(key.as_str().to_owned())
            .or_default() += 1;
        if self
            .refuse_puts
            .lock()
            .unwrap()
            .iter()
            .any(|k| k == key.as_str())
        {
            return Err(Error::new(ErrorKind::Unavailable, "connection refused").not_committed());
        }
        if self
            .lose_puts
            .lock()
            .unwrap()
            .iter()
            .any(|k| k == key.as_str())
        {
            return Err(Error::new(ErrorKind::Timeout, "request lost"));
        }
        self.lag().await;
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

/// R1. A fenced write whose answer is lost and whose read-back then finds the cell taken over
/// may have landed (here it did, and the new owner carried it forward), yet `write` answers
/// `Fenced` with `Commit::NotCommitted` ("refused, nothing written").
/// claim.rs `Settled::Fenced { maybe_landed, .. }` → `not_ours()` drops `maybe_landed`.
#[tokio::test(start_paused = true)]
async fn a_lost_write_then_superseded_is_not_reported_not_committed() {
    let store = Steered::new();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    store.puts("own.json", [Step::LoseAnswer]);
    store.gets("own.json", [Step::Delay(Duration::from_millis(100))]);
    let b = Ownership::new(store.clone(), "b");
    let takeover = async {
        advance(10).await;
        let head = b.read_owner("c").await.unwrap().unwrap();
        b.cas_owner("c", CasGuard::Match(head.etag), head.epoch + 1)
            .await
            .unwrap()
    };
    let (w, took) = tokio::join!(cell.write("w1"), takeover);
    assert_eq!(took, CasOutcome::Applied);
    let data = read_cell(a.ownership(), "c").await.unwrap().unwrap();
    assert_eq!(
        &data.payload[..],
        b"w1",
        "the write landed and was carried forward"
    );
    let e = w.expect_err("superseded");
    assert_eq!(e.kind(), ErrorKind::Fenced);
    assert!(
        e.is_ambiguous(),
        "a write that landed is reported as not committed: {e:?}"
    );
}

/// R1 for `update_cell`: the same, through `Settled::Fenced { .. } => superseded(..)`
/// (cell.rs), which is `Error::fenced` and so `NotCommitted`.
#[tokio::test(start_paused = true)]
async fn update_cell_lost_then_superseded_is_not_reported_not_committed() {
    let store = Steered::new();
    let own = Ownership::new(store.clone(), "a");
    own.cas_owner("c", CasGuard::Absent, 1).await.unwrap();
    store.puts("own.json", [Step::LoseAnswer]);
    store.gets(
        "own.json",
        [Step::Pass, Step::Delay(Duration::from_millis(100))],
    );
    let b = Ownership::new(store.clone(), "b");
    let takeover = async {
        advance(10).await;
        let head = b.read_owner("c").await.unwrap().unwrap();
        b.cas_owner("c", CasGuard::Match(head.etag), 2)
            .await
            .unwrap()
    };
    let t = Duration::from_secs(5);
    let (u, took) = tokio::join!(update_cell(&own, "c", 1, t, |_| Ok("u1".into())), takeover);
    assert_eq!(took, CasOutcome::Applied);
    let data = read_cell(&own, "c").await.unwrap().unwrap();
    assert_eq!(
        &data.payload[..],
        b"u1",
        "the update landed and was carried forward"
    );
    let e = u.expect_err("superseded");
    assert!(
        e.is_ambiguous(),
        "an update that landed is reported as not committed: {e:?}"
    );
}

/// R2. A renewal whose write is ambiguous and whose read-backs fail at once (a store that
/// refuses connections) re-reads in a loop with no pause until the authority runs out:
/// lease.rs `on_resolve_read`: `ReadResult::Failed => self.resolve(..)`. Under paused time the
/// keeper never yields (the test would hang); on a real clock it sends a read storm for the
/// remaining ~2/3 TTL. Real time, TTL 300 ms.
#[tokio::test]
async fn a_failing_renewal_read_back_does_not_spin() {
    let store = Arc::new(Counted::default());
    let f = Fence::builder(store.clone(), "a")
        .ttl(Duration::from_millis(300))
        .build()
        .unwrap();
    let lease = f.acquire().await.unwrap();
    store.lose_puts.lock().unwrap().push("nodes/a.json".into());
    store
        .refuse_gets
        .lock()
        .unwrap()
        .push("nodes/a.json".into());
    let lost = Clock::system().timeout(2_000, lease.lost()).await;
    assert!(lost.is_some(), "the lease ends");
    let reads = store.gets_of("nodes/a.json");
    assert!(
        reads <= 50,
        "{reads} lease reads in one renewal (max_attempts is 4)"
    );
}

/// R3. `acquire()` retried by a restarted process never takes over the record of its crashed
/// predecessor (until `stale_after`, 10 min by default): each call starts a fresh
/// observation (the acquisition's `Attempts::seen`, not the fence's `Observer`), so no call
/// ever sees the record unchanged for a TTL. The old code took over after TTL + margin.
#[tokio::test(start_paused = true)]
async fn acquire_retried_takes_over_a_crashed_predecessor() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let old = fence(path.clone(), "a");
    let _held = old.acquire().await.unwrap();
    path.kill();
    let new = fence(store.clone(), "a");
    let mut last = None;
    for _ in 0..40 {
        advance(250).await; // 10 s = 5 TTL
        match new.acquire().await {
            Ok(k) => {
                assert!(k.is_held());
                return;
            }
            Err(e) => last = Some(e.kind()),
        }
    }
    panic!("5 TTL after the crash, acquire() still answers {last:?}");
}

/// R4. `claim_many` over the cells of a dead node reads that node's lease once per claim in
/// flight, not once: `Observer::liveness` has no single flight. The doc (keeper.rs) says
/// `2n + 1` requests for `n` cells.
#[tokio::test(start_paused = true)]
async fn claim_many_reads_a_dead_nodes_lease_once() {
    let store = Arc::new(Counted::default());
    let d = fence(store.clone(), "d");
    let dl = d.acquire().await.unwrap();
    let cells: Vec<String> = (0..16).map(|i| format!("c{i}")).collect();
    for c in &cells {
        std::mem::forget(dl.claim(c).await.unwrap());
    }
    dl.release().await; // expires_ms 0: dead at once, no observation needed
    let a = fence(store.clone(), "a");
    let al = a.acquire().await.unwrap();
    *store.latency.lock().unwrap() = Some(Duration::from_millis(5));
    store.reset();
    let got = al.claim_many(cells.clone(), 8).await;
    assert!(got.iter().all(|(_, r)| r.is_ok()), "{got:?}");
    let lease_reads = store.gets_of("nodes/d.json");
    let cell_requests = store.total("cells/");
    assert_eq!(cell_requests, 32, "2 per cell");
    assert_eq!(
        lease_reads, 1,
        "the dead node's lease is read {lease_reads} times for 16 cells at concurrency 8"
    );
}

/// R5. What a takeover costs depends on what the peer has seen (the observation rule): a
/// peer that never read the dead node's lease first spends a claim answered `Busy` (read the
/// head, read the lease: its observation starts), and a TTL later takes over in 3 (head,
/// confirming lease read, CAS) — 5 in all; a peer that was watching pays the 3 alone.
#[tokio::test(start_paused = true)]
async fn takeover_costs_what_the_peer_has_not_yet_seen() {
    let store = Arc::new(Counted::default());
    let path = Arc::new(PausableStore::new(store.clone()));
    let d = fence(path.clone(), "d");
    let dl = d.acquire().await.unwrap();
    std::mem::forget(dl.claim("c").await.unwrap());
    path.kill(); // d dies now
    let a = fence(store.clone(), "a");
    let al = a.acquire().await.unwrap();
    advance(2 * TTL.as_millis() as u64).await;
    store.reset();
    let first = al.claim("c").await.map(|c| c.epoch());
    let seen = store.total("cells/") + store.total("nodes/d");
    assert_eq!(
        first.map_err(|e| e.kind()),
        Err(ErrorKind::Busy),
        "never observed yet"
    );
    assert_eq!(seen, 2, "head and lease read: the observation starts");
    advance(TTL.as_millis() as u64 + 100).await;
    store.reset();
    let second = al.claim("c").await.map(|c| c.epoch());
    let n = store.total("cells/") + store.total("nodes/d");
    assert_eq!(
        (n, second.ok()),
        (3, Some(2)),
        "the watching peer's takeover"
    );
}

/// Not a defect: the other rows of issue 13's goal column, printed (run with --nocapture).
#[tokio::test(start_paused = true)]
async fn goal_column_rows() {
    let store = Arc::new(Counted::default());
    let a = fence(store.clone(), "a");
    let tot = |s: &Counted| s.total("");
    store.reset();
    let al = a.acquire().await.unwrap();
    println!("fresh acquire: {}", tot(&store));
    store.reset();
    let c = al.claim("c").await.unwrap();
    println!("claim absent: {}", tot(&store));
    store.reset();
    c.write("x").await.unwrap();
    println!("fenced write (inline): {}", tot(&store));
    store.reset();
    c.write(vec![b'y'; 20_000]).await.unwrap();
    println!("fenced write (blob): {}", tot(&store));
    store.reset();
    c.release().await.unwrap();
    println!("release: {}", tot(&store));
    store.reset();
    let c = al.claim("c").await.unwrap();
    println!("re-claim released: {}", tot(&store));
    drop(c);
    store.reset();
    let _c = al.claim("c").await.unwrap();
    println!("re-claim own: {}", tot(&store));
    let d = fence(store.clone(), "d");
    let dl = d.acquire().await.unwrap();
    for i in 0..3 {
        std::mem::forget(dl.claim(&format!("d{i}")).await.unwrap());
    }
    dl.release().await;
    store.reset();
    let _x = al.claim("d0").await.unwrap();
    println!("takeover first cell (released lease): {}", tot(&store));
    store.reset();
    let _y = al.claim("d1").await.unwrap();
    println!("takeover further cell: {}", tot(&store));
}

/// R6. A payload object's recorded `len` is never checked: a head saying 5 bytes over a
/// 3-byte object reads as those 3 bytes, no `Corrupt`.
#[tokio::test(start_paused = true)]
async fn a_payload_object_of_the_wrong_length_is_corrupt() {
    let store = Arc::new(MemoryStore::new());
    let head = r#"{"v":2,"node":"","epoch":1,"nonce":"x","blob":{"name":"1-abc","len":5}}"#;
    store
        .put(&key("cells/c/own.json"), head.into(), CasGuard::Absent)
        .await
        .unwrap();
    store
        .put(&key("cells/c/blobs/1-abc"), "abc".into(), CasGuard::Absent)
        .await
        .unwrap();
    let own = Ownership::new(store, "r");
    let read = read_cell(&own, "c").await;
    assert_eq!(
        read.as_ref().map_err(|e| e.kind()).err(),
        Some(ErrorKind::Corrupt),
        "{read:?}"
    );
}

/// A store whose head puts apply at once but answer `answer_after` later (the answer's trip
/// back), so a second request can see a write whose writer has not heard of it yet.
#[derive(Debug)]
struct SlowAnswers {
    inner: MemoryStore,
    answer_after: Duration,
    slow: Mutex<u32>,
}

#[async_trait]
impl ConditionalStore for SlowAnswers {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let out = self.inner.put(key, body, guard).await;
        let slow = {
            let mut n = self.slow.lock().unwrap();
            let s = key.as_str().ends_with("own.json") && *n > 0;
            if s {
                *n -= 1;
            }
            s
        };
        if slow {
            tokio::time::sleep(self.answer_after).await;
        }
        out
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

/// R7. Two claims of one cell through one lease (`claim_many` with a repeated name, or two
/// tasks): the "already claimed" guard is check-then-act across awaits
/// (claim.rs: `shared.claimed(cell)` before any I/O, `register` after the write). The second
/// claim reads the first one's landed head, claims epoch + 1 *over it*, then fails to
/// register and answers `InvalidInput` / `NotCommitted` — though its head landed — and the one
/// registered claim is now fenced by an epoch nobody holds.
#[tokio::test(start_paused = true)]
async fn a_refused_second_claim_writes_nothing_and_fences_nobody() {
    let store = Arc::new(SlowAnswers {
        inner: MemoryStore::new(),
        answer_after: Duration::from_millis(50),
        slow: Mutex::new(0),
    });
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    *store.slow.lock().unwrap() = 2;
    let second = async {
        advance(10).await;
        lease.claim("c").await
    };
    let (first, second) = tokio::join!(lease.claim("c"), second);
    let first = first.expect("the first claim");
    let e = second.expect_err("claiming a claimed cell is refused");
    let head = a.ownership().read_owner("c").await.unwrap().unwrap();
    let w = first.write("x").await;
    assert!(
        head.epoch == first.epoch() && w.is_ok(),
        "second claim refused with {:?}/{:?}, but the head is at epoch {} over the live claim's {}; its write: {w:?}",
        e.kind(),
        e.commit(),
        head.epoch,
        first.epoch()
    );
}

/// R9 (pre-existing, a728ea2 has the same `backoff`). A 2 s store outage of fast,
/// provably-not-committed failures (connection refused) fences a healthy node that still has
/// two thirds of a 10 s TTL: the 4 attempts go out at 3.33 s and then every
/// `clamp(remaining / 8, 10, 500)` ms, so they are spent by ~4.8 s although the authority lasts
/// until 10 s. NOTES §4: bound each attempt by the remaining authority — not the number of
/// attempts by a clock of its own.
#[tokio::test(start_paused = true)]
async fn a_short_outage_does_not_fence_a_node_with_authority_left() {
    let store = Arc::new(Counted::default());
    let f = Fence::builder(store.clone(), "a")
        .ttl(Duration::from_secs(10))
        .clock(clock())
        .build()
        .unwrap();
    let lease = f.acquire().await.unwrap();
    advance(3_000).await;
    store
        .refuse_puts
        .lock()
        .unwrap()
        .push("nodes/a.json".into());
    advance(2_000).await; // the store is back at 5 s
    store.refuse_puts.lock().unwrap().clear();
    advance(1_000).await;
    assert!(
        lease.is_held(),
        "fenced with {} ms of authority left at the outage's end: {:?}",
        10_000 - 5_000,
        lease.status()
    );
}

/// R11 (doc precision, security.md "Machines that suspend … only the store's epochs protect
/// the data in that window"): the window has no end. After the machine resumes, its lease
/// renews fine (nobody else writes its lease record) and a claim that does not write reads as
/// held for as long as it does not write — here 5 TTL after a peer took the cell over.
#[tokio::test(start_paused = true)]
async fn a_resumed_machine_learns_within_a_ttl_that_its_cell_was_taken() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let sus = Arc::new(Suspension::default());
    let a = Fence::builder(path.clone(), "a")
        .ttl(TTL)
        .clock(clock().with_suspension(sus.clone()))
        .build()
        .unwrap();
    let lease_a = a.acquire().await.unwrap();
    let cell_a = lease_a.claim("c").await.unwrap();
    path.freeze();
    sus.suspend();
    let b = fence(store.clone(), "b");
    let lease_b = b.acquire().await.unwrap();
    let _ = lease_b.claim("c").await; // starts b's observation of a
    advance(3 * TTL.as_millis() as u64).await;
    let cell_b = lease_b.claim("c").await.expect("b takes the cell over");
    sus.resume();
    path.thaw();
    advance(5 * TTL.as_millis() as u64).await;
    assert!(cell_b.is_held());
    assert!(
        !(lease_a.is_held() && cell_a.is_held()),
        "5 TTL after resuming, a still believes it holds c (epoch {}) while b holds epoch {}",
        cell_a.epoch(),
        cell_b.epoch()
    );
}

/// A MemoryStore whose next read of a payload object is slow.
#[derive(Debug, Default)]
struct SlowBlobRead {
    inner: MemoryStore,
    armed: Mutex<bool>,
}

#[async_trait]
impl ConditionalStore for SlowBlobRead {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let slow =
            key.as_str().contains("/blobs/") && std::mem::take(&mut *self.armed.lock().unwrap());
        if slow {
            // The request reaches the store late (after the object was replaced and deleted).
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
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

/// R12. `update_cell` racing a write that replaces the payload object it is reading: the
/// replaced object is deleted in the background, and `update_cell` reports the cell
/// `Corrupt` ("points at a payload object that does not exist"; cell.rs `current_payload`)
/// instead of reading the head again as `read_cell` does.
#[tokio::test(start_paused = true)]
async fn update_cell_racing_a_replaced_payload_object_is_not_corrupt() {
    let store = Arc::new(SlowBlobRead::default());
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    let cell = lease.claim("c").await.unwrap();
    cell.write(vec![b'x'; 20_000]).await.unwrap();
    *store.armed.lock().unwrap() = true;
    let writer = async {
        advance(10).await;
        cell.write(vec![b'y'; 20_000]).await
    };
    let t = Duration::from_secs(5);
    let (u, w) = tokio::join!(
        update_cell(a.ownership(), "c", cell.epoch(), t, |b| Ok(b.clone())),
        writer
    );
    w.unwrap();
    let kind = u.as_ref().err().map(|e| e.kind());
    assert_ne!(kind, Some(ErrorKind::Corrupt), "{u:?}");
}

/// R13. A parseable lease record that states a huge `ttl_ms` (and an expiry far ahead: a
/// writer that confused ms and µs, or a hostile one) is trusted as is: `hold_ms` =
/// max(our TTL, its `ttl_ms`) and `stale_after` counts from its `expires_ms`, so its cells can
/// never be taken over — here not after 6 virtual hours with the record unchanged. security.md
/// lists "expiries far in the future" among hostile records that are handled.
#[tokio::test(start_paused = true)]
async fn a_record_claiming_an_endless_ttl_does_not_block_takeover_forever() {
    let store = Steered::new();
    let far = format!(
        r#"{{"v":1,"node":"b","expires_ms":{},"addr":"","peer_protocol":1,"generation":"g","nonce":"n","ttl_ms":{}}}"#,
        u64::MAX,
        u64::MAX
    );
    store
        .raw()
        .put(&key("nodes/b.json"), far.into(), CasGuard::Absent)
        .await
        .unwrap();
    let head = r#"{"v":2,"node":"b","epoch":3,"nonce":"y"}"#;
    store
        .raw()
        .put(&key("cells/d/own.json"), head.into(), CasGuard::Absent)
        .await
        .unwrap();
    let a = fence(store.clone(), "a");
    let lease = a.acquire().await.unwrap();
    let mut last = None;
    for _ in 0..6 {
        last = Some(lease.claim("d").await.map(|c| c.epoch()));
        if matches!(last, Some(Ok(_))) {
            return;
        }
        advance(3_600_000).await;
    }
    panic!("6 h of an unchanged record, still {last:?}");
}

/// `write_if` builds only on the head it names: a head another write moved while this one was
/// on its way (here a co-writer's `update_cell` at the same epoch lands first; an ambiguous
/// earlier write landing late is the same to the store) answers `Conflict`, not committed,
/// and leaves the other write in place — where a plain `write` replaces it, as documented.
#[tokio::test(start_paused = true)]
async fn write_if_never_lands_over_a_head_it_did_not_see() {
    let store = Steered::new();
    let a = fence(store.clone(), "a").acquire().await.unwrap();
    let claim = Arc::new(a.claim("c").await.unwrap());
    claim.write("0").await.unwrap();
    let seen = claim.read().await.unwrap().unwrap();
    assert_eq!(&seen.payload[..], b"0");
    // The conditional write is slow to reach the store; the co-writer's lands meanwhile.
    store.puts("own.json", [Step::Delay(Duration::from_millis(100))]);
    let w = claim.clone();
    let version = seen.version.clone();
    let pending = tokio::spawn(async move { w.write_if(Some(&version), "0+1").await });
    advance(10).await;
    let own = Ownership::new(store.clone(), "a");
    update_cell(&own, "c", claim.epoch(), Duration::from_secs(1), |_| {
        Ok(Bytes::from_static(b"co"))
    })
    .await
    .unwrap();
    let err = pending.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.commit(), Commit::NotCommitted);
    let now = claim.read().await.unwrap().unwrap();
    assert_eq!(&now.payload[..], b"co");
    // Built on what it sees now, it lands; so does a write expecting the current version.
    claim.write_if(Some(&now.version), "co+1").await.unwrap();
    assert_eq!(&claim.read().await.unwrap().unwrap().payload[..], b"co+1");
    // `None` expects a cell without data.
    let err = claim.write_if(None, "x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(claim.is_held(), "a moved head does not end the claim");
}
