//! The three code patterns of the seed document, verbatim apart from `use` lines and setup.

use std::sync::Arc;

use fence_core::{
    now_ms, CasGuard, CasOutcome, LeaseCasOutcome, MemoryStore, NodeLeaseRecord, Ownership,
};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn stop_writing() {}

#[tokio::test]
async fn seed_acquire_claim_and_lose() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ownership = Ownership::new(store.clone(), "node-a");
    let my_node = "node-a".to_string();
    let my_addr = "127.0.0.1:7000".to_string();
    let lease_ttl: u64 = 10_000;

    // Pattern 1: acquiring a node lease.
    let guard = CasGuard::Absent; // Use Match(etag) for renewals
    let record = NodeLeaseRecord {
        node: my_node.clone(),
        expires_ms: now_ms() + lease_ttl,
        addr: my_addr.clone(),
        peer_protocol: 1,
        generation: "gen-1".into(),
    };
    let outcome = ownership.cas_node_lease(guard, &record).await?;
    assert!(matches!(outcome, LeaseCasOutcome::Applied { .. }));
    let LeaseCasOutcome::Applied { etag: lease_etag } = outcome else {
        unreachable!()
    };

    // Pattern 2: writing ownership with epoch protection.
    let cell_name = "cell-1";
    ownership.cas_owner(cell_name, CasGuard::Absent, 1).await?;
    let owner = ownership
        .read_owner(cell_name)
        .await?
        .expect("owner record");
    let (current_epoch, current_etag) = (owner.epoch, owner.etag);
    let epoch = current_epoch + 1; // Increment for hand-off or initial claim
    let guard = CasGuard::Match(current_etag);
    let outcome = ownership.cas_owner(cell_name, guard, epoch).await?;
    assert_eq!(outcome, CasOutcome::Applied);
    assert_eq!(ownership.read_owner(cell_name).await?.unwrap().epoch, 2);

    // Pattern 3: handling lease loss — first a renewal that applies …
    let old_etag = lease_etag.clone();
    let mut current_etag = old_etag.clone();
    let mut stopped = false;
    match ownership
        .cas_node_lease(CasGuard::Match(old_etag), &record)
        .await?
    {
        LeaseCasOutcome::Rejected => {
            // Lease expired or stolen—immediately stop writing
            stop_writing();
            stopped = true;
        }
        LeaseCasOutcome::Applied { etag } => {
            // Lease renewed—update etag and continue
            current_etag = etag;
        }
    }
    assert!(!stopped);
    assert_ne!(current_etag, lease_etag);

    // … then one with the now-stale etag, which must be rejected.
    let old_etag = lease_etag;
    match ownership
        .cas_node_lease(CasGuard::Match(old_etag), &record)
        .await?
    {
        LeaseCasOutcome::Rejected => {
            stop_writing();
            stopped = true;
        }
        LeaseCasOutcome::Applied { etag } => {
            current_etag = etag;
        }
    }
    assert!(stopped, "a stale etag must be rejected");
    let _ = current_etag;
    Ok(())
}

#[tokio::test]
async fn stale_epoch_claim_is_rejected_by_the_store() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let a = Ownership::new(store.clone(), "a");
    let b = Ownership::new(store.clone(), "b");
    a.cas_owner("c", CasGuard::Absent, 1).await?;
    let seen_by_a = a.read_owner("c").await?.unwrap();
    let seen_by_b = b.read_owner("c").await?.unwrap();
    assert_eq!(
        b.cas_owner("c", CasGuard::Match(seen_by_b.etag), 2).await?,
        CasOutcome::Applied
    );
    // A, acting on what it read before B's hand-off, is refused by the store.
    assert_eq!(
        a.cas_owner("c", CasGuard::Match(seen_by_a.etag), 2).await?,
        CasOutcome::Rejected
    );
    Ok(())
}
