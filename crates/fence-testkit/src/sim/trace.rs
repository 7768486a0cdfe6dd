//! The simulation's event log: everything the properties are checked on, in the order it
//! happened (one thread, virtual time), and hashed for the determinism self-test.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::record::{DataBody, LeaseBody, OwnerBody};
use fence_core::{
    Capabilities, CasGuard, Clock, ConditionalStore, DeleteOutcome, Error, Key, PutOutcome, Stored,
    Version,
};

/// One recorded event. `t` is virtual milliseconds since the simulation started; `mono` is
/// the acting process's own monotonic clock (which stands still while it is suspended).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The driver did something (pause, thaw, crash, restart, end of chaos).
    Action {
        /// Virtual time.
        t: u64,
        /// What.
        what: String,
    },
    /// A lease write of `gen` entered the process's path to the store (after its anchor).
    LeaseIssued {
        /// Virtual time.
        t: u64,
        /// Node.
        node: String,
        /// Process generation.
        gen: String,
        /// The process's monotonic time.
        mono: u64,
    },
    /// The process said it holds its lease (`is_held() == true`).
    Held {
        /// Virtual time.
        t: u64,
        /// Node.
        node: String,
        /// Process generation.
        gen: String,
        /// The process's monotonic time, read just before asking.
        mono: u64,
    },
    /// A claim returned successfully.
    Claimed {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// Epoch claimed.
        epoch: u64,
        /// Node.
        node: String,
        /// Process generation.
        gen: String,
    },
    /// A fenced write is about to be sent with this payload.
    Attempt {
        /// Cell.
        cell: String,
        /// Payload (unique per attempt).
        payload: Bytes,
    },
    /// A fenced write was acknowledged.
    Acked {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// Epoch of the acknowledgement.
        epoch: u64,
        /// Node.
        node: String,
        /// Process generation.
        gen: String,
        /// Payload.
        payload: Bytes,
    },
    /// The store applied an owner record (`node: None` is a release).
    OwnerApplied {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// Owner.
        node: Option<String>,
        /// Epoch.
        epoch: u64,
    },
    /// The store applied a data head.
    DataApplied {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// Epoch in the header.
        epoch: u64,
        /// Writer in the header.
        node: String,
        /// Payload.
        payload: Bytes,
    },
    /// The store applied a node lease record.
    LeaseApplied {
        /// Virtual time.
        t: u64,
        /// Node.
        node: String,
        /// Generation in the record.
        gen: String,
        /// Wall-clock expiry in the record.
        expires_ms: u64,
    },
}

/// The shared, append-only log of one simulation run.
#[derive(Clone, Debug)]
pub struct Log {
    clock: Clock,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Log {
    /// A log stamping events with `clock`'s monotonic time.
    pub(crate) fn new(clock: Clock) -> Self {
        Log {
            clock,
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Virtual ms since the start.
    pub fn now(&self) -> u64 {
        self.clock.mono_ms()
    }

    /// Appends `make(now)`.
    pub(crate) fn push(&self, make: impl FnOnce(u64) -> Event) {
        let event = make(self.now());
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A hash of the whole trace: equal for equal traces (the determinism self-test).
pub fn trace_hash(events: &[Event]) -> u64 {
    let mut h = DefaultHasher::new();
    events.hash(&mut h);
    h.finish()
}

/// What a key of the ownership layout is about.
enum Kind<'a> {
    Owner(&'a str),
    Data(&'a str),
    Lease,
    Other,
}

fn kind(key: &Key) -> Kind<'_> {
    let s = key.as_str();
    if let Some(rest) = s.strip_prefix("cells/") {
        if let Some(cell) = rest.strip_suffix("/own.json") {
            return Kind::Owner(cell);
        }
        if let Some(cell) = rest.strip_suffix("/data") {
            return Kind::Data(cell);
        }
    }
    if s.starts_with("nodes/") {
        return Kind::Lease;
    }
    Kind::Other
}

/// Records every applied owner, data and lease write of the store underneath, in the order
/// the store applied them (the ground truth the properties are checked against).
#[derive(Debug)]
pub(crate) struct HistoryStore {
    inner: Arc<dyn ConditionalStore>,
    log: Log,
}

impl HistoryStore {
    pub(crate) fn new(inner: Arc<dyn ConditionalStore>, log: Log) -> Self {
        HistoryStore { inner, log }
    }

    fn record(&self, key: &Key, body: &Bytes) {
        match kind(key) {
            Kind::Owner(cell) => {
                if let Ok(b) = OwnerBody::decode(key, body) {
                    self.log.push(|t| Event::OwnerApplied {
                        t,
                        cell: cell.to_owned(),
                        node: b.node,
                        epoch: b.epoch,
                    });
                }
            }
            Kind::Data(cell) => {
                if let Ok(b) = DataBody::decode(key, body) {
                    self.log.push(|t| Event::DataApplied {
                        t,
                        cell: cell.to_owned(),
                        epoch: b.epoch,
                        node: b.node,
                        payload: b.payload,
                    });
                }
            }
            Kind::Lease => {
                if let Ok(b) = LeaseBody::decode(key, body) {
                    self.log.push(|t| Event::LeaseApplied {
                        t,
                        node: b.record.node,
                        gen: b.record.generation,
                        expires_ms: b.record.expires_ms,
                    });
                }
            }
            Kind::Other => {}
        }
    }
}

#[async_trait]
impl ConditionalStore for HistoryStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let outcome = self.inner.put(key, body.clone(), guard).await;
        if let Ok(PutOutcome::Applied(_)) = &outcome {
            self.record(key, &body);
        }
        outcome
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

/// One process's view: records when a lease write enters the process's path (before any
/// freeze), stamped with the process's own monotonic clock.
#[derive(Debug)]
pub(crate) struct LeaseProbe {
    inner: Arc<dyn ConditionalStore>,
    clock: Clock,
    log: Log,
}

impl LeaseProbe {
    pub(crate) fn new(inner: Arc<dyn ConditionalStore>, clock: Clock, log: Log) -> Self {
        LeaseProbe { inner, clock, log }
    }
}

#[async_trait]
impl ConditionalStore for LeaseProbe {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        if let Kind::Lease = kind(key) {
            if let Ok(b) = LeaseBody::decode(key, &body) {
                let mono = self.clock.mono_ms();
                self.log.push(|t| Event::LeaseIssued {
                    t,
                    node: b.record.node,
                    gen: b.record.generation,
                    mono,
                });
            }
        }
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
