//! The conformance suite: named scenarios run one after the other against one store, the
//! contract probe first, into a [`Report`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fence_core::{Clock, ConditionalStore, Entropy, Key};
use futures::future::BoxFuture;
use futures::FutureExt;

use crate::scenarios;
use fence_probe::{delete_current, probe, ProbeConfig, ProbeReport};

/// What the suite runs and how hard. Every field is public; start from
/// [`SuiteConfig::default`] (thorough, a few seconds on `MemoryStore`) or
/// [`SuiteConfig::light`] (for slow servers) and adjust.
///
/// ```
/// use fence_testkit::SuiteConfig;
/// let cfg = SuiteConfig { racers: 8, race_rounds: 5, ..SuiteConfig::default() };
/// assert_eq!(cfg.conditional_delete, None);
/// ```
#[derive(Clone, Debug)]
pub struct SuiteConfig {
    /// Every run writes under `<key_prefix>/run-<random>/`, so runs never collide.
    pub key_prefix: String,
    /// Whether the store has conditional delete; `None` takes it from
    /// [`ConditionalStore::capabilities`].
    pub conditional_delete: Option<bool>,
    /// Rounds of the create and update races.
    pub race_rounds: usize,
    /// Racers released together per round.
    pub racers: usize,
    /// Workers incrementing the shared counter.
    pub counter_workers: usize,
    /// Increments per counter worker.
    pub counter_increments: usize,
    /// Operations recorded for the linearizability check (all workers together).
    pub linearizability_ops: usize,
    /// Concurrent workers of the linearizability history.
    pub linearizability_workers: usize,
    /// Keys the linearizability history spreads over.
    pub linearizability_keys: usize,
    /// Rounds of the two-acquirers lease race.
    pub lease_rounds: usize,
    /// Size of the large body (capped by [`Capabilities::max_body`](fence_core::Capabilities)).
    pub large_body_bytes: usize,
    /// Each scenario fails after this long.
    pub scenario_timeout: Duration,
    /// The node lease TTL of the runtime scenarios, which run in real time (default
    /// [`runtime::TTL`](crate::scenarios::runtime::TTL), 800 ms: a local store answers a
    /// renewal in time). Give a server on a loaded machine or across a network a longer one:
    /// a lease whose renewals are not answered within it is lost, and the scenario fails. The
    /// runtime scenarios take about 6.5 TTLs in all.
    pub runtime_ttl: Duration,
    /// The contract probe run first (its `key_prefix` is replaced by the run's prefix).
    pub probe: ProbeConfig,
    /// Stop before the scenarios when the probe's verdict is not [`Verdict::Honest`](crate::Verdict::Honest): a
    /// violation, an unsupported operation or a store the probe could not judge (turn off to
    /// see every scenario such a store fails).
    pub stop_unless_honest: bool,
    /// Delete the run's keys afterwards when the store has conditional delete.
    pub cleanup: bool,
    /// Seed of fault injection and random choices (a fixed seed makes runs comparable).
    pub seed: u64,
}

impl Default for SuiteConfig {
    fn default() -> Self {
        SuiteConfig {
            key_prefix: "fence-testkit".into(),
            conditional_delete: None,
            race_rounds: 20,
            racers: 16,
            counter_workers: 8,
            counter_increments: 25,
            linearizability_ops: 10_000,
            linearizability_workers: 8,
            linearizability_keys: 32,
            lease_rounds: 5,
            large_body_bytes: 1 << 20,
            scenario_timeout: Duration::from_secs(120),
            runtime_ttl: crate::scenarios::runtime::TTL,
            probe: ProbeConfig::default(),
            stop_unless_honest: true,
            cleanup: true,
            seed: 0x5eed,
        }
    }
}

impl SuiteConfig {
    /// A cheaper run for slow servers (e.g. SeaweedFS under heavy contention): fewer racers and
    /// rounds, a smaller counter; still ≥ 10,000 linearizability operations.
    pub fn light() -> Self {
        SuiteConfig {
            race_rounds: 5,
            racers: 8,
            counter_workers: 4,
            counter_increments: 10,
            linearizability_workers: 4,
            lease_rounds: 3,
            large_body_bytes: 256 << 10,
            ..SuiteConfig::default()
        }
    }
}

/// What a scenario gets: the store, its own fresh key prefix, the configuration and the
/// resolved capabilities.
#[derive(Clone, Debug)]
pub struct ScenarioCtx {
    /// The store under test.
    pub store: Arc<dyn ConditionalStore>,
    /// This scenario's own prefix (`<key_prefix>/run-<random>/<scenario>`); nothing else
    /// writes under it.
    pub prefix: Key,
    /// The suite configuration.
    pub config: Arc<SuiteConfig>,
    /// Whether the store has conditional delete.
    pub conditional_delete: bool,
}

impl ScenarioCtx {
    /// `prefix/rel`, validated.
    pub fn key(&self, rel: &str) -> Result<Key, String> {
        self.prefix.join(rel).map_err(|e| e.to_string())
    }
}

/// A scenario's result: `Ok(note)` (the note may be empty) or `Err(reason)`.
pub type ScenarioOutcome = Result<String, String>;

type ScenarioFn = Arc<dyn Fn(ScenarioCtx) -> BoxFuture<'static, ScenarioOutcome> + Send + Sync>;

/// A named scenario: an async function over a [`ScenarioCtx`].
///
/// ```
/// use fence_testkit::Scenario;
/// let s = Scenario::new("always_passes", |_cx| async { Ok(String::new()) });
/// assert_eq!(s.name(), "always_passes");
/// ```
#[derive(Clone)]
pub struct Scenario {
    name: String,
    run: ScenarioFn,
}

impl fmt::Debug for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .finish()
    }
}

impl Scenario {
    /// A scenario named `name` (one key segment: letters, digits, `_`, `-`) running `f`.
    pub fn new<F, Fut>(name: impl Into<String>, f: F) -> Self
    where
        F: Fn(ScenarioCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ScenarioOutcome> + Send + 'static,
    {
        Scenario {
            name: name.into(),
            run: Arc::new(move |cx| f(cx).boxed()),
        }
    }

    /// The scenario's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The outcome of one scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioResult {
    /// The scenario's name.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// The failure reason, or a note on success (may be empty).
    pub detail: String,
    /// Wall time taken, in milliseconds.
    pub elapsed_ms: u64,
}

impl fmt::Display for ScenarioResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = if self.passed { "PASS" } else { "FAIL" };
        write!(f, "{status} {} ({} ms)", self.name, self.elapsed_ms)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// The suite's report. Its `Display` names what failed first (each failed scenario with its
/// reason, and why the run stopped early), so that the head of a long report, which is what
/// a test harness or a CI log shows first, says what went wrong; then it lists every scenario
/// (PASS/FAIL and reason) in the order run, and ends with the line `N passed, M failed`.
#[derive(Clone, Debug)]
pub struct Report {
    /// The run's key prefix.
    pub prefix: String,
    /// One result per scenario run, the probe first.
    pub results: Vec<ScenarioResult>,
    /// The contract probe's report, if it ran.
    pub probe: Option<ProbeReport>,
    /// Why the run stopped before the remaining scenarios, if it did.
    pub stopped_early: Option<String>,
    /// Notes on the run (cleanup, keys left behind).
    pub notes: Vec<String>,
}

impl Report {
    /// Scenarios that passed.
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed).count()
    }

    /// Scenarios that failed.
    pub fn failed(&self) -> usize {
        self.results.len() - self.passed()
    }

    /// Whether every scenario ran and passed.
    pub fn is_success(&self) -> bool {
        self.failed() == 0 && self.stopped_early.is_none()
    }

    /// The result of the scenario named `name`.
    pub fn result(&self, name: &str) -> Option<&ScenarioResult> {
        self.results.iter().find(|r| r.name == name)
    }

    /// Names of the failed scenarios.
    pub fn failures(&self) -> Vec<&str> {
        let failed = self.results.iter().filter(|r| !r.passed);
        failed.map(|r| r.name.as_str()).collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "fence-testkit run under {}", self.prefix)?;
        let failed: Vec<_> = self.results.iter().filter(|r| !r.passed).collect();
        if !failed.is_empty() || self.stopped_early.is_some() {
            writeln!(
                f,
                "what failed ({} of {}):",
                failed.len(),
                self.results.len()
            )?;
            for r in &failed {
                writeln!(f, "  {r}")?;
            }
            if let Some(why) = &self.stopped_early {
                writeln!(f, "  STOPPED EARLY: {why}")?;
            }
            writeln!(f, "every scenario, in the order run:")?;
        }
        for r in &self.results {
            writeln!(f, "{r}")?;
        }
        if let Some(why) = &self.stopped_early {
            writeln!(f, "STOPPED EARLY: {why}")?;
        }
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        write!(f, "{} passed, {} failed", self.passed(), self.failed())
    }
}

/// The scenario name of the contract probe in a [`Report`].
pub const PROBE_SCENARIO: &str = "contract_probe";

/// Runs the contract probe, then every scenario of [`scenarios::all`], against `store`.
///
/// Stops early with a failed report when the probe's verdict is not [`Verdict::Honest`](crate::Verdict::Honest)
/// (unless [`SuiteConfig::stop_unless_honest`] is off): the scenarios would only repeat its
/// finding, slowly.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence_core::MemoryStore;
/// use fence_testkit::{run_all, SuiteConfig};
/// let report = run_all(Arc::new(MemoryStore::new()), &SuiteConfig::light()).await;
/// assert!(report.is_success(), "{report}");
/// assert!(report.to_string().ends_with(" passed, 0 failed"));
/// # });
/// ```
pub async fn run_all(store: Arc<dyn ConditionalStore>, cfg: &SuiteConfig) -> Report {
    run_scenarios(store, cfg, &scenarios::all()).await
}

/// Runs the contract probe, then `list` in order (each under its own prefix and timeout).
/// Use it to run a subset or to add scenarios of your own.
pub async fn run_scenarios(
    store: Arc<dyn ConditionalStore>,
    cfg: &SuiteConfig,
    list: &[Scenario],
) -> Report {
    let run_prefix = format!(
        "{}/run-{:016x}",
        cfg.key_prefix.trim_end_matches('/'),
        Entropy::from_os().next_u64()
    );
    let mut report = Report {
        prefix: run_prefix.clone(),
        results: Vec::new(),
        probe: None,
        stopped_early: None,
        notes: Vec::new(),
    };
    let conditional_delete = cfg
        .conditional_delete
        .unwrap_or_else(|| store.capabilities().conditional_delete);
    let probe_report = run_probe(&*store, cfg, &run_prefix, conditional_delete).await;
    report.results.push(probe_result(&probe_report));
    if !probe_report.verdict.is_honest() && cfg.stop_unless_honest {
        report.stopped_early = Some(format!(
            "the contract probe says {} ({}); {} scenarios not run",
            probe_report.verdict.name(),
            probe_report.verdict.reason().unwrap_or_default(),
            list.len()
        ));
        report.probe = Some(probe_report);
        return report;
    }
    report.probe = Some(probe_report);
    let config = Arc::new(cfg.clone());
    for scenario in list {
        let cx = match Key::new(format!("{run_prefix}/{}", scenario.name)) {
            Ok(prefix) => ScenarioCtx {
                store: store.clone(),
                prefix,
                config: config.clone(),
                conditional_delete,
            },
            Err(e) => {
                report
                    .results
                    .push(failed(scenario.name(), e.to_string(), 0));
                continue;
            }
        };
        report.results.push(run_one(scenario, cx).await);
    }
    if cfg.cleanup {
        report
            .notes
            .push(cleanup(&*store, &run_prefix, conditional_delete).await);
    }
    report
}

async fn run_probe(
    store: &dyn ConditionalStore,
    cfg: &SuiteConfig,
    run_prefix: &str,
    conditional_delete: bool,
) -> ProbeReport {
    let probe_cfg = ProbeConfig {
        key_prefix: format!("{run_prefix}/{PROBE_SCENARIO}"),
        fresh_subprefix: false,
        cleanup: cfg.probe.cleanup && conditional_delete,
        ..cfg.probe.clone()
    };
    probe(store, &probe_cfg).await
}

fn probe_result(p: &ProbeReport) -> ScenarioResult {
    let passed = p.verdict.is_honest();
    let detail = match p.verdict.reason() {
        None => format!("honest ({} steps)", p.steps.len()),
        Some(why) => format!("{}: {why}", p.verdict.name().to_uppercase()),
    };
    ScenarioResult {
        name: PROBE_SCENARIO.into(),
        passed,
        detail,
        elapsed_ms: p.elapsed_ms,
    }
}

fn failed(name: &str, detail: String, elapsed_ms: u64) -> ScenarioResult {
    ScenarioResult {
        name: name.into(),
        passed: false,
        detail,
        elapsed_ms,
    }
}

async fn run_one(scenario: &Scenario, cx: ScenarioCtx) -> ScenarioResult {
    let clock = Clock::system();
    let timeout = cx.config.scenario_timeout;
    // Spawned so that a panicking scenario fails alone instead of aborting the run.
    let task = tokio::spawn((scenario.run)(cx));
    let outcome = match tokio::time::timeout(timeout, task).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(join)) => Err(format!("the scenario panicked: {join}")),
        Err(_) => Err(format!("timed out after {timeout:?}")),
    };
    let elapsed_ms = clock.mono_ms();
    match outcome {
        Ok(note) => ScenarioResult {
            name: scenario.name.clone(),
            passed: true,
            detail: note,
            elapsed_ms,
        },
        Err(why) => failed(&scenario.name, why, elapsed_ms),
    }
}

/// Deletes every key under `prefix` when the store can; says what it did.
async fn cleanup(store: &dyn ConditionalStore, prefix: &str, conditional_delete: bool) -> String {
    let Ok(prefix) = Key::new(prefix) else {
        return format!("cleanup skipped: invalid prefix {prefix:?}");
    };
    let keys = match store.list(Some(&prefix)).await {
        Ok(keys) => keys,
        Err(e) => return format!("cleanup skipped: listing failed: {e}"),
    };
    if !conditional_delete {
        return format!(
            "{} keys left under {prefix} (the store has no conditional delete)",
            keys.len()
        );
    }
    let mut left = 0;
    for key in &keys {
        if !delete_current(store, key).await {
            left += 1;
        }
    }
    format!(
        "cleanup: deleted {} of {} keys under {prefix}",
        keys.len() - left,
        keys.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str, passed: bool, detail: &str) -> ScenarioResult {
        ScenarioResult {
            name: name.into(),
            passed,
            detail: detail.into(),
            elapsed_ms: 1,
        }
    }

    fn report(results: Vec<ScenarioResult>, stopped_early: Option<String>) -> Report {
        Report {
            prefix: "p/run-1".into(),
            results,
            probe: None,
            stopped_early,
            notes: vec!["cleanup: deleted 3 of 3 keys".into()],
        }
    }

    /// A CI log shows the first lines of a failed assertion's message: they must name the
    /// failed scenario and its reason, however many passed before it.
    #[test]
    fn a_failed_report_names_its_failures_in_its_first_lines() {
        let mut results: Vec<_> = (0..20)
            .map(|i| result(&format!("ok_{i}"), true, ""))
            .collect();
        results.push(result("lease_renew", false, "lease lost after 600 ms"));
        let shown = report(results, Some("the store stopped answering".into())).to_string();
        let head: Vec<&str> = shown.lines().take(4).collect();
        assert_eq!(
            head,
            [
                "fence-testkit run under p/run-1",
                "what failed (1 of 21):",
                "  FAIL lease_renew (1 ms): lease lost after 600 ms",
                "  STOPPED EARLY: the store stopped answering",
            ]
        );
        // The full list follows, in the order run, and the verdict ends it.
        assert_eq!(shown.matches("FAIL lease_renew").count(), 2);
        assert!(shown.contains("every scenario, in the order run:\nPASS ok_0 (1 ms)\n"));
        assert!(shown.ends_with("20 passed, 1 failed"), "{shown}");
    }

    #[test]
    fn a_passing_report_lists_its_scenarios_only() {
        let shown = report(vec![result("a", true, "note")], None).to_string();
        assert_eq!(
            shown,
            "fence-testkit run under p/run-1\nPASS a (1 ms): note\n\
             note: cleanup: deleted 3 of 3 keys\n1 passed, 0 failed"
        );
    }
}
