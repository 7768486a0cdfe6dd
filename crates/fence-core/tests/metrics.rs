//! The documented metrics are recorded (names and labels as in `fence_core::stats`).

use std::sync::Arc;
use std::time::Duration;

use fence_core::*;
use metrics_exporter_prometheus::PrometheusBuilder;

#[test]
fn a_lease_claim_and_writes_record_the_documented_metrics() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
            let a = Fence::builder(store.clone(), "a")
                .ttl(Duration::from_secs(2))
                .clock(Clock::virtual_at(1_700_000_000_000))
                .build()
                .unwrap();
            let lease = a.acquire().await.unwrap();
            let cell = lease.claim("c").await.unwrap();
            cell.write("x").await.unwrap();
            tokio::time::sleep(Duration::from_millis(1_500)).await; // two renewals
            cell.release().await.unwrap();
            lease.release().await;
        });
    });
    let text = handle.render();
    for name in [
        "fence_lease_acquired_total 1",
        "fence_lease_renewed_total 2",
        "fence_lease_released_total 1",
        "fence_claims_total{kind=\"new\"} 1",
        "fence_writes_acknowledged_total 1",
        "fence_store_request_seconds_count{op=\"put\",outcome=\"applied\"}",
        "fence_store_request_seconds_count{op=\"get\",outcome=\"ok\"}",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
}
