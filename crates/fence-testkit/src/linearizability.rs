//! Linearizability of per-key compare-and-swap registers: record a history of concurrent
//! gets and puts (invocation and response times), then check it.
//!
//! The checker exploits what the store contract guarantees: every put carries a unique body,
//! every applied put names its resulting version and every read names the version it saw. That
//! fixes each key's chain of states (absent → w1 → w2 → …): two writes replacing the same
//! state are two winners, a version produced twice is a repeat. What remains is real time:
//! each write takes effect inside its own interval and in chain order, each read between the
//! write it saw and that write's successor, each rejected put at a moment its guard was false.
//! Those are interval bounds, solved by one greedy pass (earliest schedule), so a history of
//! n operations checks in about O(n log n). Ambiguous puts (unknown outcome) may or may not
//! have taken effect: they count when a read saw them, and an unseen one may still be the
//! last write of its key. Keys are checked independently (linearizability is local).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::{
    Capabilities, CasGuard, Clock, ConditionalStore, DeleteOutcome, Entropy, Error, Key,
    PutOutcome, Stored, Version,
};

/// What an operation asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// A read.
    Get,
    /// A conditional write of a body unique per key.
    Put {
        /// The condition.
        guard: CasGuard,
        /// The body (unique among the key's puts).
        body: Bytes,
    },
}

/// What an operation answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Return {
    /// A get's answer: absent, or the version and body seen.
    Read(Option<(Version, Bytes)>),
    /// The put applied with this version.
    Applied(Version),
    /// The put was rejected.
    Rejected,
    /// The put failed provably without effect.
    NotCommitted,
    /// The put failed and may or may not have taken effect.
    Ambiguous,
}

/// One completed operation of a history. Times are logical stamps from one counter
/// ([`History::tick`]): `invoked < returned`, all distinct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The key.
    pub key: Key,
    /// The request.
    pub call: Call,
    /// The answer.
    pub ret: Return,
    /// Stamp taken before the request was sent.
    pub invoked: u64,
    /// Stamp taken after the answer arrived.
    pub returned: u64,
}

/// A concurrent history under construction: a logical clock and the completed operations.
#[derive(Debug, Default)]
pub struct History {
    clock: AtomicU64,
    ops: Mutex<Vec<Operation>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History::default()
    }

    /// The next logical time stamp (strictly increasing across threads).
    pub fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Adds a completed operation.
    pub fn record(&self, op: Operation) {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// A copy of the operations recorded so far.
    pub fn operations(&self) -> Vec<Operation> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many operations were recorded.
    pub fn len(&self) -> usize {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A store wrapper that records every `get` and `put` into a [`History`]. Failed gets are
/// not recorded (they constrain nothing). `delete`, `delete_immutable` and `list` pass through
/// unrecorded: do not delete keys of a recorded history.
#[derive(Debug)]
pub struct RecordingStore {
    inner: Arc<dyn ConditionalStore>,
    history: Arc<History>,
}

impl RecordingStore {
    /// Records the operations made on `inner` into `history`.
    pub fn new(inner: Arc<dyn ConditionalStore>, history: Arc<History>) -> Self {
        RecordingStore { inner, history }
    }

    /// The history recorded into.
    pub fn history(&self) -> &Arc<History> {
        &self.history
    }
}

#[async_trait]
impl ConditionalStore for RecordingStore {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let invoked = self.history.tick();
        let answer = self.inner.get(key).await;
        let returned = self.history.tick();
        if let Ok(found) = &answer {
            let seen = found.as_ref().map(|s| (s.version.clone(), s.body.clone()));
            let (key, call, ret) = (key.clone(), Call::Get, Return::Read(seen));
            self.history.record(Operation {
                key,
                call,
                ret,
                invoked,
                returned,
            });
        }
        answer
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let call = Call::Put {
            guard: guard.clone(),
            body: body.clone(),
        };
        let invoked = self.history.tick();
        let answer = self.inner.put(key, body, guard).await;
        let returned = self.history.tick();
        let ret = match &answer {
            Ok(PutOutcome::Applied(v)) => Return::Applied(v.clone()),
            Ok(PutOutcome::Rejected) => Return::Rejected,
            Err(e) if e.is_ambiguous() => Return::Ambiguous,
            Err(_) => Return::NotCommitted,
        };
        let key = key.clone();
        self.history.record(Operation {
            key,
            call,
            ret,
            invoked,
            returned,
        });
        answer
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }

    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.inner.delete_immutable(key).await
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// A history that has no legal sequential order (or cannot be checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The key whose history is illegal.
    pub key: Key,
    /// Why.
    pub reason: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not linearizable at {}: {}", self.key, self.reason)
    }
}

impl std::error::Error for Violation {}

/// What a successful check covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Operations checked.
    pub ops: usize,
    /// Distinct keys.
    pub keys: usize,
}

/// Checks that `ops` is linearizable as one CAS register per key, starting absent.
///
/// ```
/// use fence_core::{CasGuard, Key, Version};
/// use fence_testkit::linearizability::{check, Call, Operation, Return};
/// let key = Key::new("k").unwrap();
/// let v1 = Version::new("v1").unwrap();
/// let put = |invoked, returned, ret| Operation {
///     key: key.clone(), invoked, returned, ret,
///     call: Call::Put { guard: CasGuard::Absent, body: format!("{invoked}").into() },
/// };
/// // One create wins, the concurrent one is rejected: legal.
/// assert!(check(&[put(1, 3, Return::Applied(v1.clone())), put(2, 4, Return::Rejected)]).is_ok());
/// // Two creates both applied: illegal.
/// let v2 = Version::new("v2").unwrap();
/// assert!(check(&[put(1, 3, Return::Applied(v1)), put(2, 4, Return::Applied(v2))]).is_err());
/// ```
pub fn check(ops: &[Operation]) -> Result<Checked, Violation> {
    let mut by_key: BTreeMap<&Key, Vec<&Operation>> = BTreeMap::new();
    for op in ops {
        by_key.entry(&op.key).or_default().push(op);
    }
    for (key, ops) in &by_key {
        check_key(ops).map_err(|reason| Violation {
            key: (*key).clone(),
            reason,
        })?;
    }
    Ok(Checked {
        ops: ops.len(),
        keys: by_key.len(),
    })
}

/// One put of a key's history.
struct Write<'a> {
    op: &'a Operation,
    guard: &'a CasGuard,
    version: Option<Version>,
}

impl Write<'_> {
    fn ambiguous(&self) -> bool {
        self.op.ret == Return::Ambiguous
    }
    fn effective(&self) -> bool {
        matches!(self.op.ret, Return::Applied(_)) || (self.ambiguous() && self.version.is_some())
    }
}

/// The versions of a key: which write produced which version.
struct Versions<'a> {
    writes: Vec<Write<'a>>,
    by_version: HashMap<Version, usize>,
}

fn index_writes<'a>(
    ops: &[&'a Operation],
) -> Result<(Versions<'a>, HashMap<&'a Bytes, usize>), String> {
    let mut writes = Vec::new();
    let mut by_body: HashMap<&Bytes, usize> = HashMap::new();
    for op in ops {
        if let Call::Put { guard, body } = &op.call {
            if by_body.insert(body, writes.len()).is_some() {
                return Err(
                    "two puts wrote identical bodies (the checker needs unique bodies)".into(),
                );
            }
            let version = match &op.ret {
                Return::Applied(v) => Some(v.clone()),
                _ => None,
            };
            writes.push(Write { op, guard, version });
        }
    }
    let mut by_version = HashMap::new();
    for (i, w) in writes.iter().enumerate() {
        if let Some(v) = &w.version {
            if by_version.insert(v.clone(), i).is_some() {
                return Err(format!(
                    "version {v} was produced by two writes (versions repeat)"
                ));
            }
        }
    }
    Ok((Versions { writes, by_version }, by_body))
}

/// Attributes every read to the write it saw, learning ambiguous writes' versions.
fn attribute_reads<'a>(
    ops: &[&'a Operation],
    vs: &mut Versions<'a>,
    by_body: &HashMap<&Bytes, usize>,
) -> Result<Vec<(&'a Operation, Option<usize>)>, String> {
    let mut reads = Vec::new();
    for op in ops {
        let Return::Read(seen) = &op.ret else {
            continue;
        };
        let Some((version, body)) = seen else {
            reads.push((*op, None));
            continue;
        };
        let &w = by_body
            .get(body)
            .ok_or("a read saw a body no recorded put wrote")?;
        let write = &mut vs.writes[w];
        match (&write.op.ret, &write.version) {
            (Return::Rejected, _) => {
                return Err("a put answered Rejected was read back: it landed".into())
            }
            (Return::NotCommitted, _) => {
                return Err("a put answered NotCommitted was read back: it landed".into())
            }
            (_, Some(v)) if v != version => {
                return Err(format!(
                    "a read saw a write at version {version}, but it was applied as {v}"
                ))
            }
            (_, Some(_)) => {}
            (_, None) => {
                if let Some(&other) = vs.by_version.get(version) {
                    if other != w {
                        return Err(format!("version {version} names two different bodies"));
                    }
                }
                write.version = Some(version.clone());
                vs.by_version.insert(version.clone(), w);
            }
        }
        reads.push((*op, Some(w)));
    }
    Ok(reads)
}

/// The effective writes in chain order (absent → first → …).
fn chain(vs: &Versions<'_>) -> Result<Vec<usize>, String> {
    let mut successor: HashMap<Option<usize>, usize> = HashMap::new();
    let mut effective = 0;
    for (i, w) in vs.writes.iter().enumerate() {
        if !w.effective() {
            continue;
        }
        effective += 1;
        let pred = match w.guard {
            CasGuard::Absent => None,
            CasGuard::Match(g) => Some(*vs.by_version.get(g).ok_or_else(|| {
                format!("a write applied over version {g}, which no write produced")
            })?),
        };
        if let Some(first) = successor.insert(pred, i) {
            return Err(format!(
                "two writes (stamps {} and {}) both replaced the same state: two winners",
                vs.writes[first].op.invoked, w.op.invoked
            ));
        }
    }
    let mut order = Vec::new();
    let mut at = None;
    while let Some(&next) = successor.get(&at) {
        order.push(next);
        at = Some(next);
        if order.len() > effective {
            break;
        }
    }
    if order.len() != effective {
        return Err("the applied writes do not form one chain from the absent state".into());
    }
    Ok(order)
}

/// Bounds on the moments the chain's writes take effect: `lo[k] < L_k < hi[k]`
/// (positions 1..=n; 0 is the initial absent state).
struct Bounds {
    lo: Vec<u64>,
    hi: Vec<u64>,
    /// A rejected `Match` of state k during (inv, resp): `inv < L_k` or `L_{k+1} < resp`.
    either: Vec<(usize, u64, u64)>,
}

impl Bounds {
    fn new(n: usize) -> Self {
        Bounds {
            lo: vec![0; n + 1],
            hi: vec![u64::MAX; n + 1],
            either: Vec::new(),
        }
    }
    fn above(&mut self, k: usize, t: u64) {
        if k < self.lo.len() {
            self.lo[k] = self.lo[k].max(t);
        }
    }
    fn below(&mut self, k: usize, t: u64) {
        if k < self.hi.len() {
            self.hi[k] = self.hi[k].min(t);
        }
    }
}

fn bounds(
    vs: &Versions<'_>,
    order: &[usize],
    reads: &[(&Operation, Option<usize>)],
) -> Result<Bounds, String> {
    let n = order.len();
    let mut pos: HashMap<usize, usize> = HashMap::new();
    let mut b = Bounds::new(n);
    for (k, &w) in order.iter().enumerate() {
        let op = vs.writes[w].op;
        pos.insert(w, k + 1);
        b.above(k + 1, op.invoked);
        if !vs.writes[w].ambiguous() {
            b.below(k + 1, op.returned);
        }
    }
    for (op, saw) in reads {
        let k = saw.map_or(0, |w| pos[&w]);
        if k > 0 {
            b.below(k, op.returned);
        }
        b.above(k + 1, op.invoked);
    }
    for w in &vs.writes {
        if w.op.ret != Return::Rejected {
            continue;
        }
        let (inv, resp) = (w.op.invoked, w.op.returned);
        match w.guard {
            CasGuard::Absent if n == 0 => {
                return Err("a create was rejected though the key was absent throughout".into())
            }
            CasGuard::Absent => b.below(1, resp),
            CasGuard::Match(g) => match vs.by_version.get(g).and_then(|i| pos.get(i)) {
                None => {}
                Some(&k) if k == n => b.above(k, inv),
                Some(&k) => b.either.push((k, inv, resp)),
            },
        }
    }
    Ok(b)
}

/// The earliest schedule: `x[k]` means "just after stamp x[k]".
fn earliest(b: &Bounds) -> Result<Vec<u64>, String> {
    let mut x = vec![0; b.lo.len()];
    for k in 1..b.lo.len() {
        x[k] = b.lo[k].max(x[k - 1]);
        if x[k] >= b.hi[k] {
            return Err(format!(
                "no legal order: write #{k} of the chain must take effect after stamp {} but before stamp {}",
                x[k], b.hi[k]
            ));
        }
    }
    Ok(x)
}

/// Resolves the rejected-put disjunctions and checks the schedule.
fn solve(mut b: Bounds) -> Result<(), String> {
    loop {
        let x = earliest(&b)?;
        let mut changed = false;
        let mut open = Vec::new();
        for &(k, inv, resp) in &b.either {
            if x[k + 1] < resp {
                open.push((k, inv, resp));
            } else if inv > x[k] {
                changed = true;
                b.lo[k] = b.lo[k].max(inv);
            }
        }
        b.either = open;
        if !changed {
            return Ok(());
        }
    }
}

fn check_key(ops: &[&Operation]) -> Result<(), String> {
    let (mut vs, by_body) = index_writes(ops)?;
    let reads = attribute_reads(ops, &mut vs, &by_body)?;
    let order = chain(&vs)?;
    let verdict = bounds(&vs, &order, &reads).and_then(solve);
    if verdict.is_ok() {
        return verdict;
    }
    // An ambiguous write nobody saw may still have taken effect as the last write.
    let last = order.last().and_then(|&w| vs.writes[w].version.clone());
    for i in 0..vs.writes.len() {
        let w = &vs.writes[i];
        let extends = match (w.guard, &last) {
            (CasGuard::Absent, None) => true,
            (CasGuard::Match(g), Some(v)) => g == v,
            _ => false,
        };
        if w.ambiguous() && w.version.is_none() && extends {
            let mut longer = order.clone();
            longer.push(i);
            if bounds(&vs, &longer, &reads).and_then(solve).is_ok() {
                return Ok(());
            }
        }
    }
    verdict
}

/// The shape of the workload [`record_and_check`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadConfig {
    /// Operations to record, all workers together.
    pub ops: usize,
    /// Concurrent workers.
    pub workers: usize,
    /// Keys the operations spread over.
    pub keys: usize,
    /// Seed of the workers' choices.
    pub seed: u64,
}

/// What [`record_and_check`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinStats {
    /// Operations recorded and checked.
    pub ops: usize,
    /// Keys they touched.
    pub keys: usize,
    /// Workers that ran concurrently.
    pub workers: usize,
    /// Puts applied.
    pub applied: usize,
    /// Puts rejected.
    pub rejected: usize,
    /// Puts with an unknown outcome.
    pub ambiguous: usize,
    /// Requests that failed (reads are then not recorded).
    pub errors: usize,
    /// Wall time recording took, in ms.
    pub record_ms: u64,
    /// Wall time checking took, in ms.
    pub check_ms: u64,
}

impl fmt::Display for LinStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops ({} puts applied, {} rejected, {} ambiguous, {} errors) on {} keys by {} \
             workers: recorded in {} ms, checked in {} ms",
            self.ops,
            self.applied,
            self.rejected,
            self.ambiguous,
            self.errors,
            self.keys,
            self.workers,
            self.record_ms,
            self.check_ms
        )
    }
}

/// Runs `cfg.workers` concurrent workers doing reads, read-then-CAS writes and writes with
/// possibly stale versions over `cfg.keys` fresh keys under `prefix`, records at least
/// `cfg.ops` operations, and checks the history.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence_core::{Key, MemoryStore};
/// use fence_testkit::linearizability::{record_and_check, WorkloadConfig};
/// let cfg = WorkloadConfig { ops: 2_000, workers: 4, keys: 8, seed: 1 };
/// let stats = record_and_check(Arc::new(MemoryStore::new()), &Key::new("lin").unwrap(), &cfg)
///     .await
///     .unwrap();
/// assert!(stats.ops >= 2_000);
/// # });
/// ```
pub async fn record_and_check(
    store: Arc<dyn ConditionalStore>,
    prefix: &Key,
    cfg: &WorkloadConfig,
) -> Result<LinStats, String> {
    let clock = Clock::system();
    let history = Arc::new(History::new());
    let recording: Arc<dyn ConditionalStore> =
        Arc::new(RecordingStore::new(store, history.clone()));
    let keys: Vec<Key> = (0..cfg.keys.max(1))
        .map(|i| prefix.join(&format!("r{i}")).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let keys = Arc::new(keys);
    let workers = cfg.workers.max(1);
    let per_worker = cfg.ops.div_ceil(workers);
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (store, keys) = (recording.clone(), keys.clone());
            let entropy = Entropy::seeded(cfg.seed.wrapping_add(w as u64));
            tokio::spawn(async move { worker(&*store, &keys, w, per_worker, &entropy).await })
        })
        .collect();
    let mut tally = Tally::default();
    for task in tasks {
        tally.add(task.await.map_err(|e| format!("worker panicked: {e}"))?);
    }
    let record_ms = clock.mono_ms();
    let ops = history.operations();
    check(&ops).map_err(|v| v.to_string())?;
    let count = |r: fn(&Return) -> bool| ops.iter().filter(|o| r(&o.ret)).count();
    if let Some(why) = tally.too_few_answers() {
        return Err(why);
    }
    if count(|r| matches!(r, Return::Applied(_))) == 0 {
        return Err("no write applied: the history says too little to judge".into());
    }
    let errors = tally.errors();
    Ok(LinStats {
        ops: ops.len(),
        keys: keys.len(),
        workers,
        applied: count(|r| matches!(r, Return::Applied(_))),
        rejected: count(|r| *r == Return::Rejected),
        ambiguous: count(|r| *r == Return::Ambiguous),
        errors,
        record_ms,
        check_ms: clock.mono_ms() - record_ms,
    })
}

/// The requests of one or more workers, and how many failed.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    gets: usize,
    failed_gets: usize,
    puts: usize,
    failed_puts: usize,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.gets += other.gets;
        self.failed_gets += other.failed_gets;
        self.puts += other.puts;
        self.failed_puts += other.failed_puts;
    }

    fn errors(&self) -> usize {
        self.failed_gets + self.failed_puts
    }

    /// Why the history says too little to judge: most reads or most writes failed.
    fn too_few_answers(&self) -> Option<String> {
        let most = |failed: usize, of: usize| of > 0 && failed * 2 > of;
        if most(self.failed_puts, self.puts) || most(self.failed_gets, self.gets) {
            return Some(format!(
                "most requests failed ({} of {} puts, {} of {} gets): the history says too \
                 little to judge",
                self.failed_puts, self.puts, self.failed_gets, self.gets
            ));
        }
        None
    }
}

/// One worker: until `ops` operations are done, picks a key and either reads it, reads and
/// then writes guarded by what it read, or writes guarded by the version it last saw there
/// (possibly stale). Store errors on writes are recorded; a failed read is skipped. It yields
/// between requests, so workers interleave even on a store whose requests never suspend.
async fn worker(
    store: &dyn ConditionalStore,
    keys: &[Key],
    id: usize,
    ops: usize,
    entropy: &Entropy,
) -> Tally {
    let mut last_seen: HashMap<usize, Option<Version>> = HashMap::new();
    let mut tally = Tally::default();
    while tally.gets + tally.puts < ops {
        let k = entropy.below(keys.len() as u64) as usize;
        let key = &keys[k];
        let choice = entropy.below(4);
        if choice != 3 || !last_seen.contains_key(&k) {
            tally.gets += 1;
            let found = store.get(key).await;
            tokio::task::yield_now().await;
            let Ok(found) = found else {
                tally.failed_gets += 1;
                continue;
            };
            last_seen.insert(k, found.map(|s| s.version));
            if choice == 0 {
                continue;
            }
        }
        tally.puts += 1;
        let guard = match last_seen.get(&k).cloned().flatten() {
            Some(v) => CasGuard::Match(v),
            None => CasGuard::Absent,
        };
        let body = Bytes::from(format!("worker {id} write {}", tally.puts));
        match store.put(key, body, guard).await {
            Ok(PutOutcome::Applied(v)) => {
                last_seen.insert(k, Some(v));
            }
            Ok(PutOutcome::Rejected) => {}
            Err(_) => tally.failed_puts += 1,
        }
        tokio::task::yield_now().await;
    }
    tally
}
