//! # fence-probe
//!
//! The contract probe: a check of a few seconds that any user can run against a live store
//! before trusting fence to it (`fence probe URL`), and that `fence-testkit` runs before its
//! conformance suite. It tells four kinds of store apart:
//!
//! - [`Verdict::Honest`]: conditional writes hold, races have exactly one winner;
//! - [`Verdict::Violation`]: the store accepted what it must refuse, refused what it must
//!   accept, let two racers win, or repeats versions without declaring it — a liar;
//! - [`Verdict::Unsupported`]: the store (or its adapter) lacks an operation fence needs;
//! - [`Verdict::Error`]: the probe could not tell (unreachable, denied, every answer lost).
//!
//! [`check`] is the one call to make before trusting a store: an error unless it is honest.
//!
//! A slow store is not a liar and not an error: a racer whose answer has not come is unknown
//! evidence, and the winner of a race is found by reading the key back.
//!
//! ```
//! # fn block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
//! # }
//! # block(async {
//! use fence_core::MemoryStore;
//! use fence_probe::{probe, ProbeConfig, Verdict};
//! let report = probe(&MemoryStore::new(), &ProbeConfig::default()).await;
//! assert_eq!(report.verdict, Verdict::Honest, "{report}");
//! assert_eq!(report.content_versions, Some(false));
//! # });
//! ```
#![deny(missing_docs)]

mod race;
mod run;

use std::fmt;
use std::time::Duration;

use fence_core::{Clock, ConditionalStore, Entropy, Error, ErrorKind, Key};

/// How the probe runs.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// Where the probe writes: `<key_prefix>/probe-<random>/…` (or `<key_prefix>/…` when
    /// `fresh_subprefix` is false).
    pub key_prefix: String,
    /// Add a fresh random segment under `key_prefix`, so probes never collide.
    pub fresh_subprefix: bool,
    /// Writers released together on each race key.
    pub racers: usize,
    /// Race keys of each kind (create, update); all of them race at the same time.
    pub rounds: usize,
    /// The bound of each single request, and of each race as a whole.
    pub op_timeout: Duration,
    /// Once a racer has won, how long the probe still waits for the other racers' answers
    /// before it reads the key back (answers still missing then are unknown evidence).
    pub race_grace: Duration,
    /// Delete the probe's keys afterwards: at their version where the store has conditional
    /// delete, else with its plain delete (they are the probe's own scratch under
    /// `key_prefix`, which must then be private to the probe).
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
            race_grace: Duration::from_millis(500),
            cleanup: true,
        }
    }
}

/// The probe's finding.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Every check held: the store refused what it must refuse and let exactly one racer win.
    Honest,
    /// The store accepted what it must refuse, refused what it must accept, let two racers
    /// win, or repeats versions for identical bytes without declaring
    /// [`Capabilities::content_versions`](fence_core::Capabilities). Unsafe for fence: do not
    /// run on it.
    Violation(String),
    /// An operation fence needs answered [`ErrorKind::Unsupported`](fence_core::ErrorKind)
    /// (say, an adapter without replace-if-current, or a store that returns no version).
    /// fence cannot run on it as configured; this is not a judgement on honesty.
    Unsupported(String),
    /// The probe could not tell (unreachable, permission denied, timeouts, every race answer
    /// lost). Never a judgement on the store's honesty.
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

    /// Whether the verdict is [`Verdict::Unsupported`].
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Verdict::Unsupported(_))
    }

    /// A short lowercase name: `honest`, `violation`, `unsupported` or `error`.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Honest => "honest",
            Verdict::Violation(_) => "violation",
            Verdict::Unsupported(_) => "unsupported",
            Verdict::Error(_) => "error",
        }
    }

    /// Why, for every verdict but [`Verdict::Honest`].
    pub fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Honest => None,
            Verdict::Violation(why) | Verdict::Unsupported(why) | Verdict::Error(why) => Some(why),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Honest => f.write_str("HONEST"),
            Verdict::Violation(why) => write!(f, "VIOLATION: {why}"),
            Verdict::Unsupported(why) => write!(f, "UNSUPPORTED: {why}"),
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
    /// Whether rewriting identical bytes kept the version (content-hash versions, like S3
    /// ETags); `None` when the probe stopped before that check.
    pub content_versions: Option<bool>,
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

/// Runs the contract probe against `store`.
///
/// 1. create-if-absent applies; a second create is rejected and changes nothing; an update
///    with the current version applies with a new version; one with the stale version is
///    rejected, carrying the current object where the store declares
///    [`Capabilities::current_on_reject`](fence_core::Capabilities); where it has conditional
///    delete, a delete with the stale version is rejected and one with the current version
///    deletes;
/// 2. at the same time: `rounds` keys raced by `racers` concurrent creates, `rounds` keys
///    raced by `racers` concurrent updates from one shared version, and an identical
///    rewrite. Each race has at most one racer answered `Applied`, and the key reads back
///    as the winner's body (a racer without an answer may be the winner, found by that
///    read); an identical rewrite that keeps its version must be declared
///    ([`Capabilities::content_versions`](fence_core::Capabilities)).
///
/// A store error never gives [`Verdict::Violation`]: [`ErrorKind::Unsupported`] gives
/// [`Verdict::Unsupported`], anything else [`Verdict::Error`]. An ambiguous answer is
/// resolved by reading the key back.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use fence_core::MemoryStore;
/// use fence_probe::{probe, ProbeConfig};
/// let cfg = ProbeConfig { racers: 4, rounds: 2, ..ProbeConfig::default() };
/// let report = probe(&MemoryStore::new(), &cfg).await;
/// assert!(report.verdict.is_honest(), "{report}");
/// assert!(report.left_behind.is_empty(), "MemoryStore has conditional delete");
/// # });
/// ```
///
/// [`ErrorKind::Unsupported`]: fence_core::ErrorKind::Unsupported
pub async fn probe(store: &dyn ConditionalStore, cfg: &ProbeConfig) -> ProbeReport {
    let clock = Clock::system();
    let base = cfg.key_prefix.trim_end_matches('/');
    let prefix = if cfg.fresh_subprefix {
        format!("{base}/probe-{:016x}", Entropy::from_os().next_u64())
    } else {
        base.to_owned()
    };
    let mut run = run::ProbeRun::new(store, cfg, prefix.clone());
    let verdict = run.all().await;
    let left_behind = run.cleanup().await;
    let mut steps = run.steps;
    if !left_behind.is_empty() {
        let why = if cfg.cleanup {
            "delete failed"
        } else {
            "cleanup off"
        };
        steps.push(format!(
            "left {} keys under {prefix} ({why})",
            left_behind.len()
        ));
    }
    ProbeReport {
        verdict,
        steps,
        content_versions: run.content_versions,
        prefix,
        left_behind,
        elapsed_ms: clock.mono_ms(),
    }
}

/// The probe in one call, before trusting a store you built yourself (an OpenDAL operator,
/// an S3-compatible server): [`probe`] with the default configuration, and an error unless
/// the store is honest. A store that ignores conditions (s3rver, Garage) would otherwise
/// acknowledge every write of every holder.
///
/// Errors, not committed, their message the verdict and its reason:
/// [`ErrorKind::Unsupported`] when the store lies ([`Verdict::Violation`]) or lacks an
/// operation fence needs ([`Verdict::Unsupported`]): do not run on it;
/// [`ErrorKind::Unavailable`] when the probe could not tell ([`Verdict::Error`]: unreachable,
/// denied), which says nothing of its honesty.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// let report = fence_probe::check(&fence_core::MemoryStore::new()).await.unwrap();
/// assert!(report.verdict.is_honest());
/// # });
/// ```
///
/// [`ErrorKind::Unsupported`]: fence_core::ErrorKind::Unsupported
/// [`ErrorKind::Unavailable`]: fence_core::ErrorKind::Unavailable
pub async fn check(store: &dyn ConditionalStore) -> Result<ProbeReport, Error> {
    let report = probe(store, &ProbeConfig::default()).await;
    let kind = match &report.verdict {
        Verdict::Honest => return Ok(report),
        Verdict::Error(_) => ErrorKind::Unavailable,
        _ => ErrorKind::Unsupported,
    };
    let why = format!(
        "the contract probe found the store unfit: {}",
        report.verdict
    );
    Err(Error::new(kind, why).not_committed())
}

/// Deletes `key` at its current version (a few attempts); true when it is gone.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use fence_core::{CasGuard, ConditionalStore, Key, MemoryStore};
/// let store = MemoryStore::new();
/// let key = Key::new("k").unwrap();
/// store.put(&key, "x".into(), CasGuard::Absent).await.unwrap();
/// assert!(fence_probe::delete_current(&store, &key).await);
/// assert_eq!(store.get(&key).await.unwrap(), None);
/// # });
/// ```
pub async fn delete_current(store: &dyn ConditionalStore, key: &Key) -> bool {
    for _ in 0..3 {
        match store.get(key).await {
            Ok(None) => return true,
            Ok(Some(s)) => {
                if let Ok(fence_core::DeleteOutcome::Deleted) = store.delete(key, &s.version).await
                {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}
