//! shardd: N processes share M shards; each appends a counter to every shard it owns every
//! 200 ms and prints one line per acknowledged append: `ack <cell> <epoch> <seq>`, where
//! `seq` continues from the shard's data. Survives SIGKILL and SIGSTOP of any process.
//!
//! ```text
//! mkdir -p /tmp/shards
//! cargo run -p fence-fleet --example shardd -- --store file:///tmp/shards --node n1 --cells 32
//! cargo run -p fence-fleet --example shardd -- --store file:///tmp/shards --node n2 --cells 32
//! ```
//!
//! A restart under the same `--node` resumes the node's shards at their epochs when the
//! previous process is known gone: each process holds an advisory lock on a state file
//! (`--state-dir`, default the system's temp dir) naming its lease generation; the kernel
//! drops the lock when the process dies, so a successor that gets the lock knows its
//! predecessor is gone. A successor that cannot get it (the old process is only stopped)
//! starts without vouching for it, waits out its lease and takes new epochs.
//! SIGINT or SIGTERM drains (hands the shards to the others) and exits.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use fence::Fence;
use fence_fleet::log::AppendLog;
use fence_fleet::{Fleet, FleetEvent, Shard};

/// The command line.
#[derive(Parser, Debug)]
#[command(name = "shardd", about = "N processes share M shards through fence")]
pub struct Args {
    /// The store: file:///path (an existing directory), s3://bucket/prefix, …
    #[arg(long)]
    store: String,
    /// This process's node id (restart under the same id to resume its shards).
    #[arg(long)]
    node: String,
    /// How many shards (`shard-000` …) the processes share; the same for all of them.
    #[arg(long, value_parser = at_least_one)]
    cells: usize,
    /// Node lease TTL in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    ttl_ms: u64,
    /// Milliseconds between appends to each owned shard.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    every_ms: u64,
    /// Where the per-node state file (lease generation, lock) lives.
    #[arg(long)]
    state_dir: Option<PathBuf>,
}

/// A count of at least one: `--cells 0` would run a node with nothing to do, silently.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The node's state file, locked for as long as this process lives.
struct NodeState {
    file: File,
    locked: bool,
}

impl NodeState {
    fn open(args: &Args) -> std::io::Result<NodeState> {
        let dir = args.state_dir.clone().unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&dir)?;
        let tag: String = format!("{}-{}", args.store, args.node)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = dir.join(format!("shardd-{tag}.state"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let locked = file.try_lock().is_ok();
        Ok(NodeState { file, locked })
    }

    /// The generation of a predecessor known gone: only with the lock (its holder died).
    fn predecessor(&mut self) -> Option<String> {
        if !self.locked {
            return None;
        }
        let mut s = String::new();
        self.file.read_to_string(&mut s).ok()?;
        let g = s.trim().to_owned();
        (!g.is_empty()).then_some(g)
    }

    fn record(&mut self, generation: &str) {
        if !self.locked {
            return;
        }
        let written = self
            .file
            .set_len(0)
            .and_then(|_| self.file.rewind())
            .and_then(|_| self.file.write_all(generation.as_bytes()))
            .and_then(|_| self.file.sync_data());
        if let Err(e) = written {
            eprintln!("shardd: cannot record the lease generation: {e}");
        }
    }
}

fn main() {
    serve(Args::parse());
}

/// Runs one shardd process until it is signalled (the tests run it from their own binary).
pub fn serve(args: Args) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let result = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = result {
        eprintln!("shardd: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let ttl = Duration::from_millis(args.ttl_ms);
    let opened = fence::OpenOptions::new()
        .lease_ttl(ttl)
        .open(&args.store)
        .map_err(|e| fence::describe(&e))?;
    let fence = Fence::builder(opened.store, &args.node).ttl(ttl).build()?;
    let mut state = NodeState::open(&args)?;
    let cells = (0..args.cells).map(|i| format!("shard-{i:03}"));
    let mut builder = Fleet::builder(fence.clone(), cells);
    if let Some(p) = state.predecessor() {
        eprintln!("shardd {}: resuming after generation {p}", args.node);
        builder = builder.predecessor(p);
    }
    let (fleet, mut events) = builder.start().await?;
    let every = Duration::from_millis(args.every_ms);
    let mut stop = signals()?;
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(event) => on_event(&args.node, event, &mut state, &fence, every),
                None => return Ok(()),
            },
            _ = stop.recv() => {
                // The loop is left: the drain returns the events nobody read (each stop).
                let drained = fleet.drain(Duration::from_secs(5)).await;
                let (handed, released) = (drained.handed_off.len(), drained.released.len());
                for event in drained.unread {
                    on_event(&args.node, event, &mut state, &fence, every);
                }
                eprintln!(
                    "shardd {}: drained: {handed} handed off, {released} released, left {:?}, lease released: {}",
                    args.node, drained.left, drained.lease_released
                );
                return Ok(());
            }
        }
    }
}

/// Acts on one event of the fleet.
fn on_event(node: &str, event: FleetEvent, state: &mut NodeState, fence: &Fence, every: Duration) {
    match event {
        FleetEvent::LeaseAcquired { generation } => state.record(&generation),
        FleetEvent::Started { shard, resumed } => {
            let (cell, epoch) = (shard.cell(), shard.epoch());
            eprintln!("shardd {node}: started {cell} at epoch {epoch} (resumed: {resumed})");
            tokio::spawn(append_counter(fence.clone(), shard, every));
        }
        FleetEvent::Stopped {
            cell,
            epoch,
            reason,
        } => eprintln!("shardd {node}: stopped {cell} at epoch {epoch}: {reason:?}"),
        FleetEvent::NewOwner { .. } => {}
    }
}

/// SIGINT or SIGTERM.
fn signals() -> std::io::Result<tokio::sync::mpsc::Receiver<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    for kind in [SignalKind::interrupt(), SignalKind::terminate()] {
        let mut s = signal(kind)?;
        let tx = tx.clone();
        tokio::spawn(async move {
            s.recv().await;
            let _ = tx.send(()).await;
        });
    }
    Ok(rx)
}

/// Appends the next sequence number to `shard`'s log every `every` until the shard is gone.
async fn append_counter(fence: Fence, shard: Shard, every: Duration) {
    let log = AppendLog::new(&fence, Arc::clone(shard.claim()));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = shard.lost() => return,
            _ = tick.tick() => {}
        }
        match log.append_with(|seq| seq.to_string().into()).await {
            Ok(a) => println!("ack {} {} {}", shard.cell(), a.epoch, a.seq),
            // Fenced: the shard is gone (its watch fires next). Ambiguous: the next append
            // re-reads the head, which says whether this one landed.
            Err(e) => eprintln!("{}: {e}", shard.cell()),
        }
    }
}
