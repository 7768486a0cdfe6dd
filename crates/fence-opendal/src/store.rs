//! [`OpendalStore`]: the [`ConditionalStore`] contract over an OpenDAL operator.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key, PutOutcome,
    Stored, Version,
};
use fence_wire::listing::{ListingCap, ListingLimits};
use futures::TryStreamExt;
use opendal::options::{DeleteOptions, ListOptions, WriteOptions};
use opendal::{EntryMode, Metadata, Operator};

use crate::classify::{
    classify_list, classify_read, classify_write, Ended, Failure, Guard, Verdict,
};
use crate::dialect::{Dialect, Token};
use crate::transport::Exchange;

/// The longest object name (root + key) any of the supported services stores: S3 and GCS
/// stop at 1024 bytes, Azure at 1024 characters.
const MAX_OBJECT_NAME: usize = 1024;

/// An OpenDAL operator as a fence [`ConditionalStore`].
///
/// Built by [`OpendalStore::new`] or [`OpendalStore::builder`], which read the operator's
/// capabilities once and pick the guard dialect ([`Dialect`]): version match
/// (`if_version_match`, GCS generations) or ETag match (`if_match`, S3 and Azure Blob) for
/// `CasGuard::Match`, `if_not_exists` for `CasGuard::Absent`, and conditional delete where
/// the service offers it and fence has verified it (else `delete` answers `Unsupported` and
/// releases write a tombstone). A service that cannot compare-and-swap is refused, and so is
/// an operator with a retrying (or any unknown) layer.
///
/// The operator's HTTP transport is replaced by fence's: OpenDAL's reqwest transport over a
/// client of its own that never follows redirects, bounded by the write deadline, that records
/// what each request came to (for classification) and cuts every answer body at its cap (the
/// record limit plus 64 KiB; an error's first 4 KiB; a write's first 64 KiB; a listing page within the listing's
/// [`ListingLimits`], set by [`with_listing_limits`](crate::OpendalStoreBuilder::with_listing_limits)).
/// Every write is one `write_options` call with the whole body (one
/// request on S3 and Azure; a resumable session of one chunk on GCS), never retried.
///
/// ```
/// use fence_core::ConditionalStore;
/// use opendal::services::S3;
/// let op = opendal::Operator::new(
///     S3::default()
///         .bucket("fleet")
///         .root("/fence")
///         .endpoint("http://127.0.0.1:8333")
///         .region("us-east-1")
///         .access_key_id("AKID")
///         .secret_access_key("secret")
///         .disable_config_load()
///         .disable_ec2_metadata(),
/// )
/// .unwrap();
/// let store = fence_opendal::OpendalStore::new(op).unwrap();
/// assert_eq!(store.dialect().scheme, "s3");
/// assert!(store.capabilities().content_versions, "S3 ETags are content hashes");
/// ```
pub struct OpendalStore {
    op: Operator,
    dialect: Dialect,
    cas_timeout: Duration,
    record_limit: usize,
    listing_limits: ListingLimits,
}

impl OpendalStore {
    /// A store over `op` with the defaults (lease TTL 10 s, record limit
    /// [`fence_core::DEFAULT_RECORD_LIMIT`]); see [`OpendalStore::builder`].
    pub fn new(op: Operator) -> Result<OpendalStore, Error> {
        Self::builder(op).build()
    }

    /// A builder over `op`.
    pub fn builder(op: Operator) -> crate::OpendalStoreBuilder {
        crate::OpendalStoreBuilder::new(op)
    }

    pub(crate) fn from_parts(
        op: Operator,
        dialect: Dialect,
        cas_timeout: Duration,
        record_limit: usize,
        listing_limits: ListingLimits,
    ) -> OpendalStore {
        OpendalStore {
            op,
            dialect,
            cas_timeout,
            record_limit,
            listing_limits,
        }
    }

    /// The guard dialect chosen from the operator's capabilities.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The bound of one conditional write.
    pub fn cas_timeout(&self) -> Duration {
        self.cas_timeout
    }

    /// The operator, with fence's transport in place.
    pub fn operator(&self) -> &Operator {
        &self.op
    }

    /// The OpenDAL path of `key` (relative to the operator's root), refused before any I/O
    /// if root + key is longer than an object name can be.
    fn path_of(&self, key: &Key) -> Result<String, Error> {
        let root = self.op.info().root();
        if root.trim_matches('/').len() + 1 + key.as_str().len() > MAX_OBJECT_NAME {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                "root + key is longer than a 1024-byte object name",
            )
            .with_key(key)
            .not_committed());
        }
        Ok(key.as_str().to_string())
    }

    /// The error of `f`, naming the bucket where the failure is about it; the source says
    /// what OpenDAL and the wire said, never OpenDAL's own text (which carries the request's
    /// URL, where a SAS token may be, and the raw error body, where a signature may be).
    fn error(&self, key: Option<&Key>, f: Failure, witness: Witness) -> Error {
        let message = match f.kind {
            ErrorKind::PermissionDenied | ErrorKind::NotFound | ErrorKind::InvalidInput => {
                format!(
                    "{} {:?}: {}",
                    self.dialect.scheme,
                    self.op.info().name(),
                    f.why
                )
            }
            _ => f.why.to_string(),
        };
        let e = Error::new(f.kind, message)
            .with_commit(f.commit)
            .with_source(witness);
        match key {
            Some(key) => e.with_key(key),
            None => e,
        }
    }

    /// Runs one OpenDAL mutation under the write deadline and classifies it.
    async fn mutate<F>(
        &self,
        key: &Key,
        guard: Guard,
        call: F,
        token: bool,
    ) -> Result<Verdict, Error>
    where
        F: std::future::Future<Output = opendal::Result<Option<Metadata>>>,
    {
        let exchange = Exchange::default();
        let ended = match tokio::time::timeout(self.cas_timeout, exchange.observe(call)).await {
            Err(_) => Ended::TimedOut,
            Ok(Ok(meta)) => Ended::Done(meta.and_then(|m| self.token_of(&m))),
            Ok(Err(e)) => Ended::Failed(e.kind()),
        };
        let attempts = exchange.attempts();
        match classify_write(guard, &ended, &attempts, token) {
            Verdict::Failed(f) => Err(self.error(Some(key), f, Witness::of(&ended, &attempts))),
            verdict => Ok(verdict),
        }
    }

    fn token_of(&self, meta: &Metadata) -> Option<String> {
        match self.dialect.token {
            Token::ETag => meta.etag().map(str::to_string),
            Token::Version => meta.version().map(str::to_string),
        }
    }

    async fn conditional_put(
        &self,
        key: &Key,
        body: Bytes,
        guard: &CasGuard,
    ) -> Result<PutOutcome, Error> {
        let path = self.path_of(key)?;
        let mut opts = WriteOptions::default();
        let kind = match guard {
            CasGuard::Absent => {
                opts.if_not_exists = true;
                Guard::Absent
            }
            CasGuard::Match(v) => {
                match self.dialect.token {
                    Token::ETag => opts.if_match = Some(v.as_str().to_string()),
                    Token::Version => opts.if_version_match = Some(v.as_str().to_string()),
                }
                Guard::Match
            }
        };
        let write = async { self.op.write_options(&path, body, opts).await.map(Some) };
        match self.mutate(key, kind, write, true).await? {
            Verdict::Applied(token) => Ok(PutOutcome::Applied(Version::new(token)?)),
            _ => Ok(PutOutcome::Rejected),
        }
    }

    /// One GET: the version from the answer's headers, the body read until the record limit
    /// is passed.
    async fn fetch(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let path = self.path_of(key)?;
        let exchange = Exchange::default();
        let read = exchange.observe(self.open_and_read(&path));
        let (meta, body) = match read.await {
            Ok(found) => found,
            // The transport cut the answer off past the record limit.
            Err(_) if exchange.body_cut() => return Err(self.too_large(key)),
            Err(e) => {
                let last = exchange.attempts().last().copied();
                return match classify_read(e.kind(), last.as_ref()) {
                    None => Ok(None),
                    Some(f) => {
                        let witness = Witness::read(e.kind(), last);
                        Err(self.error(Some(key), f, witness))
                    }
                };
            }
        };
        let Some(body) = body else {
            return Err(self.too_large(key));
        };
        let token = self
            .token_of(&meta)
            .filter(|t| crate::classify::strong_etag(t));
        let version = token.ok_or_else(|| no_version(key))?;
        Ok(Some(Stored {
            body,
            version: Version::new(version)?,
        }))
    }

    fn too_large(&self, key: &Key) -> Error {
        let limit = self.record_limit;
        Error::corrupt(
            key,
            format!("the object is larger than the record limit ({limit} bytes)"),
        )
    }

    /// The read's metadata, and its body unless it is over the record limit (`None`; not a
    /// byte of it read if its announced length is).
    async fn open_and_read(&self, path: &str) -> opendal::Result<(Metadata, Option<Bytes>)> {
        let reader = self.op.reader(path).await?;
        let mut stream = reader.into_stream(..).await?;
        let meta = stream.metadata().await?;
        if meta.content_length() > self.record_limit as u64 {
            return Ok((meta, None));
        }
        let mut body = BytesMut::new();
        while let Some(chunk) = stream.try_next().await? {
            if body.len() + chunk.len() > self.record_limit {
                return Ok((meta, None));
            }
            for bytes in chunk {
                body.extend_from_slice(&bytes);
            }
        }
        Ok((meta, Some(body.freeze())))
    }

    /// The keys under `prefix`, read page by page within the listing limits.
    async fn list_keys(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let dir = match prefix {
            Some(p) => format!("{}/", self.path_of(p)?),
            None => String::new(),
        };
        let exchange = Exchange::listing(self.listing_limits);
        let listed = exchange.observe(self.list_files(&dir)).await;
        let mut keys = match (listed, exchange.listing_cap()) {
            (_, Some(cap)) | (Ok(Err(cap)), None) => return Err(cap.error()),
            (Ok(Ok(keys)), None) => keys,
            (Err(e), None) => {
                let last = exchange.attempts().last().copied();
                let f = classify_list(e.kind(), last.as_ref());
                return Err(self.error(None, f, Witness::read(e.kind(), last)));
            }
        };
        if let Some(p) = prefix {
            // A listing of `p/` leaves out the object `p` itself.
            if self.fetch(p).await?.is_some() {
                keys.push(p.clone());
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// The fence keys of the files OpenDAL's lister reads under `dir`, entry by entry (it
    /// asks for a page only when the last one is used up), stopping at the limit of names:
    /// every name counts, also those that are no fence key; only `dir` itself, which OpenDAL
    /// may list first, does not. The transport counts the pages and bytes.
    async fn list_files(&self, dir: &str) -> opendal::Result<Result<Vec<Key>, ListingCap>> {
        let opts = ListOptions {
            recursive: true,
            ..ListOptions::default()
        };
        let mut lister = self.op.lister_options(dir, opts).await?;
        let (mut names, mut keys) = (0usize, Vec::new());
        while let Some(entry) = lister.try_next().await? {
            if entry.path() == dir {
                continue;
            }
            names += 1;
            if names > self.listing_limits.names {
                return Ok(Err(ListingCap::Names(self.listing_limits.names)));
            }
            if entry.metadata().mode() == EntryMode::FILE {
                keys.extend(Key::new(entry.path()).ok());
            }
        }
        Ok(Ok(keys))
    }
}

fn no_version(key: &Key) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        "the store answered a read without a usable version token",
    )
    .with_key(key)
    .not_committed()
}

#[async_trait]
impl ConditionalStore for OpendalStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.fetch(key).await
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        if body.len() > self.record_limit {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "body larger than the record limit ({} bytes)",
                    self.record_limit
                ),
            )
            .with_key(key)
            .not_committed());
        }
        self.conditional_put(key, body, &guard).await
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        if !self.dialect.conditional_delete {
            return Err(fence_core::store::delete_unsupported(key));
        }
        let path = self.path_of(key)?;
        let mut opts = DeleteOptions::default();
        match self.dialect.token {
            Token::ETag => opts.if_match = Some(version.as_str().to_string()),
            Token::Version => opts.if_version_match = Some(version.as_str().to_string()),
        }
        let delete = async { self.op.delete_options(&path, opts).await.map(|()| None) };
        match self.mutate(key, Guard::Match, delete, false).await? {
            Verdict::Applied(_) => Ok(DeleteOutcome::Deleted),
            _ => Ok(DeleteOutcome::Rejected),
        }
    }

    /// One unconditional delete: right for an object written once under a name never
    /// reused. Absent is `Ok`.
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        let path = self.path_of(key)?;
        let delete = async { self.op.delete(&path).await.map(|()| None) };
        self.mutate(key, Guard::Absent, delete, false)
            .await
            .map(|_| ())
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.list_keys(prefix).await.map_err(|e| e.listing(prefix))
    }

    fn capabilities(&self) -> Capabilities {
        let base = match self.dialect.conditional_delete {
            true => Capabilities::full(),
            false => Capabilities::without_conditional_delete(),
        };
        let caps = base.with_max_body(self.record_limit);
        match self.dialect.content_versions {
            true => caps.with_content_versions(),
            false => caps,
        }
    }
}

impl fmt::Debug for OpendalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = self.op.info();
        f.debug_struct("OpendalStore")
            .field("scheme", &self.dialect.scheme)
            .field("name", &info.name())
            .field("root", &info.root())
            .field("dialect", &self.dialect)
            .field("cas_timeout", &self.cas_timeout)
            .finish_non_exhaustive()
    }
}

/// What OpenDAL and the wire said about a failed request: the chained source of fence's
/// errors, with nothing of OpenDAL's own error text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Witness {
    opendal: Option<opendal::ErrorKind>,
    wire: Option<crate::transport::Outcome>,
}

impl Witness {
    fn of(ended: &Ended, attempts: &[crate::transport::Attempt]) -> Witness {
        Witness {
            opendal: match ended {
                Ended::Failed(kind) => Some(*kind),
                _ => None,
            },
            wire: attempts.last().map(|a| a.outcome),
        }
    }

    fn read(kind: opendal::ErrorKind, last: Option<crate::transport::Attempt>) -> Witness {
        Witness {
            opendal: Some(kind),
            wire: last.map(|a| a.outcome),
        }
    }
}

impl fmt::Display for Witness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::transport::Outcome;
        match self.opendal {
            Some(kind) => write!(f, "OpenDAL {kind}")?,
            None => write!(f, "OpenDAL returned")?,
        }
        match self.wire {
            None => write!(f, "; nothing reached the network"),
            Some(Outcome::Answer(status)) => write!(f, "; the store answered HTTP {status}"),
            Some(Outcome::Pending) => write!(f, "; the last request was never answered"),
            Some(Outcome::NotSent) => write!(f, "; the last request was not sent"),
            Some(Outcome::Connect) => write!(f, "; the connection could not be made"),
            Some(Outcome::Timeout) => write!(f, "; the last request timed out"),
            Some(Outcome::Broken) => write!(f, "; the connection broke"),
        }
    }
}

impl std::error::Error for Witness {}
