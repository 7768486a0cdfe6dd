//! `fence demo`: a small fleet in one process. Nodes claim cells and write fenced data; one
//! node is suspended past its TTL (its monotonic clock stops, as on a suspended machine); its
//! cells are taken over at epoch + 1 once peers saw its lease unchanged for a TTL. Both
//! fences show when it wakes: the write it was about to send when it was suspended — guarded
//! on the version it last wrote, at its old epoch — is rejected by the store; and its own
//! lease check refuses every new write (its wall clock ran on while its monotonic clock
//! stood still). Prints a timeline and a summary and fails if an invariant broke.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::link::Link as PausableStore;
use fence_core::{
    CellClaim, Clock, ConditionalStore, Error, ErrorKind, Fence, LeaseKeeper, Ownership, Suspension,
};
use tokio::sync::watch;

/// Demo parameters.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Fleet size.
    pub nodes: usize,
    /// Cells.
    pub cells: usize,
    /// Lease TTL.
    pub ttl: Duration,
    /// A label for the store, printed in the header.
    pub store_label: String,
}

/// What happened, for the summary and the invariant checks.
#[derive(Debug, Default)]
struct Ledger {
    /// Acknowledged writes per cell, in acknowledgement order: (epoch, node, payload).
    acked: BTreeMap<String, Vec<(u64, String, String)>>,
    /// Claims per cell in order: (epoch, node).
    claims: BTreeMap<String, Vec<(u64, String)>>,
    /// Writes refused as fenced, per node (locally or by the store's state).
    fenced: BTreeMap<String, u64>,
    /// The last acknowledged write per (node, cell): its epoch and the head version it made.
    last_ack: BTreeMap<(String, String), (u64, fence_core::Version)>,
    /// Late writes of the suspended node rejected by the store's compare-and-swap.
    store_rejected: u64,
    /// Acknowledged writes by the suspended node after it woke.
    acked_after_wake: u64,
}

struct Demo {
    cfg: DemoConfig,
    clock: Clock,
    ledger: Mutex<Ledger>,
    woke: AtomicU64,
}

impl Demo {
    fn say(&self, who: &str, what: std::fmt::Arguments<'_>) {
        let t = self.clock.mono_ms() as f64 / 1000.0;
        outln!("[{t:6.2}s] {who:<7} {what}");
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Node {
    name: String,
    /// This node's path to the store: frozen while the node is suspended.
    link: Arc<PausableStore>,
    store: Arc<dyn ConditionalStore>,
    suspension: Arc<Suspension>,
    lease: LeaseKeeper,
    claims: tokio::sync::Mutex<BTreeMap<String, CellClaim>>,
}

/// Runs the demo on `store`; returns whether every invariant held.
pub async fn run(store: Arc<dyn ConditionalStore>, cfg: DemoConfig) -> Result<bool, Error> {
    let demo = Arc::new(Demo {
        cfg: cfg.clone(),
        clock: Clock::system(),
        ledger: Mutex::new(Ledger::default()),
        woke: AtomicU64::new(0),
    });
    outln!(
        "fence demo: {} nodes, {} cells, TTL {:?}, store {}",
        cfg.nodes,
        cfg.cells,
        cfg.ttl,
        cfg.store_label
    );
    let cells: Vec<String> = (0..cfg.cells).map(|i| format!("cell-{i}")).collect();
    let mut nodes = Vec::new();
    for i in 0..cfg.nodes {
        nodes.push(Arc::new(start_node(&demo, &store, i).await?));
    }
    for (i, cell) in cells.iter().enumerate() {
        let node = &nodes[i % nodes.len()];
        try_claim(&demo, node, cell).await;
    }
    let stop = watch::channel(false).0;
    let mut tasks = Vec::new();
    for node in &nodes {
        tasks.push(tokio::spawn(writer(
            demo.clone(),
            node.clone(),
            stop.subscribe(),
        )));
        tasks.push(tokio::spawn(rebalancer(
            demo.clone(),
            node.clone(),
            cells.clone(),
            stop.subscribe(),
        )));
    }
    let ttl = cfg.ttl;
    tokio::time::sleep(ttl / 2).await;
    let victim = nodes[0].clone();
    // Suspended first, announced after: nothing of it may run once the line is printed.
    victim.link.freeze();
    victim.suspension.suspend();
    demo.say(
        &victim.name,
        format_args!("SUSPENDED (its clock stops; its requests hang)"),
    );
    tokio::time::sleep(ttl * 2).await;
    victim.suspension.resume();
    demo.say(
        &victim.name,
        format_args!(
            "WAKES UP (believes it holds its lease: {}; its wall clock ran on)",
            victim.lease.is_held()
        ),
    );
    demo.woke.store(1, Ordering::SeqCst);
    // Its prepared writes go first (through the store directly: its path is still frozen
    // for the rest of it), then the node runs again.
    late_writes(&demo, &victim).await;
    victim.link.thaw();
    tokio::time::sleep(ttl / 2 + Duration::from_millis(500)).await;
    stop.send_replace(true);
    for t in tasks {
        let _ = t.await;
    }
    let ok = summarize(&demo, &store, &cells, &victim.name).await?;
    for node in nodes {
        if let Ok(node) = Arc::try_unwrap(node) {
            node.lease.release().await;
        }
    }
    Ok(ok)
}

async fn start_node(
    demo: &Arc<Demo>,
    store: &Arc<dyn ConditionalStore>,
    i: usize,
) -> Result<Node, Error> {
    let name = format!("node-{i}");
    let link = Arc::new(PausableStore::new(store.clone()));
    let suspension = Arc::new(Suspension::default());
    let fence = Fence::builder(link.clone(), name.clone())
        .ttl(demo.cfg.ttl)
        .addr(format!("127.0.0.1:{}", 7000 + i))
        .clock(Clock::system().with_suspension(suspension.clone()))
        .build()?;
    let lease = fence.acquire_wait(demo.cfg.ttl * 3).await?;
    demo.say(&name, format_args!("acquired its node lease"));
    Ok(Node {
        name,
        link,
        store: store.clone(),
        suspension,
        lease,
        claims: tokio::sync::Mutex::new(BTreeMap::new()),
    })
}

async fn try_claim(demo: &Demo, node: &Node, cell: &str) {
    let before = Ownership::new(node.store.clone(), "observer")
        .read_owner(cell)
        .await
        .ok()
        .flatten();
    match node.lease.claim(cell).await {
        Ok(claim) => {
            let epoch = claim.epoch();
            let from = before
                .and_then(|o| o.node)
                .filter(|n| n != &node.name)
                .map(|n| format!(" (took over from {n})"))
                .unwrap_or_default();
            demo.say(
                &node.name,
                format_args!("claimed {cell} at epoch {epoch}{from}"),
            );
            demo.ledger()
                .claims
                .entry(cell.to_owned())
                .or_default()
                .push((epoch, node.name.clone()));
            node.claims.lock().await.insert(cell.to_owned(), claim);
        }
        Err(e) if e.kind() == ErrorKind::Busy => {}
        // A suspended node prints nothing: its requests merely time out.
        Err(_) if node.link.is_blocked() => {}
        Err(e) => demo.say(&node.name, format_args!("claim of {cell} failed: {e}")),
    }
}

/// Writes every owned cell every 150 ms. A suspended node runs nothing; when it wakes, its
/// lease check refuses (its wall clock saw the suspension) and the store rejects the write it
/// had prepared under its old version.
async fn writer(demo: Arc<Demo>, node: Arc<Node>, mut stop: watch::Receiver<bool>) {
    let mut seq = 0u64;
    while !*stop.borrow() {
        if node.link.is_blocked() {
            // Suspended: nothing of this node runs.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        let cells: Vec<String> = node.claims.lock().await.keys().cloned().collect();
        for cell in cells {
            if node.link.is_blocked() {
                // Suspended in the middle of a round: the rest of it never runs.
                break;
            }
            seq += 1;
            let mut claims = node.claims.lock().await;
            let Some(claim) = claims.get(&cell) else {
                continue;
            };
            let payload = format!("{}#{seq}@{}", node.name, claim.epoch());
            match claim.write(payload.clone()).await {
                Ok(ack) => {
                    let mut l = demo.ledger();
                    let last = (ack.epoch, ack.version.clone());
                    l.last_ack.insert((node.name.clone(), cell.clone()), last);
                    l.acked.entry(cell.clone()).or_default().push((
                        ack.epoch,
                        node.name.clone(),
                        payload,
                    ));
                    if node.name == "node-0" && demo.woke.load(Ordering::SeqCst) == 1 {
                        l.acked_after_wake += 1;
                    }
                }
                // A write that was under way when the node was suspended: a suspended process
                // sees no answer, so it prints nothing and keeps its claim.
                Err(_) if node.link.is_blocked() => {}
                Err(e) if e.kind() == ErrorKind::Fenced => {
                    let believes = node.lease.is_held();
                    demo.say(
                        &node.name,
                        format_args!(
                            "write to {cell} at epoch {} REJECTED: {e} (believes it holds its lease: {believes})",
                            claim.epoch()
                        ),
                    );
                    *demo.ledger().fenced.entry(node.name.clone()).or_default() += 1;
                    claims.remove(&cell);
                }
                Err(e) => demo.say(&node.name, format_args!("write to {cell} failed: {e}")),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(150)) => {}
            _ = stop.changed() => {}
        }
    }
}

/// The writes a suspended writer had prepared when it stopped, sent the moment it wakes
/// (before anything else of it runs): each guarded on the head version its last
/// acknowledged write made, at its old epoch — what a paused process's next write carries.
/// The store must reject every one for a cell that was taken over meanwhile.
async fn late_writes(demo: &Demo, node: &Node) {
    let last: Vec<((String, String), (u64, fence_core::Version))> = demo
        .ledger()
        .last_ack
        .iter()
        .filter(|((n, _), _)| *n == node.name)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let own = Ownership::new(node.store.clone(), node.name.clone());
    for ((_, cell), (epoch, version)) in last {
        let head = fence_core::record::CellHead {
            node: Some(node.name.clone()),
            epoch,
            nonce: own.fresh_nonce(),
            generation: None,
            payload: fence_core::record::CellPayload::Inline("late".into()),
            extra: Default::default(),
            format: fence_core::record::HeadFormat::V2,
        };
        let guard = fence_core::CasGuard::Match(version);
        match own.put_head(&cell, &head, guard).await {
            Ok(fence_core::PutOutcome::Rejected) => {
                demo.say(&node.name, format_args!("its prepared write to {cell} at epoch {epoch}, under the version it last wrote: REJECTED by the store"));
                demo.ledger().store_rejected += 1;
            }
            Ok(fence_core::PutOutcome::Applied(_)) => {
                demo.say(
                    &node.name,
                    format_args!("late write to {cell} at epoch {epoch} LANDED"),
                );
                demo.ledger().acked_after_wake += 1;
            }
            Err(e) => demo.say(&node.name, format_args!("late write to {cell} failed: {e}")),
        }
    }
}

/// Every 250 ms, tries to claim cells it does not own (the claim rule refuses live owners).
async fn rebalancer(
    demo: Arc<Demo>,
    node: Arc<Node>,
    cells: Vec<String>,
    mut stop: watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = stop.changed() => return,
        }
        // A suspended process runs nothing.
        if !node.lease.is_held() || node.link.is_blocked() {
            continue;
        }
        for cell in &cells {
            if !node.claims.lock().await.contains_key(cell) {
                try_claim(&demo, &node, cell).await;
            }
        }
    }
}

async fn summarize(
    demo: &Demo,
    store: &Arc<dyn ConditionalStore>,
    cells: &[String],
    victim: &str,
) -> Result<bool, Error> {
    let observer = Ownership::new(store.clone(), "observer");
    // The fleet has stopped: the ledger is final.
    let l = std::mem::take(&mut *demo.ledger());
    let mut broken = Vec::new();
    outln!("\nsummary");
    for cell in cells {
        let owner = observer.read_owner(cell).await?;
        let head = fence_core::runtime::read_cell(&observer, cell).await?;
        let acked = l.acked.get(cell).map(Vec::as_slice).unwrap_or_default();
        let claims = l.claims.get(cell).map(Vec::as_slice).unwrap_or_default();
        let (owner_node, owner_epoch) = owner
            .map(|o| (o.node.unwrap_or_else(|| "-".into()), o.epoch))
            .unwrap_or(("-".into(), 0));
        outln!(
            "  {cell:<8} owner {owner_node:<7} epoch {owner_epoch}  claims {}  acked writes {}",
            claims.len(),
            acked.len()
        );
        check_cell(cell, acked, claims, head.as_ref(), &mut broken);
    }
    let refused_victim = l.fenced.get(victim).copied().unwrap_or(0);
    let rejected_victim = l.store_rejected;
    let takeovers: usize = l
        .claims
        .values()
        .map(|c| c.windows(2).filter(|w| w[0].1 != w[1].1).count())
        .sum();
    outln!("  takeovers: {takeovers}; {victim}'s stale writes refused by its own lease check: {refused_victim}, rejected by the store: {rejected_victim}; landed or acknowledged after waking: {}", l.acked_after_wake);
    if takeovers == 0 {
        broken.push(format!("{victim}'s cells were never taken over"));
    }
    if rejected_victim == 0 {
        broken.push(format!(
            "no stale write of {victim} was rejected by the store"
        ));
    }
    if l.acked_after_wake > 0 {
        broken.push(format!(
            "{victim} had writes acknowledged after its cells were taken over"
        ));
    }
    if broken.is_empty() {
        outln!("all invariants held: one writer per epoch, epochs only rise, no acknowledged write lost, stale writes rejected");
        Ok(true)
    } else {
        for b in &broken {
            outln!("INVARIANT BROKEN: {b}");
        }
        Ok(false)
    }
}

fn check_cell(
    cell: &str,
    acked: &[(u64, String, String)],
    claims: &[(u64, String)],
    head: Option<&fence_core::CellData>,
    broken: &mut Vec<String>,
) {
    if claims.windows(2).any(|w| w[1].0 <= w[0].0) {
        broken.push(format!(
            "{cell}: epochs did not strictly rise across claims"
        ));
    }
    if acked.windows(2).any(|w| w[1].0 < w[0].0) {
        broken.push(format!("{cell}: an acknowledged write went back in epoch"));
    }
    let mut writer_of: BTreeMap<u64, &str> = BTreeMap::new();
    for (epoch, node, _) in acked {
        if *writer_of.entry(*epoch).or_insert(node) != node.as_str() {
            broken.push(format!("{cell}: two writers at epoch {epoch}"));
        }
    }
    if let (Some(last), Some(head)) = (acked.last(), head) {
        if head.payload != last.2.as_bytes() {
            broken.push(format!(
                "{cell}: the last acknowledged write is not the stored data"
            ));
        }
    } else if !acked.is_empty() {
        broken.push(format!("{cell}: acknowledged data is missing"));
    }
}
