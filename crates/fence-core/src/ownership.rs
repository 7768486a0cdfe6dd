//! The seed's ownership API over any [`ConditionalStore`]: node leases at
//! `nodes/<node>.json`, cell owners at `cells/<cell>/own.json`, cell data heads at
//! `cells/<cell>/data` — all under an optional prefix.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::clock::Entropy;
use crate::error::{Commit, Error, ErrorKind};
use crate::key::Key;
use crate::record::{
    fresh_nonce, DataBody, Extra, LeaseBody, NodeLease, NodeLeaseRecord, OwnerBody, OwnerRecord,
};
use crate::store::{CasGuard, ConditionalStore, PutOutcome, Version};

/// The answer to [`Ownership::cas_node_lease`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseCasOutcome {
    /// The lease record was written; `etag` guards the next renewal.
    Applied {
        /// The new version of the lease record.
        etag: Version,
    },
    /// The guard did not hold: somebody else wrote the lease (or it is gone). Stop writing.
    Rejected,
}

/// Why [`Ownership::cas_node_lease`] reached no verdict.
#[derive(Debug, thiserror::Error)]
pub enum LeaseCasError {
    /// Provably nothing was written (bad input, refused before sending, permission denied,
    /// a conditional conflict). Safe to retry.
    #[error("lease write not committed: {0}")]
    NotCommitted(#[source] Error),
    /// The write may have landed: read the lease back and compare its nonce.
    #[error("lease write ambiguous: {0}")]
    Ambiguous(#[source] Error),
}

impl LeaseCasError {
    fn from_error(e: Error) -> Self {
        match e.commit() {
            Commit::NotCommitted => LeaseCasError::NotCommitted(e),
            Commit::Ambiguous => LeaseCasError::Ambiguous(e),
        }
    }

    /// The underlying error.
    pub fn error(&self) -> &Error {
        match self {
            LeaseCasError::NotCommitted(e) | LeaseCasError::Ambiguous(e) => e,
        }
    }
}

impl From<LeaseCasError> for Error {
    fn from(e: LeaseCasError) -> Error {
        match e {
            LeaseCasError::NotCommitted(e) | LeaseCasError::Ambiguous(e) => e,
        }
    }
}

/// The answer to an owner-record write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// Written.
    Applied,
    /// The guard did not hold; nothing was written.
    Rejected,
}

/// What we last saw of a record: lets a rewrite keep unknown fields and check the epoch rule
/// without an extra read.
#[derive(Clone, Debug)]
struct Known {
    version: Version,
    extra: Extra,
    epoch: Option<u64>,
}

/// The ownership store of one node: the seed's API.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence_core::*;
/// let ownership = Ownership::new(Arc::new(MemoryStore::new()), "n1");
/// assert_eq!(ownership.cas_owner("c1", CasGuard::Absent, 1).await.unwrap(), CasOutcome::Applied);
/// let owner = ownership.read_owner("c1").await.unwrap().unwrap();
/// assert_eq!((owner.node.as_deref(), owner.epoch), (Some("n1"), 1));
/// ownership.release_owner("c1", 1).await.unwrap();
/// assert_eq!(ownership.read_owner("c1").await.unwrap().unwrap().node, None);
/// # });
/// ```
pub struct Ownership {
    store: Arc<dyn ConditionalStore>,
    node: String,
    prefix: Option<Key>,
    entropy: Entropy,
    known: Mutex<HashMap<Key, Known>>,
}

impl fmt::Debug for Ownership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ownership")
            .field("node", &self.node)
            .field("prefix", &self.prefix)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Checks that `id` can stand as one key segment (a node or cell name).
pub fn check_name(what: &str, id: &str) -> Result<(), Error> {
    if id.is_empty() || id.contains('/') || id == "." || id == ".." || id.len() > 200 {
        return Err(Error::new(
            ErrorKind::InvalidKey,
            format!("{what} name {id:?} must be one non-empty path segment of at most 200 bytes"),
        )
        .not_committed());
    }
    Ok(())
}

impl Ownership {
    /// The ownership API of node `node` over `store`.
    pub fn new(store: Arc<dyn ConditionalStore>, node: impl Into<String>) -> Self {
        Ownership {
            store,
            node: node.into(),
            prefix: None,
            entropy: Entropy::from_os(),
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Puts every key under `prefix/`.
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, Error> {
        let prefix = prefix.trim_end_matches('/');
        self.prefix = if prefix.is_empty() {
            None
        } else {
            Some(Key::new(prefix)?)
        };
        Ok(self)
    }

    /// Uses `entropy` for nonces (seeded in simulations).
    #[must_use]
    pub fn with_entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = entropy;
        self
    }

    /// The node this process writes as.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn ConditionalStore> {
        &self.store
    }

    /// A fresh write nonce.
    pub fn fresh_nonce(&self) -> String {
        fresh_nonce(&self.entropy)
    }

    fn key(&self, rel: String) -> Result<Key, Error> {
        match &self.prefix {
            Some(p) => p.join(&rel),
            None => Key::new(rel),
        }
    }

    /// `nodes/<node>.json`.
    pub fn lease_key(&self, node: &str) -> Result<Key, Error> {
        check_name("node", node)?;
        self.key(format!("nodes/{node}.json"))
    }

    /// `cells/<cell>/own.json`.
    pub fn owner_key(&self, cell: &str) -> Result<Key, Error> {
        check_name("cell", cell)?;
        self.key(format!("cells/{cell}/own.json"))
    }

    /// `cells/<cell>/data`.
    pub fn data_key(&self, cell: &str) -> Result<Key, Error> {
        check_name("cell", cell)?;
        self.key(format!("cells/{cell}/data"))
    }

    fn remember(&self, key: &Key, known: Known) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), known);
    }

    fn recall(&self, key: &Key, version: &Version) -> Option<Known> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.get(key).filter(|k| &k.version == version).cloned()
    }

    /// What we know of the record at `key` at version `version`: from memory, else by one
    /// read. `None` when the store's current version is another one (the guard cannot hold).
    async fn known_at(
        &self,
        key: &Key,
        version: &Version,
        decode: impl Fn(&Bytes) -> Result<Known, Error>,
    ) -> Result<Option<Known>, Error> {
        if let Some(k) = self.recall(key, version) {
            return Ok(Some(k));
        }
        let Some(stored) = self.store.get(key).await? else {
            return Ok(None);
        };
        if &stored.version != version {
            return Ok(None);
        }
        let mut known = decode(&stored.body)?;
        known.version = stored.version;
        self.remember(key, known.clone());
        Ok(Some(known))
    }

    // ----- node leases ---------------------------------------------------------------------

    /// Writes `record` as the lease of `record.node` if `guard` holds: `Absent` to acquire,
    /// `Match(etag)` to renew or take over. Each write carries a fresh nonce; unknown fields of
    /// the record being replaced are kept.
    pub async fn cas_node_lease(
        &self,
        guard: CasGuard,
        record: &NodeLeaseRecord,
    ) -> Result<LeaseCasOutcome, LeaseCasError> {
        let nonce = self.fresh_nonce();
        match self.put_node_lease(guard, record, &nonce).await {
            Ok(PutOutcome::Applied(etag)) => Ok(LeaseCasOutcome::Applied { etag }),
            Ok(PutOutcome::Rejected) => Ok(LeaseCasOutcome::Rejected),
            Err(e) => Err(LeaseCasError::from_error(e)),
        }
    }

    /// [`cas_node_lease`](Self::cas_node_lease) with a caller-chosen nonce, so the caller can
    /// recognise its own write when reading back after an ambiguous answer.
    pub async fn put_node_lease(
        &self,
        guard: CasGuard,
        record: &NodeLeaseRecord,
        nonce: &str,
    ) -> Result<PutOutcome, Error> {
        let key = self.lease_key(&record.node)?;
        let extra = match &guard {
            CasGuard::Absent => Extra::new(),
            CasGuard::Match(v) => match self.known_at(&key, v, |b| lease_known(&key, b)).await {
                Ok(Some(k)) => k.extra,
                Ok(None) => return Ok(PutOutcome::Rejected),
                Err(e) => return Err(e.not_committed()),
            },
        };
        let body = LeaseBody {
            record: record.clone(),
            nonce: nonce.to_owned(),
            extra: extra.clone(),
        };
        let outcome = self.store.put(&key, body.encode(), guard).await?;
        if let PutOutcome::Applied(v) = &outcome {
            self.remember(&key, known(v, extra, None));
        }
        Ok(outcome)
    }

    /// Reads the lease of `node`.
    pub async fn read_node_lease(&self, node: &str) -> Result<Option<NodeLease>, Error> {
        let key = self.lease_key(node)?;
        let Some(stored) = self.store.get(&key).await? else {
            return Ok(None);
        };
        let body = LeaseBody::decode(&key, &stored.body)?;
        self.remember(&key, known(&stored.version, body.extra, None));
        Ok(Some(NodeLease {
            record: body.record,
            etag: stored.version,
            nonce: body.nonce,
        }))
    }

    // ----- cell owners ---------------------------------------------------------------------

    /// Claims `cell` for this node at `epoch` if `guard` holds. With `Match`, `epoch` must be
    /// above the replaced record's epoch (epochs never go back): otherwise
    /// [`ErrorKind::InvalidInput`] and nothing is written.
    pub async fn cas_owner(
        &self,
        cell: &str,
        guard: CasGuard,
        epoch: u64,
    ) -> Result<CasOutcome, Error> {
        let nonce = self.fresh_nonce();
        let outcome = self
            .put_owner(cell, guard, Some(&self.node), epoch, &nonce)
            .await?;
        Ok(cas_outcome(&outcome))
    }

    /// Writes the owner record of `cell` (`node: None` releases) at `epoch` with a
    /// caller-chosen nonce, enforcing the epoch rule: a claim raises the epoch, a release
    /// keeps it.
    pub async fn put_owner(
        &self,
        cell: &str,
        guard: CasGuard,
        node: Option<&str>,
        epoch: u64,
        nonce: &str,
    ) -> Result<PutOutcome, Error> {
        let key = self.owner_key(cell)?;
        if let Some(n) = node {
            check_name("node", n)?;
        }
        let extra = match &guard {
            CasGuard::Absent => Extra::new(),
            CasGuard::Match(v) => match self.known_at(&key, v, |b| owner_known(&key, b)).await {
                Ok(Some(k)) => {
                    check_epoch_rule(&key, k.epoch.unwrap_or(0), node.is_some(), epoch)?;
                    k.extra
                }
                Ok(None) => return Ok(PutOutcome::Rejected),
                Err(e) => return Err(e.not_committed()),
            },
        };
        if epoch == 0 {
            return Err(bad_epoch(
                &key,
                "epoch 0 is never written; the first claim is 1",
            ));
        }
        let body = OwnerBody {
            node: node.map(str::to_owned),
            epoch,
            nonce: nonce.to_owned(),
            extra: extra.clone(),
        };
        let outcome = self.store.put(&key, body.encode(), guard).await?;
        if let PutOutcome::Applied(v) = &outcome {
            self.remember(&key, known(v, extra, Some(epoch)));
        }
        Ok(outcome)
    }

    /// Reads the owner record of `cell`.
    pub async fn read_owner(&self, cell: &str) -> Result<Option<OwnerRecord>, Error> {
        Ok(self
            .read_owner_body(cell)
            .await?
            .map(|(body, etag)| OwnerRecord {
                node: body.node,
                epoch: body.epoch,
                etag,
            }))
    }

    /// Reads the owner record of `cell` with its nonce and unknown fields.
    pub async fn read_owner_body(&self, cell: &str) -> Result<Option<(OwnerBody, Version)>, Error> {
        let key = self.owner_key(cell)?;
        let Some(stored) = self.store.get(&key).await? else {
            return Ok(None);
        };
        let body = OwnerBody::decode(&key, &stored.body)?;
        self.remember(
            &key,
            known(&stored.version, body.extra.clone(), Some(body.epoch)),
        );
        Ok(Some((body, stored.version)))
    }

    /// Releases `cell` if this node owns it at `epoch`: writes an unowned record that keeps
    /// the epoch, so the next claim takes `epoch + 1`. `Rejected` when the cell is no longer
    /// ours at that epoch.
    pub async fn release_owner(&self, cell: &str, epoch: u64) -> Result<CasOutcome, Error> {
        for _ in 0..2 {
            let Some((body, version)) = self.read_owner_body(cell).await? else {
                return Ok(CasOutcome::Rejected);
            };
            if body.node.as_deref() != Some(self.node.as_str()) || body.epoch != epoch {
                return Ok(CasOutcome::Rejected);
            }
            let nonce = self.fresh_nonce();
            match self
                .put_owner(cell, CasGuard::Match(version), None, epoch, &nonce)
                .await?
            {
                PutOutcome::Applied(_) => return Ok(CasOutcome::Applied),
                // The record moved between our read and write: look again once.
                PutOutcome::Rejected => continue,
            }
        }
        Ok(CasOutcome::Rejected)
    }

    // ----- cell data heads -----------------------------------------------------------------

    /// Reads the data head of `cell`.
    pub async fn read_data(&self, cell: &str) -> Result<Option<(DataBody, Version)>, Error> {
        let key = self.data_key(cell)?;
        let Some(stored) = self.store.get(&key).await? else {
            return Ok(None);
        };
        let body = DataBody::decode(&key, &stored.body)?;
        self.remember(
            &key,
            known(&stored.version, body.extra.clone(), Some(body.epoch)),
        );
        Ok(Some((body, stored.version)))
    }

    /// Writes the data head of `cell` if `guard` holds.
    pub async fn put_data(
        &self,
        cell: &str,
        guard: CasGuard,
        body: &DataBody,
    ) -> Result<PutOutcome, Error> {
        let key = self.data_key(cell)?;
        let outcome = self.store.put(&key, body.encode(), guard).await?;
        if let PutOutcome::Applied(v) = &outcome {
            self.remember(&key, known(v, body.extra.clone(), Some(body.epoch)));
        }
        Ok(outcome)
    }
}

fn known(v: &Version, extra: Extra, epoch: Option<u64>) -> Known {
    Known {
        version: v.clone(),
        extra,
        epoch,
    }
}

fn lease_known(key: &Key, bytes: &Bytes) -> Result<Known, Error> {
    let body = LeaseBody::decode(key, bytes)?;
    Ok(Known {
        version: Version::new("-")?,
        extra: body.extra,
        epoch: None,
    })
}

fn owner_known(key: &Key, bytes: &Bytes) -> Result<Known, Error> {
    let body = OwnerBody::decode(key, bytes)?;
    Ok(Known {
        version: Version::new("-")?,
        extra: body.extra,
        epoch: Some(body.epoch),
    })
}

fn bad_epoch(key: &Key, why: &str) -> Error {
    Error::new(ErrorKind::InvalidInput, why)
        .with_key(key)
        .not_committed()
}

fn check_epoch_rule(key: &Key, prior: u64, claim: bool, epoch: u64) -> Result<(), Error> {
    if claim && epoch <= prior {
        return Err(bad_epoch(
            key,
            &format!("a claim must raise the epoch: {epoch} is not above {prior}"),
        ));
    }
    if !claim && epoch != prior {
        return Err(bad_epoch(
            key,
            &format!("a release keeps the epoch: {epoch} is not {prior}"),
        ));
    }
    Ok(())
}

fn cas_outcome(outcome: &PutOutcome) -> CasOutcome {
    match outcome {
        PutOutcome::Applied(_) => CasOutcome::Applied,
        PutOutcome::Rejected => CasOutcome::Rejected,
    }
}
