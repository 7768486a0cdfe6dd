//! The shared conformance suite (fence-testkit) over FsStore.

use std::sync::Arc;

use fence_core::ConditionalStore;
use fence_fs::FsStore;
use fence_testkit::{run_all, SuiteConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes_on_fs_store() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ConditionalStore> = Arc::new(FsStore::open(dir.path()).unwrap());
    let report = run_all(store, &SuiteConfig::light()).await;
    println!("{report}");
    assert!(report.is_success(), "{report}");
}
