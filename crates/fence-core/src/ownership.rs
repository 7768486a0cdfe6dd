//! The seed's ownership API over any [`ConditionalStore`], and the keys fence uses: node
//! leases at `nodes/<node>.json`, cell heads at `cells/<cell>/own.json`, payload objects at
//! `cells/<cell>/blobs/<name>` — all under an optional prefix.
//!
//! `Ownership` keeps no cache: every call is what it says, and nothing is retained per key.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use crate::clock::{now_ms, Entropy};
use crate::decide::observe::MAX_RECORD_TTL_MS;
use crate::error::{Commit, Error, ErrorKind};
use crate::key::Key;
use crate::record::legacy::DataBody;
use crate::record::{
    fresh_nonce, BlobRef, CellHead, CellPayload, Extra, HeadFormat, LeaseBody, NodeLease,
    NodeLeaseRecord, OwnerRecord,
};
use crate::store::{CasGuard, ConditionalStore, Current, PutOutcome, Version};

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

/// Longest node or cell name, in bytes.
pub const MAX_NAME_LEN: usize = 200;

/// Checks that `id` can stand as one key segment (a node or cell name). The error echoes at
/// most the first 100 bytes of the name.
pub fn check_name(what: &str, id: &str) -> Result<(), Error> {
    if id.is_empty() || id.contains('/') || id == "." || id == ".." || id.len() > MAX_NAME_LEN {
        let shown: String = id.chars().take(100).collect();
        let more = if shown.len() < id.len() { "…" } else { "" };
        return Err(Error::new(
            ErrorKind::InvalidKey,
            format!(
                "{what} name {shown:?}{more} must be one non-empty path segment of at most {MAX_NAME_LEN} bytes"
            ),
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

    /// `cells/<cell>/own.json`: the cell head (owner, epoch, data).
    pub fn owner_key(&self, cell: &str) -> Result<Key, Error> {
        check_name("cell", cell)?;
        self.key(format!("cells/{cell}/own.json"))
    }

    /// `cells/<cell>/blobs/<name>`: a payload object.
    pub fn blob_key(&self, cell: &str, name: &str) -> Result<Key, Error> {
        check_name("cell", cell)?;
        self.key(format!("cells/{cell}/blobs/{name}"))
    }

    /// `cells/<cell>/blobs`: the folder of a cell's payload objects.
    pub fn blobs_prefix(&self, cell: &str) -> Result<Key, Error> {
        check_name("cell", cell)?;
        self.key(format!("cells/{cell}/blobs"))
    }

    /// `nodes`: the folder of node leases (for membership views; listing decides nothing
    /// about safety).
    pub fn nodes_prefix(&self) -> Result<Key, Error> {
        self.key("nodes".to_owned())
    }

    /// `cells`: the folder of cells.
    pub fn cells_prefix(&self) -> Result<Key, Error> {
        self.key("cells".to_owned())
    }

    /// `cells/<cell>/log/<name>`: an immutable record of an append log kept beside the head
    /// (the head commits which records count; see `fence-fleet`'s `AppendLog`).
    pub fn log_key(&self, cell: &str, name: &str) -> Result<Key, Error> {
        check_name("cell", cell)?;
        check_name("log record", name)?;
        self.key(format!("cells/{cell}/log/{name}"))
    }

    /// `cells/<cell>/data`: the version-1 data head.
    pub fn legacy_data_key(&self, cell: &str) -> Result<Key, Error> {
        check_name("cell", cell)?;
        self.key(format!("cells/{cell}/data"))
    }

    // ----- node leases ---------------------------------------------------------------------

    /// Writes `record` as the lease of `record.node` if `guard` holds: `Absent` to acquire,
    /// `Match(etag)` to renew or take over. Each write carries a fresh nonce. With `Match`,
    /// the record being replaced is read first (its unknown fields are kept; a version other
    /// than `etag` answers `Rejected` without writing): two requests. The runtime's keeper
    /// renews in one.
    ///
    /// The record states its holder's TTL (`ttl_ms`, which docs/protocol.md requires of a
    /// lease that is not released): the seed's API takes an expiry, not a TTL, so it is what
    /// is left of `expires_ms` by this machine's wall clock when the body is built. A release
    /// (`expires_ms: 0`) keeps the TTL of the record it replaces.
    pub async fn cas_node_lease(
        &self,
        guard: CasGuard,
        record: &NodeLeaseRecord,
    ) -> Result<LeaseCasOutcome, LeaseCasError> {
        let (extra, replaced_ttl) = match &guard {
            CasGuard::Absent => (Extra::new(), None),
            CasGuard::Match(v) => match self.read_lease_body(&record.node).await {
                Ok(Some((body, current))) if current == *v => (body.extra, body.ttl_ms),
                Ok(_) => return Ok(LeaseCasOutcome::Rejected),
                Err(e) => return Err(LeaseCasError::NotCommitted(e.not_committed())),
            },
        };
        let ttl_ms = match record.expires_ms {
            0 => replaced_ttl,
            expires_ms => Some(expires_ms.saturating_sub(now_ms()).min(MAX_RECORD_TTL_MS)),
        };
        let body = LeaseBody {
            record: record.clone(),
            nonce: self.fresh_nonce(),
            ttl_ms,
            extra,
        };
        match self.put_lease_body(guard, &body).await {
            Ok(PutOutcome::Applied(etag)) => Ok(LeaseCasOutcome::Applied { etag }),
            Ok(PutOutcome::Rejected) => Ok(LeaseCasOutcome::Rejected),
            Err(e) => Err(LeaseCasError::from_error(e)),
        }
    }

    /// Writes a lease body as it is (the caller chose its nonce) if `guard` holds.
    pub async fn put_lease_body(
        &self,
        guard: CasGuard,
        body: &LeaseBody,
    ) -> Result<PutOutcome, Error> {
        let key = self.lease_key(&body.record.node)?;
        self.store.put(&key, body.encode(), guard).await
    }

    /// Reads the lease of `node`.
    pub async fn read_node_lease(&self, node: &str) -> Result<Option<NodeLease>, Error> {
        Ok(self
            .read_lease_body(node)
            .await?
            .map(|(body, etag)| NodeLease {
                record: body.record,
                etag,
                nonce: body.nonce,
                ttl_ms: body.ttl_ms,
            }))
    }

    /// Reads the lease body of `node` with its version.
    pub async fn read_lease_body(&self, node: &str) -> Result<Option<(LeaseBody, Version)>, Error> {
        let key = self.lease_key(node)?;
        let Some(stored) = self.store.get(&key).await? else {
            return Ok(None);
        };
        Ok(Some((
            LeaseBody::decode(&key, &stored.body)?,
            stored.version,
        )))
    }

    // ----- cell heads ----------------------------------------------------------------------

    /// Reads the head of `cell` (any format) with its version.
    pub async fn read_head(&self, cell: &str) -> Result<Option<(CellHead, Version)>, Error> {
        let key = self.owner_key(cell)?;
        let Some(stored) = self.store.get(&key).await? else {
            return Ok(None);
        };
        Ok(Some((
            CellHead::decode(&key, &stored.body)?,
            stored.version,
        )))
    }

    /// Writes `head` (in the current format) as the head of `cell` if `guard` holds.
    pub async fn put_head(
        &self,
        cell: &str,
        head: &CellHead,
        guard: CasGuard,
    ) -> Result<PutOutcome, Error> {
        let key = self.owner_key(cell)?;
        self.store.put(&key, head.encode(), guard).await
    }

    /// Writes `head` as [`put_head`](Self::put_head) does; a rejection also tells the head
    /// the condition was checked against when the store's answer carries it
    /// ([`ConditionalStore::put_with_current`]): `Some(None)` for no head, `None` when the
    /// store told nothing or what it told is not a readable head (then read it).
    pub async fn put_head_with_current(
        &self,
        cell: &str,
        head: &CellHead,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Option<Option<(CellHead, Version)>>), Error> {
        let key = self.owner_key(cell)?;
        let (outcome, current) = self
            .store
            .put_with_current(&key, head.encode(), guard)
            .await?;
        let seen = match current {
            Current::Untold => None,
            Current::Absent => Some(None),
            Current::Found(stored) => CellHead::decode(&key, &stored.body)
                .ok()
                .map(|found| Some((found, stored.version))),
        };
        Ok((outcome, seen))
    }

    /// Reads the owner record of `cell`.
    pub async fn read_owner(&self, cell: &str) -> Result<Option<OwnerRecord>, Error> {
        Ok(self.read_head(cell).await?.map(|(h, etag)| OwnerRecord {
            node: h.node,
            epoch: h.epoch,
            etag,
        }))
    }

    /// Claims `cell` for this node at `epoch` if `guard` holds. With `Match`, the head being
    /// replaced is read first: a version other than the guard answers `Rejected` without
    /// writing; `epoch` must be above its epoch (epochs never go back), otherwise
    /// [`ErrorKind::InvalidInput`] and nothing is written; its data and unknown fields are
    /// carried forward. Two requests; the runtime's claims take two as well, including the
    /// read that decides.
    pub async fn cas_owner(
        &self,
        cell: &str,
        guard: CasGuard,
        epoch: u64,
    ) -> Result<CasOutcome, Error> {
        let node = self.node.clone();
        self.rewrite_owner(cell, guard, Some(node), epoch).await
    }

    async fn rewrite_owner(
        &self,
        cell: &str,
        guard: CasGuard,
        node: Option<String>,
        epoch: u64,
    ) -> Result<CasOutcome, Error> {
        let key = self.owner_key(cell)?;
        if let Some(n) = &node {
            check_name("node", n)?;
        }
        let prior = match &guard {
            CasGuard::Absent => None,
            CasGuard::Match(v) => match self.read_head(cell).await.map_err(Error::not_committed)? {
                Some((head, current)) if current == *v => Some(head),
                _ => return Ok(CasOutcome::Rejected),
            },
        };
        check_epoch_rule(
            &key,
            prior.as_ref().map_or(0, |h| h.epoch),
            node.is_some(),
            epoch,
        )?;
        let (payload, extra) = match prior {
            Some(h) if h.format == HeadFormat::V1 => {
                (self.migrate_legacy(cell, epoch).await?, h.extra)
            }
            Some(h) => (h.payload, h.extra),
            None => (CellPayload::Empty, Extra::new()),
        };
        let head = CellHead {
            node,
            epoch,
            nonce: self.fresh_nonce(),
            generation: None,
            payload,
            extra,
            format: HeadFormat::V2,
        };
        Ok(match self.put_head(cell, &head, guard).await? {
            PutOutcome::Applied(_) => CasOutcome::Applied,
            PutOutcome::Rejected => CasOutcome::Rejected,
        })
    }

    /// Releases `cell` if this node owns it at `epoch`: writes an unowned head that keeps the
    /// epoch and the data, so the next claim takes `epoch + 1`. `Rejected` when the cell is no
    /// longer ours at that epoch.
    pub async fn release_owner(&self, cell: &str, epoch: u64) -> Result<CasOutcome, Error> {
        for _ in 0..2 {
            let Some((head, version)) = self.read_head(cell).await? else {
                return Ok(CasOutcome::Rejected);
            };
            if !head.is_owned_by(&self.node, epoch) {
                return Ok(CasOutcome::Rejected);
            }
            match self
                .rewrite_owner(cell, CasGuard::Match(version), None, epoch)
                .await?
            {
                CasOutcome::Applied => return Ok(CasOutcome::Applied),
                // The head moved between our read and write: look again once.
                CasOutcome::Rejected => continue,
            }
        }
        Ok(CasOutcome::Rejected)
    }

    // ----- payloads ------------------------------------------------------------------------

    /// Reads the version-1 data head of `cell`.
    pub async fn read_legacy_data(&self, cell: &str) -> Result<Option<(DataBody, Version)>, Error> {
        let key = self.legacy_data_key(cell)?;
        let Some(stored) = self.store.get(&key).await? else {
            return Ok(None);
        };
        Ok(Some((
            DataBody::decode(&key, &stored.body)?,
            stored.version,
        )))
    }

    /// The payload of a version-1 cell, moved into a payload the version-2 head written at
    /// `epoch` can carry: inline when small, else copied once into a payload object named with
    /// that epoch, as payload collection expects of every object (it reads an object's epoch
    /// from its name; an epoch-0 name under a later head broke that rule).
    async fn migrate_legacy(&self, cell: &str, epoch: u64) -> Result<CellPayload, Error> {
        match self.read_legacy_data(cell).await? {
            None => Ok(CellPayload::Empty),
            Some((data, _)) => {
                self.store_payload(cell, epoch, data.payload, INLINE_MAX_DEFAULT)
                    .await
            }
        }
    }

    /// Stores `payload` where a head can point at it: inline up to `inline_max` bytes, else
    /// as a new payload object named `<epoch>-<nonce>`, created with `Absent` (so it is never
    /// overwritten) before any head refers to it.
    pub async fn store_payload(
        &self,
        cell: &str,
        epoch: u64,
        payload: Bytes,
        inline_max: usize,
    ) -> Result<CellPayload, Error> {
        if payload.is_empty() {
            return Ok(CellPayload::Empty);
        }
        if payload.len() <= inline_max {
            return Ok(CellPayload::Inline(payload));
        }
        if let Some(max) = self.store.capabilities().max_body {
            if payload.len() > max {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "a payload of {} bytes is above this store's bound of {max}",
                        payload.len()
                    ),
                )
                .not_committed());
            }
        }
        let blob = BlobRef {
            name: format!("{epoch}-{}", self.fresh_nonce()),
            len: payload.len() as u64,
        };
        let key = self.blob_key(cell, &blob.name)?;
        // The name is unique: a create that is rejected, or answered ambiguously and then
        // rejected on a second try, found our own object.
        for attempt in 0..2 {
            match self
                .store
                .put(&key, payload.clone(), CasGuard::Absent)
                .await
            {
                Ok(_) => return Ok(CellPayload::Blob(blob)),
                Err(e) if attempt == 0 && (e.is_ambiguous() || e.is_retryable()) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            "payload object not stored",
        ))
    }

    /// The bytes of `payload`: inline, or read from its object (`None` if that object is
    /// gone — the head moved on and it was collected).
    pub async fn load_payload(
        &self,
        cell: &str,
        payload: &CellPayload,
    ) -> Result<Option<Bytes>, Error> {
        match payload {
            CellPayload::Empty => Ok(Some(Bytes::new())),
            CellPayload::Inline(b) => Ok(Some(b.clone())),
            CellPayload::Blob(blob) => {
                let key = self.blob_key(cell, &blob.name)?;
                let Some(stored) = self.store.get(&key).await? else {
                    return Ok(None);
                };
                if stored.body.len() as u64 != blob.len {
                    return Err(Error::corrupt(
                        &key,
                        format!(
                            "payload object holds {} bytes, its head says {}",
                            stored.body.len(),
                            blob.len
                        ),
                    ));
                }
                Ok(Some(stored.body))
            }
        }
    }

    /// Deletes a payload object no head refers to any more.
    pub async fn delete_blob(&self, cell: &str, blob: &BlobRef) -> Result<(), Error> {
        let key = self.blob_key(cell, &blob.name)?;
        self.store.delete_immutable(&key).await
    }
}

/// The default inline bound of a payload, in bytes: larger payloads become payload objects.
pub const INLINE_MAX_DEFAULT: usize = 8 * 1024;

fn bad_epoch(key: &Key, why: &str) -> Error {
    Error::new(ErrorKind::InvalidInput, why)
        .with_key(key)
        .not_committed()
}

fn check_epoch_rule(key: &Key, prior: u64, claim: bool, epoch: u64) -> Result<(), Error> {
    if epoch == 0 {
        return Err(bad_epoch(
            key,
            "epoch 0 is never written; the first claim is 1",
        ));
    }
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
