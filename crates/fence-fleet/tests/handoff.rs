//! Issue 30, items 6 and 7: the reason a hand-off is announced with is the truth, told after
//! the fact, and nodes that leave together never hand cells to each other.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use fence_core::runtime::Fence;
use fence_core::{
    Capabilities, CasGuard, Clock, ConditionalStore, DeleteOutcome, Error, ErrorKind, Key,
    PutOutcome, Stored, Version,
};
use fence_fleet::{Fleet, FleetEvent, StopReason};
use fence_testkit::{FaultyStore, OpKind, RandomFaults};
use support::*;

/// What a [`Trap`] does to the requests of its key.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Snare {
    /// Writes are refused before they are sent (permission denied): nothing lands.
    RefuseWrites,
    /// Writes land but their answer is lost, and reads get no answer: nobody can tell.
    LandUnseen,
}

/// A store wrapper that sets a [`Snare`] on one key until cleared.
#[derive(Debug)]
struct Trap {
    inner: Arc<dyn ConditionalStore>,
    armed: Mutex<Option<(String, Snare)>>,
}

impl Trap {
    fn set(&self, key: Option<(String, Snare)>) {
        *self.armed.lock().unwrap() = key;
    }

    fn snare(&self, key: &Key) -> Option<Snare> {
        let armed = self.armed.lock().unwrap();
        armed
            .as_ref()
            .filter(|(k, _)| k == key.as_str())
            .map(|a| a.1)
    }
}

#[async_trait]
impl ConditionalStore for Trap {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        if self.snare(key) == Some(Snare::LandUnseen) {
            return Err(Error::new(ErrorKind::Unavailable, "no answer").not_committed());
        }
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        match self.snare(key) {
            Some(Snare::RefuseWrites) => {
                Err(Error::new(ErrorKind::PermissionDenied, "refused").not_committed())
            }
            Some(Snare::LandUnseen) => {
                self.inner.put(key, body, guard).await?;
                Err(Error::new(ErrorKind::Timeout, "answer lost"))
            }
            None => self.inner.put(key, body, guard).await,
        }
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// A node whose every request goes through a [`FaultyStore`] and a [`Trap`] (over its own
/// pausable path).
fn faulty_node(store: &Arc<dyn ConditionalStore>, id: &str) -> (Node, Arc<FaultyStore>) {
    let (n, faulty, _) = trapped_node(store, id);
    (n, faulty)
}

fn trapped_node(
    store: &Arc<dyn ConditionalStore>,
    id: &str,
) -> (Node, Arc<FaultyStore>, Arc<Trap>) {
    let mut n = node(store, id);
    let trap = Arc::new(Trap {
        inner: n.path.clone(),
        armed: Mutex::new(None),
    });
    let faulty = Arc::new(FaultyStore::new(trap.clone(), 7));
    n.fence = Fence::builder(faulty.clone(), id)
        .ttl(Duration::from_millis(TTL_MS))
        .attempt_timeouts(Duration::from_millis(50), Duration::from_millis(200))
        .clock(Clock::virtual_at(BASE_WALL).with_stop(n.stop.clone()))
        .build()
        .unwrap();
    (n, faulty, trap)
}

/// Every write of `faulty` takes up to 5 ms: the store answers later than it is asked, as a
/// real one does, so other tasks run while a hand-off is in flight.
fn slow_writes(faulty: &FaultyStore) {
    let slow = RandomFaults {
        latency: 1.0,
        latency_max: Duration::from_millis(5),
        ..RandomFaults::default()
    };
    faulty.set_random(OpKind::Put, slow);
}

fn head_key(store: &Arc<dyn ConditionalStore>, cell: &str) -> String {
    let own = fence_core::Ownership::new(store.clone(), "x");
    own.owner_key(cell).unwrap().as_str().to_owned()
}

/// The reason of every `Stopped` event, by cell, in order.
fn stops(log: &Log) -> BTreeMap<String, Vec<StopReason>> {
    let mut out: BTreeMap<String, Vec<StopReason>> = BTreeMap::new();
    for (_, e) in log.lock().unwrap().iter() {
        if let FleetEvent::Stopped { cell, reason, .. } = e {
            out.entry(cell.clone()).or_default().push(reason.clone());
        }
    }
    out
}

/// Two nodes settled over `n` cells; `a`'s requests go through a [`Trap`].
async fn pair(
    n: usize,
) -> (
    Arc<dyn ConditionalStore>,
    Vec<String>,
    Arc<Trap>,
    Fleet,
    Log,
    Fleet,
) {
    let store = store();
    let cells = cells(n);
    let (a, faulty, trap) = trapped_node(&store, "a");
    slow_writes(&faulty);
    let b = node(&store, "b");
    let hold = Duration::from_secs(600);
    let (fa, ea) = a.fleet(&cells).min_hold(hold).start().await.unwrap();
    let log = drain_events(ea);
    let (fb, eb) = b.fleet(&cells).min_hold(hold).start().await.unwrap();
    drain_events(eb);
    converged(&store, &cells, &[&fa, &fb], 20_000).await;
    std::mem::forget((a, b));
    (store, cells, trap, fa, log, fb)
}

#[tokio::test(start_paused = true)]
async fn a_failed_hand_off_is_told_the_same_by_lost_and_stopped_and_neither_says_handed_off() {
    let (store, _cells, trap, fa, log, fb) = pair(4).await;
    let shard = fa.held()[0].clone();
    let cell = shard.cell().to_owned();
    // The hand-off write is refused: nothing lands, the store still names a.
    trap.set(Some((head_key(&store, &cell), Snare::RefuseWrites)));
    // Whoever waits on the shard hears the first answer `lost()` gives.
    let waiter = shard.clone();
    let heard = tokio::spawn(async move { waiter.lost().await });
    let asked = fa.hand_off(&cell, "b").await;
    trap.set(None);
    assert!(asked.is_err(), "the hand-off failed: {asked:?}");
    let gone = tokio::time::timeout(Duration::from_millis(TTL_MS), heard)
        .await
        .expect("the shard is gone")
        .unwrap();
    advance(10).await;
    let told = stops(&log)[&cell][0].clone();
    assert_eq!(gone, told, "lost() and Stopped tell the same reason");
    assert!(
        !matches!(gone, StopReason::HandedOff { .. }),
        "nothing was handed off: {gone:?}"
    );
    drop(fb);
}

#[tokio::test(start_paused = true)]
async fn a_hand_off_whose_answer_was_lost_is_told_as_handed_off_once_the_head_shows_it() {
    let (store, cells, trap, fa, log, fb) = pair(4).await;
    let shard = fa.held()[0].clone();
    let cell = shard.cell().to_owned();
    // The write lands; its answer is lost and the head cannot be read for a while: a
    // cannot tell, and says nothing until it can.
    trap.set(Some((head_key(&store, &cell), Snare::LandUnseen)));
    let asked = fa.hand_off(&cell, "b").await;
    assert!(asked.is_err(), "no verdict: {asked:?}");
    advance(TTL_MS / 2).await;
    assert_eq!(shard.ended(), None, "no reason told before it is known");
    assert!(!shard.is_held(), "but the shard no longer acts");
    assert!(!stops(&log).contains_key(&cell), "no Stopped event yet");
    trap.set(None);
    let gone = tokio::time::timeout(Duration::from_millis(TTL_MS), shard.lost())
        .await
        .expect("the shard is gone");
    advance(10).await;
    let head = heads(&store, &cells).await[&cell].clone();
    assert_eq!(head.0.as_deref(), Some("b"), "the hand-off landed");
    let handed = StopReason::HandedOff {
        to: "b".into(),
        epoch: head.1,
    };
    assert_eq!(gone, handed);
    assert_eq!(stops(&log)[&cell], vec![handed]);
    drop(fb);
}

#[tokio::test(start_paused = true)]
async fn rebalancing_hand_offs_are_announced_as_hand_offs_by_events_and_lost() {
    let store = store();
    let cells = cells(8);
    let (a, faulty) = faulty_node(&store, "a");
    slow_writes(&faulty);
    let (fa, ea) = a.fleet(&cells).start().await.unwrap();
    let log = drain_events(ea);
    converged(&store, &cells, &[&fa], 20_000).await;
    let before = fa.held();
    let b = node(&store, "b");
    let (fb, _eb) = b.fleet(&cells).start().await.unwrap();
    let after = converged(&store, &cells, &[&fa, &fb], 40_000).await;
    advance(100).await;
    let stops = stops(&log);
    let mut handed = 0;
    for shard in before {
        let cell = shard.cell().to_owned();
        if after[&cell].0.as_deref() != Some("b") {
            continue;
        }
        handed += 1;
        let want = StopReason::HandedOff {
            to: "b".into(),
            epoch: after[&cell].1,
        };
        assert_eq!(stops[&cell], vec![want.clone()], "{cell}: Stopped");
        assert_eq!(shard.lost().await, want, "{cell}: lost()");
    }
    assert_eq!(handed, 4);
}

/// Routes by the events alone: the owner of a cell is the last one announced at the highest
/// epoch, from any node's `Started`, `Stopped` (a hand-off names its receiver, a release
/// names nobody) and `NewOwner` events.
#[derive(Default)]
struct Router {
    owners: BTreeMap<String, (u64, bool, Option<String>)>,
}

impl Router {
    fn learn(&mut self, cell: &str, epoch: u64, owner: Option<String>) {
        // At one epoch a release comes after the claim it ends.
        let key = (epoch, owner.is_none());
        let known = self.owners.get(cell).map(|(e, r, _)| (*e, *r));
        if known.is_none_or(|k| key >= k) {
            self.owners
                .insert(cell.to_owned(), (epoch, owner.is_none(), owner));
        }
    }

    fn follow(&mut self, node: &str, event: &FleetEvent) {
        match event {
            FleetEvent::Started { shard, .. } => {
                self.learn(shard.cell(), shard.epoch(), Some(node.to_owned()))
            }
            FleetEvent::Stopped { cell, reason, .. } => match reason {
                StopReason::HandedOff { to, epoch } => self.learn(cell, *epoch, Some(to.clone())),
                StopReason::Released => {
                    let epoch = self.owners.get(cell).map_or(0, |o| o.0);
                    self.learn(cell, epoch, None)
                }
                _ => {}
            },
            FleetEvent::NewOwner { cell, owner, epoch } => self.learn(cell, *epoch, owner.clone()),
            FleetEvent::LeaseAcquired { .. } => {}
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_router_following_the_events_of_every_node_ends_with_every_cells_owner() {
    let store = store();
    let cells = cells(12);
    let mut logs = Vec::new();
    let mut fleets = Vec::new();
    let mut nodes = Vec::new();
    for id in ["a", "b", "c"] {
        let (n, faulty) = faulty_node(&store, id);
        slow_writes(&faulty);
        let (f, e) = n.fleet(&cells).start().await.unwrap();
        logs.push((id, drain_events(e)));
        fleets.push(f);
        nodes.push(n);
        if id == "b" {
            converged(&store, &cells, &fleets.iter().collect::<Vec<_>>(), 20_000).await;
        }
    }
    converged(&store, &cells, &fleets.iter().collect::<Vec<_>>(), 40_000).await;
    // One leaves by draining, another dies.
    let c = fleets.pop().unwrap();
    let drained = c.drain(Duration::from_secs(5)).await;
    // What c's reader had not taken when it stopped, the drain returned.
    let now = fence_core::Clock::virtual_at(0).mono_ms();
    let unread = drained.unread.into_iter().map(|e| (now, e));
    logs[2].1.lock().unwrap().extend(unread);
    nodes[1].kill();
    let a = &fleets[0];
    let end = converged(&store, &cells, &[a], 40_000).await;
    advance(100).await;
    let mut router = Router::default();
    let mut all: Vec<(u64, &str, usize)> = Vec::new();
    let locked: Vec<_> = logs.iter().map(|(n, l)| (*n, l.lock().unwrap())).collect();
    for (node, log) in &locked {
        for (i, (t, _)) in log.iter().enumerate() {
            all.push((*t, node, i));
        }
    }
    all.sort();
    for (_, node, i) in all {
        let log = &locked.iter().find(|(n, _)| *n == node).unwrap().1;
        router.follow(node, &log[i].1);
    }
    for (cell, (owner, epoch)) in &end {
        let routed = router.owners.get(cell).map(|(e, _, o)| (o.clone(), *e));
        assert_eq!(routed, Some((owner.clone(), *epoch)), "{cell}");
    }
}

#[tokio::test(start_paused = true)]
async fn nodes_draining_at_once_hand_nothing_to_each_other_and_waste_no_write() {
    let store = store();
    let cells = cells(24);
    let ids = ["a", "b", "c", "d"];
    let nodes: Vec<Node> = ids.iter().map(|id| node(&store, id)).collect();
    let mut fleets = Vec::new();
    for n in &nodes {
        fleets.push(n.fleet(&cells).start().await.unwrap().0);
    }
    let before = converged(&store, &cells, &fleets.iter().collect::<Vec<_>>(), 40_000).await;
    let d = fleets.pop().unwrap();
    let c = fleets.pop().unwrap();
    let (dc, dd) = tokio::join!(
        c.drain(Duration::from_secs(5)),
        d.drain(Duration::from_secs(5))
    );
    for drained in [&dc, &dd] {
        assert!(drained.left.is_empty(), "{drained:?}");
    }
    let after = converged(&store, &cells, &fleets.iter().collect::<Vec<_>>(), 40_000).await;
    for (cell, (owner, epoch)) in &after {
        let (was, then) = &before[cell];
        let left = matches!(was.as_deref(), Some("c" | "d"));
        let moved = epoch - then;
        if left {
            assert_eq!(moved, 1, "{cell} of {was:?} moved once, to {owner:?}");
        } else {
            assert_eq!(moved, 0, "{cell} of {was:?} stayed");
        }
    }
}
