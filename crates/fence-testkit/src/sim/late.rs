//! [`LateStore`]: requests and answers held up in the network. A delayed put is handed to a
//! task of its own, so a caller that gives up (its timeout drops the future) does not stop
//! it: the request still lands when its delay is over — the case a read-back must never
//! mistake for "did not land". A delayed read is served at once and its answer travels back
//! slowly: what it shows may have changed by the time it arrives (a renewal landing while a
//! confirming read of the lease travels back).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key, PutOutcome,
    Stored, Version,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A wrapper that delays a random share of puts by up to `max_delay`, without letting the
/// caller cancel them, and the answers of a random share of gets by up to `answer_delay`.
#[derive(Debug)]
pub(crate) struct LateStore {
    inner: Arc<dyn ConditionalStore>,
    rng: Mutex<SmallRng>,
    share: Mutex<f64>,
    max_delay: Duration,
    /// The share of gets whose answer is held up, and for how long at most.
    late_answers: Mutex<(f64, Duration)>,
}

impl LateStore {
    pub(crate) fn new(
        inner: Arc<dyn ConditionalStore>,
        seed: u64,
        share: f64,
        max_delay: Duration,
    ) -> Self {
        LateStore {
            inner,
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            share: Mutex::new(share),
            max_delay,
            late_answers: Mutex::new((0.0, Duration::ZERO)),
        }
    }

    /// Holds up the answers of `share` of the gets by up to `max_delay`.
    pub(crate) fn with_late_answers(self, share: f64, max_delay: Duration) -> Self {
        *self.late_answers.lock().unwrap_or_else(|p| p.into_inner()) = (share, max_delay);
        self
    }

    /// Stops delaying new writes and answers (the end of the chaos phase).
    pub(crate) fn clear(&self) {
        *self.share.lock().unwrap_or_else(|p| p.into_inner()) = 0.0;
        self.late_answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0 = 0.0;
    }

    fn draw(&self, share: f64, max_delay: Duration) -> Option<Duration> {
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        if share <= 0.0 || !rng.gen_bool(share.min(1.0)) {
            return None;
        }
        let max = max_delay.as_millis().max(1) as u64;
        Some(Duration::from_millis(rng.gen_range(1..=max)))
    }

    fn delay(&self) -> Option<Duration> {
        let share = *self.share.lock().unwrap_or_else(|p| p.into_inner());
        self.draw(share, self.max_delay)
    }

    fn answer_delay(&self) -> Option<Duration> {
        let (share, max) = *self.late_answers.lock().unwrap_or_else(|p| p.into_inner());
        self.draw(share, max)
    }
}

#[async_trait]
impl ConditionalStore for LateStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let answer = self.inner.get(key).await;
        if let Some(delay) = self.answer_delay() {
            tokio::time::sleep(delay).await;
        }
        answer
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let Some(delay) = self.delay() else {
            return self.inner.put(key, body, guard).await;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (inner, key) = (self.inner.clone(), key.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(inner.put(&key, body, guard).await);
        });
        rx.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Timeout,
                "delayed request lost its answer",
            ))
        })
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }

    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.inner.delete_immutable(key).await
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
