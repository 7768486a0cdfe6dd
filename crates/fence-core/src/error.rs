//! The one error type of fence: coarse, prescriptive kinds, the backend detail chained as
//! `source`, and — for writes — whether the write may have landed.

use std::fmt;

use crate::key::Key;

/// What went wrong, coarsely enough that a caller can decide what to do.
///
/// Backends map their dialect (HTTP statuses, errno values, SDK errors) onto these kinds; the
/// original error stays reachable through [`std::error::Error::source`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A key failed validation; nothing was sent.
    InvalidKey,
    /// A configuration or argument is invalid (bad URL, bad root directory, record too large).
    InvalidInput,
    /// The object does not exist where the operation needs it to.
    NotFound,
    /// The store refused our credentials or our permissions.
    PermissionDenied,
    /// The store could not be reached or answered with a server error.
    Unavailable,
    /// The store answered "conflicting conditional operation in flight" (S3 409): nothing of
    /// ours landed; retrying with backoff is safe.
    Conflict,
    /// The request outlived its deadline.
    Timeout,
    /// A stored record could not be decoded. Nothing was overwritten.
    Corrupt,
    /// The store lacks a capability the operation needs, or lies about one it claims.
    Unsupported,
    /// Another live holder has the lease or the cell; try again later.
    Busy,
    /// Our authority is gone: the lease is lost or the epoch was superseded.
    Fenced,
    /// Anything else.
    Other,
}

impl ErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidKey => "invalid key",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::NotFound => "not found",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::Unavailable => "store unavailable",
            ErrorKind::Conflict => "conflicting conditional write",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Corrupt => "corrupt record",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Busy => "held by another",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Other => "error",
        }
    }
}

/// Whether a failed write may have been applied by the store.
///
/// [`Commit::Ambiguous`] is the default: an error is only [`Commit::NotCommitted`] when the
/// backend can prove that nothing was sent or nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Commit {
    /// Provably not applied: safe to retry as-is.
    NotCommitted,
    /// May have been applied: resolve by reading back and comparing the write's identity.
    #[default]
    Ambiguous,
}

/// The error of every fence operation.
///
/// ```
/// use fence_core::{Error, ErrorKind, Commit};
/// let e = Error::new(ErrorKind::Unavailable, "connection refused").not_committed();
/// assert_eq!(e.kind(), ErrorKind::Unavailable);
/// assert_eq!(e.commit(), Commit::NotCommitted);
/// assert!(e.is_retryable());
/// ```
pub struct Error {
    kind: ErrorKind,
    commit: Commit,
    message: String,
    key: Option<Key>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind`. Its commit state is [`Commit::Ambiguous`] until proven otherwise.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            commit: Commit::Ambiguous,
            message: message.into(),
            key: None,
            source: None,
        }
    }

    /// Marks the error as provably not committed.
    #[must_use]
    pub fn not_committed(mut self) -> Self {
        self.commit = Commit::NotCommitted;
        self
    }

    /// Sets the commit state explicitly.
    #[must_use]
    pub fn with_commit(mut self, commit: Commit) -> Self {
        self.commit = commit;
        self
    }

    /// Names the key the error is about.
    #[must_use]
    pub fn with_key(mut self, key: &Key) -> Self {
        self.key = Some(key.clone());
        self
    }

    /// Names `prefix` unless the error already names a key: what a failed listing of
    /// `prefix` returns, so that the caller can say which listing failed (a listing of the
    /// whole store, `None`, names nothing).
    ///
    /// ```
    /// use fence_core::{Error, ErrorKind, Key};
    /// let cells = Key::new("cells").unwrap();
    /// let err = Error::new(ErrorKind::PermissionDenied, "access denied").listing(Some(&cells));
    /// assert_eq!(err.key(), Some(&cells));
    /// ```
    #[must_use]
    pub fn listing(self, prefix: Option<&Key>) -> Self {
        match (&self.key, prefix) {
            (None, Some(p)) => self.with_key(p),
            _ => self,
        }
    }

    /// Chains the backend's own error. It must not contain secrets.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether a write that failed with this error may have landed.
    pub fn commit(&self) -> Commit {
        self.commit
    }

    /// Shorthand for `commit() == Commit::Ambiguous`.
    pub fn is_ambiguous(&self) -> bool {
        self.commit == Commit::Ambiguous
    }

    /// The key the error is about, if any.
    pub fn key(&self) -> Option<&Key> {
        self.key.as_ref()
    }

    /// The human-readable message (without the kind or the key).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether repeating the same operation unchanged may succeed and is safe.
    ///
    /// True only for transient kinds whose write provably did not land (or reads).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Unavailable | ErrorKind::Conflict | ErrorKind::Timeout
        ) && self.commit == Commit::NotCommitted
    }

    /// A [`ErrorKind::Corrupt`] error naming `key`.
    pub fn corrupt(key: &Key, message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corrupt, message)
            .with_key(key)
            .not_committed()
    }

    /// A [`ErrorKind::Fenced`] error.
    pub fn fenced(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Fenced, message).not_committed()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.as_str())?;
        if let Some(key) = &self.key {
            write!(f, " at {key}")?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if self.commit == Commit::Ambiguous && is_write_relevant(self.kind) {
            write!(f, " (the write may have landed)")?;
        }
        Ok(())
    }
}

fn is_write_relevant(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Unavailable | ErrorKind::Timeout | ErrorKind::Other
    )
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind)
            .field("commit", &self.commit)
            .field("message", &self.message);
        if let Some(key) = &self.key {
            d.field("key", &key.as_str());
        }
        if let Some(source) = &self.source {
            d.field("source", &source.to_string());
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// Result alias of fence.
pub type Result<T, E = Error> = std::result::Result<T, E>;
