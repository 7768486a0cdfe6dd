//! Runtime-level scenarios: the tokio runtime ([`Fence`], [`LeaseKeeper`], [`CellClaim`])
//! against the store under test, in real time with a short TTL (by default [`TTL`], each
//! scenario then well under five seconds; [`SuiteConfig::runtime_ttl`](crate::SuiteConfig)
//! sets it). They run on live servers too.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fence_core::decide::LeaseStatus;
use fence_core::{
    CellClaim, Clock, ConditionalStore, Error, ErrorKind, Fence, Key, LeaseKeeper, Ownership,
};

use crate::counting::CountingStore;
use crate::faulty::{Fault, FaultyStore, OpKind};
use crate::sim::PausableStore;

/// The default lease TTL of the runtime scenarios: short, so a scenario takes seconds, and
/// long enough for a local store to answer a renewal (attempts get about a third of it). A
/// server on a loaded machine, or across a network, needs a longer one
/// ([`SuiteConfig::runtime_ttl`](crate::SuiteConfig)): a renewal that cannot be answered
/// within the TTL loses the lease, and the scenario fails.
pub const TTL: Duration = Duration::from_millis(800);

/// A runtime TTL for a live server that shares a loaded machine with other tests (a CI run
/// of two test lanes and the servers on two cores): there Azurite once answered 4 times
/// slower than alone. With it the runtime scenarios take about 10 s instead of 5.
pub const SERVER_TTL: Duration = Duration::from_millis(1_500);

/// Each runtime scenario gives up after this long, or after 20 TTLs if that is longer (a
/// hung store must not hang the suite).
const LIMIT: Duration = Duration::from_secs(15);

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn err(step: &str, e: &Error) -> String {
    format!("{step}: {e}")
}

async fn limited<T>(
    ttl: Duration,
    f: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let limit = LIMIT.max(ttl.saturating_mul(20));
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| Err(format!("did not finish within {limit:?}")))
}

fn fence_with(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    node: &str,
    clock: Clock,
    ttl: Duration,
) -> Result<Fence, String> {
    Fence::builder(store, node)
        .ttl(ttl)
        .prefix(prefix.as_str())
        .clock(clock)
        .build()
        .map_err(|e| err("build", &e))
}

fn fence(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    node: &str,
    ttl: Duration,
) -> Result<Fence, String> {
    fence_with(store, prefix, node, Clock::system(), ttl)
}

async fn acquire(f: &Fence, who: &str) -> Result<LeaseKeeper, String> {
    f.acquire()
        .await
        .map_err(|e| err(&format!("{who} acquires"), &e))
}

async fn claim(lease: &LeaseKeeper, cell: &str, who: &str) -> Result<CellClaim, String> {
    lease
        .claim(cell)
        .await
        .map_err(|e| err(&format!("{who} claims {cell}"), &e))
}

async fn write(c: &CellClaim, payload: &'static str, who: &str) -> Result<u64, String> {
    match c.write(payload).await {
        Ok(ack) => Ok(ack.epoch),
        Err(e) => Err(err(&format!("{who} writes {payload}"), &e)),
    }
}

async fn sleep(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

fn want<T: PartialEq + std::fmt::Debug>(what: &str, got: T, expected: T) -> Result<(), String> {
    if got == expected {
        Ok(())
    } else {
        Err(format!("{what}: {got:?}, expected {expected:?}"))
    }
}

fn reader(store: Arc<dyn ConditionalStore>, prefix: &Key) -> Result<Ownership, String> {
    Ownership::new(store, "reader")
        .with_prefix(prefix.as_str())
        .map_err(|e| err("reader", &e))
}

async fn owner(own: &Ownership, cell: &str) -> Result<(Option<String>, u64), String> {
    match own.read_owner(cell).await {
        Ok(Some(o)) => Ok((o.node, o.epoch)),
        Ok(None) => Err(format!("cell {cell} has no owner record")),
        Err(e) => Err(err("read owner", &e)),
    }
}

/// Acquire and renew: a lease is held across more than two TTLs of renewals in the
/// background, writes are acknowledged all along at the claim's epoch, and the lease record
/// changes with every renewal.
pub async fn lease_renew(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    ttl: Duration,
) -> Result<String, String> {
    limited(ttl, async {
        let a = fence(store.clone(), prefix, "a", ttl)?;
        let lease = acquire(&a, "a").await?;
        let cell = claim(&lease, "c", "a").await?;
        want("first claim's epoch", cell.epoch(), 1)?;
        let own = reader(store, prefix)?;
        let mut versions = Vec::new();
        let steps = 11;
        for step in 0..steps {
            sleep(ms(ttl) / 4).await;
            if !lease.is_held() {
                return Err(format!(
                    "lease lost after {} ms: {:?}",
                    step * ms(ttl) / 4,
                    lease.status()
                ));
            }
            want("acknowledged epoch", write(&cell, "renewed", "a").await?, 1)?;
            let rec = own
                .read_node_lease("a")
                .await
                .map_err(|e| err("read lease", &e))?;
            let v = rec.ok_or("the lease record is missing")?.etag;
            if versions.last() != Some(&v) {
                versions.push(v);
            }
        }
        want("status after renewals", lease.status(), LeaseStatus::Held)?;
        if versions.len() < 4 {
            return Err(format!(
                "only {} lease versions seen over {} ms",
                versions.len(),
                steps * ms(ttl) / 4
            ));
        }
        cell.release().await.map_err(|e| err("release cell", &e))?;
        lease.release().await;
        Ok(format!(
            "held {} ms (TTL {} ms), {} lease versions",
            steps * ms(ttl) / 4,
            ms(ttl),
            versions.len()
        ))
    })
    .await
}

/// Release: a released cell keeps its epoch and the next claim (by the same node) raises it;
/// a released lease is expired at once, so another node claims the cell without waiting.
pub async fn release(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    ttl: Duration,
) -> Result<String, String> {
    limited(ttl, async {
        let own = reader(store.clone(), prefix)?;
        let a = fence(store.clone(), prefix, "a", ttl)?;
        let lease_a = acquire(&a, "a").await?;
        let first = claim(&lease_a, "c", "a").await?;
        want("first epoch", first.epoch(), 1)?;
        first.release().await.map_err(|e| err("a releases c", &e))?;
        want("owner after release", owner(&own, "c").await?, (None, 1))?;
        let again = claim(&lease_a, "c", "a").await?;
        want("epoch of the claim after release", again.epoch(), 2)?;
        lease_a.release().await;
        let b = fence(store, prefix, "b", ttl)?;
        let lease_b = acquire(&b, "b").await?;
        let taken = claim(&lease_b, "c", "b").await?;
        want("epoch taken after a's lease release", taken.epoch(), 3)?;
        want("b's acknowledged epoch", write(&taken, "b1", "b").await?, 3)?;
        want(
            "owner at the end",
            owner(&own, "c").await?,
            (Some("b".into()), 3),
        )?;
        lease_b.release().await;
        Ok("epochs 1 → release (kept 1) → 2 → lease released → 3 by another node".into())
    })
    .await
}

/// Expiry and takeover: a holder whose path to the store is frozen (a paused process) is
/// refused by nobody until its lease expires; then its own monotonic clock says it no longer
/// holds, a peer takes the cell over at epoch + 1, and the old holder's write, once thawed,
/// fails with `Fenced`.
pub async fn expire_takeover(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    ttl: Duration,
) -> Result<String, String> {
    limited(ttl, async {
        let path = Arc::new(PausableStore::new(store.clone()));
        let a = fence(path.clone(), prefix, "a", ttl)?;
        let lease_a = acquire(&a, "a").await?;
        let cell_a = claim(&lease_a, "c", "a").await?;
        write(&cell_a, "a1", "a").await?;
        let b = fence(store.clone(), prefix, "b", ttl)?;
        let lease_b = acquire(&b, "b").await?;
        let frozen_at = Clock::system();
        path.freeze();
        match lease_b.claim("c").await {
            Err(e) if e.kind() == ErrorKind::Busy => {}
            other => {
                return Err(format!(
                    "claim while a's lease is live: {other:?}, expected Busy"
                ))
            }
        }
        let cell_b = loop {
            sleep(ms(ttl) / 8).await;
            match lease_b.claim("c").await {
                Ok(c) => break c,
                Err(e) if e.kind() == ErrorKind::Busy && frozen_at.mono_ms() < 4 * ms(ttl) => {}
                Err(e) => return Err(err("b takes c over", &e)),
            }
        };
        let waited = frozen_at.mono_ms();
        if waited < ms(ttl) {
            return Err(format!(
                "taken over {waited} ms after the freeze, before one TTL"
            ));
        }
        if lease_a.is_held() {
            return Err("the frozen holder still says it holds after the takeover".into());
        }
        want("takeover epoch", cell_b.epoch(), cell_a.epoch() + 1)?;
        want(
            "b's acknowledged epoch",
            write(&cell_b, "b1", "b").await?,
            2,
        )?;
        path.thaw();
        match cell_a.write("late").await {
            Err(e) if e.kind() == ErrorKind::Fenced => {}
            other => {
                return Err(format!(
                    "the old holder's late write: {other:?}, expected Fenced"
                ))
            }
        }
        let data = cell_b.read().await.map_err(|e| err("read data", &e))?;
        let data = data.ok_or("the data head is missing")?;
        want(
            "data head",
            (data.epoch, &data.payload[..]),
            (2, &b"b1"[..]),
        )?;
        lease_b.release().await;
        Ok(format!(
            "taken over {waited} ms after the freeze (TTL {} ms)",
            ms(ttl)
        ))
    })
    .await
}

/// Fencing by the store: a holder whose wall clock runs an hour late still believes it holds
/// (its own monotonic clock says so), a peer takes its cell over at once, and the holder's next
/// write reaches the store and is refused there with `Fenced`; the data head stays the peer's.
pub async fn stale_writer_fenced_by_store(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    ttl: Duration,
) -> Result<String, String> {
    limited(ttl, async {
        let counted = Arc::new(CountingStore::new(store.clone()));
        let late_clock = Clock::system().with_skew_ms(-3_600_000);
        let a = fence_with(counted.clone(), prefix, "a", late_clock, ttl)?;
        let lease_a = acquire(&a, "a").await?;
        let cell_a = claim(&lease_a, "c", "a").await?;
        write(&cell_a, "a1", "a").await?;
        let b = fence(store, prefix, "b", ttl)?;
        let lease_b = acquire(&b, "b").await?;
        let cell_b = claim(&lease_b, "c", "b").await?;
        want("takeover epoch", cell_b.epoch(), cell_a.epoch() + 1)?;
        if !lease_a.is_held() {
            return Err("the stale holder should still believe it holds".into());
        }
        counted.reset();
        match cell_a.write("stale").await {
            Err(e) if e.kind() == ErrorKind::Fenced => {}
            other => return Err(format!("the stale write: {other:?}, expected Fenced")),
        }
        let sent = counted.counts();
        if sent.put == 0 {
            return Err("the stale write was refused locally, not by the store".into());
        }
        let data = cell_b.read().await.map_err(|e| err("read data", &e))?;
        let data = data.ok_or("the data head is missing")?;
        if data.epoch != 2 || &data.payload[..] == b"stale" {
            return Err(format!(
                "data head after the stale write: epoch {}",
                data.epoch
            ));
        }
        lease_a.release().await;
        lease_b.release().await;
        Ok(format!(
            "stale write refused by the store after {} puts",
            sent.put
        ))
    })
    .await
}

/// Ambiguous renewals are resolved: a renewal that landed but whose answer was lost keeps the
/// lease held; one whose request was lost keeps the prior lease and is retried; the lease is
/// held throughout.
pub async fn ambiguous_renewal(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    seed: u64,
    ttl: Duration,
) -> Result<String, String> {
    limited(ttl, async {
        let faulty = Arc::new(FaultyStore::new(store, seed));
        let a = fence(faulty.clone(), prefix, "a", ttl)?;
        let lease = acquire(&a, "a").await?;
        for fault in [Fault::LoseAnswer, Fault::LoseRequest] {
            faulty.script(OpKind::Put, [fault]);
            let clock = Clock::system();
            while faulty.pending(OpKind::Put) > 0 {
                if clock.mono_ms() > 2 * ms(ttl) {
                    return Err(format!("no renewal within {} ms", 2 * ms(ttl)));
                }
                sleep(10).await;
            }
            sleep(ms(ttl)).await;
            if !lease.is_held() || lease.status() != LeaseStatus::Held {
                return Err(format!(
                    "after a renewal with {fault:?}: {:?}",
                    lease.status()
                ));
            }
        }
        lease.release().await;
        Ok("lost answer → held; lost request → prior kept, retried, held".into())
    })
    .await
}
