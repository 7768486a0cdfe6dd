//! Adapters over object_store without a server: the reference adapter passes the suite and
//! classifies every fault of a `FaultyObjectStore` right; mis-classifying ones are caught.

use std::sync::Arc;

use fence_core::{ConditionalStore, Key};
use fence_testkit::objstore::{FaultyObjectStore, ObjectStoreAdapter};
use fence_testkit::sabotage::{Misclassification, Misclassifying};
use fence_testkit::scenarios::wire::{outcomes, runtime, RuntimeWorkload, Workload};
use fence_testkit::{run_all, SuiteConfig};
use object_store::memory::InMemory;
use object_store::ObjectStore;

fn prefix() -> Key {
    Key::new("wire").unwrap()
}

fn workload() -> Workload {
    Workload {
        writes: 2_000,
        ..Workload::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_adapter_passes_the_suite() {
    let store = ObjectStoreAdapter::new(Arc::new(InMemory::new()));
    let report = run_all(Arc::new(store), &SuiteConfig::light()).await;
    println!("{report}");
    assert!(report.is_success(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_adapter_classifies_every_fault_right() {
    let faulty = Arc::new(FaultyObjectStore::over_memory(3).with_fault_rate(0.3));
    let store = Arc::new(ObjectStoreAdapter::new(faulty.clone()));
    let report = outcomes(store, faulty.ledger(), &prefix(), &workload()).await;
    println!("{report}; {} faults injected", faulty.injected());
    assert!(report.violations.is_empty(), "{report}");
    assert!(
        report.writes >= 2_000 && faulty.injected() >= 300,
        "{report}"
    );
}

/// A mis-classifying adapter over faults below it must be caught: some violation says `says`.
async fn assert_caught(how: Misclassification, seed: u64, says: &str) {
    let faulty = Arc::new(FaultyObjectStore::over_memory(seed).with_fault_rate(0.3));
    let honest: Arc<dyn ConditionalStore> = Arc::new(ObjectStoreAdapter::new(faulty.clone()));
    let liar = Arc::new(Misclassifying::new(honest, how));
    let report = outcomes(liar, faulty.ledger(), &prefix(), &workload()).await;
    println!("{report}");
    let named = |v: &String| v.contains(says);
    assert!(
        report.violations.iter().any(named),
        "{how:?} not caught: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_calling_every_error_not_committed_is_caught() {
    assert_caught(Misclassification::EveryErrorNotCommitted, 4, "NotCommitted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_retrying_its_writes_is_caught() {
    assert_caught(Misclassification::RetriesWrites, 6, "a hidden retry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_keeps_its_promises_over_faults_below_the_adapter() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let faulty = Arc::new(FaultyObjectStore::new(inner.clone(), 5).with_fault_rate(0.1));
    let store = Arc::new(ObjectStoreAdapter::new(faulty.clone()));
    let direct = Arc::new(ObjectStoreAdapter::new(inner));
    let cfg = RuntimeWorkload {
        ttl: std::time::Duration::from_secs(1),
        run_for: std::time::Duration::from_secs(4),
        ..RuntimeWorkload::default()
    };
    let report = runtime(store, direct, &prefix(), &cfg).await;
    println!("{report}; {} faults injected", faulty.injected());
    assert!(report.violations.is_empty(), "{report}");
    assert!(report.writes > 0, "some writes were acknowledged: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_checks_catch_a_store_that_ignores_conditions() {
    use fence_testkit::sabotage::{Flaw, SabotagedStore};
    let liar: Arc<dyn ConditionalStore> = Arc::new(SabotagedStore::new(Flaw::IgnoresGuard));
    let cfg = RuntimeWorkload {
        ttl: std::time::Duration::from_secs(1),
        run_for: std::time::Duration::from_secs(3),
        ..RuntimeWorkload::default()
    };
    let report = runtime(liar.clone(), liar, &prefix(), &cfg).await;
    println!("{report}");
    assert!(!report.violations.is_empty(), "{report}");
}
