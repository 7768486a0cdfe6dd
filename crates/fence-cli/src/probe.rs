//! `fence probe`: the contract probe of `fence-probe` against a live store.
//!
//! The `--json` shape:
//!
//! ```json
//! {"verdict": "honest", "reason": null, "steps": ["create applies", "…"],
//!  "content_versions": false, "prefix": "fence-probe/probe-…", "left_behind": [],
//!  "elapsed_ms": 42}
//! ```
//!
//! `verdict` is `honest`, `violation` (the store broke its contract: exit 1), `unsupported`
//! (an operation fence needs is missing: exit 1) or `error` (could not tell: unreachable,
//! denied, timed out: exit 69); `reason` says why for all but `honest`. `content_versions`
//! says whether identical bytes kept their version (null when the probe stopped earlier).

use std::time::Duration;

use fence_core::ConditionalStore;
use fence_probe::{ProbeConfig, ProbeReport, Verdict};
use serde::Serialize;

use crate::exit::{CHECK_FAILED, OK, STORE};

/// Runs the probe with `rounds` race keys of each kind, printing a progress line on stderr every
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
    let probe = fence_probe::probe(store, &cfg);
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
                eprintln!("fence probe: still probing ({waited}s; {} race keys of {} racers each kind)", cfg.rounds, cfg.racers);
            }
        }
    }
}

/// The exit code of a verdict: 0 honest, 1 violation or unsupported, 69 could not tell.
pub fn exit_code(verdict: &Verdict) -> u8 {
    match verdict {
        Verdict::Honest => OK,
        Verdict::Violation(_) | Verdict::Unsupported(_) => CHECK_FAILED,
        _ => STORE,
    }
}

/// The JSON form of a report.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeJson {
    /// `honest`, `violation`, `unsupported` or `error`.
    pub verdict: &'static str,
    /// Why, for every verdict but `honest`.
    pub reason: Option<String>,
    /// The checks that completed, in order.
    pub steps: Vec<String>,
    /// Whether identical bytes kept their version (content-hash versions); `None` when the
    /// probe stopped before that check.
    pub content_versions: Option<bool>,
    /// Where the probe wrote.
    pub prefix: String,
    /// Keys it could not delete.
    pub left_behind: Vec<String>,
    /// Time taken.
    pub elapsed_ms: u64,
}

impl From<&ProbeReport> for ProbeJson {
    fn from(r: &ProbeReport) -> Self {
        ProbeJson {
            verdict: r.verdict.name(),
            reason: r.verdict.reason().map(str::to_owned),
            steps: r.steps.clone(),
            content_versions: r.content_versions,
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

#[cfg(test)]
mod tests {
    use super::*;
    use fence_testkit::sabotage::{Flaw, SabotagedStore};

    #[tokio::test]
    async fn a_store_without_replace_is_unsupported_and_fails_the_check() {
        let report = run(&SabotagedStore::new(Flaw::NoUpdate), 1, false).await;
        assert!(report.verdict.is_unsupported(), "{report}");
        assert_eq!(exit_code(&report.verdict), CHECK_FAILED);
        let json = ProbeJson::from(&report);
        assert_eq!((json.verdict, json.content_versions), ("unsupported", None));
    }
}
