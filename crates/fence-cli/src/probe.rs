//! `fence probe`: the contract probe of fence-testkit against a live store.
//!
//! The `--json` shape:
//!
//! ```json
//! {"verdict": "honest", "reason": null, "steps": ["create applies", "…"],
//!  "prefix": "fence-probe/probe-…", "left_behind": [], "elapsed_ms": 42}
//! ```
//!
//! `verdict` is `honest`, `violation` (the store broke its contract: exit 1) or `error` (could
//! not tell: unreachable, denied, timed out: exit 69); `reason` says why for the last two.

use std::time::Duration;

use fence_core::ConditionalStore;
use fence_testkit::{ProbeConfig, ProbeReport, Verdict};
use serde::Serialize;

use crate::exit::{CHECK_FAILED, OK, STORE};

/// Runs the probe with `rounds` rounds of each race, printing a progress line on stderr every
/// second once it has taken more than one second (when `progress` is set).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use fence_core::MemoryStore;
/// let report = fence_cli::probe::run(&MemoryStore::new(), 2, false).await;
/// assert_eq!(fence_cli::probe::exit_code(&report.verdict), 0);
/// # });
/// ```
pub async fn run(store: &dyn ConditionalStore, rounds: usize, progress: bool) -> ProbeReport {
    let cfg = ProbeConfig {
        rounds: rounds.max(1),
        ..ProbeConfig::default()
    };
    let probe = fence_testkit::probe(store, &cfg);
    if !progress {
        return probe.await;
    }
    tokio::pin!(probe);
    let mut waited = 0u64;
    loop {
        tokio::select! {
            report = &mut probe => {
                if waited > 0 {
                    eprintln!("fence probe: done after {waited}s");
                }
                return report;
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                waited += 1;
                eprintln!("fence probe: still probing ({waited}s; {} rounds of {} racers)", cfg.rounds, cfg.racers);
            }
        }
    }
}

/// The exit code of a verdict: 0 honest, 1 violation, 69 could not tell.
pub fn exit_code(verdict: &Verdict) -> u8 {
    match verdict {
        Verdict::Honest => OK,
        Verdict::Violation(_) => CHECK_FAILED,
        Verdict::Error(_) => STORE,
    }
}

/// The JSON form of a report.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeJson {
    /// `honest`, `violation` or `error`.
    pub verdict: &'static str,
    /// Why, for a violation or an error.
    pub reason: Option<String>,
    /// The checks that completed, in order.
    pub steps: Vec<String>,
    /// Where the probe wrote.
    pub prefix: String,
    /// Keys it could not delete.
    pub left_behind: Vec<String>,
    /// Time taken.
    pub elapsed_ms: u64,
}

impl From<&ProbeReport> for ProbeJson {
    fn from(r: &ProbeReport) -> Self {
        let (verdict, reason) = match &r.verdict {
            Verdict::Honest => ("honest", None),
            Verdict::Violation(why) => ("violation", Some(why.clone())),
            Verdict::Error(why) => ("error", Some(why.clone())),
        };
        ProbeJson {
            verdict,
            reason,
            steps: r.steps.clone(),
            prefix: r.prefix.clone(),
            left_behind: r
                .left_behind
                .iter()
                .map(|k| k.as_str().to_owned())
                .collect(),
            elapsed_ms: r.elapsed_ms,
        }
    }
}
