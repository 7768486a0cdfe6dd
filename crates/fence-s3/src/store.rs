//! [`S3Store`]: the [`ConditionalStore`] contract over S3 conditional PUTs.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::store::delete_unsupported;
use fence_core::{
    Capabilities, CasGuard, Clock, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key,
    PutOutcome, Stored, Version,
};
use fence_wire::body::{over_put_limit, read_record};
use fence_wire::limits::StoreLimits;
use fence_wire::names::ObjectNames;
use object_store::aws::AmazonS3;
use object_store::path::Path;
use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};

use crate::builder::S3StoreBuilder;
use crate::classify::{
    classify_delete, classify_list, classify_put, classify_read, strong_etag, Failure, PutVerdict,
};
use fence_wire::exchange::{list_names, Exchange};

/// S3's bound of an object key: 1024 bytes of UTF-8.
const MAX_OBJECT_NAME: usize = 1024;

/// An S3 bucket (optionally under a key prefix) as a fence [`ConditionalStore`].
///
/// Creates with `If-None-Match: *`, replaces with `If-Match: <etag>`, and passes ETags back
/// exactly as the store returned them. Bodies are stored as given, under object keys that are
/// the fence key's UTF-8 bytes (`prefix/key`). Conditional writes go through their own client
/// (own connection pool, no retries, timeouts derived from the lease TTL) and are classified
/// here, not by object_store; reads and lists use a second client that retries. Neither
/// follows redirects.
///
/// ```no_run
/// # async fn demo() -> Result<(), fence_core::Error> {
/// use fence_core::{CasGuard, ConditionalStore, Key, PutOutcome};
/// let store = fence_s3::S3Store::builder()
///     .with_url("s3://my-bucket/fence")
///     .with_region("eu-west-1")
///     .build()?;
/// let key = Key::new("nodes/n1.json")?;
/// match store.put(&key, "{}".into(), CasGuard::Absent).await? {
///     PutOutcome::Applied(version) => println!("created at {version}"),
///     PutOutcome::Rejected => println!("someone else was first"),
/// }
/// # Ok(()) }
/// ```
pub struct S3Store {
    cas: AmazonS3,
    read: AmazonS3,
    bucket: String,
    names: ObjectNames,
    cas_timeout: Duration,
    limits: StoreLimits,
    clock: Clock,
}

impl S3Store {
    /// A builder with nothing set.
    pub fn builder() -> S3StoreBuilder {
        S3StoreBuilder::new()
    }

    /// A builder reading object_store's `AWS_*` environment variables.
    pub fn from_env() -> S3StoreBuilder {
        S3StoreBuilder::from_env()
    }

    pub(crate) fn new(
        cas: AmazonS3,
        read: AmazonS3,
        bucket: String,
        names: ObjectNames,
        cas_timeout: Duration,
        limits: StoreLimits,
    ) -> Self {
        S3Store {
            cas,
            read,
            bucket,
            names,
            cas_timeout,
            limits,
            clock: Clock::system(),
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix every key is stored under (empty for none).
    pub fn prefix(&self) -> String {
        self.names.prefix()
    }

    /// The bound of one conditional write.
    pub fn cas_timeout(&self) -> Duration {
        self.cas_timeout
    }

    /// The record limit: the largest body `put` sends and `get` reads.
    pub fn record_limit(&self) -> usize {
        self.limits.record
    }

    /// The S3 object key of `key`: `prefix/key`, exactly these UTF-8 bytes.
    ///
    /// ```
    /// let store = fence_s3::S3Store::builder()
    ///     .with_url("s3://b/fleet")
    ///     .with_credentials("AKID", "secret")
    ///     .build()
    ///     .unwrap();
    /// let key = fence_core::Key::new("cells/ñ 1/own.json").unwrap();
    /// assert_eq!(store.object_name(&key), "fleet/cells/ñ 1/own.json");
    /// ```
    pub fn object_name(&self, key: &Key) -> String {
        self.names.name(key)
    }

    /// The object_store path of `key`, refused before any I/O if S3 cannot store it.
    fn path_of(&self, key: &Key) -> Result<Path, Error> {
        let fits = |name: &str| name.len() <= MAX_OBJECT_NAME;
        let bound = "prefix + key is longer than S3's 1024-byte object keys";
        self.names.path(key, fits, bound)
    }

    fn error(&self, key: Option<&Key>, f: Failure, source: object_store::Error) -> Error {
        let message = match f.kind {
            ErrorKind::PermissionDenied | ErrorKind::NotFound | ErrorKind::InvalidInput => {
                format!("bucket {:?}: {}", self.bucket, f.why)
            }
            _ => f.why.to_string(),
        };
        // The source carries at most the S3 error code and message: the HTTP layer cut the
        // error bodies down before object_store saw them (see `fence_wire::exchange`).
        let e = Error::new(f.kind, message)
            .with_commit(f.commit)
            .with_source(source);
        match key {
            Some(key) => e.with_key(key),
            None => e,
        }
    }

    async fn conditional_put(
        &self,
        key: &Key,
        path: &Path,
        body: Bytes,
        guard: &CasGuard,
    ) -> Result<PutOutcome, Error> {
        let deadline_ms = self.clock.mono_ms() + millis(self.cas_timeout);
        let mode = match guard {
            CasGuard::Absent => PutMode::Create,
            CasGuard::Match(version) => PutMode::Update(UpdateVersion {
                e_tag: Some(version.as_str().to_string()),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let exchange = Exchange::default();
        let put = self.cas.put_opts(path, PutPayload::from(body), opts);
        let result = exchange.observe(put).await;
        let e_tag = result.as_ref().ok().map(|r| r.e_tag.as_deref());
        let is_create = matches!(guard, CasGuard::Absent);
        match classify_put(is_create, exchange.last().as_ref(), e_tag) {
            PutVerdict::Applied(tag) => Ok(PutOutcome::Applied(Version::new(tag)?)),
            PutVerdict::Rejected => Ok(PutOutcome::Rejected),
            PutVerdict::Conflict => self.resolve_conflict(key, path, guard, deadline_ms).await,
            PutVerdict::Failed(f) => Err(self.put_error(key, f, result.err())),
        }
    }

    fn put_error(&self, key: &Key, f: Failure, source: Option<object_store::Error>) -> Error {
        match source {
            Some(source) => self.error(Some(key), f, source),
            None => Error::new(f.kind, f.why)
                .with_commit(f.commit)
                .with_key(key),
        }
    }

    /// A 409 means a conflicting conditional write was in flight and ours did not land. One
    /// read decides: if the condition is false now, "rejected" is the truthful answer (it is
    /// linearized at that read); otherwise the caller may retry with backoff.
    ///
    /// That read is one attempt on the CAS client, bounded by what is left of the write's
    /// timeout (`deadline_ms`): a put never outlives its CAS timeout by more than scheduling.
    async fn resolve_conflict(
        &self,
        key: &Key,
        path: &Path,
        guard: &CasGuard,
        deadline_ms: u64,
    ) -> Result<PutOutcome, Error> {
        let left = Duration::from_millis(deadline_ms.saturating_sub(self.clock.mono_ms()));
        let current = match left.is_zero() {
            true => None,
            false => tokio::time::timeout(left, self.fetch(&self.cas, key, path))
                .await
                .ok()
                .and_then(Result::ok),
        };
        let condition_false = match (guard, &current) {
            (_, None) => false,
            (CasGuard::Absent, Some(found)) => found.is_some(),
            (CasGuard::Match(want), Some(found)) => {
                found.as_ref().map(|s| &s.version) != Some(want)
            }
        };
        if condition_false {
            return Ok(PutOutcome::Rejected);
        }
        Err(Error::new(
            ErrorKind::Conflict,
            "409: a conflicting conditional write was in flight; nothing of ours landed",
        )
        .with_key(key)
        .not_committed())
    }

    /// Reads `key` through the read client; a miss is checked against the legacy name.
    async fn read(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let path = self.path_of(key)?;
        match self.fetch(&self.read, key, &path).await? {
            Some(stored) => Ok(Some(stored)),
            None => self.refuse_legacy_name(key).await.map(|()| None),
        }
    }

    /// One GET of `path` through `client`: body and version from the same answer, the body
    /// read only up to the record limit. The answers may bring one byte more than the limit
    /// (so that a longer body shows as one), and the reading stops there.
    async fn fetch(
        &self,
        client: &AmazonS3,
        key: &Key,
        path: &Path,
    ) -> Result<Option<Stored>, Error> {
        let limit = self.limits.record;
        let exchange = Exchange::with_budget(limit as u64 + 1);
        let got = exchange
            .observe(client.get_opts(path, GetOptions::default()))
            .await;
        let got = match got {
            Ok(got) => got,
            Err(e) => {
                return match classify_read(exchange.last().as_ref()) {
                    Some(f) => Err(self.error(Some(key), f, e)),
                    None => Ok(None),
                }
            }
        };
        let tag = got.meta.e_tag.clone().unwrap_or_default();
        let size = Some(got.meta.size);
        let broken = |e| cut_body(key, e);
        let body = read_record(key, size, got.into_stream(), limit, broken);
        let body = exchange.observe(body).await?;
        if !strong_etag(&tag) {
            return Err(unusable_etag(key));
        }
        Ok(Some(Stored {
            body,
            version: Version::new(tag)?,
        }))
    }

    /// A key absent under its name may exist under the name fence used to give it. Reading
    /// it as absent would let a claim restart its epochs, so the operator is told instead.
    async fn refuse_legacy_name(&self, key: &Key) -> Result<(), Error> {
        let Some(legacy) = self.names.legacy(key) else {
            return Ok(());
        };
        match self.fetch(&self.read, key, &legacy).await? {
            None => Ok(()),
            Some(_) => Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "bucket {:?}: this key is stored under its percent-encoded name {:?} \
                     (written by an earlier fence); rename the object to {:?}",
                    self.bucket,
                    legacy.as_ref(),
                    self.object_name(key)
                ),
            )
            .with_key(key)
            .not_committed()),
        }
    }

    async fn list_paths(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let under = match prefix {
            Some(p) => Some(self.path_of(p)?),
            None => self.names.under(None)?,
        };
        let mut keys = self.list_under(under.as_ref()).await?;
        if let Some(p) = prefix {
            // S3 lists only what lies under `p/`; the key `p` itself needs its own look-up.
            if self.read(p).await?.is_some() {
                keys.push(p.clone());
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// The keys of every object under `under/` (the bucket's root for `None`), page by
    /// page (with the read client's retries), within the store's listing limits.
    async fn list_under(&self, under: Option<&Path>) -> Result<Vec<Key>, Error> {
        let keep = |name: &str| self.names.key_of(name);
        let failed = |x: &Exchange, e| self.error(None, classify_list(x.last().as_ref()), e);
        list_names(&self.read, under, self.limits.listing, keep, failed).await
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The answer started and then broke off: the object is fine, this read is not. Retryable.
fn cut_body(key: &Key, source: object_store::Error) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the answer broke off before the whole body arrived",
    )
    .with_key(key)
    .with_source(source)
    .not_committed()
}

fn unusable_etag(key: &Key) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        "the store answered a read without a usable ETag (none, several, empty or weak)",
    )
    .with_key(key)
    .not_committed()
}

#[async_trait]
impl ConditionalStore for S3Store {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.read(key).await
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        if body.len() > self.limits.record {
            return Err(over_put_limit(key, body.len(), self.limits.record));
        }
        let path = self.path_of(key)?;
        self.conditional_put(key, &path, body, &guard).await
    }

    async fn delete(&self, key: &Key, _version: &Version) -> Result<DeleteOutcome, Error> {
        Err(delete_unsupported(key))
    }

    /// One unconditional `DELETE` (S3 has no conditional delete in object_store): right for
    /// an object written once under a name never reused. Absent is `Ok`.
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        let path = self.path_of(key)?;
        let exchange = Exchange::default();
        match exchange.observe(self.read.delete(&path)).await {
            Ok(()) => Ok(()),
            Err(e) => match classify_delete(exchange.last().as_ref()) {
                None => Ok(()),
                Some(f) => Err(self.error(Some(key), f, e)),
            },
        }
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.list_paths(prefix).await.map_err(|e| e.listing(prefix))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::without_conditional_delete()
            .with_max_body(self.limits.record)
            .with_content_versions()
    }
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix())
            .field("cas_timeout", &self.cas_timeout)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}
