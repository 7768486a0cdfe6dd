//! Deliberately broken stores: the suite and the probe must catch every one of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::store::delete_unsupported;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key, PutOutcome,
    Stored, Version,
};

/// How a [`SabotagedStore`] breaks the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// Every put applies, whatever its guard (like Garage, s3rver).
    IgnoresGuard,
    /// Checks the guard, then writes after a pause without re-checking: concurrent racers
    /// all win (like s3s-fs under load).
    TwoWinners,
    /// Versions are content hashes: identical bytes get the same version (S3 ETags), also
    /// after a delete and re-create (ABA).
    RepeatingVersions,
    /// Every third applied put is answered `Rejected` though it landed.
    RejectsLandedWrites,
    /// Every request fails: the store is unreachable ([`ErrorKind::Unavailable`]).
    Unreachable,
    /// Replace-if-current is not implemented: a `put` with [`CasGuard::Match`] answers
    /// [`ErrorKind::Unsupported`], not committed (like an adapter over a store without
    /// `PutMode::Update`). Honest, but fence cannot run on it.
    NoUpdate,
    /// `list(prefix)` leaves out the key equal to `prefix` (lists only what is under
    /// `prefix/`, a common slip when a prefix is turned into `prefix/` for the store).
    ListsOnlyChildren,
}

/// An in-memory store with one deliberate [`Flaw`].
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use fence_testkit::sabotage::{Flaw, SabotagedStore};
/// use fence_testkit::{probe, ProbeConfig};
/// let liar = SabotagedStore::new(Flaw::IgnoresGuard);
/// assert!(probe(&liar, &ProbeConfig::default()).await.verdict.is_violation());
/// # });
/// ```
#[derive(Debug)]
pub struct SabotagedStore {
    flaw: Flaw,
    capabilities: Capabilities,
    objects: Mutex<BTreeMap<Key, (Bytes, Version)>>,
    counter: AtomicU64,
}

impl SabotagedStore {
    /// An empty store with `flaw`, declaring [`Capabilities::full`].
    pub fn new(flaw: Flaw) -> Self {
        SabotagedStore {
            flaw,
            capabilities: Capabilities::full(),
            objects: Mutex::new(BTreeMap::new()),
            counter: AtomicU64::new(0),
        }
    }

    /// The same store declaring `capabilities` instead. Declaring what a flaw does makes it
    /// honest: [`Flaw::RepeatingVersions`] with
    /// [`Capabilities::with_content_versions`] is a store with content-hash versions.
    ///
    /// ```
    /// use fence_core::{Capabilities, ConditionalStore};
    /// use fence_testkit::sabotage::{Flaw, SabotagedStore};
    /// let caps = Capabilities::full().with_content_versions();
    /// let store = SabotagedStore::new(Flaw::RepeatingVersions).with_capabilities(caps);
    /// assert!(store.capabilities().content_versions);
    /// ```
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, (Bytes, Version)>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn unreachable(&self) -> Result<(), Error> {
        if self.flaw == Flaw::Unreachable {
            return Err(Error::new(ErrorKind::Unavailable, "connection refused").not_committed());
        }
        Ok(())
    }

    fn next_version(&self, body: &Bytes) -> Result<Version, Error> {
        if self.flaw == Flaw::RepeatingVersions {
            let hash = body.iter().fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
            });
            return Version::new(format!("{hash:016x}"));
        }
        Version::new(format!(
            "s{}",
            self.counter.fetch_add(1, Ordering::SeqCst) + 1
        ))
    }

    fn holds(objects: &BTreeMap<Key, (Bytes, Version)>, key: &Key, guard: &CasGuard) -> bool {
        match (guard, objects.get(key)) {
            (CasGuard::Absent, None) => true,
            (CasGuard::Match(want), Some((_, have))) => want == have,
            _ => false,
        }
    }

    /// Checks the guard (unless the flaw ignores it) and writes, atomically.
    fn write(&self, key: &Key, body: Bytes, guard: &CasGuard) -> Result<Option<Version>, Error> {
        let mut objects = self.objects();
        if self.flaw != Flaw::IgnoresGuard && !Self::holds(&objects, key, guard) {
            return Ok(None);
        }
        let version = self.next_version(&body)?;
        objects.insert(key.clone(), (body, version.clone()));
        Ok(Some(version))
    }

    /// Checks the guard, pauses, then writes unconditionally: not atomic.
    async fn check_then_write(
        &self,
        key: &Key,
        body: Bytes,
        guard: &CasGuard,
    ) -> Result<Option<Version>, Error> {
        if !Self::holds(&self.objects(), key, guard) {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let version = self.next_version(&body)?;
        self.objects().insert(key.clone(), (body, version.clone()));
        Ok(Some(version))
    }
}

#[async_trait]
impl ConditionalStore for SabotagedStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.unreachable()?;
        Ok(self.objects().get(key).map(|(body, version)| Stored {
            body: body.clone(),
            version: version.clone(),
        }))
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.unreachable()?;
        if self.flaw == Flaw::NoUpdate && matches!(guard, CasGuard::Match(_)) {
            let e = Error::new(
                ErrorKind::Unsupported,
                "replace-if-current is not implemented",
            );
            return Err(e.with_key(key).not_committed());
        }
        let written = if self.flaw == Flaw::TwoWinners {
            self.check_then_write(key, body, &guard).await?
        } else {
            self.write(key, body, &guard)?
        };
        let Some(version) = written else {
            return Ok(PutOutcome::Rejected);
        };
        let landed = self.counter.load(Ordering::SeqCst);
        if self.flaw == Flaw::RejectsLandedWrites && landed.is_multiple_of(3) {
            return Ok(PutOutcome::Rejected);
        }
        Ok(PutOutcome::Applied(version))
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.unreachable()?;
        if !self.capabilities.conditional_delete {
            return Err(delete_unsupported(key));
        }
        let mut objects = self.objects();
        match objects.get(key) {
            Some((_, v)) if v == version => {
                objects.remove(key);
                Ok(DeleteOutcome::Deleted)
            }
            _ => Ok(DeleteOutcome::Rejected),
        }
    }

    /// A plain delete, like a store without conditional delete has.
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.unreachable()?;
        self.objects().remove(key);
        Ok(())
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.unreachable()?;
        let objects = self.objects();
        let only_children = self.flaw == Flaw::ListsOnlyChildren;
        let keys = objects
            .keys()
            .filter(|k| prefix.is_none_or(|p| k.starts_with(p) && !(only_children && *k == p)));
        Ok(keys.cloned().collect())
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
}

/// How a [`Misclassifying`] adapter gets its write errors wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misclassification {
    /// Every failed write is reported [`Commit::NotCommitted`](fence_core::Commit).
    EveryErrorNotCommitted,
    /// A failed connection ([`ErrorKind::Unavailable`] or [`ErrorKind::Timeout`], ambiguous)
    /// is reported not committed: a reset after the request was sent taken for a refused
    /// connection.
    ResetNotCommitted,
    /// A write that failed ambiguously is sent once more and the second answer reported, as
    /// an HTTP client with its default retries does: a hidden retry of a conditional write
    /// (after a lost success it is answered `Rejected` by the adapter's own write).
    RetriesWrites,
}

/// An adapter wrapper that classifies write errors wrongly: over a store that never fails it
/// passes every scenario; over a fault layer that records what landed
/// ([`FaultProxy`](crate::wire::FaultProxy),
/// [`FaultyObjectStore`](crate::objstore::FaultyObjectStore)) it must be caught.
///
/// ```
/// use std::sync::Arc;
/// use fence_core::MemoryStore;
/// use fence_testkit::sabotage::{Misclassification, Misclassifying};
/// let liar = Misclassifying::new(Arc::new(MemoryStore::new()), Misclassification::EveryErrorNotCommitted);
/// # let _ = liar;
/// ```
#[derive(Debug)]
pub struct Misclassifying {
    inner: std::sync::Arc<dyn ConditionalStore>,
    how: Misclassification,
}

impl Misclassifying {
    /// Wraps `inner`, getting its write errors wrong as `how` says.
    pub fn new(inner: std::sync::Arc<dyn ConditionalStore>, how: Misclassification) -> Self {
        Misclassifying { inner, how }
    }

    fn misclassify(&self, e: Error) -> Error {
        let connection = matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout);
        match self.how {
            Misclassification::EveryErrorNotCommitted => e.not_committed(),
            Misclassification::ResetNotCommitted if connection => e.not_committed(),
            Misclassification::ResetNotCommitted | Misclassification::RetriesWrites => e,
        }
    }
}

#[async_trait]
impl ConditionalStore for Misclassifying {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let first = self.inner.put(key, body.clone(), guard.clone()).await;
        let retry = self.how == Misclassification::RetriesWrites;
        let answer = match first {
            Err(e) if retry && e.is_ambiguous() => self.inner.put(key, body, guard).await,
            other => other,
        };
        answer.map_err(|e| self.misclassify(e))
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
