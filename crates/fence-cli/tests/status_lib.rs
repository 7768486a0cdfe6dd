//! `fence status` on records a hostile or broken writer left: no panic, every row shown.

use std::sync::Arc;

use fence_core::{CasGuard, ConditionalStore, MemoryStore, NodeLeaseRecord, Ownership};

#[tokio::test]
async fn a_lease_record_with_an_extreme_expiry_is_shown_not_a_panic() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    for (node, expires_ms) in [("far", u64::MAX), ("mid", 1u64 << 63), ("zero", 0)] {
        let record = NodeLeaseRecord {
            node: node.into(),
            expires_ms,
            addr: String::new(),
            peer_protocol: 1,
            generation: "g".into(),
        };
        Ownership::new(store.clone(), node)
            .cas_node_lease(CasGuard::Absent, &record)
            .await
            .expect("written");
    }
    let status = fence_cli::status::read(&store, "memory://", None)
        .await
        .expect("status reads");
    let table = fence_cli::status::table(&status, fence_cli::status::Rows::All);
    assert_eq!(status.leases.len() + status.bad.len(), 3, "{table}");
    assert!(status
        .leases
        .iter()
        .all(|l| l.live == (l.expires_in_ms > 0)));
}
