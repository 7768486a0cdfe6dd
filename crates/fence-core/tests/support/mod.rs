//! A store whose requests a test steers one by one: answers lost after applying, reads held
//! back, writes held up in the network (still landing after the caller gave up), and a
//! record of every write the store applied.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::*;

/// What to do to one request.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Perform it normally.
    Pass,
    /// Apply, then lose the answer (ambiguous timeout).
    LoseAnswer,
    /// Wait this long before performing it (a slow read).
    Delay(Duration),
    /// Hand it to the network: it lands after this long whatever the caller does; the caller
    /// waits for the answer (and usually times out first).
    Late(Duration),
}

#[derive(Debug, Default)]
struct Plan {
    puts: VecDeque<Step>,
    gets: VecDeque<Step>,
}

/// The steerable store.
#[derive(Debug)]
pub struct Steered {
    inner: Arc<MemoryStore>,
    plan: Mutex<HashMap<String, Plan>>,
    applied: Arc<Mutex<Vec<(Key, Bytes)>>>,
}

impl Steered {
    pub fn new() -> Arc<Self> {
        Self::over(Arc::new(MemoryStore::new()))
    }

    /// One process's steerable path to `inner`, which others may reach directly.
    pub fn over(inner: Arc<MemoryStore>) -> Arc<Self> {
        Arc::new(Steered {
            inner,
            plan: Mutex::new(HashMap::new()),
            applied: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// Steps for the next puts to keys ending in `suffix` (say `own.json`).
    pub fn puts(&self, suffix: &str, steps: impl IntoIterator<Item = Step>) {
        let mut plan = self.plan.lock().unwrap();
        plan.entry(suffix.to_owned())
            .or_default()
            .puts
            .extend(steps);
    }

    /// Steps for the next gets of keys ending in `suffix`.
    pub fn gets(&self, suffix: &str, steps: impl IntoIterator<Item = Step>) {
        let mut plan = self.plan.lock().unwrap();
        plan.entry(suffix.to_owned())
            .or_default()
            .gets
            .extend(steps);
    }

    fn next(&self, key: &Key, put: bool) -> Step {
        let mut plan = self.plan.lock().unwrap();
        for (suffix, p) in plan.iter_mut() {
            if key.as_str().ends_with(suffix.as_str()) {
                let q = if put { &mut p.puts } else { &mut p.gets };
                if let Some(s) = q.pop_front() {
                    return s;
                }
            }
        }
        Step::Pass
    }

    /// Every body the store applied to keys ending in `suffix`, in order.
    pub fn applied(&self, suffix: &str) -> Vec<Bytes> {
        let applied = self.applied.lock().unwrap();
        applied
            .iter()
            .filter(|(k, _)| k.as_str().ends_with(suffix))
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// The raw store, for writing records by hand.
    pub fn raw(&self) -> &MemoryStore {
        &self.inner
    }

    async fn apply(
        inner: &MemoryStore,
        applied: &Mutex<Vec<(Key, Bytes)>>,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<PutOutcome, Error> {
        let out = inner.put(key, body.clone(), guard).await?;
        if let PutOutcome::Applied(_) = out {
            applied.lock().unwrap().push((key.clone(), body));
        }
        Ok(out)
    }
}

fn lost() -> Error {
    Error::new(ErrorKind::Timeout, "answer lost")
}

#[async_trait]
impl ConditionalStore for Steered {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        match self.next(key, false) {
            Step::Delay(d) | Step::Late(d) => tokio::time::sleep(d).await,
            Step::LoseAnswer => {
                let _ = self.inner.get(key).await;
                return Err(lost());
            }
            Step::Pass => {}
        }
        self.inner.get(key).await
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        match self.next(key, true) {
            Step::Pass => Self::apply(&self.inner, &self.applied, key, body, guard).await,
            Step::Delay(d) => {
                tokio::time::sleep(d).await;
                Self::apply(&self.inner, &self.applied, key, body, guard).await
            }
            Step::LoseAnswer => {
                Self::apply(&self.inner, &self.applied, key, body, guard).await?;
                Err(lost())
            }
            Step::Late(d) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let (inner, applied, key) = (self.inner.clone(), self.applied.clone(), key.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = tx.send(Steered::apply(&inner, &applied, &key, body, guard).await);
                });
                rx.await.unwrap_or_else(|_| Err(lost()))
            }
        }
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// Virtual time: a wall clock for fences built in tests.
pub fn clock() -> Clock {
    Clock::virtual_at(1_700_000_000_000)
}

/// The lease TTL the core's tests use.
pub const TTL: Duration = Duration::from_secs(2);

/// A fence for `node` on `store` with [`TTL`] and the virtual [`clock`].
pub fn fence(store: Arc<dyn ConditionalStore>, node: &str) -> Fence {
    fence_on(store, node, clock())
}

/// A fence for `node` on `store` with [`TTL`] and `clock`.
pub fn fence_on(store: Arc<dyn ConditionalStore>, node: &str, clock: Clock) -> Fence {
    Fence::builder(store, node)
        .ttl(TTL)
        .clock(clock)
        .build()
        .unwrap()
}

/// A key the test knows to be valid.
pub fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

pub async fn advance(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}
