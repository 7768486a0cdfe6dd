//! The fleet at scale, simulated: `n` nodes of the real fleet on one in-memory store, in
//! virtual time (tokio's paused clock), every request counted by kind, by node and by key
//! prefix. Shared by `tests/scale.rs` (the small sizes, with the goals asserted) and
//! `benches/scale.rs` (every size, printed as a table).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::runtime::Fence;
use fence_core::{
    Capabilities, CasGuard, Clock, ConditionalStore, Current, DeleteOutcome, Error, Key,
    MemoryStore, Ownership, PutOutcome, Stop, Stored, Version,
};
use fence_fleet::{Events, Fleet};
use fence_testkit::sim::PausableStore;
use fence_testkit::{CountingStore, OpCounts};

/// S3 Standard list prices (us-east-1): PUT, COPY, POST and LIST per 1,000 requests, and GET
/// per 1,000 requests.
pub const S3_WRITE_PER_1000: f64 = 0.005;
pub const S3_READ_PER_1000: f64 = 0.0004;
/// DynamoDB on-demand list prices (us-east-1), per million request units: a write unit is a
/// write of up to 1 KB of item, a read unit a strongly consistent read of up to 4 KB. Failed
/// conditional writes are billed like the others.
pub const DYNAMODB_WRITE_PER_MILLION: f64 = 0.625;
pub const DYNAMODB_READ_PER_MILLION: f64 = 0.125;
/// Seconds in a 30-day month.
pub const MONTH_S: f64 = 30.0 * 24.0 * 3600.0;
/// Keys one S3 LIST request returns at most.
pub const LIST_PAGE: u64 = 1_000;

/// Requests by kind; a listing counts one request per page of [`LIST_PAGE`] keys.
#[derive(Default, Debug)]
struct Kinds {
    get: AtomicU64,
    put: AtomicU64,
    delete: AtomicU64,
    list_pages: AtomicU64,
    /// The request units the same requests take on DynamoDB.
    read_units: AtomicU64,
    write_units: AtomicU64,
}

/// The bytes of the DynamoDB item fence-dynamodb stores `key` with a record of `body` bytes
/// as: the attribute names (`pk`, `sk`, `v`, `b`), the partition key (the prefix; `/` here),
/// the sort key (the key), the version (`<generation>-<16 hex digits>`, 20 bytes or so) and
/// the record.
fn item_bytes(key: &Key, body: usize) -> u64 {
    (2 + 1 + 2 + key.as_str().len() + 1 + 20 + 1 + body) as u64
}

/// Write units of a write touching an item of `bytes` (the larger of the old and the new).
fn write_units(bytes: u64) -> u64 {
    bytes.div_ceil(1024).max(1)
}

/// Read units of a strongly consistent read of `bytes` (an absent item costs one).
fn read_units(bytes: u64) -> u64 {
    bytes.div_ceil(4096).max(1)
}

/// The request rate of one key prefix.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrefixRate {
    /// The prefix.
    pub prefix: String,
    /// Reads (GET, LIST pages) per second.
    pub reads: f64,
    /// Writes (PUT, DELETE) per second.
    pub writes: f64,
}

/// Counts every request to the shared store by key prefix — the key's folder (everything up
/// to its last `/`) and its first segment — while measuring.
#[derive(Debug)]
pub struct Tally {
    inner: Arc<dyn ConditionalStore>,
    on: AtomicBool,
    kinds: Kinds,
    /// (reads, writes) per folder.
    folders: Mutex<HashMap<String, (u64, u64)>>,
    /// (reads, writes) per first key segment.
    tops: Mutex<HashMap<String, (u64, u64)>>,
    /// Rejections carry the current object, as DynamoDB's do (`ALL_OLD`).
    telling: bool,
}

impl Tally {
    pub fn new(inner: Arc<dyn ConditionalStore>) -> Self {
        Tally {
            inner,
            on: AtomicBool::new(false),
            kinds: Kinds::default(),
            folders: Mutex::default(),
            tops: Mutex::default(),
            telling: false,
        }
    }

    /// The same store, its rejections carrying the current object as DynamoDB's do (read
    /// through the inner store, uncounted: on DynamoDB it comes in the same answer).
    pub fn telling(mut self, telling: bool) -> Self {
        self.telling = telling;
        self
    }

    /// The size of `key`'s item now (0: absent), uncounted.
    async fn item_now(&self, key: &Key) -> u64 {
        match self.inner.get(key).await {
            Ok(Some(s)) => item_bytes(key, s.body.len()),
            _ => 0,
        }
    }

    fn units(&self, read: u64, write: u64) {
        if self.on.load(Ordering::Relaxed) {
            self.kinds.read_units.fetch_add(read, Ordering::Relaxed);
            self.kinds.write_units.fetch_add(write, Ordering::Relaxed);
        }
    }

    /// Read and write units counted while measuring.
    pub fn request_units(&self) -> (u64, u64) {
        let k = &self.kinds;
        (
            k.read_units.load(Ordering::SeqCst),
            k.write_units.load(Ordering::SeqCst),
        )
    }

    /// Counts a write of `body` bytes to `key` (units by the larger item) and performs it.
    async fn counted_write(&self, key: &Key, body: usize) {
        self.count(key.as_str(), 0, 1);
        if self.on.load(Ordering::Relaxed) {
            let bytes = self.item_now(key).await.max(item_bytes(key, body));
            self.units(0, write_units(bytes));
        }
    }

    pub fn measure(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    fn count(&self, key: &str, reads: u64, writes: u64) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let folder = key.rsplit_once('/').map_or("", |(f, _)| f).to_owned() + "/";
        let top = key.split('/').next().unwrap_or("").to_owned() + "/";
        for (map, k) in [(&self.folders, folder), (&self.tops, top)] {
            let mut m = map.lock().unwrap();
            let e = m.entry(k).or_default();
            e.0 += reads;
            e.1 += writes;
        }
    }

    fn busiest(map: &Mutex<HashMap<String, (u64, u64)>>, secs: f64) -> (PrefixRate, PrefixRate) {
        let m = map.lock().unwrap();
        let rate = |(p, (r, w)): (&String, &(u64, u64))| PrefixRate {
            prefix: p.clone(),
            reads: *r as f64 / secs,
            writes: *w as f64 / secs,
        };
        let reads = m.iter().max_by_key(|(_, (r, _))| *r).map(rate);
        let writes = m.iter().max_by_key(|(_, (_, w))| *w).map(rate);
        (reads.unwrap_or_default(), writes.unwrap_or_default())
    }

    /// LIST pages counted while measuring.
    pub fn list_pages(&self) -> u64 {
        self.kinds.list_pages.load(Ordering::SeqCst)
    }
}

fn pages(keys: usize) -> u64 {
    (keys as u64).div_ceil(LIST_PAGE).max(1)
}

#[async_trait]
impl ConditionalStore for Tally {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.count(key.as_str(), 1, 0);
        let found = self.inner.get(key).await;
        if self.on.load(Ordering::Relaxed) {
            self.kinds.get.fetch_add(1, Ordering::Relaxed);
            let bytes = match &found {
                Ok(Some(s)) => item_bytes(key, s.body.len()),
                _ => 0,
            };
            self.units(read_units(bytes), 0);
        }
        found
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.counted_write(key, body.len()).await;
        self.inner.put(key, body, guard).await
    }
    async fn put_with_current(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        self.counted_write(key, body.len()).await;
        let outcome = self.inner.put(key, body, guard).await?;
        let current = match (&outcome, self.telling) {
            (PutOutcome::Rejected, true) => match self.inner.get(key).await? {
                Some(found) => Current::Found(found),
                None => Current::Absent,
            },
            _ => Current::Untold,
        };
        Ok((outcome, current))
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.counted_write(key, 0).await;
        self.inner.delete(key, version).await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.counted_write(key, 0).await;
        self.inner.delete_immutable(key).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let keys = self.inner.list(prefix).await?;
        let p = pages(keys.len());
        let at = prefix.map_or(String::new(), |k| k.as_str().to_owned() + "/x");
        self.count(&at, p, 0);
        if self.on.load(Ordering::Relaxed) {
            self.kinds.list_pages.fetch_add(p, Ordering::Relaxed);
            // A Query reads whole items: its units are those of everything it went through.
            let mut bytes = 0;
            for k in &keys {
                bytes += self.item_now(k).await;
            }
            self.units(bytes.div_ceil(4096).max(p), 0);
        }
        Ok(keys)
    }
    fn capabilities(&self) -> Capabilities {
        let caps = self.inner.capabilities();
        match self.telling {
            true => caps.with_current_on_reject(),
            false => caps,
        }
    }
}

/// One node of the simulated fleet.
pub struct SimNode {
    pub id: String,
    pub path: Arc<PausableStore>,
    pub stop: Arc<Stop>,
    pub counts: Arc<CountingStore>,
    pub fleet: Option<Fleet>,
    pub events: Option<Events>,
}

impl SimNode {
    /// Starts node `id` of the fleet over `cells`, on its own path to the `shared` store,
    /// with a wall clock that agrees with every other node's (`since_ms`: virtual ms since
    /// the run began). A node started later on a clock reset to the run's start would write
    /// notices that look minutes old to its peers, which drop them.
    async fn start(
        shared: &Arc<dyn ConditionalStore>,
        id: String,
        cells: &[String],
        cfg: &ScaleConfig,
        since_ms: u64,
    ) -> SimNode {
        let path = Arc::new(PausableStore::new(shared.clone()));
        let counts = Arc::new(CountingStore::new(path.clone()));
        let stop = Arc::new(Stop::default());
        let fence = Fence::builder(counts.clone(), id.clone())
            .ttl(cfg.ttl)
            .clock(Clock::virtual_at(BASE_WALL + since_ms).with_stop(stop.clone()))
            .build()
            .unwrap();
        let fleet = Fleet::builder(fence, cells.to_vec()).start().await;
        let (fleet, events) = fleet.unwrap();
        SimNode {
            id,
            path,
            stop,
            counts,
            fleet: Some(fleet),
            events: Some(events),
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct ScaleReport {
    pub nodes: usize,
    pub cells: usize,
    pub measured_s: f64,
    /// Mean requests per node per second by kind (LIST in pages).
    pub get: f64,
    pub put: f64,
    pub list: f64,
    pub delete: f64,
    /// Mean DynamoDB request units per node per second: read units, write units.
    pub read_units: f64,
    pub write_units: f64,
    /// The busiest node's requests per second (LIST in pages).
    pub busiest_node: f64,
    pub fleet_rps: f64,
    /// The busiest folder (key up to its last `/`) by reads, and by writes.
    pub folder_reads: PrefixRate,
    pub folder_writes: PrefixRate,
    /// The busiest first key segment by reads, and by writes.
    pub top_reads: PrefixRate,
    pub top_writes: PrefixRate,
    /// Cells moved (epoch raised) while measuring, with nothing changing.
    pub quiet_moves: usize,
    /// Milliseconds from the SIGKILL of a node until every cell it held was held again: the
    /// longest of the kills (three, at different moments of the renewal and round cycles).
    pub failover_ms: Option<u64>,
    /// Each kill's failover.
    pub failovers: Vec<u64>,
    /// Cells the killed nodes held.
    pub killed_cells: usize,
    /// Cells that moved because of the kills, and the most any moved (epochs) in one.
    pub kill_moved: usize,
    pub kill_most: u64,
    /// A drain (a leave) after the kills: the cells the leaver held, how many moved, the
    /// most any moved (epochs), and whether everything was handed off.
    pub leave_held: usize,
    pub leave_moved: usize,
    pub leave_most: u64,
    pub leave_handed_all: bool,
    /// A join after the leave: how many cells moved, the most any moved, and how many the
    /// joiner holds once settled.
    pub join_moved: usize,
    pub join_most: u64,
    pub join_held: usize,
    /// Milliseconds from the joiner's start until it held its share (`None`: not within
    /// 6 TTL).
    pub join_ms: Option<u64>,
}

impl ScaleReport {
    pub fn per_node(&self) -> f64 {
        self.get + self.put + self.list + self.delete
    }

    /// Dollars per node-month at S3 list prices.
    pub fn dollars(&self) -> f64 {
        let writes = self.put + self.list + self.delete;
        (writes * S3_WRITE_PER_1000 + self.get * S3_READ_PER_1000) / 1000.0 * MONTH_S
    }

    /// Dollars per node-month at DynamoDB's on-demand list prices, from the request units
    /// the same requests take there.
    pub fn dynamodb_dollars(&self) -> f64 {
        let per_s = self.write_units * DYNAMODB_WRITE_PER_MILLION
            + self.read_units * DYNAMODB_READ_PER_MILLION;
        per_s / 1e6 * MONTH_S
    }

    pub fn header() -> String {
        "| nodes | requests per node per second (GET / PUT / LIST / DELETE) | busiest node (req/s) | fleet requests per second | busiest folder: reads/s · writes/s | busiest top-level prefix: reads/s · writes/s | $ per node-month (S3) | DynamoDB: read · write units per node-second, $ per node-month | failover after SIGKILL, three kills (ms) | cells moved per kill · leave · join (held by the node) |\n|---|---|---|---|---|---|---|---|---|---|".to_owned()
    }

    pub fn row(&self) -> String {
        format!(
            "| {} | {:.2} ({:.2} / {:.2} / {:.3} / {:.3}) | {:.2} | {:.0} | `{}` {:.0} · `{}` {:.0} | `{}` {:.0} · `{}` {:.0} | {:.2} | {:.2} · {:.2}, {:.2} | {} | {} ({}) · {} ({}) · {} ({}) |",
            self.nodes,
            self.per_node(),
            self.get,
            self.put,
            self.list,
            self.delete,
            self.busiest_node,
            self.fleet_rps,
            self.folder_reads.prefix,
            self.folder_reads.reads,
            self.folder_writes.prefix,
            self.folder_writes.writes,
            self.top_reads.prefix,
            self.top_reads.reads,
            self.top_writes.prefix,
            self.top_writes.writes,
            self.dollars(),
            self.read_units,
            self.write_units,
            self.dynamodb_dollars(),
            self.failovers
                .iter()
                .map(|m| m.to_string())
                .collect::<Vec<_>>()
                .join(" · "),
            self.kill_moved,
            self.killed_cells,
            self.leave_moved,
            self.leave_held,
            self.join_moved,
            self.join_held,
        )
    }
}

pub const BASE_WALL: u64 = 1_700_000_000_000;

/// The settings of one run.
#[derive(Clone, Debug)]
pub struct ScaleConfig {
    pub nodes: usize,
    pub cells_per_node: usize,
    pub ttl: Duration,
    /// Virtual seconds to let the fleet settle before measuring.
    pub settle_s: u64,
    /// Virtual seconds measured.
    pub measure_s: u64,
    /// Nodes started per virtual second (all at once when 0).
    pub start_rate: usize,
    /// The store's rejections carry the current object, as DynamoDB's do.
    pub telling: bool,
}

impl ScaleConfig {
    pub fn new(nodes: usize) -> Self {
        ScaleConfig {
            nodes,
            cells_per_node: 8,
            ttl: Duration::from_secs(10),
            settle_s: 120,
            measure_s: 60,
            start_rate: 0,
            telling: false,
        }
    }
}

async fn heads(own: &Ownership, cells: &[String]) -> BTreeMap<String, (Option<String>, u64)> {
    let mut out = BTreeMap::new();
    for c in cells {
        let h = own.read_owner(c).await.unwrap();
        out.insert(c.clone(), h.map_or((None, 0), |h| (h.node, h.epoch)));
    }
    out
}

fn node_id(i: usize) -> String {
    format!("node-{i:05}")
}

/// Runs the fleet of `cfg.nodes` nodes: settles, measures `cfg.measure_s` with nothing
/// changing, then SIGKILLs one node and measures the failover. Must run on a runtime with
/// paused time.
pub async fn run(cfg: &ScaleConfig) -> ScaleReport {
    let memory: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let tally = Arc::new(Tally::new(memory.clone()).telling(cfg.telling));
    let shared: Arc<dyn ConditionalStore> = tally.clone();
    let cells: Vec<String> = (0..cfg.nodes * cfg.cells_per_node)
        .map(|i| format!("cell-{i:06}"))
        .collect();
    let mut nodes = Vec::with_capacity(cfg.nodes);
    let origin = Clock::virtual_at(0);
    for i in 0..cfg.nodes {
        let since_ms = origin.mono_ms();
        nodes.push(SimNode::start(&shared, node_id(i), &cells, cfg, since_ms).await);
        if cfg.start_rate > 0 && (i + 1) % cfg.start_rate == 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    // Events are read and dropped, as an application would read them.
    for n in &mut nodes {
        let mut events = n.events.take().unwrap();
        tokio::spawn(async move { while events.recv().await.is_some() {} });
    }
    tokio::time::sleep(Duration::from_secs(cfg.settle_s)).await;
    let reader = Ownership::new(memory.clone(), "reader");
    let before = heads(&reader, &cells).await;
    for n in &nodes {
        n.counts.reset();
    }
    tally.measure(true);
    tokio::time::sleep(Duration::from_secs(cfg.measure_s)).await;
    tally.measure(false);
    let secs = cfg.measure_s as f64;
    let per: Vec<OpCounts> = nodes.iter().map(|n| n.counts.reset()).collect();
    let n = cfg.nodes as f64;
    let sum = |f: fn(&OpCounts) -> u64| per.iter().map(f).sum::<u64>() as f64 / n / secs;
    let list = tally.list_pages() as f64 / n / secs;
    let get = sum(|c| c.get);
    let put = sum(|c| c.put);
    let delete = sum(|c| c.delete);
    let busiest_node = per.iter().map(|c| c.total()).max().unwrap_or(0) as f64 / secs;
    let (read_units, write_units) = tally.request_units();
    let (folder_reads, folder_writes) = Tally::busiest(&tally.folders, secs);
    let (top_reads, top_writes) = Tally::busiest(&tally.tops, secs);
    let quiet = heads(&reader, &cells).await;
    let quiet_moves = quiet.iter().filter(|(c, v)| before[*c].1 != v.1).count();
    let mut report = ScaleReport {
        nodes: cfg.nodes,
        cells: cells.len(),
        measured_s: secs,
        get,
        put,
        list,
        delete,
        read_units: read_units as f64 / n / secs,
        write_units: write_units as f64 / n / secs,
        busiest_node,
        fleet_rps: (get + put + list + delete) * n,
        folder_reads,
        folder_writes,
        top_reads,
        top_writes,
        quiet_moves,
        ..ScaleReport::default()
    };
    for k in 0..KILLS {
        // Each kill at another moment of the renewal period and of the rounds.
        tokio::time::sleep(Duration::from_millis(1_111 * k as u64)).await;
        failover(&mut report, &mut nodes, &reader, &cells, cfg, k).await;
    }
    leave(&mut report, &mut nodes, &reader, &cells, cfg).await;
    let since_ms = origin.mono_ms();
    join(
        &mut report,
        &mut nodes,
        &shared,
        &reader,
        &cells,
        cfg,
        since_ms,
    )
    .await;
    report
}

/// Cells whose epoch changed between two readings, and the most epochs any moved.
fn moves(
    before: &BTreeMap<String, (Option<String>, u64)>,
    after: &BTreeMap<String, (Option<String>, u64)>,
) -> (usize, u64) {
    let moved = after.iter().filter(|(c, v)| before[*c].1 != v.1).count();
    let most = after
        .iter()
        .map(|(c, v)| v.1 - before[c].1)
        .max()
        .unwrap_or(0);
    (moved, most)
}

/// Drains a live node that is not the first (the leader, most likely) and counts what
/// moved once the fleet settled.
async fn leave(
    report: &mut ScaleReport,
    nodes: &mut [SimNode],
    reader: &Ownership,
    cells: &[String],
    cfg: &ScaleConfig,
) {
    if nodes.len() < 3 {
        return;
    }
    let Some(leaver) = (1..nodes.len()).rev().find(|i| nodes[*i].fleet.is_some()) else {
        return;
    };
    let before = heads(reader, cells).await;
    let id = nodes[leaver].id.clone();
    report.leave_held = before
        .values()
        .filter(|(o, _)| o.as_deref() == Some(id.as_str()))
        .count();
    let fleet = nodes[leaver].fleet.take().unwrap();
    let drained = fleet.drain(Duration::from_secs(5)).await;
    report.leave_handed_all = drained.left.is_empty()
        && drained.released.is_empty()
        && drained.handed_off.len() == report.leave_held;
    tokio::time::sleep(Duration::from_secs(6 * cfg.ttl.as_secs())).await;
    let after = heads(reader, cells).await;
    (report.leave_moved, report.leave_most) = moves(&before, &after);
}

/// Starts one more node and counts what moved once the fleet settled.
async fn join(
    report: &mut ScaleReport,
    nodes: &mut Vec<SimNode>,
    shared: &Arc<dyn ConditionalStore>,
    reader: &Ownership,
    cells: &[String],
    cfg: &ScaleConfig,
    since_ms: u64,
) {
    let before = heads(reader, cells).await;
    let mut joiner = SimNode::start(shared, node_id(nodes.len()), cells, cfg, since_ms).await;
    let mut events = joiner.events.take().unwrap();
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let clock = Clock::virtual_at(0);
    let (t0, wait) = (clock.mono_ms(), 6 * cfg.ttl.as_millis() as u64);
    // Its fair share: the floor over the live nodes, itself included.
    let share = cells.len() / (nodes.iter().filter(|n| n.fleet.is_some()).count() + 1);
    while clock.mono_ms() - t0 < wait {
        if joiner
            .fleet
            .as_ref()
            .is_some_and(|f| f.held().len() >= share.max(1))
        {
            report.join_ms = Some(clock.mono_ms() - t0);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(
        wait - (clock.mono_ms() - t0).min(wait),
    ))
    .await;
    let after = heads(reader, cells).await;
    (report.join_moved, report.join_most) = moves(&before, &after);
    report.join_held = joiner.fleet.as_ref().map_or(0, |f| f.held().len());
    nodes.push(joiner);
}

/// Nodes killed one after the other (each once the previous kill settled).
pub const KILLS: usize = 3;

/// SIGKILLs node `len / 2 + k` and waits until each of its cells is held by a live node;
/// records the failover time and how far the kill moved cells.
async fn failover(
    report: &mut ScaleReport,
    nodes: &mut [SimNode],
    reader: &Ownership,
    cells: &[String],
    cfg: &ScaleConfig,
    k: usize,
) {
    // Two nodes stay alive at least.
    if nodes.len() < k + 3 {
        return;
    }
    let before = heads(reader, cells).await;
    let victim = nodes.len() / 2 + k;
    let id = nodes[victim].id.clone();
    let lost: Vec<String> = before
        .iter()
        .filter(|(_, (o, _))| o.as_deref() == Some(id.as_str()))
        .map(|(c, _)| c.clone())
        .collect();
    nodes[victim].path.kill();
    nodes[victim].stop.stop();
    let index: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.clone(), i))
        .collect();
    let clock = Clock::virtual_at(0);
    let t0 = clock.mono_ms();
    let limit = 6 * cfg.ttl.as_millis() as u64;
    loop {
        let mut done = true;
        for c in &lost {
            let owner = reader.read_owner(c).await.unwrap().and_then(|h| h.node);
            let held = owner
                .as_ref()
                .filter(|o| **o != id)
                .and_then(|o| index.get(o))
                .and_then(|i| nodes[*i].fleet.as_ref())
                .is_some_and(|f| f.shard(c).is_some());
            done &= held;
        }
        let waited = clock.mono_ms() - t0;
        if done {
            report.failovers.push(waited);
            break;
        }
        if waited > limit {
            report.failovers.push(u64::MAX);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    report.failover_ms = report
        .failovers
        .iter()
        .copied()
        .max()
        .filter(|m| *m != u64::MAX);
    // Let the rest settle, then count how far the kill moved cells.
    tokio::time::sleep(Duration::from_secs(6 * cfg.ttl.as_secs())).await;
    let after = heads(reader, cells).await;
    let (moved, most) = moves(&before, &after);
    report.killed_cells += lost.len();
    report.kill_moved += moved;
    report.kill_most = report.kill_most.max(most);
    drop(nodes[victim].fleet.take());
}
