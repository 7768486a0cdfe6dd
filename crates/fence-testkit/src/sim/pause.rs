//! [`PausableStore`]: one process's path to the store, which can be frozen (a paused process
//! or a stalled network) and killed (a crashed process).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, Key, PutOutcome, Stored,
    Version,
};
use tokio::sync::Notify;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PathState {
    Open,
    Frozen,
    Dead,
}

/// A wrapper whose requests wait at a gate: open (pass through), frozen (wait until thawed)
/// or dead (wait forever). A request that has passed the gate is performed normally, so
/// freezing mid-flight models a process paused at any await point. Held requests are let
/// through in the order they arrived (a deterministic wake-up order, for the simulation).
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::{sync::Arc, time::Duration};
/// use fence_core::{ConditionalStore, Key, MemoryStore};
/// use fence_testkit::sim::PausableStore;
/// let path = PausableStore::new(Arc::new(MemoryStore::new()));
/// let key = Key::new("k").unwrap();
/// path.freeze();
/// let read = tokio::time::timeout(Duration::from_millis(20), path.get(&key)).await;
/// assert!(read.is_err(), "a frozen path does not answer");
/// path.thaw();
/// assert_eq!(path.get(&key).await.unwrap(), None);
/// # });
/// ```
#[derive(Debug)]
pub struct PausableStore {
    inner: Arc<dyn ConditionalStore>,
    state: Mutex<PathState>,
    changed: Notify,
}

impl PausableStore {
    /// An open path to `inner`.
    pub fn new(inner: Arc<dyn ConditionalStore>) -> Self {
        PausableStore {
            inner,
            state: Mutex::new(PathState::Open),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> PathState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, from: Option<PathState>, to: PathState) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if from.is_none_or(|f| *state == f) {
            *state = to;
            drop(state);
            self.changed.notify_waiters();
        }
    }

    /// Holds every later request (and every request not yet past the gate) until
    /// [`thaw`](Self::thaw). No effect on a dead path.
    pub fn freeze(&self) {
        self.set(Some(PathState::Open), PathState::Frozen);
    }

    /// Lets held requests through. No effect on a dead path.
    pub fn thaw(&self) {
        self.set(Some(PathState::Frozen), PathState::Open);
    }

    /// Kills the path for good: no request of this process reaches the store any more.
    pub fn kill(&self) {
        self.set(None, PathState::Dead);
    }

    /// Whether requests are being held (frozen or dead).
    pub fn is_blocked(&self) -> bool {
        self.state() != PathState::Open
    }

    async fn gate(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before looking, so a thaw in between is not missed.
            notified.as_mut().enable();
            if self.state() == PathState::Open {
                return;
            }
            notified.await;
        }
    }
}

#[async_trait]
impl ConditionalStore for PausableStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.gate().await;
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.gate().await;
        self.inner.put(key, body, guard).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.gate().await;
        self.inner.delete(key, version).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.gate().await;
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
