//! [`Link`]: one demo node's path to the store, which the demo can stall (a suspended machine
//! whose requests hang) and release again.
//!
//! The testkit's simulation has a richer pausable path (kill, a deterministic wake-up order);
//! the `fence` binary does not link the test kit, so the demo keeps this small gate of its own.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, Key, PutOutcome, Stored,
    Version,
};
use tokio::sync::watch;

/// A store wrapper whose requests wait while the link is frozen. A request already past the
/// gate completes normally, as on a machine that stopped mid-request.
#[derive(Debug)]
pub(crate) struct Link {
    inner: Arc<dyn ConditionalStore>,
    open: watch::Sender<bool>,
}

impl Link {
    /// An open link to `inner`.
    pub(crate) fn new(inner: Arc<dyn ConditionalStore>) -> Self {
        Link {
            inner,
            open: watch::Sender::new(true),
        }
    }

    /// Holds every later request until [`thaw`](Self::thaw).
    pub(crate) fn freeze(&self) {
        self.open.send_replace(false);
    }

    /// Lets held requests through.
    pub(crate) fn thaw(&self) {
        self.open.send_replace(true);
    }

    /// Whether requests are being held.
    pub(crate) fn is_blocked(&self) -> bool {
        !*self.open.borrow()
    }

    async fn gate(&self) {
        let mut open = self.open.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = open.wait_for(|open| *open).await;
    }
}

#[async_trait]
impl ConditionalStore for Link {
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
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.gate().await;
        self.inner.delete_immutable(key).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.gate().await;
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fence_core::MemoryStore;
    use std::time::Duration;

    #[tokio::test]
    async fn a_frozen_link_holds_requests_until_thawed() {
        let link = Arc::new(Link::new(Arc::new(MemoryStore::new())));
        let key = Key::new("k").unwrap();
        link.freeze();
        assert!(link.is_blocked());
        let held = tokio::spawn({
            let (link, key) = (link.clone(), key.clone());
            async move { link.put(&key, "x".into(), CasGuard::Absent).await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!held.is_finished(), "a frozen link does not answer");
        link.thaw();
        assert!(matches!(held.await.unwrap(), Ok(PutOutcome::Applied(_))));
        assert!(!link.is_blocked());
        assert!(link.get(&key).await.unwrap().is_some());
    }
}
