//! The simulation's event log: everything the properties are checked on, in the order it
//! happened (one thread, virtual time), and hashed for the determinism self-test.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::record::{CellHead, CellPayload, LeaseBody};
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
    /// A process's monotonic clock was stopped (a suspended machine): from here on its own
    /// judgement of its authority is wrong by construction, and only the store fences it.
    Suspended {
        /// Virtual time.
        t: u64,
        /// The process (`node#incarnation`).
        process: String,
    },
    /// A lease write of `gen` entered the process's path to the store (after its anchor).
    LeaseIssued {
        /// Virtual time.
        t: u64,
        /// Node.
        node: String,
        /// Process generation.
        gen: String,
        /// The write's identity.
        nonce: String,
        /// The process's monotonic time.
        mono: u64,
    },
    /// The process saw its lease end (fenced or expired), with the status it read.
    LeaseLost {
        /// Virtual time.
        t: u64,
        /// Node.
        node: String,
        /// Process generation.
        gen: String,
        /// The status, in words.
        status: String,
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
    /// The process holds a claim of `cell` at `epoch` and its lease says it may act now: it
    /// believes it owns the cell.
    Believes {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// Epoch of its claim.
        epoch: u64,
        /// Node.
        node: String,
        /// Lease generation.
        gen: String,
        /// The process (`node#incarnation`).
        process: String,
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
    /// A resume returned successfully: the process acts on the cell at the epoch its head
    /// already had (`claim_or_resume` finding a head of a generation it vouches for — its
    /// own current one after a hand-off to it or after closing its own claim, or its own
    /// earlier one after it closed every claim of that lease).
    Resumed {
        /// Virtual time.
        t: u64,
        /// Virtual time when the resume was asked for: its seal must land after this.
        since: u64,
        /// Cell.
        cell: String,
        /// Epoch resumed.
        epoch: u64,
        /// Node.
        node: String,
        /// Process generation (the resumer's).
        gen: String,
        /// The generations it vouched for.
        vouched: Vec<String>,
    },
    /// A fenced write is about to be made with this payload.
    Attempt {
        /// Cell.
        cell: String,
        /// Payload (unique per attempt).
        payload: Bytes,
        /// Process generation.
        gen: String,
        /// The process's monotonic time when it asked.
        mono: u64,
        /// Made through a claim (`CellClaim::write`), whose lease must still be held when
        /// it is sent; `false`: a keeperless co-writer's (`update_cell`).
        by_claim: bool,
    },
    /// A read of a cell head entered the process's path to the store.
    HeadRead {
        /// Virtual time.
        t: u64,
        /// Node.
        node: String,
        /// Cell.
        cell: String,
        /// The process's monotonic time.
        mono: u64,
    },
    /// A cell head write carrying data entered the process's path to the store (each send
    /// of it, a re-send included).
    HeadSent {
        /// Virtual time.
        t: u64,
        /// The lease generation the head names as its writer.
        gen: Option<String>,
        /// The data it carries (inline, or its payload object's bytes).
        payload: Bytes,
        /// The process's monotonic time.
        mono: u64,
    },
    /// A fenced write was refused with `Commit::NotCommitted`: it must never land.
    Refused {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// Payload.
        payload: Bytes,
        /// The error kind, in words.
        kind: String,
    },
    /// A reader got an error it should never get from a consistent store (a corrupt cell).
    ReadFailed {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// The error, in words.
        error: String,
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
    /// The store applied a cell head (`node: None` is a release).
    HeadApplied {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// Owner.
        node: Option<String>,
        /// Epoch.
        epoch: u64,
        /// The lease generation the head names as its writer.
        gen: Option<String>,
        /// The payload the head refers to (inline or its payload object's bytes).
        payload: Bytes,
        /// The name of the payload object it points at, if its payload is one.
        blob: Option<String>,
    },
    /// The store deleted a payload object of `cell` (payload collection, or a write's
    /// replaced or unused object).
    BlobDeleted {
        /// Virtual time.
        t: u64,
        /// Cell.
        cell: String,
        /// The object's name.
        name: String,
    },
    /// The store applied a node lease record.
    LeaseApplied {
        /// Virtual time.
        t: u64,
        /// Node.
        node: String,
        /// Generation in the record.
        gen: String,
        /// The write's identity.
        nonce: String,
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
    Head(&'a str),
    /// A payload object: its cell and name.
    Blob(&'a str, &'a str),
    Lease,
    Other,
}

fn kind(key: &Key) -> Kind<'_> {
    let s = key.as_str();
    if let Some(rest) = s.strip_prefix("cells/") {
        if let Some(cell) = rest.strip_suffix("/own.json") {
            return Kind::Head(cell);
        }
        if let Some((cell, name)) = rest.split_once("/blobs/") {
            return Kind::Blob(cell, name);
        }
    }
    if s.starts_with("nodes/") {
        return Kind::Lease;
    }
    Kind::Other
}

/// The key of payload object `name` of the cell whose head is `head_key`.
fn blob_key(head_key: &Key, name: &str) -> Option<Key> {
    let key = head_key
        .as_str()
        .replace("/own.json", &format!("/blobs/{name}"));
    Key::new(key).ok()
}

/// Records every applied head and lease write of the store underneath, in the order the
/// store applied them (the ground truth the properties are checked against). Payload objects
/// are remembered so a head that points at one is recorded with its bytes.
#[derive(Debug)]
pub(crate) struct HistoryStore {
    inner: Arc<dyn ConditionalStore>,
    log: Log,
    blobs: Mutex<HashMap<Key, Bytes>>,
}

impl HistoryStore {
    pub(crate) fn new(inner: Arc<dyn ConditionalStore>, log: Log) -> Self {
        HistoryStore {
            inner,
            log,
            blobs: Mutex::new(HashMap::new()),
        }
    }

    fn payload(&self, key: &Key, cell: &str, head: &CellHead) -> Bytes {
        match &head.payload {
            CellPayload::Empty => Bytes::new(),
            CellPayload::Inline(b) => b.clone(),
            CellPayload::Blob(blob) => {
                let blobs = self.blobs.lock().unwrap_or_else(|p| p.into_inner());
                blob_key(key, &blob.name)
                    .and_then(|k| blobs.get(&k).cloned())
                    .unwrap_or_else(|| Bytes::from(format!("<missing payload object of {cell}>")))
            }
        }
    }

    fn record(&self, key: &Key, body: &Bytes) {
        match kind(key) {
            Kind::Head(cell) => {
                if let Ok(h) = CellHead::decode(key, body) {
                    let payload = self.payload(key, cell, &h);
                    let blob = h.payload.blob().map(|b| b.name.clone());
                    self.log.push(|t| Event::HeadApplied {
                        t,
                        cell: cell.to_owned(),
                        node: h.node,
                        epoch: h.epoch,
                        gen: h.generation,
                        payload,
                        blob,
                    });
                }
            }
            Kind::Blob(..) => {
                let mut blobs = self.blobs.lock().unwrap_or_else(|p| p.into_inner());
                blobs.insert(key.clone(), body.clone());
            }
            Kind::Lease => {
                if let Ok(b) = LeaseBody::decode(key, body) {
                    self.log.push(|t| Event::LeaseApplied {
                        t,
                        node: b.record.node,
                        gen: b.record.generation,
                        nonce: b.nonce,
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
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.inner.delete_immutable(key).await?;
        if let Kind::Blob(cell, name) = kind(key) {
            let (cell, name) = (cell.to_owned(), name.to_owned());
            self.log.push(|t| Event::BlobDeleted { t, cell, name });
        }
        Ok(())
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// One process's view: records when a lease write, a head read and a head write carrying
/// data enter the process's path (before any freeze), stamped with the process's own
/// monotonic clock.
#[derive(Debug)]
pub(crate) struct PathProbe {
    inner: Arc<dyn ConditionalStore>,
    clock: Clock,
    log: Log,
    node: String,
    /// The payload objects this process created, by key: a head pointing at one is
    /// recorded with its bytes.
    blobs: Mutex<HashMap<Key, Bytes>>,
}

impl PathProbe {
    pub(crate) fn new(
        inner: Arc<dyn ConditionalStore>,
        clock: Clock,
        log: Log,
        node: String,
    ) -> Self {
        PathProbe {
            inner,
            clock,
            log,
            node,
            blobs: Mutex::new(HashMap::new()),
        }
    }

    /// The data a head write sent under `key` carries, if any.
    fn head_data(&self, key: &Key, head: &CellHead) -> Option<Bytes> {
        match &head.payload {
            CellPayload::Empty => None,
            CellPayload::Inline(b) => Some(b.clone()),
            CellPayload::Blob(blob) => {
                let blobs = self.blobs.lock().unwrap_or_else(|p| p.into_inner());
                blob_key(key, &blob.name).and_then(|k| blobs.get(&k).cloned())
            }
        }
    }

    fn sent(&self, key: &Key, body: &Bytes) {
        let mono = self.clock.mono_ms();
        match kind(key) {
            Kind::Lease => {
                if let Ok(b) = LeaseBody::decode(key, body) {
                    self.log.push(|t| Event::LeaseIssued {
                        t,
                        node: b.record.node,
                        gen: b.record.generation,
                        nonce: b.nonce,
                        mono,
                    });
                }
            }
            Kind::Head(_) => {
                let Ok(head) = CellHead::decode(key, body) else {
                    return;
                };
                if let Some(payload) = self.head_data(key, &head) {
                    let gen = head.generation;
                    self.log.push(|t| Event::HeadSent {
                        t,
                        gen,
                        payload,
                        mono,
                    });
                }
            }
            Kind::Blob(..) => {
                let mut blobs = self.blobs.lock().unwrap_or_else(|p| p.into_inner());
                blobs.insert(key.clone(), body.clone());
            }
            Kind::Other => {}
        }
    }
}

#[async_trait]
impl ConditionalStore for PathProbe {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        if let Kind::Head(cell) = kind(key) {
            let (node, cell, mono) = (self.node.clone(), cell.to_owned(), self.clock.mono_ms());
            self.log.push(|t| Event::HeadRead {
                t,
                node,
                cell,
                mono,
            });
        }
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.sent(key, &body);
        self.inner.put(key, body, guard).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.inner.delete_immutable(key).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
