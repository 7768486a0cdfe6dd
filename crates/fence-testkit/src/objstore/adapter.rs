//! [`ObjectStoreAdapter`]: the reference [`ConditionalStore`] over any
//! [`ObjectStore`](https://docs.rs/object_store/0.14/object_store/trait.ObjectStore.html).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::store::delete_unsupported;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key, PutOutcome,
    Stored, Version,
};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};

/// A [`ConditionalStore`] over any [`ObjectStore`](https://docs.rs/object_store/0.14/object_store/trait.ObjectStore.html) with conditional puts (`PutMode::Create`
/// and `PutMode::Update`): the adapter that docs/testkit.md ("Writing an adapter") walks
/// through, and the kit's own subject when it runs faults below an adapter
/// ([`FaultyObjectStore`](super::FaultyObjectStore)).
///
/// - A [`Version`] carries both of object_store's tokens (`e_tag` for S3 and Azure, `version`
///   for GCS), so `Update` gets back what the store needs.
/// - `AlreadyExists` (create) and `Precondition` (update) are rejections; `NotImplemented`
///   and `NotSupported` are [`ErrorKind::Unsupported`], not committed; anything else on a
///   write is ambiguous: object_store does not say whether the request was sent.
/// - No conditional delete: `delete` is [`delete_unsupported`]; `delete_immutable` is a plain
///   delete.
/// - `list(prefix)` adds the object at `prefix` itself, which object_store's `list` leaves out.
///
/// Give it a client with retries off for conditional writes (object_store retries 5xx and 429
/// of conditional puts too): `RetryConfig { max_retries: 0, .. }` on the cloud builders.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence_core::{CasGuard, ConditionalStore, Key, PutOutcome};
/// use fence_testkit::objstore::ObjectStoreAdapter;
/// let store = ObjectStoreAdapter::new(Arc::new(object_store::memory::InMemory::new()));
/// let key = Key::new("a/b").unwrap();
/// assert!(matches!(store.put(&key, "x".into(), CasGuard::Absent).await, Ok(PutOutcome::Applied(_))));
/// assert_eq!(store.put(&key, "y".into(), CasGuard::Absent).await.unwrap(), PutOutcome::Rejected);
/// assert_eq!(store.list(Some(&key)).await.unwrap(), [key]);
/// # });
/// ```
#[derive(Debug)]
pub struct ObjectStoreAdapter {
    inner: Arc<dyn ObjectStore>,
}

impl ObjectStoreAdapter {
    /// The adapter over `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        ObjectStoreAdapter { inner }
    }
}

/// Both of object_store's tokens in one fence version: `<e_tag>\n<version>` (either may be
/// empty; a store that gives neither has not said what it applied).
fn version_of(e_tag: Option<&str>, version: Option<&str>) -> Result<Version, Error> {
    if e_tag.is_none() && version.is_none() {
        let e = Error::new(ErrorKind::Unsupported, "the store gave no version token");
        return Err(e);
    }
    Version::new(format!(
        "{}\n{}",
        e_tag.unwrap_or_default(),
        version.unwrap_or_default()
    ))
}

fn update_of(version: &Version) -> UpdateVersion {
    let (e_tag, v) = version
        .as_str()
        .split_once('\n')
        .unwrap_or((version.as_str(), ""));
    let token = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    UpdateVersion {
        e_tag: token(e_tag),
        version: token(v),
    }
}

fn path_of(key: &Key) -> Result<Path, Error> {
    Path::parse(key.as_str()).map_err(|e| {
        Error::new(ErrorKind::InvalidKey, "not an object_store path")
            .with_key(key)
            .with_source(e)
            .not_committed()
    })
}

/// A failed write: a rejection, an unsupported mode, or ambiguous.
fn put_failure(key: &Key, e: object_store::Error) -> Result<PutOutcome, Error> {
    use object_store::Error as E;
    let (kind, committed) = match &e {
        E::AlreadyExists { .. } | E::Precondition { .. } => return Ok(PutOutcome::Rejected),
        E::NotImplemented { .. } | E::NotSupported { .. } => (ErrorKind::Unsupported, false),
        E::InvalidPath { .. } => (ErrorKind::InvalidKey, false),
        _ => (ErrorKind::Unavailable, true),
    };
    let e = Error::new(kind, "conditional put failed")
        .with_key(key)
        .with_source(e);
    Err(if committed { e } else { e.not_committed() })
}

/// A failed read changes nothing: never ambiguous.
fn read_failure(key: Option<&Key>, e: object_store::Error) -> Error {
    let kind = match &e {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => ErrorKind::PermissionDenied,
        _ => ErrorKind::Unavailable,
    };
    let e = Error::new(kind, "read failed")
        .with_source(e)
        .not_committed();
    match key {
        Some(key) => e.with_key(key),
        None => e,
    }
}

#[async_trait]
impl ConditionalStore for ObjectStoreAdapter {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let found = self
            .inner
            .get_opts(&path_of(key)?, GetOptions::default())
            .await;
        let found = match found {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(read_failure(Some(key), e)),
        };
        let version = version_of(found.meta.e_tag.as_deref(), found.meta.version.as_deref())?;
        let body = found
            .bytes()
            .await
            .map_err(|e| read_failure(Some(key), e))?;
        Ok(Some(Stored { body, version }))
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let mode = match &guard {
            CasGuard::Absent => PutMode::Create,
            CasGuard::Match(v) => PutMode::Update(update_of(v)),
        };
        let opts = PutOptions::from(mode);
        let path = path_of(key)?;
        match self
            .inner
            .put_opts(&path, PutPayload::from(body), opts)
            .await
        {
            Ok(done) => {
                let version = version_of(done.e_tag.as_deref(), done.version.as_deref());
                // A write applied without a version: we cannot tell what we stored.
                version
                    .map(PutOutcome::Applied)
                    .map_err(|e| e.with_key(key).with_commit(fence_core::Commit::Ambiguous))
            }
            Err(e) => put_failure(key, e),
        }
    }

    async fn delete(&self, key: &Key, _version: &Version) -> Result<DeleteOutcome, Error> {
        Err(delete_unsupported(key))
    }

    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        match self.inner.delete(&path_of(key)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::new(ErrorKind::Unavailable, "delete failed")
                .with_key(key)
                .with_source(e)),
        }
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let at = prefix.map(path_of).transpose()?;
        let listed: Vec<_> = self
            .inner
            .list(at.as_ref())
            .try_collect()
            .await
            .map_err(|e| read_failure(prefix, e))?;
        let mut keys: Vec<Key> = listed
            .iter()
            .filter_map(|meta| Key::new(meta.location.as_ref()).ok())
            .collect();
        if let Some(prefix) = prefix {
            if self.get(prefix).await?.is_some() {
                keys.push(prefix.clone());
            }
        }
        keys.sort();
        Ok(keys)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::without_conditional_delete()
    }
}
