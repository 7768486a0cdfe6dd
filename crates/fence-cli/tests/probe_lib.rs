//! The probe command's library path against deliberately broken stores.

use fence_cli::exit::{CHECK_FAILED, OK, STORE};
use fence_cli::probe::{exit_code, run, ProbeJson};
use fence_core::MemoryStore;
use fence_testkit::sabotage::{Flaw, SabotagedStore};

#[tokio::test]
async fn a_store_that_ignores_conditions_fails_the_probe() {
    let report = run(&SabotagedStore::new(Flaw::IgnoresGuard), 2, false).await;
    assert!(report.verdict.is_violation(), "{report}");
    assert_eq!(exit_code(&report.verdict), CHECK_FAILED);
    assert_eq!(ProbeJson::from(&report).verdict, "violation");
}

#[tokio::test]
async fn a_store_with_racing_winners_fails_the_probe() {
    let report = run(&SabotagedStore::new(Flaw::TwoWinners), 2, false).await;
    assert_eq!(exit_code(&report.verdict), CHECK_FAILED, "{report}");
}

#[tokio::test]
async fn an_unreachable_store_is_an_error_not_a_violation() {
    let report = run(&SabotagedStore::new(Flaw::Unreachable), 1, false).await;
    assert_eq!(exit_code(&report.verdict), STORE, "{report}");
    assert_eq!(ProbeJson::from(&report).verdict, "error");
}

#[tokio::test]
async fn an_honest_store_passes() {
    let report = run(&MemoryStore::new(), 2, false).await;
    assert_eq!(exit_code(&report.verdict), OK, "{report}");
}
