//! FaultyStore and CountingStore do what they say.

use std::sync::Arc;
use std::time::Duration;

use fence_core::{CasGuard, Commit, ConditionalStore, ErrorKind, Key, MemoryStore, PutOutcome};
use fence_testkit::{BodyBytes, CountingStore, Fault, FaultyStore, OpCounts, OpKind, RandomFaults};

fn key() -> Key {
    Key::new("k").unwrap()
}

async fn faulted_put(fault: Fault) -> (Result<PutOutcome, fence_core::Error>, bool) {
    let faulty = FaultyStore::new(Arc::new(MemoryStore::new()), 1);
    faulty.script(OpKind::Put, [fault]);
    let answer = faulty.put(&key(), "x".into(), CasGuard::Absent).await;
    let landed = faulty.inner().get(&key()).await.unwrap().is_some();
    (answer, landed)
}

#[tokio::test]
async fn each_fault_has_its_kind_commit_and_effect() {
    let cases = [
        (
            Fault::FailBeforeSend,
            ErrorKind::Unavailable,
            Commit::NotCommitted,
            false,
        ),
        (
            Fault::LoseRequest,
            ErrorKind::Timeout,
            Commit::Ambiguous,
            false,
        ),
        (
            Fault::LoseAnswer,
            ErrorKind::Timeout,
            Commit::Ambiguous,
            true,
        ),
        (
            Fault::Conflict,
            ErrorKind::Conflict,
            Commit::NotCommitted,
            false,
        ),
        (
            Fault::ServerErrorAfterApply,
            ErrorKind::Unavailable,
            Commit::Ambiguous,
            true,
        ),
    ];
    for (fault, kind, commit, applied) in cases {
        let (answer, landed) = faulted_put(fault).await;
        let err = answer.unwrap_err();
        assert_eq!((err.kind(), err.commit()), (kind, commit), "{fault:?}");
        assert_eq!(landed, applied, "{fault:?}");
    }
    let (answer, landed) = faulted_put(Fault::Latency(Duration::from_millis(5))).await;
    assert!(matches!(answer, Ok(PutOutcome::Applied(_))) && landed);
}

#[tokio::test]
async fn hang_never_answers_and_applies_nothing() {
    let faulty = FaultyStore::new(Arc::new(MemoryStore::new()), 1);
    faulty.script(OpKind::Put, [Fault::Hang]);
    let k = key();
    let put = faulty.put(&k, "x".into(), CasGuard::Absent);
    assert!(tokio::time::timeout(Duration::from_millis(50), put)
        .await
        .is_err());
    assert!(faulty.get(&key()).await.unwrap().is_none());
}

#[tokio::test]
async fn scripted_faults_hit_the_next_ops_of_their_kind_in_order() {
    let faulty = FaultyStore::new(Arc::new(MemoryStore::new()), 1);
    faulty.script(OpKind::Put, [Fault::Conflict, Fault::FailBeforeSend]);
    assert!(faulty.get(&key()).await.is_ok(), "gets are not affected");
    assert_eq!(faulty.pending(OpKind::Put), 2);
    let k = key();
    let put = || faulty.put(&k, "x".into(), CasGuard::Absent);
    assert_eq!(put().await.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(put().await.unwrap_err().kind(), ErrorKind::Unavailable);
    assert!(matches!(put().await, Ok(PutOutcome::Applied(_))));
    assert_eq!(faulty.injected(), 2);
}

async fn random_trace(seed: u64) -> Vec<Option<ErrorKind>> {
    let faulty = FaultyStore::new(Arc::new(MemoryStore::new()), seed);
    let odds = RandomFaults {
        fail_before_send: 0.3,
        conflict: 0.2,
        ..RandomFaults::default()
    };
    faulty.set_random(OpKind::Get, odds);
    let mut trace = Vec::new();
    for _ in 0..200 {
        trace.push(faulty.get(&key()).await.err().map(|e| e.kind()));
    }
    trace
}

#[tokio::test]
async fn random_faults_follow_the_seed() {
    let a = random_trace(9).await;
    assert_eq!(a, random_trace(9).await, "same seed, same faults");
    assert_ne!(a, random_trace(10).await);
    let failed = a.iter().filter(|k| k.is_some()).count();
    assert!((60..140).contains(&failed), "about half fail: {failed}");
}

#[tokio::test]
async fn counting_store_counts_round_trips_per_kind() {
    let store = CountingStore::new(Arc::new(MemoryStore::new()));
    let PutOutcome::Applied(v) = store
        .put(&key(), "x".into(), CasGuard::Absent)
        .await
        .unwrap()
    else {
        panic!("create failed")
    };
    store
        .put(&key(), "y".into(), CasGuard::Absent)
        .await
        .unwrap();
    store.get(&key()).await.unwrap();
    store.list(None).await.unwrap();
    store.delete(&key(), &v).await.unwrap();
    assert_eq!(
        store.counts(),
        OpCounts {
            get: 1,
            put: 2,
            delete: 1,
            list: 1
        }
    );
    assert_eq!(store.reset().total(), 5);
    assert_eq!(store.counts(), OpCounts::default());
}

#[tokio::test]
async fn counting_store_counts_body_bytes_and_passes_an_ignored_key_uncounted() {
    let lease = Key::new("nodes/a.json").unwrap();
    let store = CountingStore::new(Arc::new(MemoryStore::new())).ignoring(lease.clone());
    store
        .put(&key(), "abc".into(), CasGuard::Absent)
        .await
        .unwrap();
    store.get(&key()).await.unwrap();
    store.get(&Key::new("absent").unwrap()).await.unwrap();
    store
        .put(&lease, "renewal".into(), CasGuard::Absent)
        .await
        .unwrap();
    assert!(store.get(&lease).await.unwrap().is_some(), "passed through");
    assert_eq!(
        store.bytes(),
        BodyBytes {
            read: 3,
            written: 3
        }
    );
    assert_eq!(
        store.reset(),
        OpCounts {
            get: 2,
            put: 1,
            ..OpCounts::default()
        }
    );
    assert_eq!(store.bytes(), BodyBytes::default());
}

#[tokio::test]
async fn a_lost_answer_names_and_chains_the_stores_own_error() {
    use fence_testkit::sabotage::{Flaw, SabotagedStore};
    for fault in [Fault::LoseAnswer, Fault::ServerErrorAfterApply] {
        let faulty = FaultyStore::new(Arc::new(SabotagedStore::new(Flaw::Unreachable)), 1);
        faulty.script(OpKind::Put, [fault]);
        let err = faulty
            .put(&key(), "x".into(), CasGuard::Absent)
            .await
            .unwrap_err();
        assert_eq!(err.commit(), Commit::Ambiguous, "{fault:?}");
        let source = std::error::Error::source(&err).expect("the store's error is chained");
        let inner = source
            .downcast_ref::<fence_core::Error>()
            .expect("a fence error");
        assert_eq!(inner.kind(), ErrorKind::Unavailable, "{fault:?}: {err}");
    }
}

/// A store like S3: content-hash versions, no conditional delete, a plain delete of
/// write-once objects.
fn s3_like() -> Arc<dyn ConditionalStore> {
    use fence_core::Capabilities;
    use fence_testkit::sabotage::{Flaw, SabotagedStore};
    let caps = Capabilities::without_conditional_delete().with_content_versions();
    Arc::new(SabotagedStore::new(Flaw::RepeatingVersions).with_capabilities(caps))
}

#[tokio::test]
async fn wrappers_forward_delete_immutable() {
    use fence_testkit::linearizability::{History, RecordingStore};
    let wrappers: Vec<(&str, Arc<dyn ConditionalStore>)> = vec![
        ("faulty", Arc::new(FaultyStore::new(s3_like(), 1))),
        ("counting", Arc::new(CountingStore::new(s3_like()))),
        (
            "recording",
            Arc::new(RecordingStore::new(s3_like(), Arc::new(History::new()))),
        ),
    ];
    for (name, store) in wrappers {
        store
            .put(&key(), "x".into(), CasGuard::Absent)
            .await
            .unwrap();
        store
            .delete_immutable(&key())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(store.get(&key()).await.unwrap(), None, "{name}");
    }
}

#[tokio::test]
async fn counting_store_counts_delete_immutable_as_one_delete() {
    let store = CountingStore::new(s3_like());
    store.delete_immutable(&key()).await.unwrap();
    let want = OpCounts {
        delete: 1,
        ..OpCounts::default()
    };
    assert_eq!(store.counts(), want);
}
