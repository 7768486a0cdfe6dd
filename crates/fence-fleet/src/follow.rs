//! Watching a cell's owner without claiming it, and reading many cells' owners at once.

use std::collections::BTreeMap;
use std::time::Duration;

use fence_core::record::CellHead;
use fence_core::runtime::Fence;
use fence_core::{Error, ErrorKind};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Head reads in flight at once in [`owners`].
const READS_IN_FLIGHT: usize = 32;

/// A cell's owner as a reader of its head sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The owning node, `None` when released or when the cell has no head.
    pub node: Option<String>,
    /// The head's epoch (0 when there is no head).
    pub epoch: u64,
}

impl Owner {
    fn of(head: Option<CellHead>) -> Owner {
        match head {
            Some(h) => Owner {
                node: h.node,
                epoch: h.epoch,
            },
            None => Owner {
                node: None,
                epoch: 0,
            },
        }
    }
}

/// Follows one cell's owner: its head is read every `every`, and each change is published.
/// Nothing is claimed or written. Dropping it stops the reads.
#[derive(Debug)]
pub struct Follow {
    rx: watch::Receiver<Option<Owner>>,
    task: JoinHandle<()>,
}

impl Follow {
    /// The owner last read (`None` before the first read answered).
    pub fn current(&self) -> Option<Owner> {
        self.rx.borrow().clone()
    }

    /// Waits for the next owner (another node, a new epoch, a release) and returns it
    /// (`None` only if the follower's task has ended). Cancellation-safe.
    pub async fn changed(&mut self) -> Option<Owner> {
        self.rx.changed().await.ok()?;
        self.rx.borrow_and_update().clone()
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Follows `cell` through `fence`'s store, reading its head every `every` (failed reads are
/// retried at the next tick).
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::{sync::Arc, time::Duration};
/// use fence::{Fence, MemoryStore};
/// let store = Arc::new(MemoryStore::new());
/// let a = Fence::builder(store.clone(), "a").build().unwrap().acquire().await.unwrap();
/// let watcher = Fence::builder(store, "w").build().unwrap();
/// let mut f = fence_fleet::follow(&watcher, "orders", Duration::from_millis(20));
/// let _claim = a.claim("orders").await.unwrap();
/// let owner = loop {
///     let o = f.changed().await.unwrap();
///     if o.node.is_some() { break o; }
/// };
/// assert_eq!((owner.node.as_deref(), owner.epoch), (Some("a"), 1));
/// # });
/// ```
pub fn follow(fence: &Fence, cell: &str, every: Duration) -> Follow {
    let (tx, rx) = watch::channel(None);
    let fence = fence.clone();
    let cell = cell.to_owned();
    // A read that hangs is given up after the longer of `every` and the fence's longest
    // attempt timeout, so one stuck request never stops the follow.
    let bound = every.max(Duration::from_millis(fence.config().attempt_max_ms));
    let task = tokio::spawn(async move {
        loop {
            let read = tokio::time::timeout(bound, fence.ownership().read_head(&cell)).await;
            if let Ok(Ok(head)) = read {
                let owner = Owner::of(head.map(|(h, _)| h));
                tx.send_if_modified(|cur| {
                    let changed = cur.as_ref() != Some(&owner);
                    if changed {
                        *cur = Some(owner);
                    }
                    changed
                });
            }
            fence.clock().sleep(every).await;
        }
    });
    Follow { rx, task }
}

/// The owner of each of `cells`, from one read of each head (a few dozen in flight, each
/// bounded by the fence's longest attempt timeout): the batch form of [`follow`]. Nothing is
/// claimed or written. A read that failed or got no answer is that cell's error.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence::{Fence, MemoryStore};
/// let store = Arc::new(MemoryStore::new());
/// let a = Fence::builder(store.clone(), "a").build().unwrap().acquire().await.unwrap();
/// let _claim = a.claim("orders").await.unwrap();
/// let reader = Fence::builder(store, "r").build().unwrap();
/// let found = fence_fleet::owners(&reader, ["orders", "stock"]).await;
/// assert_eq!(found["orders"].as_ref().unwrap().node.as_deref(), Some("a"));
/// assert_eq!(found["stock"].as_ref().unwrap().node, None);
/// # });
/// ```
pub async fn owners<I, S>(fence: &Fence, cells: I) -> BTreeMap<String, Result<Owner, Error>>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let cells = cells.into_iter().map(Into::into).collect();
    let bound = fence.config().attempt_max_ms;
    read_heads(fence, cells, bound, READS_IN_FLIGHT)
        .await
        .into_iter()
        .map(|(cell, head)| (cell, head.map(Owner::of)))
        .collect()
}

/// One read of each of `cells`' heads, `in_flight` at once, each bounded by `bound_ms`
/// ([`ErrorKind::Timeout`], not committed, when no answer came).
pub(crate) async fn read_heads(
    fence: &Fence,
    cells: Vec<String>,
    bound_ms: u64,
    in_flight: usize,
) -> Vec<(String, Result<Option<CellHead>, Error>)> {
    futures::stream::iter(cells)
        .map(|cell| async move {
            let read = fence.ownership().read_head(&cell);
            let head = match fence.clock().timeout(bound_ms, read).await {
                Some(Ok(head)) => Ok(head.map(|(h, _)| h)),
                Some(Err(e)) => Err(e),
                None => Err(Error::new(
                    ErrorKind::Timeout,
                    format!("cell {cell}: no answer to the head read within {bound_ms} ms"),
                )
                .not_committed()),
            };
            (cell, head)
        })
        .buffer_unordered(in_flight.max(1))
        .collect()
        .await
}

/// The cells among `cells` whose head names this fence's node as owner, sorted: what a
/// restarting process under the same node id would resume or claim back (a
/// [`Fleet`](crate::Fleet) does so itself at start). One read per cell, as in [`owners`];
/// any failed read is the error, since the list would be incomplete.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence::{Fence, MemoryStore};
/// let store = Arc::new(MemoryStore::new());
/// let fence = Fence::builder(store, "a").build().unwrap();
/// let lease = fence.acquire().await.unwrap();
/// let _claim = lease.claim("orders").await.unwrap();
/// let mine = fence_fleet::named_mine(&fence, ["orders", "stock"]).await.unwrap();
/// assert_eq!(mine, ["orders"]);
/// # });
/// ```
pub async fn named_mine<I, S>(fence: &Fence, cells: I) -> Result<Vec<String>, Error>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let me = fence.ownership().node().to_owned();
    let mut mine = Vec::new();
    for (cell, owner) in owners(fence, cells).await {
        if owner?.node.as_deref() == Some(me.as_str()) {
            mine.push(cell);
        }
    }
    Ok(mine)
}
