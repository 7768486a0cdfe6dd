//! [`CountingStore`]: counts round trips per operation kind.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, Current, DeleteOutcome, Error, Key, PutOutcome,
    Stored, Version,
};

/// Round trips per operation kind, as counted by a [`CountingStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// `get` calls.
    pub get: u64,
    /// `put` calls.
    pub put: u64,
    /// `delete` and `delete_immutable` calls.
    pub delete: u64,
    /// `list` calls.
    pub list: u64,
}

impl OpCounts {
    /// All round trips.
    pub fn total(&self) -> u64 {
        self.get + self.put + self.delete + self.list
    }
}

impl fmt::Display for OpCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "get {} · put {} · delete {} · list {} (total {})",
            self.get,
            self.put,
            self.delete,
            self.list,
            self.total()
        )
    }
}

/// Body bytes moved since the last [`CountingStore::reset`]: read (bodies `get` returned) and
/// written (bodies `put` sent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BodyBytes {
    /// Bytes of the bodies `get` returned.
    pub read: u64,
    /// Bytes of the bodies `put` sent.
    pub written: u64,
}

impl BodyBytes {
    /// Both directions.
    pub fn total(&self) -> u64 {
        self.read + self.written
    }
}

/// A wrapper that counts every call (a round trip, whether it succeeds or fails) per
/// operation kind, and the body bytes moved.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence_core::{CasGuard, ConditionalStore, Key, MemoryStore};
/// use fence_testkit::CountingStore;
/// let store = CountingStore::new(Arc::new(MemoryStore::new()));
/// let key = Key::new("k").unwrap();
/// store.put(&key, "x".into(), CasGuard::Absent).await.unwrap();
/// store.get(&key).await.unwrap();
/// assert_eq!(store.bytes().total(), 2, "one byte written, one read");
/// let counts = store.reset();
/// assert_eq!((counts.get, counts.put, counts.total()), (1, 1, 2));
/// assert_eq!((store.counts().total(), store.bytes().total()), (0, 0));
/// # });
/// ```
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ConditionalStore>,
    get: AtomicU64,
    put: AtomicU64,
    delete: AtomicU64,
    list: AtomicU64,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    /// Requests to this key pass uncounted.
    ignored: Option<Key>,
}

impl CountingStore {
    /// Counts the calls made to `inner`.
    pub fn new(inner: Arc<dyn ConditionalStore>) -> Self {
        CountingStore {
            inner,
            get: AtomicU64::new(0),
            put: AtomicU64::new(0),
            delete: AtomicU64::new(0),
            list: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            ignored: None,
        }
    }

    /// The same wrapper, passing requests to `key` through uncounted: typically a fence's
    /// own lease key, so its renewals, which come due on a wall-clock schedule, never count
    /// in a claim or a write measured meanwhile.
    #[must_use]
    pub fn ignoring(mut self, key: Key) -> Self {
        self.ignored = Some(key);
        self
    }

    fn counts_key(&self, key: &Key) -> bool {
        self.ignored.as_ref() != Some(key)
    }

    /// The counts so far.
    pub fn counts(&self) -> OpCounts {
        OpCounts {
            get: self.get.load(Ordering::SeqCst),
            put: self.put.load(Ordering::SeqCst),
            delete: self.delete.load(Ordering::SeqCst),
            list: self.list.load(Ordering::SeqCst),
        }
    }

    /// The body bytes moved so far.
    pub fn bytes(&self) -> BodyBytes {
        BodyBytes {
            read: self.read_bytes.load(Ordering::SeqCst),
            written: self.written_bytes.load(Ordering::SeqCst),
        }
    }

    /// Returns the counts so far and starts again from zero (the body bytes too: read them
    /// with [`bytes`](Self::bytes) first).
    pub fn reset(&self) -> OpCounts {
        self.read_bytes.store(0, Ordering::SeqCst);
        self.written_bytes.store(0, Ordering::SeqCst);
        OpCounts {
            get: self.get.swap(0, Ordering::SeqCst),
            put: self.put.swap(0, Ordering::SeqCst),
            delete: self.delete.swap(0, Ordering::SeqCst),
            list: self.list.swap(0, Ordering::SeqCst),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

fn add(counter: &AtomicU64, len: usize) {
    counter.fetch_add(len as u64, Ordering::SeqCst);
}

#[async_trait]
impl ConditionalStore for CountingStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        if !self.counts_key(key) {
            return self.inner.get(key).await;
        }
        bump(&self.get);
        let found = self.inner.get(key).await;
        if let Ok(Some(stored)) = &found {
            add(&self.read_bytes, stored.body.len());
        }
        found
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        if self.counts_key(key) {
            bump(&self.put);
            add(&self.written_bytes, body.len());
        }
        self.inner.put(key, body, guard).await
    }
    async fn put_with_current(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        if self.counts_key(key) {
            bump(&self.put);
            add(&self.written_bytes, body.len());
        }
        self.inner.put_with_current(key, body, guard).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        if self.counts_key(key) {
            bump(&self.delete);
        }
        self.inner.delete(key, version).await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        if self.counts_key(key) {
            bump(&self.delete);
        }
        self.inner.delete_immutable(key).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        bump(&self.list);
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
