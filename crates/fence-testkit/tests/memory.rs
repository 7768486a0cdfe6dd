//! The whole suite on the reference store: it must pass 100%.

use std::sync::Arc;

use fence_core::MemoryStore;
use fence_testkit::{probe, run_all, ProbeConfig, SuiteConfig, Verdict};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_passes_on_memory_store() {
    let clock = fence_core::Clock::system();
    let report = run_all(Arc::new(MemoryStore::new()), &SuiteConfig::default()).await;
    println!("{report}");
    println!("run_all on MemoryStore took {} ms", clock.mono_ms());
    assert!(report.is_success(), "{report}");
    assert_eq!(report.failed(), 0);
    assert!(report.passed() >= 19, "{report}");
    let last = report.to_string().lines().last().unwrap().to_owned();
    assert_eq!(last, format!("{} passed, 0 failed", report.passed()));
    let lin = report
        .result("linearizability")
        .expect("the linearizability scenario ran");
    println!("linearizability: {}", lin.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn light_config_passes_too() {
    let report = run_all(Arc::new(MemoryStore::new()), &SuiteConfig::light()).await;
    assert!(report.is_success(), "{report}");
}

#[tokio::test]
async fn probe_says_honest_on_memory_store() {
    let report = probe(&MemoryStore::new(), &ProbeConfig::default()).await;
    println!("{report}");
    assert_eq!(report.verdict, Verdict::Honest);
    // Four sequential checks and the conditional delete, the identical rewrite, one line per
    // kind of race.
    assert_eq!(report.steps.len(), 5 + 1 + 2, "{report}");
    assert_eq!(report.content_versions, Some(false), "{report}");
    assert!(
        report.left_behind.is_empty(),
        "cleanup deletes everything: {report}"
    );
}

#[tokio::test]
async fn runs_never_collide() {
    let store = Arc::new(MemoryStore::new());
    let cfg = SuiteConfig {
        cleanup: false,
        ..SuiteConfig::light()
    };
    let first = run_all(store.clone(), &cfg).await;
    let second = run_all(store, &cfg).await;
    assert_ne!(first.prefix, second.prefix);
    assert!(
        first.is_success() && second.is_success(),
        "{first}\n{second}"
    );
}

/// `SuiteConfig::runtime_ttl` is the TTL the runtime scenarios hold their leases with: a
/// takeover waits at least that long, and each scenario reports the TTL it used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_scenarios_use_the_configured_ttl() {
    let cfg = SuiteConfig {
        runtime_ttl: std::time::Duration::from_millis(1_200),
        ..SuiteConfig::light()
    };
    let list: Vec<_> = fence_testkit::scenarios::runtime_level()
        .into_iter()
        .filter(|s| ["runtime_lease_renew", "runtime_expire_takeover"].contains(&s.name()))
        .collect();
    let report = fence_testkit::run_scenarios(Arc::new(MemoryStore::new()), &cfg, &list).await;
    assert!(report.is_success(), "{report}");
    let renew = &report.result("runtime_lease_renew").unwrap().detail;
    assert!(renew.contains("(TTL 1200 ms)"), "{renew}");
    let takeover = report.result("runtime_expire_takeover").unwrap();
    assert!(
        takeover.detail.contains("(TTL 1200 ms)"),
        "{}",
        takeover.detail
    );
    assert!(takeover.elapsed_ms >= 1_200, "{takeover}");
}
