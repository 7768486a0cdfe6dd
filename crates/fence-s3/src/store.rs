//! [`S3Store`]: the [`ConditionalStore`] contract over S3 conditional PUTs.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::store::delete_unsupported;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Entropy, Error, ErrorKind, Key,
    PutOutcome, Stored, Version,
};
use futures::TryStreamExt;
use object_store::aws::AmazonS3;
use object_store::path::{Path, PathPart};
use object_store::{GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};
use percent_encoding::percent_decode_str;

use crate::builder::S3StoreBuilder;
use crate::classify::{classify_put, classify_read, Failure, PutVerdict};
use crate::nonce;
use crate::observe::Exchange;

/// The largest body of one S3 PUT (5 GiB) less the nonce trailer; fence records are a few
/// hundred bytes.
const MAX_BODY: usize = 5 * 1024 * 1024 * 1024 - nonce::TRAILER_LEN;

/// An S3 bucket (optionally under a key prefix) as a fence [`ConditionalStore`].
///
/// Creates with `If-None-Match: *`, replaces with `If-Match: <etag>`, and passes ETags back
/// exactly as the store returned them. Conditional writes go through their own client (own
/// connection pool, no retries, timeouts derived from the lease TTL) and are classified here,
/// not by object_store; reads and lists use a second client that retries.
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
    prefix: Vec<String>,
    cas_timeout: Duration,
    entropy: Entropy,
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
        prefix: Vec<String>,
        cas_timeout: Duration,
    ) -> Self {
        S3Store {
            cas,
            read,
            bucket,
            prefix,
            cas_timeout,
            entropy: Entropy::from_os(),
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix every key is stored under (empty for none).
    pub fn prefix(&self) -> String {
        self.prefix.join("/")
    }

    /// The bound of one conditional write.
    pub fn cas_timeout(&self) -> Duration {
        self.cas_timeout
    }

    fn path_of(&self, key: &Key) -> Path {
        let segments = self.prefix.iter().map(String::as_str).chain(key.segments());
        Path::from_iter(segments.map(PathPart::from))
    }

    fn prefix_path(&self) -> Option<Path> {
        (!self.prefix.is_empty())
            .then(|| Path::from_iter(self.prefix.iter().map(|s| PathPart::from(s.as_str()))))
    }

    /// The fence key of a listed object, if it lies under the prefix and is a valid key.
    fn key_of(&self, path: &Path) -> Option<Key> {
        let mut parts = path.parts();
        for expected in &self.prefix {
            let part = parts.next()?;
            if decode(part.as_ref())? != *expected {
                return None;
            }
        }
        let segments: Option<Vec<String>> = parts.map(|p| decode(p.as_ref())).collect();
        Key::new(segments?.join("/")).ok()
    }

    fn error(&self, key: Option<&Key>, f: Failure, source: object_store::Error) -> Error {
        let message = match f.kind {
            ErrorKind::PermissionDenied | ErrorKind::NotFound | ErrorKind::InvalidInput => {
                format!("bucket {:?}: {}", self.bucket, f.why)
            }
            _ => f.why.to_string(),
        };
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
        body: Bytes,
        guard: &CasGuard,
    ) -> Result<PutOutcome, Error> {
        let exchange = Exchange::default();
        let mode = match guard {
            CasGuard::Absent => PutMode::Create,
            CasGuard::Match(version) => PutMode::Update(UpdateVersion {
                e_tag: Some(version.as_str().to_string()),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            extensions: exchange.extensions(),
            ..PutOptions::default()
        };
        let path = self.path_of(key);
        let result = self
            .cas
            .put_opts(
                &path,
                PutPayload::from(nonce::seal(&body, &self.entropy)),
                opts,
            )
            .await;
        let e_tag = result.as_ref().ok().map(|r| r.e_tag.as_deref());
        let is_create = matches!(guard, CasGuard::Absent);
        match classify_put(is_create, exchange.last().as_ref(), e_tag) {
            PutVerdict::Applied(tag) => Ok(PutOutcome::Applied(Version::new(tag)?)),
            PutVerdict::Rejected => Ok(PutOutcome::Rejected),
            PutVerdict::Conflict => self.resolve_conflict(key, guard).await,
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
    /// read decides: if the condition is false now, "rejected" is the truthful answer (it
    /// is linearized at that read); otherwise the caller may retry with backoff.
    async fn resolve_conflict(&self, key: &Key, guard: &CasGuard) -> Result<PutOutcome, Error> {
        let current = self.get(key).await.ok();
        let condition_false = match (guard, &current) {
            (_, None) => false,
            (CasGuard::Absent, Some(Some(_))) => true,
            (CasGuard::Absent, Some(None)) => false,
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

    async fn read(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let exchange = Exchange::default();
        let opts = GetOptions {
            extensions: exchange.extensions(),
            ..GetOptions::default()
        };
        let fail = |e: object_store::Error| match classify_read(exchange.last().as_ref()) {
            Some(f) => Err(self.error(Some(key), f, e)),
            None => Ok(None),
        };
        let got = match self.read.get_opts(&self.path_of(key), opts).await {
            Ok(got) => got,
            Err(e) => return fail(e),
        };
        let tag = got.meta.e_tag.clone().unwrap_or_default();
        let body = match got.bytes().await {
            Ok(body) => body,
            Err(e) => return fail(e).and(Err(unreadable(key))),
        };
        let version = Version::new(tag).map_err(|e| e.with_key(key).not_committed())?;
        Ok(Some(Stored {
            body: nonce::open(body),
            version,
        }))
    }

    async fn list_paths(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let under = prefix
            .map(|p| self.path_of(p))
            .or_else(|| self.prefix_path());
        let metas: Vec<_> = self
            .read
            .list(under.as_ref())
            .try_collect()
            .await
            .map_err(|e| self.list_error(e))?;
        let mut keys: Vec<Key> = metas
            .iter()
            .filter_map(|m| self.key_of(&m.location))
            .collect();
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

    fn list_error(&self, e: object_store::Error) -> Error {
        // object_store folds list failures into `Generic`; its message keeps the S3 code.
        let text = e.to_string();
        let (kind, why) = if text.contains("NoSuchBucket") {
            (ErrorKind::NotFound, "the bucket does not exist")
        } else if text.contains("AccessDenied") || text.contains("SignatureDoesNotMatch") {
            (ErrorKind::PermissionDenied, "access denied")
        } else {
            (ErrorKind::Unavailable, "listing failed")
        };
        Error::new(kind, format!("bucket {:?}: {why}", self.bucket))
            .with_source(e)
            .not_committed()
    }
}

fn decode(part: &str) -> Option<String> {
    percent_decode_str(part)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

fn unreadable(key: &Key) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the object's body could not be read",
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
        if body.len() > MAX_BODY {
            return Err(
                Error::new(ErrorKind::InvalidInput, "body larger than one S3 PUT")
                    .with_key(key)
                    .not_committed(),
            );
        }
        self.conditional_put(key, body, &guard).await
    }

    async fn delete(&self, key: &Key, _version: &Version) -> Result<DeleteOutcome, Error> {
        Err(delete_unsupported(key))
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.list_paths(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::without_conditional_delete().with_max_body(MAX_BODY)
    }
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix())
            .field("cas_timeout", &self.cas_timeout)
            .finish_non_exhaustive()
    }
}
