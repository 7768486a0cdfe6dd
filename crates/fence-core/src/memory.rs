//! `MemoryStore`: the reference linearizable store, a backend in its own right.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::Error;
use crate::key::Key;
use crate::store::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, PutOutcome, Stored, Version,
};

/// An in-process store: every operation takes one lock, so histories are linearizable by
/// construction. Versions come from one counter per store and never repeat, also after a
/// delete and re-create of the same key.
///
/// Use it for tests, simulations and single-process fleets; it does not survive the process.
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
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
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
        Capabilities::full()
    }
}
