//! [`FaultyObjectStore`]: faults below an adapter over object_store, without a server.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::Entropy;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use crate::wire::{InFlight, Ledger, Upstream};

/// One fault of a [`FaultyObjectStore`]. Every one of them surfaces as
/// [`object_store::Error::Generic`](https://docs.rs/object_store/0.14/object_store/enum.Error.html#variant.Generic) (what a transport failure looks like through
/// object_store), so only the ledger knows whether the write took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFault {
    /// Fail before the request reaches the store: nothing applied.
    FailBeforeSend,
    /// Perform the request, then lose the answer: it may have applied.
    LoseAnswer,
    /// Fail at once, and perform the request this much later (it lands after the caller
    /// gave up; its condition is checked then).
    ApplyLate(Duration),
}

impl fmt::Display for StoreFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreFault::FailBeforeSend => f.write_str("failed before sending"),
            StoreFault::LoseAnswer => f.write_str("answer lost after the store answered"),
            StoreFault::ApplyLate(d) => write!(f, "applied {} ms late", d.as_millis()),
        }
    }
}

/// The error a [`FaultyObjectStore`] injects (the `source` of `object_store::Error::Generic`).
#[derive(Debug)]
pub struct InjectedFault {
    fault: StoreFault,
    /// What the store below answered, when it was asked.
    inner: Option<object_store::Error>,
}

impl InjectedFault {
    /// The fault.
    pub fn fault(&self) -> StoreFault {
        self.fault
    }
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "injected fault: {}", self.fault)?;
        if let Some(inner) = &self.inner {
            write!(f, " (the store had answered: {inner})")?;
        }
        Ok(())
    }
}

impl std::error::Error for InjectedFault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.as_ref().map(|e| e as _)
    }
}

fn injected(fault: StoreFault, inner: Option<object_store::Error>) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyObjectStore",
        source: Box::new(InjectedFault { fault, inner }),
    }
}

/// An [`ObjectStore`](https://docs.rs/object_store/0.14/object_store/trait.ObjectStore.html) wrapping another that injects seeded faults into `put_opts` (and
/// failures into `get_opts`), and records in a [`Ledger`] what the store below did with
/// every marked write ([`TOKEN_MARKER`](crate::wire::TOKEN_MARKER)). An adapter over
/// object_store is tested with it like one over HTTP is with a
/// [`FaultProxy`](crate::wire::FaultProxy): no server needed.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use object_store::{path::Path, ObjectStoreExt};
/// use fence_testkit::objstore::{FaultyObjectStore, StoreFault};
/// use fence_testkit::wire::Fate;
/// let store = FaultyObjectStore::over_memory(7);
/// store.script([StoreFault::LoseAnswer]);
/// let put = store.put(&Path::from("k"), "wire-op-1".into()).await;
/// assert!(matches!(put, Err(object_store::Error::Generic { .. })));
/// assert_eq!(store.ledger().fate("1"), Some(Fate::Applied), "it landed all the same");
/// # });
/// ```
#[derive(Debug)]
pub struct FaultyObjectStore {
    inner: Arc<dyn ObjectStore>,
    entropy: Entropy,
    write_rate: Mutex<f64>,
    read_rate: Mutex<f64>,
    late_by: Duration,
    scripted: Mutex<VecDeque<StoreFault>>,
    ledger: Arc<Ledger>,
    injected: AtomicU64,
}

impl FaultyObjectStore {
    /// Wraps `inner`, without faults until given a rate or a script; `seed` drives every
    /// random choice.
    pub fn new(inner: Arc<dyn ObjectStore>, seed: u64) -> Self {
        FaultyObjectStore {
            inner,
            entropy: Entropy::seeded(seed),
            write_rate: Mutex::new(0.0),
            read_rate: Mutex::new(0.0),
            late_by: Duration::from_millis(20),
            scripted: Mutex::new(VecDeque::new()),
            ledger: Ledger::new(),
            injected: AtomicU64::new(0),
        }
    }

    /// Wraps a fresh [`InMemory`](https://docs.rs/object_store/0.14/object_store/memory/struct.InMemory.html) store.
    pub fn over_memory(seed: u64) -> Self {
        FaultyObjectStore::new(Arc::new(InMemory::new()), seed)
    }

    /// The same store, giving a random fault (the three kinds equally likely) to each write
    /// with probability `p`, and a [`StoreFault::FailBeforeSend`] to each read with `p / 3`.
    #[must_use]
    pub fn with_fault_rate(self, p: f64) -> Self {
        self.set_fault_rate(p);
        self
    }

    /// Changes the fault rate (0 stops random faults).
    pub fn set_fault_rate(&self, p: f64) {
        *self.write_rate.lock().unwrap_or_else(|e| e.into_inner()) = p.clamp(0.0, 1.0);
        *self.read_rate.lock().unwrap_or_else(|e| e.into_inner()) = (p / 3.0).clamp(0.0, 1.0);
    }

    /// Faults for the next writes, one each, before any random one.
    pub fn script(&self, faults: impl IntoIterator<Item = StoreFault>) {
        let mut scripted = self.scripted.lock().unwrap_or_else(|e| e.into_inner());
        scripted.extend(faults);
    }

    /// What the store below did with each marked write.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    fn chance(&self, rate: &Mutex<f64>) -> bool {
        let p = *rate.lock().unwrap_or_else(|e| e.into_inner());
        p > 0.0 && (self.entropy.below(1_000_000) as f64) < p * 1_000_000.0
    }

    fn next_write_fault(&self) -> Option<StoreFault> {
        let scripted = self
            .scripted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        let fault = scripted.or_else(|| {
            self.chance(&self.write_rate)
                .then(|| match self.entropy.below(3) {
                    0 => StoreFault::FailBeforeSend,
                    1 => StoreFault::LoseAnswer,
                    _ => StoreFault::ApplyLate(self.late_by),
                })
        });
        if fault.is_some() {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        fault
    }
}

impl fmt::Display for FaultyObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyObjectStore({})", self.inner)
    }
}

/// Performs the put on `inner` and records its outcome.
async fn perform(
    inner: &dyn ObjectStore,
    location: &Path,
    payload: PutPayload,
    opts: PutOptions,
    sent: InFlight,
) -> object_store::Result<PutResult> {
    let answer = inner.put_opts(location, payload, opts).await;
    sent.finish(match &answer {
        Ok(_) => Upstream::Applied,
        Err(
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. },
        ) => Upstream::NotApplied,
        Err(e) => Upstream::Lost(e.to_string()),
    });
    answer
}

#[async_trait]
impl ObjectStore for FaultyObjectStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let fault = self.next_write_fault();
        let body: Vec<u8> = payload.iter().flat_map(|b| b.iter().copied()).collect();
        let label = fault.map_or("none".to_owned(), |f| f.to_string());
        let sent = self.ledger.begin(&body, &format!("put {location}"), &label);
        match fault {
            None => perform(&*self.inner, location, payload, opts, sent).await,
            Some(StoreFault::FailBeforeSend) => {
                sent.finish(Upstream::NotSent);
                Err(injected(StoreFault::FailBeforeSend, None))
            }
            Some(StoreFault::LoseAnswer) => {
                let inner = perform(&*self.inner, location, payload, opts, sent).await;
                Err(injected(StoreFault::LoseAnswer, inner.err()))
            }
            Some(StoreFault::ApplyLate(d)) => {
                let (inner, location) = (self.inner.clone(), location.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = perform(&*inner, &location, payload, opts, sent).await;
                });
                Err(injected(StoreFault::ApplyLate(d), None))
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if self.chance(&self.read_rate) {
            self.injected.fetch_add(1, Ordering::SeqCst);
            return Err(injected(StoreFault::FailBeforeSend, None));
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
