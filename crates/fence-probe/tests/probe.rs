//! The probe on in-process stores: honest but slow ones are honest, liars are caught, and
//! content-hash versions are reported (and must be declared).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, ConditionalStore, Current, DeleteOutcome, Error, Key, MemoryStore,
    PutOutcome, Stored, Version,
};
use fence_probe::{probe, ProbeConfig, Verdict};
use fence_testkit::sabotage::{Flaw, SabotagedStore};

/// A store in front of another that, like SeaweedFS, serves conditional writes to one key one
/// at a time, each taking `step` (the k-th of n concurrent racers answers after k steps), and
/// may declare content-hash versions, rejections that carry the current object (telling it,
/// or not: `tells_current`), and delete whatever the version (`deletes_any_version`).
#[derive(Debug)]
struct Shaped {
    inner: Arc<dyn ConditionalStore>,
    step: Duration,
    declares_content_versions: bool,
    /// `Some(tells)`: declares `current_on_reject`, and tells the object (or tells nothing).
    tells_current: Option<bool>,
    deletes_any_version: bool,
    queues: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

impl Shaped {
    fn new(inner: impl ConditionalStore + 'static) -> Self {
        Shaped {
            inner: Arc::new(inner),
            step: Duration::ZERO,
            declares_content_versions: false,
            tells_current: None,
            deletes_any_version: false,
            queues: Mutex::new(HashMap::new()),
        }
    }

    fn queue(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        let mut queues = self.queues.lock().unwrap();
        queues.entry(key.clone()).or_default().clone()
    }
}

#[async_trait]
impl ConditionalStore for Shaped {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let queue = self.queue(key);
        let _turn = queue.lock().await;
        tokio::time::sleep(self.step).await;
        self.inner.put(key, body, guard).await
    }
    async fn put_with_current(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        let outcome = self.put(key, body, guard).await?;
        let current = match (&outcome, self.tells_current) {
            (PutOutcome::Rejected, Some(true)) => match self.inner.get(key).await? {
                Some(found) => Current::Found(found),
                None => Current::Absent,
            },
            _ => Current::Untold,
        };
        Ok((outcome, current))
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        match (self.deletes_any_version, self.inner.get(key).await?) {
            (true, Some(current)) => self.inner.delete(key, &current.version).await,
            _ => self.inner.delete(key, version).await,
        }
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.inner.capabilities();
        if self.declares_content_versions {
            caps = caps.with_content_versions();
        }
        if self.tells_current.is_some() {
            caps = caps.with_current_on_reject();
        }
        caps
    }
}

/// A store whose versions are content hashes, declaring it or not.
fn content_hashed(declared: bool) -> Shaped {
    Shaped {
        declares_content_versions: declared,
        ..Shaped::new(SabotagedStore::new(Flaw::RepeatingVersions))
    }
}

#[tokio::test]
async fn a_store_that_queues_racers_is_honest_though_racers_outlive_the_timeout() {
    // 8 racers × 300 ms: the last would answer after 2.4 s, the bound is 1 s.
    let store = Shaped {
        step: Duration::from_millis(300),
        ..Shaped::new(MemoryStore::new())
    };
    let cfg = ProbeConfig {
        op_timeout: Duration::from_secs(1),
        ..ProbeConfig::default()
    };
    let report = probe(&store, &cfg).await;
    println!("{report}");
    assert_eq!(report.verdict, Verdict::Honest, "{report}");
}

#[tokio::test]
async fn content_hash_versions_are_reported_when_declared() {
    let report = probe(&content_hashed(true), &ProbeConfig::default()).await;
    println!("{report}");
    assert_eq!(report.verdict, Verdict::Honest, "{report}");
    assert_eq!(report.content_versions, Some(true));
}

#[tokio::test]
async fn undeclared_content_hash_versions_are_a_violation() {
    let report = probe(&content_hashed(false), &ProbeConfig::default()).await;
    println!("{report}");
    assert!(report.verdict.is_violation(), "{report}");
    assert_eq!(report.content_versions, None);
}

#[tokio::test]
async fn liars_are_caught() {
    for flaw in [
        Flaw::IgnoresGuard,
        Flaw::TwoWinners,
        Flaw::RejectsLandedWrites,
    ] {
        let report = probe(&SabotagedStore::new(flaw), &ProbeConfig::default()).await;
        println!("{flaw:?}: {report}");
        assert!(report.verdict.is_violation(), "{flaw:?}: {report}");
    }
}

/// `check`, the one call: a liar and a store without replace-if-current are refused as
/// unfit (`Unsupported`), a dead one as "could not tell" (`Unavailable`); nothing committed.
#[tokio::test]
async fn check_refuses_every_store_but_an_honest_one() {
    use fence_core::ErrorKind;
    assert!(fence_probe::check(&MemoryStore::new()).await.is_ok());
    for (flaw, kind) in [
        (Flaw::IgnoresGuard, ErrorKind::Unsupported),
        (Flaw::NoUpdate, ErrorKind::Unsupported),
        (Flaw::Unreachable, ErrorKind::Unavailable),
    ] {
        let refused = fence_probe::check(&SabotagedStore::new(flaw)).await;
        let e = refused.expect_err("an unfit store passed the check");
        assert_eq!(e.kind(), kind, "{flaw:?}: {e}");
        assert!(!e.is_ambiguous());
    }
}

#[tokio::test]
async fn rejections_that_carry_the_current_object_are_checked_where_declared() {
    let telling = Shaped {
        tells_current: Some(true),
        ..Shaped::new(MemoryStore::new())
    };
    let report = probe(&telling, &ProbeConfig::default()).await;
    println!("{report}");
    assert_eq!(report.verdict, Verdict::Honest, "{report}");
    assert!(report
        .steps
        .iter()
        .any(|s| s.contains("carrying the current object")));
    let silent = Shaped {
        tells_current: Some(false),
        ..Shaped::new(MemoryStore::new())
    };
    let report = probe(&silent, &ProbeConfig::default()).await;
    assert!(report.verdict.is_violation(), "{report}");
}

#[tokio::test]
async fn a_conditional_delete_is_checked_and_one_that_ignores_the_version_caught() {
    let honest = probe(&MemoryStore::new(), &ProbeConfig::default()).await;
    assert!(
        honest
            .steps
            .iter()
            .any(|s| s.contains("conditional delete")),
        "{honest}"
    );
    let careless = Shaped {
        deletes_any_version: true,
        ..Shaped::new(MemoryStore::new())
    };
    let report = probe(&careless, &ProbeConfig::default()).await;
    println!("{report}");
    assert!(report.verdict.is_violation(), "{report}");
}

#[tokio::test]
async fn a_missing_operation_is_unsupported_and_a_dead_store_is_an_error() {
    let no_update = probe(
        &SabotagedStore::new(Flaw::NoUpdate),
        &ProbeConfig::default(),
    )
    .await;
    assert!(no_update.verdict.is_unsupported(), "{no_update}");
    assert_eq!(no_update.verdict.name(), "unsupported");
    let dead = probe(
        &SabotagedStore::new(Flaw::Unreachable),
        &ProbeConfig::default(),
    )
    .await;
    assert!(matches!(dead.verdict, Verdict::Error(_)), "{dead}");
}

/// A store that nobody can reach: every request fails before anything is sent (a refused
/// connection), and it has no conditional delete (like S3), so cleanup cannot delete.
#[derive(Debug)]
struct Unreachable;

fn refused() -> Error {
    Error::new(fence_core::ErrorKind::Unavailable, "connection refused").not_committed()
}

#[async_trait]
impl ConditionalStore for Unreachable {
    async fn get(&self, _: &Key) -> Result<Option<Stored>, Error> {
        Err(refused())
    }
    async fn put(&self, _: &Key, _: Bytes, _: CasGuard) -> Result<PutOutcome, Error> {
        Err(refused())
    }
    async fn delete(&self, _: &Key, _: &Version) -> Result<DeleteOutcome, Error> {
        Err(refused())
    }
    async fn list(&self, _: Option<&Key>) -> Result<Vec<Key>, Error> {
        Err(refused())
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::without_conditional_delete()
    }
}

/// After a connect error that wrote nothing, the probe says it could not tell and does not
/// claim to have left keys behind.
#[tokio::test]
async fn a_store_that_refuses_every_connection_leaves_no_keys_behind() {
    let report = probe(&Unreachable, &ProbeConfig::default()).await;
    assert!(matches!(report.verdict, Verdict::Error(_)), "{report}");
    assert_eq!(report.left_behind, Vec::<Key>::new(), "{report}");
    assert!(!report.steps.iter().any(|s| s.contains("left")), "{report}");
}

/// Like S3: content-hash versions (declared) and no conditional delete. The probe's keys are
/// its own scratch under a random prefix, so it removes them with the plain delete.
#[tokio::test]
async fn a_store_without_conditional_delete_keeps_nothing_of_the_probe() {
    let caps = Capabilities::without_conditional_delete().with_content_versions();
    let store = SabotagedStore::new(Flaw::RepeatingVersions).with_capabilities(caps);
    let report = probe(&store, &ProbeConfig::default()).await;
    assert_eq!(report.verdict, Verdict::Honest, "{report}");
    assert_eq!(report.left_behind, Vec::<Key>::new(), "{report}");
    assert_eq!(store.list(None).await.unwrap(), Vec::<Key>::new());
}
