//! Workloads over a fault layer that records what the store really did (a
//! [`FaultProxy`](crate::wire::FaultProxy) in front of a real server, or a
//! [`FaultyObjectStore`](crate::objstore::FaultyObjectStore) below an adapter over
//! object_store):
//!
//! - [`outcomes`]: many conditional writes spread over many keys; every answer of the adapter
//!   is checked against the [`Ledger`] ([`judge`]) and the whole history for linearizability;
//! - [`runtime`]: nodes holding leases, claiming cells and writing fenced data through the
//!   faulty path (public API only: `Fence::builder`, `acquire`, `claim`, `CellClaim::write`),
//!   checked for one writer per epoch and no acknowledged write lost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fence_core::{
    CasGuard, Clock, ConditionalStore, Entropy, Error, ErrorKind, Fence, Key, PutOutcome, Version,
};

use crate::counting::CountingStore;
use crate::linearizability::{check, History, RecordingStore};
use crate::wire::{judge, Ledger, Said, TOKEN_MARKER};

/// The shape of [`outcomes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Concurrent writers; each owns its own keys, so one key never sees two writers (servers
    /// that queue conditional writes per key stay fast).
    pub writers: usize,
    /// Keys per writer.
    pub keys_per_writer: usize,
    /// Conditional writes, all writers together.
    pub writes: usize,
    /// Seed of the writers' choices.
    pub seed: u64,
    /// How long to wait, after the last answer, for writes still in flight in the fault layer.
    pub settle: Duration,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            writers: 8,
            keys_per_writer: 8,
            writes: 1_200,
            seed: 0x5eed,
            settle: Duration::from_secs(10),
        }
    }
}

/// What a workload did and found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireReport {
    /// Store requests made through the faulty path (gets and puts).
    pub ops: u64,
    /// Conditional writes among them.
    pub writes: u64,
    /// The adapter's answers to the writes, by kind (`Applied`, `Rejected`, …).
    pub said: BTreeMap<String, u64>,
    /// Every broken rule, precisely.
    pub violations: Vec<String>,
}

impl WireReport {
    /// Adds `other`'s counts and violations.
    pub fn absorb(&mut self, other: WireReport) {
        self.ops += other.ops;
        self.writes += other.writes;
        for (k, n) in other.said {
            *self.said.entry(k).or_default() += n;
        }
        self.violations.extend(other.violations);
    }
}

impl fmt::Display for WireReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let said: Vec<String> = self.said.iter().map(|(k, n)| format!("{n} {k}")).collect();
        write!(
            f,
            "{} ops, {} writes ({}), {} violations",
            self.ops,
            self.writes,
            said.join(", "),
            self.violations.len()
        )?;
        for v in &self.violations {
            write!(f, "\n  VIOLATION {v}")?;
        }
        Ok(())
    }
}

/// One write of the workload, for judging once the fault layer settled.
struct Written {
    token: String,
    key: Key,
    said: Said,
}

/// One writer's keys and what it knows of them.
struct Writer {
    id: usize,
    run: u64,
    keys: Vec<Key>,
    /// The version each key holds as far as this writer knows (`None`: absent or unknown).
    known: Vec<Option<Version>>,
    /// Whether `known` may be out of date (after an ambiguous or failed write).
    doubt: Vec<bool>,
    /// Versions a key held before, for stale writes.
    stale: Vec<Vec<Version>>,
    entropy: Entropy,
    ops: u64,
    written: Vec<Written>,
}

impl Writer {
    fn new(id: usize, run: u64, keys: Vec<Key>, seed: u64) -> Self {
        let n = keys.len();
        Writer {
            id,
            run,
            keys,
            known: vec![None; n],
            doubt: vec![false; n],
            stale: vec![Vec::new(); n],
            entropy: Entropy::seeded(seed),
            ops: 0,
            written: Vec::new(),
        }
    }

    /// Re-reads key `k` (a few tries) after a write left its state in doubt.
    async fn refresh(&mut self, store: &dyn ConditionalStore, k: usize) {
        for _ in 0..3 {
            self.ops += 1;
            if let Ok(found) = store.get(&self.keys[k]).await {
                self.known[k] = found.map(|s| s.version);
                self.doubt[k] = false;
                return;
            }
        }
    }

    /// Mostly the current version; sometimes a stale one or a create on an existing key,
    /// which the store must reject.
    fn guard(&self, k: usize) -> CasGuard {
        let current = match &self.known[k] {
            Some(v) => CasGuard::Match(v.clone()),
            None => CasGuard::Absent,
        };
        match self.entropy.below(10) {
            0 => self.stale[k]
                .last()
                .map_or(current, |v| CasGuard::Match(v.clone())),
            1 => CasGuard::Absent,
            _ => current,
        }
    }

    async fn write_once(&mut self, store: &dyn ConditionalStore, seq: usize) {
        let k = self.entropy.below(self.keys.len() as u64) as usize;
        if self.doubt[k] {
            self.refresh(store, k).await;
        }
        let token = format!("{:08x}-{}-{seq}", self.run, self.id);
        let body = Bytes::from(format!("{{\"op\":\"{TOKEN_MARKER}{token}\"}}"));
        self.ops += 1;
        let answer = store.put(&self.keys[k], body, self.guard(k)).await;
        match &answer {
            Ok(PutOutcome::Applied(v)) => {
                if let Some(old) = self.known[k].replace(v.clone()) {
                    self.stale[k].push(old);
                }
            }
            Ok(PutOutcome::Rejected) => {}
            Err(_) => self.doubt[k] = true,
        }
        let key = self.keys[k].clone();
        let said = Said::of(&answer);
        self.written.push(Written { token, key, said });
    }
}

/// `cfg.writes` conditional writes by `cfg.writers` writers over their own keys under
/// `prefix`, through `store` (the adapter over the fault layer that fills `ledger`). After
/// the last answer it waits for writes still in flight, then judges every answer against the
/// ledger ([`judge`]) and the whole history for linearizability.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence_core::Key;
/// use fence_testkit::objstore::{FaultyObjectStore, ObjectStoreAdapter};
/// use fence_testkit::scenarios::wire::{outcomes, Workload};
/// let faulty = Arc::new(FaultyObjectStore::over_memory(1).with_fault_rate(0.3));
/// let store = Arc::new(ObjectStoreAdapter::new(faulty.clone()));
/// let cfg = Workload { writes: 300, ..Workload::default() };
/// let report = outcomes(store, faulty.ledger(), &Key::new("wire").unwrap(), &cfg).await;
/// assert!(report.violations.is_empty(), "{report}");
/// # });
/// ```
pub async fn outcomes(
    store: Arc<dyn ConditionalStore>,
    ledger: &Ledger,
    prefix: &Key,
    cfg: &Workload,
) -> WireReport {
    let history = Arc::new(History::new());
    let recording: Arc<dyn ConditionalStore> =
        Arc::new(RecordingStore::new(store, history.clone()));
    let run = Entropy::from_os().next_u64() as u32 as u64;
    let writers = cfg.writers.max(1);
    let per_writer = cfg.writes.div_ceil(writers);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let keys = (0..cfg.keys_per_writer.max(1))
                .filter_map(|i| prefix.join(&format!("w{w}/k{i}")).ok())
                .collect();
            let mut writer = Writer::new(w, run, keys, cfg.seed.wrapping_add(w as u64));
            let store = recording.clone();
            tokio::spawn(async move {
                for seq in 0..per_writer {
                    writer.write_once(&*store, seq).await;
                }
                writer
            })
        })
        .collect();
    let mut report = WireReport::default();
    let mut written = Vec::new();
    for task in tasks {
        match task.await {
            Ok(writer) => {
                report.ops += writer.ops;
                written.extend(writer.written);
            }
            Err(e) => report.violations.push(format!("a writer panicked: {e}")),
        }
    }
    if !ledger.settle(cfg.settle).await {
        report.violations.push(format!(
            "{} writes still in flight {:?} after the last answer",
            ledger.in_flight(),
            cfg.settle
        ));
    }
    judge_all(&mut report, ledger, &written);
    if let Err(v) = check(&history.operations()) {
        report.violations.push(v.to_string());
    }
    report
}

fn judge_all(report: &mut WireReport, ledger: &Ledger, written: &[Written]) {
    for w in written {
        report.writes += 1;
        let kind = match w.said {
            Said::Applied => "Applied",
            Said::Rejected => "Rejected",
            Said::NotCommitted(_) => "NotCommitted",
            Said::Ambiguous(_) => "Ambiguous",
        };
        *report.said.entry(kind.to_owned()).or_default() += 1;
        if let Some(v) = judge(w.said, &ledger.sends(&w.token), false) {
            report
                .violations
                .push(format!("write {} at {}: {v}", w.token, w.key));
        }
    }
}

/// The shape of [`runtime`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeWorkload {
    /// Nodes (node `n0`'s wall clock runs an hour late, so the others take its cells over at
    /// once and its later writes must be fenced by the store).
    pub nodes: usize,
    /// Cells they contend for.
    pub cells: usize,
    /// The lease TTL.
    pub ttl: Duration,
    /// How long the nodes run.
    pub run_for: Duration,
    /// Seed of the nodes' choices and nonces.
    pub seed: u64,
}

impl Default for RuntimeWorkload {
    fn default() -> Self {
        RuntimeWorkload {
            nodes: 3,
            cells: 3,
            ttl: Duration::from_secs(3),
            run_for: Duration::from_secs(8),
            seed: 0x5eed,
        }
    }
}

/// What the nodes did, for the properties.
#[derive(Debug, Default)]
struct Log {
    /// `(cell, epoch)` → node, from claims and acknowledgements.
    writers: HashMap<(String, u64), String>,
    /// Per cell: the largest acknowledged `(epoch, seq)` and its payload.
    last_ack: HashMap<String, ((u64, u64), String)>,
    /// Every payload some node tried to write.
    attempted: HashSet<String>,
    /// Per cell: the largest epoch claimed.
    top_epoch: HashMap<String, u64>,
    claims: u64,
    acks: u64,
    violations: Vec<String>,
}

impl Log {
    fn writer(&mut self, cell: &str, epoch: u64, node: &str, what: &str) {
        let entry = self.writers.entry((cell.to_owned(), epoch));
        let holder = entry.or_insert_with(|| node.to_owned());
        if holder != node {
            self.violations.push(format!(
                "two writers at epoch {epoch} of {cell}: {holder} and {node} ({what})"
            ));
        }
    }

    fn claimed(&mut self, cell: &str, epoch: u64, node: &str) {
        self.claims += 1;
        self.writer(cell, epoch, node, "claim");
        let top = self.top_epoch.entry(cell.to_owned()).or_default();
        *top = (*top).max(epoch);
    }

    fn acked(&mut self, cell: &str, epoch: u64, seq: u64, node: &str, payload: &str) {
        self.acks += 1;
        self.writer(cell, epoch, node, "acknowledged write");
        let last = self.last_ack.entry(cell.to_owned());
        let last = last.or_insert(((0, 0), String::new()));
        if (epoch, seq) > last.0 {
            *last = ((epoch, seq), payload.to_owned());
        }
    }
}

type SharedLog = Arc<Mutex<Log>>;

fn log(shared: &SharedLog) -> std::sync::MutexGuard<'_, Log> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// `cfg.nodes` nodes run the lease/claim/write runtime through `store` (the faulty path) for
/// `cfg.run_for`, claiming `cfg.cells` cells at random and writing `node|epoch|seq` payloads.
/// Then a checker node, through `direct` (a path without faults to the same store), claims
/// every cell and reads it. Checked: one writer per epoch (claims and acknowledgements), a
/// new claim's epoch above every earlier one, and no acknowledged write lost (each cell holds
/// a payload some node wrote, at least as recent as its latest acknowledged one).
pub async fn runtime(
    store: Arc<dyn ConditionalStore>,
    direct: Arc<dyn ConditionalStore>,
    prefix: &Key,
    cfg: &RuntimeWorkload,
) -> WireReport {
    let shared: SharedLog = Arc::default();
    let counted = Arc::new(CountingStore::new(store));
    let store: Arc<dyn ConditionalStore> = counted.clone();
    let cells: Vec<String> = (0..cfg.cells.max(1)).map(|c| format!("c{c}")).collect();
    let clock = Clock::system();
    let deadline = clock.mono_ms() + cfg.run_for.as_millis() as u64;
    let tasks: Vec<_> = (0..cfg.nodes.max(2))
        .map(|n| {
            let node = NodeRun {
                name: format!("n{n}"),
                store: store.clone(),
                prefix: prefix.to_string(),
                cfg: *cfg,
                cells: cells.clone(),
                log: shared.clone(),
                entropy: Entropy::seeded(cfg.seed.wrapping_add(n as u64)),
                clock: clock.clone(),
                deadline,
            };
            tokio::spawn(node.run())
        })
        .collect();
    let mut report = WireReport::default();
    for task in tasks {
        if let Err(e) = task.await {
            report.violations.push(format!("a node panicked: {e}"));
        }
    }
    final_check(&shared, direct, prefix, cfg, &cells).await;
    let log = log(&shared);
    report.ops = counted.counts().total();
    report.writes = log.acks;
    report.said.insert("claims".into(), log.claims);
    report.said.insert("acknowledged writes".into(), log.acks);
    report.violations.extend(log.violations.iter().cloned());
    report
}

/// One node of [`runtime`].
struct NodeRun {
    name: String,
    store: Arc<dyn ConditionalStore>,
    prefix: String,
    cfg: RuntimeWorkload,
    cells: Vec<String>,
    log: SharedLog,
    entropy: Entropy,
    clock: Clock,
    deadline: u64,
}

impl NodeRun {
    fn fence(&self) -> Result<Fence, Error> {
        let skew = if self.name == "n0" { -3_600_000 } else { 0 };
        Fence::builder(self.store.clone(), self.name.clone())
            .ttl(self.cfg.ttl)
            .prefix(self.prefix.clone())
            .clock(Clock::system().with_skew_ms(skew))
            .entropy(Entropy::seeded(self.entropy.next_u64()))
            .build()
    }

    fn running(&self) -> bool {
        self.clock.mono_ms() < self.deadline
    }

    async fn pause(&self) {
        tokio::time::sleep(self.cfg.ttl / 10).await;
    }

    async fn run(self) {
        let Ok(fence) = self.fence() else {
            log(&self.log)
                .violations
                .push(format!("{}: invalid configuration", self.name));
            return;
        };
        while self.running() {
            let Ok(lease) = fence.acquire().await else {
                self.pause().await;
                continue;
            };
            while lease.is_held() && self.running() {
                let cell = &self.cells[self.entropy.below(self.cells.len() as u64) as usize];
                match lease.claim(cell).await {
                    Ok(claim) => self.hold(cell, claim).await,
                    Err(_) => self.pause().await,
                }
            }
            lease.release().await;
        }
    }

    /// Writes a few payloads under a claim, then releases it or keeps it.
    async fn hold(&self, cell: &str, claim: fence_core::CellClaim) {
        let epoch = claim.epoch();
        log(&self.log).claimed(cell, epoch, &self.name);
        for seq in 1..=1 + self.entropy.below(4) {
            let payload = format!("{}|{epoch}|{seq}", self.name);
            log(&self.log).attempted.insert(payload.clone());
            match claim.write(payload.clone()).await {
                Ok(ack) => log(&self.log).acked(cell, ack.epoch, seq, &self.name, &payload),
                Err(e) if e.kind() == ErrorKind::Fenced => return,
                Err(_) => {}
            }
        }
        if self.entropy.below(2) == 0 {
            let _ = claim.release().await;
        }
    }
}

/// The checker node claims every cell through `direct` and reads what it holds.
async fn final_check(
    shared: &SharedLog,
    direct: Arc<dyn ConditionalStore>,
    prefix: &Key,
    cfg: &RuntimeWorkload,
    cells: &[String],
) {
    let checker = Fence::builder(direct, "checker")
        .ttl(cfg.ttl)
        .prefix(prefix.to_string())
        .build();
    let lease = match checker {
        Ok(fence) => fence.acquire_wait(cfg.ttl * 4).await,
        Err(e) => Err(e),
    };
    let lease = match lease {
        Ok(lease) => lease,
        Err(e) => {
            log(shared)
                .violations
                .push(format!("the checker could not acquire its lease: {e}"));
            return;
        }
    };
    for cell in cells {
        if let Err(why) = check_cell(shared, &lease, cell, cfg.ttl).await {
            log(shared).violations.push(format!("{cell}: {why}"));
        }
    }
    lease.release().await;
}

async fn check_cell(
    shared: &SharedLog,
    lease: &fence_core::LeaseKeeper,
    cell: &str,
    ttl: Duration,
) -> Result<(), String> {
    let mut tries = 0;
    let claim = loop {
        match lease.claim(cell).await {
            Ok(claim) => break claim,
            Err(_) if tries < 40 => {
                tries += 1;
                tokio::time::sleep(ttl / 10).await;
            }
            Err(e) => return Err(format!("the checker could not claim it: {e}")),
        }
    };
    let data = claim
        .read()
        .await
        .map_err(|e| format!("the checker could not read it: {e}"))?;
    let log = log(shared);
    if claim.epoch() <= log.top_epoch.get(cell).copied().unwrap_or(0) {
        return Err(format!(
            "the checker's claim got epoch {}, not above every earlier claim",
            claim.epoch()
        ));
    }
    let Some(((epoch, seq), payload)) = log.last_ack.get(cell).cloned() else {
        return Ok(());
    };
    let held = data.map(|d| String::from_utf8_lossy(&d.payload).into_owned());
    let Some(held) = held else {
        return Err(format!(
            "acknowledged {payload:?}, but the cell holds no data"
        ));
    };
    if !log.attempted.contains(&held) {
        return Err(format!("holds {held:?}, which no node wrote"));
    }
    match tag(&held) {
        Some(t) if t >= (epoch, seq) => Ok(()),
        _ => Err(format!(
            "acknowledged {payload:?} was lost: the cell holds the older {held:?}"
        )),
    }
}

/// `(epoch, seq)` of a `node|epoch|seq` payload.
fn tag(payload: &str) -> Option<(u64, u64)> {
    let mut parts = payload.split('|').skip(1);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}
