//! [`FaultyStore`]: a seeded wrapper that injects the failures real stores and networks produce.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, Commit, ConditionalStore, DeleteOutcome, Entropy, Error, ErrorKind,
    Key, PutOutcome, Stored, Version,
};

/// The kind of a store operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `get`.
    Get,
    /// `put`.
    Put,
    /// `delete`.
    Delete,
    /// `list`.
    List,
}

/// One injected fault. Writes (`put`, `delete`) take them literally; reads treat the
/// "applied" variants as "performed, answer lost".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail before sending: [`ErrorKind::Unavailable`], [`Commit::NotCommitted`], nothing
    /// applied.
    FailBeforeSend,
    /// The request never reached the store but the caller cannot know:
    /// [`ErrorKind::Timeout`], [`Commit::Ambiguous`], nothing applied.
    LoseRequest,
    /// Apply the request, then lose the answer: [`ErrorKind::Timeout`],
    /// [`Commit::Ambiguous`], applied. When the store itself failed the request, its error
    /// is named in the message and chained as the source.
    LoseAnswer,
    /// Answer a 409-style conditional conflict: [`ErrorKind::Conflict`],
    /// [`Commit::NotCommitted`], nothing applied.
    Conflict,
    /// Apply, then answer a 5xx: [`ErrorKind::Unavailable`], [`Commit::Ambiguous`], applied
    /// (the store's own error, if it failed, named and chained as with `LoseAnswer`).
    ServerErrorAfterApply,
    /// Wait this long, then perform the request normally.
    Latency(Duration),
    /// Never answer (until the future is dropped): callers must use timeouts. Nothing applied.
    Hang,
}

/// Probabilities (each in `0.0..=1.0`, checked in this order) of random faults per operation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RandomFaults {
    /// [`Fault::FailBeforeSend`].
    pub fail_before_send: f64,
    /// [`Fault::LoseRequest`].
    pub lose_request: f64,
    /// [`Fault::LoseAnswer`].
    pub lose_answer: f64,
    /// [`Fault::Conflict`].
    pub conflict: f64,
    /// [`Fault::ServerErrorAfterApply`].
    pub server_error_after_apply: f64,
    /// [`Fault::Hang`].
    pub hang: f64,
    /// [`Fault::Latency`] of a uniformly random duration up to `latency_max`.
    pub latency: f64,
    /// The largest random latency.
    pub latency_max: Duration,
}

#[derive(Debug, Default)]
struct Plan {
    scripted: HashMap<OpKind, VecDeque<Fault>>,
    random: HashMap<OpKind, RandomFaults>,
}

/// A seeded wrapper around a store that injects [`Fault`]s: scripted (the next operations of
/// a kind, in order) and/or random (per kind, with probabilities drawn from the seed).
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence_core::{CasGuard, Commit, ConditionalStore, Key, MemoryStore};
/// use fence_testkit::{Fault, FaultyStore, OpKind};
/// let store = FaultyStore::new(Arc::new(MemoryStore::new()), 7);
/// let key = Key::new("k").unwrap();
/// store.script(OpKind::Put, [Fault::LoseAnswer]);
/// let err = store.put(&key, "x".into(), CasGuard::Absent).await.unwrap_err();
/// assert_eq!(err.commit(), Commit::Ambiguous);
/// assert!(store.get(&key).await.unwrap().is_some(), "the write landed");
/// # });
/// ```
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ConditionalStore>,
    entropy: Entropy,
    plan: Mutex<Plan>,
    injected: AtomicU64,
}

impl FaultyStore {
    /// Wraps `inner`; `seed` drives every random choice.
    pub fn new(inner: Arc<dyn ConditionalStore>, seed: u64) -> Self {
        FaultyStore {
            inner,
            entropy: Entropy::seeded(seed),
            plan: Mutex::new(Plan::default()),
            injected: AtomicU64::new(0),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn ConditionalStore> {
        &self.inner
    }

    fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Scripts `faults` for the next operations of `kind`, one each, after any already
    /// scripted.
    pub fn script(&self, kind: OpKind, faults: impl IntoIterator<Item = Fault>) {
        self.plan().scripted.entry(kind).or_default().extend(faults);
    }

    /// Injects random faults into every later operation of `kind` that has no scripted fault.
    pub fn set_random(&self, kind: OpKind, faults: RandomFaults) {
        self.plan().random.insert(kind, faults);
    }

    /// Removes every scripted and random fault.
    pub fn clear(&self) {
        *self.plan() = Plan::default();
    }

    /// How many faults (latency included) were injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// Scripted faults of `kind` not yet consumed.
    pub fn pending(&self, kind: OpKind) -> usize {
        self.plan().scripted.get(&kind).map_or(0, VecDeque::len)
    }

    fn next_fault(&self, kind: OpKind) -> Option<Fault> {
        let mut plan = self.plan();
        let fault = match plan.scripted.get_mut(&kind).and_then(VecDeque::pop_front) {
            Some(f) => Some(f),
            None => plan.random.get(&kind).and_then(|r| self.draw(r)),
        };
        if fault.is_some() {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        fault
    }

    fn chance(&self, p: f64) -> bool {
        p > 0.0 && (self.entropy.below(1_000_000) as f64) < p * 1_000_000.0
    }

    fn draw(&self, r: &RandomFaults) -> Option<Fault> {
        let table = [
            (r.fail_before_send, Fault::FailBeforeSend),
            (r.lose_request, Fault::LoseRequest),
            (r.lose_answer, Fault::LoseAnswer),
            (r.conflict, Fault::Conflict),
            (r.server_error_after_apply, Fault::ServerErrorAfterApply),
            (r.hang, Fault::Hang),
        ];
        if let Some((_, f)) = table.iter().find(|(p, _)| self.chance(*p)) {
            return Some(*f);
        }
        if self.chance(r.latency) {
            let max = r.latency_max.as_micros() as u64;
            return Some(Fault::Latency(Duration::from_micros(
                self.entropy.below(max + 1),
            )));
        }
        None
    }

    /// Runs `op` under the next fault of `kind`.
    async fn faulted<T>(
        &self,
        kind: OpKind,
        key: Option<&Key>,
        op: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let Some(fault) = self.next_fault(kind) else {
            return op.await;
        };
        let injected = |k: ErrorKind, commit: Commit, what: &str| {
            let e = Error::new(k, format!("injected fault: {what}")).with_commit(commit);
            match key {
                Some(key) => e.with_key(key),
                None => e,
            }
        };
        // After a performed request: the store's own error, if it failed, is named and chained.
        let lost = |k: ErrorKind, what: &str, answer: Result<T, Error>| match answer {
            Ok(_) => injected(k, Commit::Ambiguous, what),
            Err(inner) => injected(
                k,
                Commit::Ambiguous,
                &format!("{what}; the store had answered: {inner}"),
            )
            .with_source(inner),
        };
        match fault {
            Fault::FailBeforeSend => Err(injected(
                ErrorKind::Unavailable,
                Commit::NotCommitted,
                "failed before sending",
            )),
            Fault::LoseRequest => Err(injected(
                ErrorKind::Timeout,
                Commit::Ambiguous,
                "request lost in flight",
            )),
            Fault::Conflict => Err(injected(
                ErrorKind::Conflict,
                Commit::NotCommitted,
                "409 conditional request conflict",
            )),
            Fault::LoseAnswer => Err(lost(ErrorKind::Timeout, "answer lost", op.await)),
            Fault::ServerErrorAfterApply => {
                Err(lost(ErrorKind::Unavailable, "503 after applying", op.await))
            }
            Fault::Latency(d) => {
                tokio::time::sleep(d).await;
                op.await
            }
            Fault::Hang => std::future::pending().await,
        }
    }
}

#[async_trait]
impl ConditionalStore for FaultyStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.faulted(OpKind::Get, Some(key), self.inner.get(key))
            .await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.faulted(OpKind::Put, Some(key), self.inner.put(key, body, guard))
            .await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.faulted(OpKind::Delete, Some(key), self.inner.delete(key, version))
            .await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.faulted(OpKind::Delete, Some(key), self.inner.delete_immutable(key))
            .await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.faulted(OpKind::List, prefix, self.inner.list(prefix))
            .await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
