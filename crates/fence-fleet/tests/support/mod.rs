//! Nodes of a fleet on one in-memory store, each behind its own path that can be frozen or
//! killed, on tokio's paused clock.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fence_core::runtime::Fence;
use fence_core::{Clock, ConditionalStore, MemoryStore, Ownership, Stop};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use fence_fleet::{Events, Fleet, FleetBuilder, FleetEvent};
use fence_testkit::sim::PausableStore;

pub const TTL_MS: u64 = 1_000;
pub const BASE_WALL: u64 = 1_700_000_000_000;

/// One process: its path to the store and its clock's stop switch.
pub struct Node {
    pub id: String,
    pub path: Arc<PausableStore>,
    pub stop: Arc<Stop>,
    pub fence: Fence,
}

pub fn store() -> Arc<dyn ConditionalStore> {
    Arc::new(MemoryStore::new())
}

pub fn node(store: &Arc<dyn ConditionalStore>, id: &str) -> Node {
    node_through(store.clone(), id)
}

/// A node whose path to the store goes through `via` (a store that injects faults).
pub fn node_through(via: Arc<dyn ConditionalStore>, id: &str) -> Node {
    let path = Arc::new(PausableStore::new(via));
    let stop = Arc::new(Stop::default());
    let fence = Fence::builder(path.clone(), id)
        .ttl(Duration::from_millis(TTL_MS))
        .attempt_timeouts(Duration::from_millis(50), Duration::from_millis(200))
        .clock(Clock::virtual_at(BASE_WALL).with_stop(stop.clone()))
        .build()
        .unwrap();
    Node {
        id: id.to_owned(),
        path,
        stop,
        fence,
    }
}

impl Node {
    pub fn fleet(&self, cells: &[String]) -> FleetBuilder {
        Fleet::builder(self.fence.clone(), cells.to_vec())
    }

    /// SIGKILL: nothing of this process reaches the store again, and it runs no more.
    pub fn kill(&self) {
        self.path.kill();
        self.stop.stop();
    }

    /// SIGSTOP: the process and its requests in flight wait until [`cont`](Self::cont).
    pub fn sigstop(&self) {
        self.path.stop();
        self.stop.stop();
    }

    pub fn cont(&self) {
        self.path.thaw();
        self.stop.resume();
    }
}

pub fn cells(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("shard-{i:03}")).collect()
}

pub async fn advance(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// `(owner, epoch)` of every cell, read from the store.
pub async fn heads(
    store: &Arc<dyn ConditionalStore>,
    cells: &[String],
) -> BTreeMap<String, (Option<String>, u64)> {
    let own = Ownership::new(store.clone(), "reader");
    let mut out = BTreeMap::new();
    for c in cells {
        let h = own.read_owner(c).await.unwrap();
        out.insert(c.clone(), h.map_or((None, 0), |h| (h.node, h.epoch)));
    }
    out
}

/// Waits (virtual time) until every cell is owned by one of `live` and held by its fleet,
/// every fleet holding `floor(cells / live)` or `ceil(cells / live)`; panics after
/// `within_ms`.
pub async fn converged(
    store: &Arc<dyn ConditionalStore>,
    cells: &[String],
    live: &[&Fleet],
    within_ms: u64,
) -> BTreeMap<String, (Option<String>, u64)> {
    match converges(store, cells, live, within_ms).await {
        Ok(h) => h,
        Err(e) => panic!("{e}"),
    }
}

/// [`converged`], or what the heads were when `within_ms` passed.
pub async fn converges(
    store: &Arc<dyn ConditionalStore>,
    cells: &[String],
    live: &[&Fleet],
    within_ms: u64,
) -> Result<BTreeMap<String, (Option<String>, u64)>, String> {
    let share = fence_fleet::assign::fair_share(cells.len(), live.len());
    let floor = cells.len() / live.len().max(1);
    let mut waited = 0;
    loop {
        let h = heads(store, cells).await;
        let held: usize = live.iter().map(|f| f.held().len()).sum();
        let fair = live
            .iter()
            .all(|f| (floor..=share).contains(&f.held().len()));
        let placed = h.iter().all(|(c, (o, _))| {
            o.as_ref()
                .is_some_and(|o| live.iter().any(|f| f.node() == o && f.shard(c).is_some()))
        });
        if held == cells.len() && fair && placed {
            return Ok(h);
        }
        if waited >= within_ms {
            return Err(format!(
                "not converged after {within_ms} ms: held {held}, heads {h:?}"
            ));
        }
        advance(50).await;
        waited += 50;
    }
}

/// Cells whose epoch rose between two snapshots, and by how much at most.
pub fn moves(
    before: &BTreeMap<String, (Option<String>, u64)>,
    after: &BTreeMap<String, (Option<String>, u64)>,
) -> (usize, u64) {
    let mut moved = 0;
    let mut most = 0;
    for (c, (_, e)) in after {
        let d = e - before.get(c).map_or(0, |b| b.1);
        if d > 0 {
            moved += 1;
        }
        most = most.max(d);
    }
    (moved, most)
}

/// Collects events in the background.
pub fn drain_events(mut events: Events) -> Arc<std::sync::Mutex<Vec<(u64, FleetEvent)>>> {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let l = log.clone();
    let clock = Clock::virtual_at(0);
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            l.lock().unwrap().push((clock.mono_ms(), e));
        }
    });
    log
}

pub type Log = Arc<std::sync::Mutex<Vec<(u64, FleetEvent)>>>;

/// One node "a" holding all of `n` cells, its events logged.
pub async fn one_node(n: usize) -> (Arc<dyn ConditionalStore>, Vec<String>, Node, Fleet, Log) {
    let store = store();
    let cells = cells(n);
    let a = node(&store, "a");
    let (fleet, events) = a.fleet(&cells).start().await.unwrap();
    let log = drain_events(events);
    converged(&store, &cells, &[&fleet], 10_000).await;
    (store, cells, a, fleet, log)
}

/// When (and why) the first `Stopped` event of `cell` came.
pub fn stopped(log: &Log, cell: &str) -> Option<(u64, fence_fleet::StopReason)> {
    log.lock().unwrap().iter().find_map(|(t, e)| match e {
        FleetEvent::Stopped {
            cell: c, reason, ..
        } if c == cell => Some((*t, reason.clone())),
        _ => None,
    })
}

/// Every shard each node was given, by cell.
pub type Shards = Arc<Mutex<Vec<(&'static str, fence_fleet::Shard)>>>;

/// An acknowledged write: `t` is its place in one global order.
#[derive(Clone, Debug)]
pub struct Act {
    pub cell: String,
    pub node: String,
    pub epoch: u64,
    pub t: u64,
}

pub type Acts = Arc<Mutex<Vec<Act>>>;

/// Writes every 10 ms through each shard started, until it is gone; records each
/// acknowledged write in one global order. When a shard starts, no other node's shard of
/// that cell may still believe it holds it.
pub async fn act_on_shards(
    mut events: fence_fleet::Events,
    node: &'static str,
    order: Arc<AtomicU64>,
    acts: Acts,
    shards: Shards,
) {
    while let Some(e) = events.recv().await {
        let FleetEvent::Started { shard, .. } = e else {
            continue;
        };
        {
            let mut all = shards.lock().unwrap();
            for (other, s) in all.iter() {
                let same = s.cell() == shard.cell() && *other != node;
                assert!(
                    !(same && s.is_held()),
                    "{} started on {node} while {other} holds it",
                    s.cell()
                );
            }
            all.push((node, shard.clone()));
        }
        let (order, acts) = (order.clone(), acts.clone());
        tokio::spawn(async move {
            while shard.is_held() {
                if let Ok(ack) = shard.write(node).await {
                    let t = order.fetch_add(1, Ordering::SeqCst);
                    let cell = shard.cell().to_owned();
                    let node = node.to_owned();
                    let epoch = ack.epoch;
                    acts.lock().unwrap().push(Act {
                        cell,
                        node,
                        epoch,
                        t,
                    });
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
}

/// Every cell's acknowledged writes, in order: epochs never go back, and each epoch's
/// writes are one node's.
pub fn one_writer_per_epoch(acts: &Acts) {
    let acts = acts.lock().unwrap();
    let mut last: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    let mut owner: BTreeMap<(&str, u64), &str> = BTreeMap::new();
    let mut sorted: Vec<&Act> = acts.iter().collect();
    sorted.sort_by_key(|a| a.t);
    for a in sorted {
        if let Some((e, n)) = last.get(a.cell.as_str()) {
            assert!(
                a.epoch >= *e,
                "{}: epoch {} acked after {e} (by {n})",
                a.cell,
                a.epoch
            );
        }
        last.insert(&a.cell, (a.epoch, &a.node));
        let by = owner.entry((&a.cell, a.epoch)).or_insert(&a.node);
        assert_eq!(*by, a.node, "{} epoch {}: two writers", a.cell, a.epoch);
    }
}
