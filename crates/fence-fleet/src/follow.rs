//! Watching a cell's owner without claiming it.

use std::time::Duration;

use fence_core::runtime::Fence;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A cell's owner as a reader of its head sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The owning node, `None` when released or when the cell has no head.
    pub node: Option<String>,
    /// The head's epoch (0 when there is no head).
    pub epoch: u64,
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
/// use fence_core::{runtime::Fence, MemoryStore};
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
                let owner = match head {
                    Some((h, _)) => Owner {
                        node: h.node,
                        epoch: h.epoch,
                    },
                    None => Owner {
                        node: None,
                        epoch: 0,
                    },
                };
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
