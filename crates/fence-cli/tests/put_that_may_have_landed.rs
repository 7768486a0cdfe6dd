//! `fence put` whose write may have landed is not reported refused (the third review: failed
//! on main 3114028 for the reason its doc comment states, and now asserts the fixed
//! behaviour).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key, MemoryStore,
    Ownership, PutOutcome, Stored, Version,
};

/// A store whose next head put is applied, then — before its answer comes back — the cell is
/// taken over by another node at the next epoch (carrying the data forward, as every claim
/// does), and the answer is lost.
#[derive(Debug)]
struct TakenOverMidPut {
    inner: Arc<MemoryStore>,
    armed: AtomicBool,
}

#[async_trait]
impl ConditionalStore for TakenOverMidPut {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let out = self.inner.put(key, body, guard).await?;
        let is_head = key.as_str().ends_with("own.json");
        if let (true, PutOutcome::Applied(v)) = (is_head, &out) {
            if self.armed.swap(false, Ordering::SeqCst) {
                let thief = Ownership::new(self.inner.clone(), "thief");
                thief
                    .cas_owner("jobs", CasGuard::Match(v.clone()), 2)
                    .await
                    .unwrap();
                return Err(Error::new(ErrorKind::Timeout, "answer lost"));
            }
        }
        Ok(out)
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

/// R3-4. docs/cli.md (`fence put`): "a put of an older epoch is **rejected by the store**
/// (exit 76, `refused: epoch E is no longer current ...`)", and "refused … nothing is
/// written"; the exit table: 76 "fenced". kv.rs `put` maps *every* `ErrorKind::Fenced` to
/// exit 76 and the word "refused" — also the core's ambiguous `Fenced` (an attempt whose
/// answer was lost, then the head found at a later epoch: "this write may have landed").
/// Here it did land, and the next claim carried it forward: `fence get` shows the value of a
/// put that `fence put` reported refused. A script retrying on 76-means-refused (or treating
/// the value as never written) acts on a false outcome; an ambiguous put must not exit like
/// a refused one (exit 69, as a put that timed out does, would be honest).
#[tokio::test]
async fn a_put_that_may_have_landed_is_not_reported_refused() {
    let inner = Arc::new(MemoryStore::new());
    Ownership::new(inner.clone(), "holder")
        .cas_owner("jobs", CasGuard::Absent, 1)
        .await
        .unwrap();
    let store: Arc<dyn ConditionalStore> = Arc::new(TakenOverMidPut {
        inner: inner.clone(),
        armed: AtomicBool::new(true),
    });
    let put = fence_cli::kv::put(&store, "holder", "jobs", 1, "k", b"v").await;
    let failure = put.expect_err("the answer was lost and the cell taken over");
    let got = fence_cli::kv::get(&store, "jobs", "k").await;
    assert_eq!(got.ok().as_deref(), Some(&b"v"[..]), "the put landed");
    assert_ne!(
        failure.code,
        fence_cli::exit::FENCED,
        "a put that landed was reported as refused: {}",
        failure.message
    );
}
