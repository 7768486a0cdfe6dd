//! The shared conformance suite (fence-testkit) over FsStore.

use std::sync::Arc;

use fence_core::ConditionalStore;
use fence_fs::FsStore;
use fence_testkit::scenarios::runtime::SERVER_TTL;
use fence_testkit::{run_all, SuiteConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_all_passes_on_fs_store() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ConditionalStore> = Arc::new(FsStore::open(dir.path()).unwrap());
    // Every write is fsynced, beside a busy test lane: the runtime scenarios' leases get the
    // margin of a server's.
    let cfg = SuiteConfig {
        runtime_ttl: SERVER_TTL,
        ..SuiteConfig::light()
    };
    let report = run_all(store, &cfg).await;
    println!("{report}");
    assert!(report.is_success(), "{report}");
}
