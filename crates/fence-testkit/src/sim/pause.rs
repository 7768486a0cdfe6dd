//! [`PausableStore`]: one process's path to the store, which can be frozen (a paused process
//! or a stalled network) and killed (a crashed process).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, Key, PutOutcome, Stop, Stored,
    Version,
};
use tokio::sync::Notify;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PathState {
    Open,
    Frozen,
    /// Frozen, and answers of requests already sent are held too (a stopped process).
    Stopped,
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
    /// Hold the process's next lease write up for this many ms while the process is stopped;
    /// it lands just before the process runs again.
    trap: Mutex<Option<(u64, Arc<Stop>)>>,
    /// Stop the process for this many ms right after its next read of a lease record other
    /// than this one was served.
    read_trap: Mutex<Option<(Key, u64, Arc<Stop>)>>,
}

impl PausableStore {
    /// An open path to `inner`.
    pub fn new(inner: Arc<dyn ConditionalStore>) -> Self {
        PausableStore {
            inner,
            state: Mutex::new(PathState::Open),
            changed: Notify::new(),
            trap: Mutex::new(None),
            read_trap: Mutex::new(None),
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

    /// Like [`freeze`](Self::freeze), and the answers of requests already past the gate are
    /// held too until [`thaw`](Self::thaw): the store applied them, the stopped process has
    /// not seen it yet.
    pub fn stop(&self) {
        self.set(Some(PathState::Open), PathState::Stopped);
    }

    /// Arms a trap: the next lease write (`nodes/…`) is held up in the network for `ms`
    /// while the process stops (this path and `stop`); it lands then, and the process runs
    /// again a moment later and finds its answer — a renewal that lands after its prior
    /// authority ended, answered to a process that was not running to time it out.
    pub fn stop_around_next_lease_write(&self, ms: u64, stop: Arc<Stop>) {
        *self.trap.lock().unwrap_or_else(|p| p.into_inner()) = Some((ms, stop));
    }

    /// Arms a trap: the next read of a lease record other than `own` is served, and the
    /// process stops (this path and `stop`) for `ms` before its answer arrives — a peer's
    /// confirming read whose answer travels back while the holder's renewal lands.
    pub fn stop_around_next_peer_lease_read(&self, own: Key, ms: u64, stop: Arc<Stop>) {
        *self.read_trap.lock().unwrap_or_else(|p| p.into_inner()) = Some((own, ms, stop));
    }

    /// Disarms both traps if they have not fired (the simulation's faults end).
    pub fn disarm(&self) {
        *self.trap.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.read_trap.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn take_read_trap(&self, key: &Key) -> Option<(u64, Arc<Stop>)> {
        if !key.as_str().starts_with("nodes/") {
            return None;
        }
        let mut trap = self.read_trap.lock().unwrap_or_else(|p| p.into_inner());
        if trap.as_ref().is_none_or(|(own, _, _)| own == key) {
            return None;
        }
        trap.take().map(|(_, ms, stop)| (ms, stop))
    }

    async fn trapped_get(
        &self,
        key: &Key,
        (ms, stop): (u64, Arc<Stop>),
    ) -> Result<Option<Stored>, Error> {
        let r = self.inner.get(key).await;
        let _stopped = self.stop_process(stop);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        r
    }

    fn take_trap(&self, key: &Key) -> Option<(u64, Arc<Stop>)> {
        if !key.as_str().starts_with("nodes/") {
            return None;
        }
        self.trap.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    async fn trapped_put(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
        (ms, stop): (u64, Arc<Stop>),
    ) -> Result<PutOutcome, Error> {
        let _stopped = self.stop_process(stop);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        let r = self.inner.put(key, body, guard).await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        r
    }

    /// Stops this path and the process until the guard is dropped — also when the caller
    /// gives up on the request meanwhile (an application's own deadline runs on the runtime's
    /// timers, which a stop does not hold).
    fn stop_process(&self, stop: Arc<Stop>) -> Stopped<'_> {
        self.stop();
        stop.stop();
        Stopped { path: self, stop }
    }

    /// Lets held requests (and held answers) through. No effect on a dead path.
    pub fn thaw(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, PathState::Frozen | PathState::Stopped) {
            *state = PathState::Open;
            drop(state);
            self.changed.notify_waiters();
        }
    }

    /// Kills the path for good: no request of this process reaches the store any more.
    pub fn kill(&self) {
        self.set(None, PathState::Dead);
    }

    /// Whether requests are being held (frozen or dead).
    pub fn is_blocked(&self) -> bool {
        self.state() != PathState::Open
    }

    /// Holds an answer while the process is stopped (or forever, once dead).
    async fn answer<T>(&self, answer: T) -> T {
        if matches!(self.state(), PathState::Stopped | PathState::Dead) {
            self.gate().await;
        }
        answer
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

/// A trap's stop of the process: lifted when dropped.
struct Stopped<'a> {
    path: &'a PausableStore,
    stop: Arc<Stop>,
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.stop.resume();
        // Undo only our own stop: a thaw or a kill meanwhile stands.
        self.path.set(Some(PathState::Stopped), PathState::Open);
    }
}

#[async_trait]
impl ConditionalStore for PausableStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.gate().await;
        if let Some(trap) = self.take_read_trap(key) {
            return self.trapped_get(key, trap).await;
        }
        let r = self.inner.get(key).await;
        self.answer(r).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.gate().await;
        if let Some(trap) = self.take_trap(key) {
            return self.trapped_put(key, body, guard, trap).await;
        }
        let r = self.inner.put(key, body, guard).await;
        self.answer(r).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.gate().await;
        let r = self.inner.delete(key, version).await;
        self.answer(r).await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.gate().await;
        let r = self.inner.delete_immutable(key).await;
        self.answer(r).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.gate().await;
        let r = self.inner.list(prefix).await;
        self.answer(r).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
