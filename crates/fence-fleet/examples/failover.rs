//! The failover benchmark: N node processes share M cells; one is SIGKILLed; how long until
//! every cell has a live owner again, next to the model
//! `TTL + cells moved × requests per takeover × RTT / concurrency`.
//!
//! ```text
//! mkdir -p /tmp/failover
//! cargo run --release -p fence-fleet --example failover -- --store file:///tmp/failover
//! cargo run --release -p fence-fleet --example failover -- --store s3://bucket/prefix
//! ```
//!
//! Each node is this same program run as a child (`--child`), printing `started <cell>` and
//! `stopped <cell>` as its fleet reports them; the parent follows ownership from those lines
//! (received within a millisecond of the event), and measures the store's round trip itself.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use fence::{CasGuard, Clock, ConditionalStore, Fence, Key, PutOutcome};
use fence_fleet::{Fleet, FleetEvent};

#[derive(Parser, Debug, Clone)]
struct Args {
    /// The store URL (file:///dir, s3://bucket/prefix, …).
    #[arg(long)]
    store: String,
    #[arg(long, default_value_t = 1_024)]
    cells: usize,
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    #[arg(long, default_value_t = 2_000)]
    ttl_ms: u64,
    /// Claims in flight at once, per node.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Run as one node (internal).
    #[arg(long)]
    child: Option<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args.child.clone() {
        Some(node) => rt.block_on(child(args, node)),
        None => rt.block_on(parent(args)),
    }
}

fn cell_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("cell-{i:04}")).collect()
}

async fn open(args: &Args) -> Result<Arc<dyn ConditionalStore>, Box<dyn std::error::Error>> {
    let ttl = Duration::from_millis(args.ttl_ms);
    let opened = fence::OpenOptions::new()
        .lease_ttl(ttl)
        .open(&args.store)
        .map_err(|e| fence::describe(&e))?;
    Ok(opened.store)
}

async fn child(args: Args, node: String) -> Result<(), Box<dyn std::error::Error>> {
    let store = open(&args).await?;
    let fence = Fence::builder(store, &node)
        .ttl(Duration::from_millis(args.ttl_ms))
        .build()?;
    let (fleet, mut events) = Fleet::builder(fence, cell_names(args.cells))
        .concurrency(args.concurrency)
        .start()
        .await?;
    while let Some(e) = events.recv().await {
        match e {
            FleetEvent::Started { shard, .. } => println!("started {}", shard.cell()),
            FleetEvent::Stopped { cell, .. } => println!("stopped {cell}"),
            _ => {}
        }
    }
    drop(fleet);
    Ok(())
}

/// Who holds which cell, as the children report it, and when each cell was last started.
#[derive(Default)]
struct Owners {
    held: BTreeMap<String, String>,
    started_at: BTreeMap<String, u64>,
    last_event: u64,
}

fn spawn(args: &Args, node: &str, owners: &Arc<Mutex<Owners>>, clock: &Clock) -> Child {
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe)
        .args(["--store", &args.store, "--cells", &args.cells.to_string()])
        .args(["--ttl-ms", &args.ttl_ms.to_string()])
        .args([
            "--concurrency",
            &args.concurrency.to_string(),
            "--child",
            node,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn a node");
    let out = BufReader::new(child.stdout.take().expect("piped"));
    let (owners, clock, node) = (owners.clone(), clock.clone(), node.to_owned());
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let now = clock.mono_ms();
            let mut o = owners.lock().unwrap_or_else(|p| p.into_inner());
            o.last_event = now;
            if let Some(cell) = line.strip_prefix("started ") {
                o.held.insert(cell.to_owned(), node.clone());
                o.started_at.insert(cell.to_owned(), now);
            } else if let Some(cell) = line.strip_prefix("stopped ") {
                if o.held.get(cell) == Some(&node) {
                    o.held.remove(cell);
                }
            }
        }
    });
    child
}

async fn parent(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let store = open(&args).await?;
    let rtt_ms = round_trip_ms(&store).await?;
    let clock = Clock::system();
    let owners: Arc<Mutex<Owners>> = Arc::default();
    let nodes: Vec<String> = (0..args.nodes).map(|i| format!("node-{i}")).collect();
    let mut children: Vec<Child> = nodes
        .iter()
        .map(|n| spawn(&args, n, &owners, &clock))
        .collect();
    // Settled: every cell held, and no event for two TTLs.
    loop {
        clock.sleep(Duration::from_millis(100)).await;
        let o = owners.lock().unwrap_or_else(|p| p.into_inner());
        let quiet = clock.mono_ms().saturating_sub(o.last_event) > 2 * args.ttl_ms;
        if o.held.len() == args.cells && quiet {
            break;
        }
    }
    let victim = &nodes[0];
    let (lost, killed_at) = {
        let o = owners.lock().unwrap_or_else(|p| p.into_inner());
        let lost: Vec<String> = o
            .held
            .iter()
            .filter(|(_, n)| *n == victim)
            .map(|(c, _)| c.clone())
            .collect();
        let pid = children[0].id() as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        (lost, clock.mono_ms())
    };
    let _ = children[0].wait();
    let recovered_at = loop {
        clock.sleep(Duration::from_millis(5)).await;
        let o = owners.lock().unwrap_or_else(|p| p.into_inner());
        let all = o.held.len() == args.cells && o.held.values().all(|n| n != victim);
        if all {
            break o.started_at.values().copied().max().unwrap_or(killed_at);
        }
        if clock.mono_ms() - killed_at > 60 * args.ttl_ms {
            return Err("no recovery within 60 TTLs".into());
        }
    };
    let (moved, first) = {
        let o = owners.lock().unwrap_or_else(|p| p.into_inner());
        let after: Vec<u64> = o
            .started_at
            .values()
            .copied()
            .filter(|t| *t > killed_at)
            .collect();
        (after.len(), after.iter().min().map_or(0, |t| t - killed_at))
    };
    let measured = recovered_at - killed_at;
    // A takeover is a claim: read the head, write it (the dead node's lease read is shared).
    let per_takeover = 2.0;
    let model = args.ttl_ms as f64 + moved as f64 * per_takeover * rtt_ms / args.concurrency as f64;
    println!("store                         cells nodes ttl_ms  lost moved rtt_ms conc first_ms measured_ms model_ms measured/model");
    println!(
        "{:<29} {:>5} {:>5} {:>6} {:>5} {:>5} {:>6.2} {:>4} {:>8} {:>11} {:>8.0} {:>14.2}",
        args.store,
        args.cells,
        args.nodes,
        args.ttl_ms,
        lost.len(),
        moved,
        rtt_ms,
        args.concurrency,
        first,
        measured,
        model,
        measured as f64 / model
    );
    for c in children.iter_mut().skip(1) {
        let _ = c.kill();
        let _ = c.wait();
    }
    Ok(())
}

/// The mean of 50 reads and 50 conditional writes of a scratch key, averaged.
async fn round_trip_ms(
    store: &Arc<dyn ConditionalStore>,
) -> Result<f64, Box<dyn std::error::Error>> {
    const N: u64 = 50;
    let clock = Clock::system();
    let key = Key::new(format!("bench/rtt-{}", clock.wall_ms()))?;
    let mut version = match store.put(&key, "0".into(), CasGuard::Absent).await? {
        PutOutcome::Applied(v) => v,
        PutOutcome::Rejected => return Err("scratch key exists".into()),
    };
    let t = clock.mono_ms();
    for _ in 0..N {
        store.get(&key).await?;
    }
    let gets = clock.mono_ms() - t;
    let t = clock.mono_ms();
    for i in 0..N {
        let body = i.to_string().into();
        if let PutOutcome::Applied(v) = store
            .put(&key, body, CasGuard::Match(version.clone()))
            .await?
        {
            version = v;
        }
    }
    let puts = clock.mono_ms() - t;
    Ok((gets + puts) as f64 / (2 * N) as f64)
}
