//! Round trips per lease operation, measured through the real runtime over any store.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{Clock, ConditionalStore, Error, Fence, Key};

use crate::{CountingStore, OpCounts};

/// One lease operation and the store requests it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundTrip {
    /// The operation.
    pub operation: &'static str,
    /// Requests per kind.
    pub counts: OpCounts,
}

/// The round trips of acquire, renew, claim, fenced write, takeover, rejected stale write and
/// release, in that order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundTrips(pub Vec<RoundTrip>);

impl fmt::Display for RoundTrips {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "round trips per lease operation:")?;
        for row in &self.0 {
            writeln!(
                f,
                "  {:<24} {:>2}  ({} get + {} put)",
                row.operation,
                row.counts.total(),
                row.counts.get,
                row.counts.put
            )?;
        }
        Ok(())
    }
}

/// Runs each lease operation once through [`Fence`] on `store` under `prefix` and counts its
/// requests. Takes about `ttl / 3` of real time (one renewal); node `a`'s wall clock is set an
/// hour back so node `b` may take its cell over at once.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::{sync::Arc, time::Duration};
/// use fence_core::{Key, MemoryStore};
/// let rows = fence_testkit::round_trips::measure(
///     Arc::new(MemoryStore::new()), &Key::new("rt").unwrap(), Duration::from_millis(300),
/// ).await.unwrap();
/// assert_eq!(rows.0[1].operation, "renew lease");
/// assert_eq!(rows.0[1].counts.total(), 1);
/// # });
/// ```
pub async fn measure(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    ttl: Duration,
) -> Result<RoundTrips, Error> {
    let counting = Arc::new(CountingStore::new(store));
    let node = |name: &str, skew_ms: i64| {
        Fence::builder(counting.clone(), name)
            .ttl(ttl)
            .prefix(prefix.as_str())
            .clock(Clock::system().with_skew_ms(skew_ms))
            .build()
    };
    let mut rows = Vec::new();
    let mut row = |operation, counts| rows.push(RoundTrip { operation, counts });
    counting.reset();
    let lease_a = node("a", -3_600_000)?.acquire().await?;
    row("acquire lease", counting.reset());
    tokio::time::sleep(ttl / 3 + ttl / 10).await;
    row("renew lease", counting.reset());
    let cell_a = lease_a.claim("cell").await?;
    row("claim new cell", counting.reset());
    cell_a.write("a1").await?;
    row("fenced write", counting.reset());
    let lease_b = node("b", 0)?.acquire().await?;
    counting.reset();
    let cell_b = lease_b.claim("cell").await?;
    row("take over cell", counting.reset());
    let stale = cell_a.write("stale").await;
    row("stale write (rejected)", counting.reset());
    cell_b.release().await?;
    row("release cell", counting.reset());
    lease_a.release().await;
    lease_b.release().await;
    match stale {
        Err(e) if e.kind() == fence_core::ErrorKind::Fenced => Ok(RoundTrips(rows)),
        other => Err(Error::new(
            fence_core::ErrorKind::Other,
            format!("the stale write was not fenced: {other:?}"),
        )),
    }
}
