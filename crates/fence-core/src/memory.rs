//! `MemoryStore`: the reference linearizable store, a backend in its own right.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::Error;
use crate::key::Key;
use crate::store::{
    over_put_limit, Capabilities, CasGuard, ConditionalStore, DeleteOutcome, PutOutcome, Stored,
    Version, DEFAULT_RECORD_LIMIT,
};

/// An in-process store: every operation takes one lock, so histories are linearizable by
/// construction. Versions come from one counter per store and never repeat, also after a
/// delete and re-create of the same key.
///
/// Use it for tests, simulations and single-process fleets; it does not survive the process.
///
/// Its record limit is [`DEFAULT_RECORD_LIMIT`], as on every backend
/// ([`MemoryStore::with_record_limit`]).
///
/// ```
/// # tokio_test_block(async {
/// use fence_core::{CasGuard, ConditionalStore, Key, MemoryStore, PutOutcome};
/// let store = MemoryStore::new();
/// let key = Key::new("a").unwrap();
/// let PutOutcome::Applied(v1) = store.put(&key, "x".into(), CasGuard::Absent).await.unwrap()
///     else { panic!() };
/// assert_eq!(store.put(&key, "y".into(), CasGuard::Absent).await.unwrap(), PutOutcome::Rejected);
/// assert!(matches!(store.put(&key, "y".into(), CasGuard::Match(v1)).await.unwrap(),
///     PutOutcome::Applied(_)));
/// # });
/// # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    record_limit: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            state: Mutex::default(),
            record_limit: DEFAULT_RECORD_LIMIT,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<Key, (Bytes, u64)>,
    next_version: u64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// The same store with record limit `bytes` (default [`DEFAULT_RECORD_LIMIT`], 5 MiB),
    /// declared as [`Capabilities::max_body`]: `put` refuses a larger body with
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), not committed, and nothing larger is ever stored.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use fence_core::{CasGuard, ConditionalStore, ErrorKind, Key, MemoryStore};
    /// let store = MemoryStore::new().with_record_limit(4);
    /// assert_eq!(store.capabilities().max_body, Some(4));
    /// let err = store.put(&Key::new("k").unwrap(), "12345".into(), CasGuard::Absent).await;
    /// assert_eq!(err.unwrap_err().kind(), ErrorKind::InvalidInput);
    /// # });
    /// ```
    #[must_use]
    pub fn with_record_limit(mut self, bytes: usize) -> Self {
        self.record_limit = bytes;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-updated (every update is
        // one insert or remove), so a poisoned lock is safe to keep using.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn version_of(n: u64) -> Version {
    Version::new(format!("m{n}")).expect("non-empty")
}

#[async_trait]
impl ConditionalStore for MemoryStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        Ok(self.lock().objects.get(key).map(|(body, n)| Stored {
            body: body.clone(),
            version: version_of(*n),
        }))
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        if body.len() > self.record_limit {
            return Err(over_put_limit(key, body.len(), self.record_limit));
        }
        let mut state = self.lock();
        let current = state.objects.get(key).map(|(_, n)| version_of(*n));
        let holds = match (&guard, &current) {
            (CasGuard::Absent, None) => true,
            (CasGuard::Match(want), Some(have)) => want == have,
            _ => false,
        };
        if !holds {
            return Ok(PutOutcome::Rejected);
        }
        state.next_version += 1;
        let n = state.next_version;
        state.objects.insert(key.clone(), (body, n));
        Ok(PutOutcome::Applied(version_of(n)))
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        let mut state = self.lock();
        match state.objects.get(key) {
            Some((_, n)) if version_of(*n) == *version => {
                state.objects.remove(key);
                Ok(DeleteOutcome::Deleted)
            }
            _ => Ok(DeleteOutcome::Rejected),
        }
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        Ok(self
            .lock()
            .objects
            .keys()
            .filter(|k| prefix.is_none_or(|p| k.starts_with(p)))
            .cloned()
            .collect())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::full().with_max_body(self.record_limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn block<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn bodies_over_the_record_limit_are_refused_and_not_stored() {
        let store = MemoryStore::new();
        assert_eq!(store.capabilities().max_body, Some(DEFAULT_RECORD_LIMIT));
        let store = store.with_record_limit(3);
        let key = Key::new("k").unwrap();
        let err = block(store.put(&key, "abcd".into(), CasGuard::Absent)).unwrap_err();
        assert_eq!(
            (err.kind(), err.is_ambiguous(), err.key()),
            (ErrorKind::InvalidInput, false, Some(&key))
        );
        assert_eq!(block(store.get(&key)).unwrap(), None);
        let applied = block(store.put(&key, "abc".into(), CasGuard::Absent)).unwrap();
        assert!(matches!(applied, PutOutcome::Applied(_)));
    }
}
