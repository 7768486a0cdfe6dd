//! The store contract: one conditional request at a time, three possible results.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, ErrorKind};
use crate::key::Key;

/// The default record limit of every backend (5 MiB): the largest body a store's `put`
/// accepts and the most a `get` reads before it stops and answers
/// [`ErrorKind::Corrupt`]. Each backend has one setting for it (its builder's
/// `with_record_limit`), declared as [`Capabilities::max_body`]. fence's own records are a
/// few hundred bytes; the limit bounds what a hostile or broken store can make a process
/// hold in memory.
pub const DEFAULT_RECORD_LIMIT: usize = 5 * 1024 * 1024;

/// The error of every backend's `put` of a body of `len` bytes, over its record limit
/// `limit`: [`ErrorKind::InvalidInput`] naming the key, not committed (refused before any
/// I/O).
///
/// ```
/// use fence_core::{store::over_put_limit, Commit, ErrorKind, Key};
/// let err = over_put_limit(&Key::new("k").unwrap(), 6, 5);
/// assert_eq!((err.kind(), err.commit()), (ErrorKind::InvalidInput, Commit::NotCommitted));
/// ```
pub fn over_put_limit(key: &Key, len: usize, limit: usize) -> Error {
    let message = format!(
        "a body of {len} bytes is over the store's record limit of {limit} bytes \
         (with_record_limit raises it)"
    );
    Error::new(ErrorKind::InvalidInput, message)
        .with_key(key)
        .not_committed()
}

/// An opaque version token of one stored object: an S3 ETag, a GCS generation, a file
/// version. Never empty. Compared only for equality.
///
/// ```
/// use fence_core::Version;
/// let v = Version::new("\"9b2cf535f27731c974343645a3985328\"").unwrap();
/// assert!(Version::new("").is_err());
/// assert_eq!(v, v.clone());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Version(Arc<str>);

impl Version {
    /// Wraps a token exactly as the store returned it. An empty token is an error: a store
    /// that answers a write without a version has not told us what it applied.
    pub fn new(token: impl AsRef<str>) -> Result<Version, Error> {
        let token = token.as_ref();
        if token.is_empty() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "the store returned an empty version token",
            ));
        }
        Ok(Version(Arc::from(token)))
    }

    /// The token as the store returned it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({:?})", &*self.0)
    }
}

/// The condition of a write.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CasGuard {
    /// Create only if no object exists at the key (S3 `If-None-Match: *`, GCS
    /// `ifGenerationMatch=0`).
    Absent,
    /// Replace only if the current version is exactly this one (S3 `If-Match`, GCS
    /// `ifGenerationMatch=<generation>`).
    Match(Version),
}

/// The answer to a conditional write that reached a verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// The store accepted this body; it now has this version, different from every earlier
    /// version of the key.
    Applied(Version),
    /// The store proved the condition false; nothing of ours landed.
    Rejected,
}

/// The answer to a conditional delete that reached a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The object at exactly that version is gone.
    Deleted,
    /// The object was absent or at another version; nothing was deleted.
    Rejected,
}

/// What a store told of a key's current object along with its answer to a conditional write
/// ([`ConditionalStore::put_with_current`]).
///
/// ```
/// use fence_core::store::Current;
/// assert_eq!(Current::default(), Current::Untold);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Current {
    /// Nothing: the answer carried no object (an S3 412, and every answer but a rejection).
    #[default]
    Untold,
    /// No object at the key when the condition was checked.
    Absent,
    /// The object the condition was checked against.
    Found(Stored),
}

/// A stored object: its bytes and its current version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The object's bytes.
    pub body: Bytes,
    /// The version those bytes carry.
    pub version: Version,
}

/// What a store can do beyond the required contract; checked up front, never assumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// `delete` with a version condition is atomic. Without it, `delete` answers
    /// [`ErrorKind::Unsupported`] and callers release by writing a tombstone with `Match`.
    pub conditional_delete: bool,
    /// The largest body `put` accepts, if bounded.
    pub max_body: Option<usize>,
    /// Versions are derived from the bytes (S3 ETags are content hashes): rewriting
    /// identical bytes yields the same version, so `Match` cannot tell an intervening
    /// identical write apart (ABA). Every body fence writes is unique (a per-write nonce, or
    /// a unique object name), so fence is safe on such a store; the testkit checks this
    /// capability instead of failing the store, and the probe reports it.
    pub content_versions: bool,
    /// Every rejection of [`ConditionalStore::put_with_current`] carries the object the
    /// condition was checked against (DynamoDB's `ReturnValuesOnConditionCheckFailure`): a
    /// lost compare-and-swap needs no read to learn why, and re-sending a write whose answer
    /// was lost settles it in one request (applied, or rejected showing whether our write is
    /// the one stored).
    pub current_on_reject: bool,
}

impl Capabilities {
    /// Capabilities of a store with conditional delete and no body bound.
    pub const fn full() -> Self {
        Capabilities {
            conditional_delete: true,
            max_body: None,
            content_versions: false,
            current_on_reject: false,
        }
    }

    /// Capabilities of a store without conditional delete (most S3-compatible stores).
    pub const fn without_conditional_delete() -> Self {
        Capabilities {
            conditional_delete: false,
            max_body: None,
            content_versions: false,
            current_on_reject: false,
        }
    }

    /// The same, with a body bound.
    #[must_use]
    pub const fn with_max_body(mut self, max: usize) -> Self {
        self.max_body = Some(max);
        self
    }

    /// The same, declaring content-derived versions ([`Capabilities::content_versions`]).
    #[must_use]
    pub const fn with_content_versions(mut self) -> Self {
        self.content_versions = true;
        self
    }

    /// The same, declaring rejections that carry the current object
    /// ([`Capabilities::current_on_reject`]).
    #[must_use]
    pub const fn with_current_on_reject(mut self) -> Self {
        self.current_on_reject = true;
        self
    }
}

/// A key-value object store with conditional writes: the one thing fence needs from a backend.
///
/// Object safe: `Arc<dyn ConditionalStore>` is how the rest of fence holds a store.
///
/// # Contract
///
/// Every implementation guarantees, per key:
///
/// - **`get`** returns `None` or the current body with its [`Version`]. The version is opaque,
///   never empty, and identifies exactly those bytes at that moment. Reads may be retried by
///   the implementation.
/// - **`put`** with [`CasGuard::Absent`] creates only if no object exists; with
///   [`CasGuard::Match`] replaces only if the current version equals the guard (a missing
///   object does not match). The answer is:
///   - `Ok(PutOutcome::Applied(v))`: this body is stored with version `v`, and `v` differs
///     from every earlier version of the key — also when identical bytes are rewritten and
///     after a delete and re-create (no ABA);
///   - `Ok(PutOutcome::Rejected)`: the store *proved* the condition false; nothing landed;
///   - `Err(e)` with [`Error::commit`] = `NotCommitted` only when nothing can have been
///     written (refused before sending, a 409 conditional conflict, a permission error), and
///     `Ambiguous` otherwise (timeout, reset, 5xx after sending, an answer without a version).
///     Ambiguous is the default for anything unclassified.
/// - **`put_with_current`** is `put` whose rejection may also tell the object the condition was
///   checked against, from the same answer ([`Current::Found`] or [`Current::Absent`]); a
///   store declaring [`Capabilities::current_on_reject`] tells it with every rejection it
///   can parse, every other answer is [`Current::Untold`]. The provided implementation calls
///   `put` and tells nothing.
/// - **No hidden retries of writes**: an implementation never repeats a conditional write
///   after the request may have reached the store (a retry after a lost success is answered
///   "precondition failed" on our own write).
/// - **`delete`** removes the object only if its current version equals `version`, if
///   [`Capabilities::conditional_delete`]; otherwise it answers [`ErrorKind::Unsupported`]
///   without I/O.
/// - **`delete_immutable`** removes an object that is written once (with
///   [`CasGuard::Absent`], under a name never reused) and never rewritten, without a
///   condition: for such an object an unconditional delete that lands late can only remove
///   that same object. The provided implementation reads the version and deletes with it
///   (stores with conditional delete); stores without conditional delete override it with
///   their plain delete. Deleting an absent object is `Ok`.
/// - **`list`** returns the keys equal to `prefix` or under `prefix/` (all keys for `None`),
///   sorted. It is for inspection only and never decides anything about safety.
/// - **Linearizable**: every history of concurrent `get`/`put`/`delete` on one key has a legal
///   sequential order consistent with real time.
/// - Keys arrive validated ([`Key`]); an implementation may narrow them further (say, by
///   length) with [`ErrorKind::InvalidKey`] before any I/O.
/// - Errors carry a coarse [`ErrorKind`]: `NotFound`, `PermissionDenied` (naming the bucket or
///   root, never a secret), `Unavailable`, `Timeout`, `Conflict`, `Corrupt`, `Unsupported`.
///
/// `fence-testkit` checks all of this against a live store.
#[async_trait]
pub trait ConditionalStore: Send + Sync + fmt::Debug {
    /// Reads the current body and version, or `None` if absent.
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error>;

    /// Writes `body` if `guard` holds. See the trait's contract for the three results.
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error>;

    /// Writes `body` if `guard` holds, as [`put`](Self::put) does; a rejection may also tell
    /// the object the condition was checked against (see the trait's contract).
    async fn put_with_current(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        let outcome = self.put(key, body, guard).await?;
        Ok((outcome, Current::Untold))
    }

    /// Deletes `key` if its current version is `version`.
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error>;

    /// Deletes an immutable object (see the trait's contract): `Ok` also when it is absent.
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        if !self.capabilities().conditional_delete {
            return Err(delete_unsupported(key));
        }
        match self.get(key).await? {
            None => Ok(()),
            Some(stored) => self.delete(key, &stored.version).await.map(|_| ()),
        }
    }

    /// Lists keys equal to or under `prefix`, sorted. For inspection only.
    ///
    /// A listing the store would not give in full (a refusal, a missing bucket, a directory
    /// it cannot read) is an error naming `prefix` ([`Error::listing`]), never a shorter or
    /// empty list: an empty list says the store holds nothing there.
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error>;

    /// What this store can do beyond the required contract.
    fn capabilities(&self) -> Capabilities;
}

#[async_trait]
impl<S: ConditionalStore + ?Sized> ConditionalStore for Arc<S> {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        (**self).get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        (**self).put(key, body, guard).await
    }
    async fn put_with_current(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        (**self).put_with_current(key, body, guard).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        (**self).delete(key, version).await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        (**self).delete_immutable(key).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        (**self).list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
}

/// The error a store without conditional delete answers to `delete`.
pub fn delete_unsupported(key: &Key) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        "this store has no conditional delete; write a tombstone with CasGuard::Match instead",
    )
    .with_key(key)
    .not_committed()
}
