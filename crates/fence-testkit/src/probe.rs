//! The contract probe: a short check any user can run against a live store, telling a store
//! that violates its preconditions apart from one that is merely unreachable.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use fence_core::{
    CasGuard, Clock, ConditionalStore, DeleteOutcome, Entropy, Error, Key, PutOutcome, Stored,
    Version,
};

/// How the probe runs.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// Where the probe writes: `<key_prefix>/probe-<random>/…` (or `<key_prefix>/…` when
    /// `fresh_subprefix` is false).
    pub key_prefix: String,
    /// Add a fresh random segment under `key_prefix`, so probes never collide.
    pub fresh_subprefix: bool,
    /// Writers released together per race round.
    pub racers: usize,
    /// Rounds of each race (create, then update).
    pub rounds: usize,
    /// Each request fails the probe with [`Verdict::Error`] after this long.
    pub op_timeout: Duration,
    /// Delete the probe's keys afterwards (when the store has conditional delete).
    pub cleanup: bool,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            key_prefix: "fence-probe".into(),
            fresh_subprefix: true,
            racers: 8,
            rounds: 3,
            op_timeout: Duration::from_secs(10),
            cleanup: true,
        }
    }
}

/// The probe's finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every check held: the store refused what it must refuse and let exactly one racer win.
    Honest,
    /// The store accepted what it must refuse, refused what it must accept, or let two racers
    /// win. Unsafe for fence: do not run on it.
    Violation(String),
    /// The probe could not tell (unreachable, permission denied, timeout, ambiguous answers).
    /// Never a judgement on the store's honesty.
    Error(String),
}

impl Verdict {
    /// Whether the verdict is [`Verdict::Honest`].
    pub fn is_honest(&self) -> bool {
        matches!(self, Verdict::Honest)
    }

    /// Whether the verdict is [`Verdict::Violation`].
    pub fn is_violation(&self) -> bool {
        matches!(self, Verdict::Violation(_))
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Honest => f.write_str("HONEST"),
            Verdict::Violation(why) => write!(f, "VIOLATION: {why}"),
            Verdict::Error(why) => write!(f, "ERROR (could not tell): {why}"),
        }
    }
}

/// What the probe did and found.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    /// The finding.
    pub verdict: Verdict,
    /// One line per completed check, in order.
    pub steps: Vec<String>,
    /// The prefix the probe wrote under.
    pub prefix: String,
    /// Keys the probe could not (or was not allowed to) delete.
    pub left_behind: Vec<Key>,
    /// Wall time taken, in milliseconds.
    pub elapsed_ms: u64,
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "contract probe under {} ({} ms)",
            self.prefix, self.elapsed_ms
        )?;
        for step in &self.steps {
            writeln!(f, "  ok {step}")?;
        }
        if !self.left_behind.is_empty() {
            writeln!(
                f,
                "  {} keys left under {}",
                self.left_behind.len(),
                self.prefix
            )?;
        }
        write!(f, "{}", self.verdict)
    }
}

/// Why the probe stopped.
enum Stop {
    Violation(String),
    Error(String),
}

type Step<T> = Result<T, Stop>;

/// Runs the contract probe against `store`: create applies; a second create is rejected;
/// update with the current version applies (with a new version); update with the stale
/// version is rejected; then `racers` concurrent creates and `racers` concurrent updates from
/// one shared version, `rounds` times each: exactly one winner each round, and the stored
/// body is the winner's.
///
/// Any error of the store (unreachable, denied, timeout, ambiguous) gives
/// [`Verdict::Error`], never [`Verdict::Violation`].
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use fence_core::MemoryStore;
/// use fence_testkit::{probe, ProbeConfig, Verdict};
/// let report = probe(&MemoryStore::new(), &ProbeConfig::default()).await;
/// assert_eq!(report.verdict, Verdict::Honest, "{report}");
/// # });
/// ```
pub async fn probe(store: &dyn ConditionalStore, cfg: &ProbeConfig) -> ProbeReport {
    let clock = Clock::system();
    let base = cfg.key_prefix.trim_end_matches('/');
    let prefix = if cfg.fresh_subprefix {
        format!("{base}/probe-{:016x}", Entropy::from_os().next_u64())
    } else {
        base.to_owned()
    };
    let mut run = ProbeRun {
        store,
        cfg,
        prefix: prefix.clone(),
        steps: Vec::new(),
        written: BTreeSet::new(),
        nonce: Entropy::from_os().next_u64(),
    };
    let verdict = match run.all().await {
        Ok(()) => Verdict::Honest,
        Err(Stop::Violation(why)) => Verdict::Violation(why),
        Err(Stop::Error(why)) => Verdict::Error(why),
    };
    let left_behind = run.cleanup().await;
    if !left_behind.is_empty() {
        run.steps.push(format!(
            "left {} keys under {prefix} ({})",
            left_behind.len(),
            if cfg.cleanup && store.capabilities().conditional_delete {
                "delete failed"
            } else {
                "no conditional delete or cleanup off"
            }
        ));
    }
    ProbeReport {
        verdict,
        steps: run.steps,
        prefix,
        left_behind,
        elapsed_ms: clock.mono_ms(),
    }
}

struct ProbeRun<'a> {
    store: &'a dyn ConditionalStore,
    cfg: &'a ProbeConfig,
    prefix: String,
    steps: Vec<String>,
    written: BTreeSet<Key>,
    nonce: u64,
}

fn violation<T>(why: impl Into<String>) -> Step<T> {
    Err(Stop::Violation(why.into()))
}

fn store_error(what: &str, e: &Error) -> Stop {
    Stop::Error(format!("{what}: {e}"))
}

impl ProbeRun<'_> {
    fn key(&self, rel: &str) -> Step<Key> {
        Key::new(format!("{}/{rel}", self.prefix))
            .map_err(|e| Stop::Error(format!("probe key prefix: {e}")))
    }

    fn body(&self, tag: &str) -> Bytes {
        Bytes::from(format!("fence-probe {tag} {:016x}", self.nonce))
    }

    async fn timed<T>(&self, what: &str, op: impl Future<Output = Result<T, Error>>) -> Step<T> {
        match tokio::time::timeout(self.cfg.op_timeout, op).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(store_error(what, &e)),
            Err(_) => Err(Stop::Error(format!(
                "{what}: no answer within {:?}",
                self.cfg.op_timeout
            ))),
        }
    }

    async fn put(
        &mut self,
        what: &str,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Step<PutOutcome> {
        self.written.insert(key.clone());
        self.timed(what, self.store.put(key, body, guard)).await
    }

    async fn get(&self, what: &str, key: &Key) -> Step<Option<Stored>> {
        self.timed(what, self.store.get(key)).await
    }

    async fn all(&mut self) -> Step<()> {
        let v1 = self.sequential().await?;
        let _ = v1;
        for round in 0..self.cfg.rounds {
            self.race_create(round).await?;
        }
        for round in 0..self.cfg.rounds {
            self.race_update(round).await?;
        }
        Ok(())
    }

    /// The four sequential checks.
    async fn sequential(&mut self) -> Step<Version> {
        let key = self.key("contract")?;
        let body1 = self.body("create");
        let v1 = match self
            .put("create", &key, body1.clone(), CasGuard::Absent)
            .await?
        {
            PutOutcome::Applied(v) => v,
            PutOutcome::Rejected => {
                return violation("create-if-absent on an absent key was rejected")
            }
        };
        self.steps.push("create-if-absent applies".into());
        let second = self.put("second create", &key, self.body("second"), CasGuard::Absent);
        if let PutOutcome::Applied(_) = second.await? {
            return violation("a second create-if-absent was accepted (If-None-Match ignored)");
        }
        match self.get("read after second create", &key).await? {
            Some(s) if s.body == body1 && s.version == v1 => {}
            Some(s) if s.body == body1 => {
                return violation("the version changed though the second create was rejected")
            }
            _ => return violation("the rejected second create changed the stored object"),
        }
        self.steps
            .push("second create-if-absent rejected, object unchanged".into());
        let update = self.put(
            "update",
            &key,
            self.body("update"),
            CasGuard::Match(v1.clone()),
        );
        let v2 = match update.await? {
            PutOutcome::Applied(v) if v == v1 => {
                return violation("an update answered the version it replaced (versions repeat)")
            }
            PutOutcome::Applied(v) => v,
            PutOutcome::Rejected => {
                return violation("an update with the current version was rejected")
            }
        };
        self.steps
            .push("update with the current version applies, new version".into());
        let stale = self.put(
            "stale update",
            &key,
            self.body("stale"),
            CasGuard::Match(v1),
        );
        if let PutOutcome::Applied(_) = stale.await? {
            return violation("an update with a stale version was accepted (If-Match ignored)");
        }
        self.steps
            .push("update with a stale version rejected".into());
        Ok(v2)
    }

    async fn race_create(&mut self, round: usize) -> Step<()> {
        let key = self.key(&format!("race-create-{round}"))?;
        self.race(&key, CasGuard::Absent, "create", round).await
    }

    async fn race_update(&mut self, round: usize) -> Step<()> {
        let key = self.key(&format!("race-update-{round}"))?;
        let base = self
            .put("race base", &key, self.body("base"), CasGuard::Absent)
            .await?;
        let PutOutcome::Applied(v0) = base else {
            return violation("create-if-absent on an absent key was rejected");
        };
        self.race(&key, CasGuard::Match(v0), "update", round).await
    }

    /// `racers` writers at once on `key` under `guard`: exactly one may win.
    async fn race(&mut self, key: &Key, guard: CasGuard, what: &str, round: usize) -> Step<()> {
        self.written.insert(key.clone());
        let bodies: Vec<Bytes> = (0..self.cfg.racers)
            .map(|i| self.body(&format!("{what}-racer-{i}-round-{round}")))
            .collect();
        let answers = futures::future::join_all(bodies.iter().map(|b| {
            let op = self.store.put(key, b.clone(), guard.clone());
            tokio::time::timeout(self.cfg.op_timeout, op)
        }))
        .await;
        let label = format!("{what} race round {round}");
        let mut winners = Vec::new();
        let mut trouble = None;
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(Ok(PutOutcome::Applied(_))) => winners.push(i),
                Ok(Ok(PutOutcome::Rejected)) => {}
                Ok(Err(e)) => trouble = Some(store_error(&label, &e)),
                Err(_) => trouble = Some(Stop::Error(format!("{label}: a racer timed out"))),
            }
        }
        if winners.len() > 1 {
            return violation(format!(
                "{label}: {} of {} racers won (exactly one may)",
                winners.len(),
                self.cfg.racers
            ));
        }
        if let Some(stop) = trouble {
            return Err(stop);
        }
        let Some(&winner) = winners.first() else {
            return violation(format!("{label}: every racer was rejected, none won"));
        };
        let stored = self.get(&format!("{label} read-back"), key).await?;
        if stored.map(|s| s.body) != Some(bodies[winner].clone()) {
            return violation(format!("{label}: the stored body is not the winner's"));
        }
        self.steps.push(format!(
            "{label}: exactly 1 of {} racers won",
            self.cfg.racers
        ));
        Ok(())
    }

    /// Deletes what the probe wrote, if allowed; returns the keys left behind.
    async fn cleanup(&self) -> Vec<Key> {
        if !(self.cfg.cleanup && self.store.capabilities().conditional_delete) {
            return self.written.iter().cloned().collect();
        }
        let mut left = Vec::new();
        for key in &self.written {
            let deleted =
                tokio::time::timeout(self.cfg.op_timeout, delete_current(self.store, key));
            if !matches!(deleted.await, Ok(true)) {
                left.push(key.clone());
            }
        }
        left
    }
}

/// Deletes `key` at its current version (a few attempts); true when it is gone.
pub(crate) async fn delete_current(store: &dyn ConditionalStore, key: &Key) -> bool {
    for _ in 0..3 {
        match store.get(key).await {
            Ok(None) => return true,
            Ok(Some(s)) => {
                if let Ok(DeleteOutcome::Deleted) = store.delete(key, &s.version).await {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}
