//! Who is alive: one listing of `nodes/` plus one read of each lease, judged by the same
//! observation rule as a takeover ([`fence_core::decide::observe`]). A tool for inspection:
//! its cost grows with the number of nodes, so a [`Fleet`](crate::Fleet) does not use it (each
//! node reads one other node's lease; see docs/fleet.md, "How a fleet scales").
//!
//! A view is an input to decisions — where cells should go, whom to hand one to — and never
//! a safety proof: a node shown live may have died since, a node shown gone may be a
//! process still paused. The cells' epochs stay the fence. A node is shown **gone** only when
//! a claim of its cells would also judge it dead: its lease released, long stale, or seen
//! unchanged for a full TTL by reads of this process. Anything else, a read that failed
//! included, shows it **live**.
//!
//! ```
//! # fn block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
//! # }
//! # block(async {
//! use std::{sync::Arc, time::Duration};
//! use fence::{Fence, MemoryStore};
//! let store = Arc::new(MemoryStore::new());
//! let a = Fence::builder(store.clone(), "a").build().unwrap();
//! let b = Fence::builder(store, "b").build().unwrap().acquire().await.unwrap();
//! let view = fence_fleet::membership::read_members(&a, Duration::from_secs(1)).await.unwrap();
//! assert_eq!(view.live_nodes(), vec!["b".to_owned()]);
//! # drop(b);
//! # });
//! ```

use std::time::Duration;

use fence_core::decide::{Liveness, Observation};
use fence_core::runtime::Fence;
use fence_core::Error;
use futures::StreamExt;

/// Reads of leases in flight at once while building a view.
const READS_IN_FLIGHT: usize = 16;

/// A node shown live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The node id.
    pub node: String,
    /// The lease generation (process) last seen, `None` if its record could not be read.
    pub generation: Option<String>,
    /// The address its lease advertises.
    pub addr: String,
}

/// A view of the fleet's nodes at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// Nodes shown live, sorted by id.
    pub live: Vec<Member>,
    /// Nodes listed but judged gone, sorted.
    pub gone: Vec<String>,
    /// The earliest time (monotonic ms of the fence's clock) at which a live node, if its
    /// lease stays unchanged, could be judged gone by one more read: when to look again to
    /// notice a death at once.
    pub recheck_mono: Option<u64>,
}

impl Members {
    /// The ids of the live nodes, sorted.
    pub fn live_nodes(&self) -> Vec<String> {
        self.live.iter().map(|m| m.node.clone()).collect()
    }

    /// Whether `node` is shown live.
    pub fn is_live(&self, node: &str) -> bool {
        self.live.iter().any(|m| m.node == node)
    }

    /// The lease generation last seen of live node `node`.
    pub fn generation(&self, node: &str) -> Option<&str> {
        self.live
            .iter()
            .find(|m| m.node == node)
            .and_then(|m| m.generation.as_deref())
    }
}

/// The node ids under `nodes/`: one listing, bounded by `timeout`.
pub async fn list_nodes(fence: &Fence, timeout: Duration) -> Result<Vec<String>, Error> {
    let own = fence.ownership();
    let prefix = own.nodes_prefix()?;
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let keys = match fence
        .clock()
        .timeout(timeout_ms, own.store().list(Some(&prefix)))
        .await
    {
        Some(keys) => keys?,
        None => {
            return Err(Error::new(
                fence_core::ErrorKind::Timeout,
                format!("listing nodes: no answer within {timeout_ms} ms"),
            ))
        }
    };
    let mut nodes: Vec<String> = keys
        .iter()
        .filter_map(|k| k.as_str().strip_prefix(prefix.as_str())?.strip_prefix('/'))
        .filter_map(|rest| rest.strip_suffix(".json"))
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .map(str::to_owned)
        .collect();
    nodes.sort();
    nodes.dedup();
    Ok(nodes)
}

/// A view of every node listed under `nodes/` except this fence's own: one listing and each
/// lease read once (each request bounded by `timeout`) and folded into the fence's
/// [`Observer`](fence_core::runtime::Observer), so a claim made right after shares the read.
pub async fn read_members(fence: &Fence, timeout: Duration) -> Result<Members, Error> {
    let me = fence.ownership().node().to_owned();
    let nodes: Vec<String> = list_nodes(fence, timeout)
        .await?
        .into_iter()
        .filter(|n| *n != me)
        .collect();
    judge_nodes(fence, nodes, timeout).await
}

/// A view of `nodes` (each read once, bounded by `timeout`).
pub async fn judge_nodes(
    fence: &Fence,
    nodes: Vec<String>,
    timeout: Duration,
) -> Result<Members, Error> {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let seen: Vec<(String, Option<Observation>)> = futures::stream::iter(nodes)
        .map(|node| async move {
            let observer = fence.observer();
            let obs = match observer.observe(fence, &node, timeout_ms).await {
                Ok(o) => Some(o),
                Err(e) => {
                    tracing::debug!(node, error = %e, "lease read failed; last observation kept");
                    observer.last(&node)
                }
            };
            (node, obs)
        })
        .buffer_unordered(READS_IN_FLIGHT)
        .collect()
        .await;
    Ok(fold(fence, seen))
}

fn fold(fence: &Fence, seen: Vec<(String, Option<Observation>)>) -> Members {
    let now = fence_core::decide::Now {
        mono_ms: fence.clock().mono_ms(),
        wall_ms: fence.clock().wall_ms(),
    };
    let mut view = Members::default();
    for (node, obs) in seen {
        let verdict = obs.as_ref().map_or(
            Liveness::Live {
                until_mono: u64::MAX,
            },
            |o| o.judge(now, fence.config()),
        );
        let lease = obs.as_ref().and_then(|o| o.lease.as_ref());
        match verdict {
            Liveness::Dead => view.gone.push(node),
            Liveness::Live { until_mono } => {
                if lease.is_some() {
                    view.recheck_mono =
                        Some(view.recheck_mono.map_or(until_mono, |r| r.min(until_mono)));
                }
                view.live.push(Member {
                    node,
                    generation: lease.map(|l| l.record.generation.clone()),
                    addr: lease.map(|l| l.record.addr.clone()).unwrap_or_default(),
                })
            }
        }
    }
    view.live.sort_by(|a, b| a.node.cmp(&b.node));
    view.gone.sort();
    view
}
