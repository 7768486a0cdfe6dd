//! `fence run`: hold a lease while a command runs.
//!
//! Each `fence run` is a node of its own (`run-<host>-<pid>-<random>`): it acquires its node
//! lease, then claims the cell named by `--lease` at a new epoch, which the command receives
//! as `FENCE_EPOCH`. While the command runs the node lease is renewed; if it is lost, the
//! command gets SIGTERM, then SIGKILL after the grace period, and `fence` exits 76. When the
//! command exits, the cell and the lease are released and `fence` exits with its code
//! (128 + N if signal N killed it). SIGTERM, SIGINT and SIGHUP sent to `fence` are forwarded.

use std::process::ExitStatus;
use std::time::Duration;

use fence_core::decide::LeaseStatus;
use fence_core::{CellClaim, Entropy, ErrorKind, Fence, LeaseKeeper};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::exit::{Failure, BUSY, CANNOT_EXECUTE, COMMAND_NOT_FOUND, FENCED, STORE};
use crate::stores::OpenedStore;

/// What `fence run` does.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The store.
    pub store: OpenedStore,
    /// The lease (cell) name.
    pub lease: String,
    /// Node lease TTL.
    pub ttl: Duration,
    /// Wait for the lease instead of failing at once.
    pub wait: bool,
    /// How long to wait (`None`: forever).
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the lease is lost.
    pub grace: Duration,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// Signals `fence` forwards to the command.
struct Forwarded {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Forwarded {
    fn install() -> Result<Self, Failure> {
        let install = |kind| {
            signal(kind).map_err(|e| Failure::new(STORE, format!("cannot handle signals: {e}")))
        };
        Ok(Forwarded {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.hup.recv() => Signal::SIGHUP,
        }
    }
}

/// Runs the command under the lease; returns the exit code.
pub async fn run(opts: RunOptions) -> Result<u8, Failure> {
    let program = opts
        .command
        .first()
        .ok_or_else(|| Failure::usage("no command given (fence run ... -- CMD ARGS...)"))?;
    let mut signals = Forwarded::install()?;
    let node = node_id();
    let fence = Fence::builder(opts.store.store.clone(), node.clone())
        .ttl(opts.ttl)
        .addr(format!("pid:{}", std::process::id()))
        .build()?;
    let mut keeper = fence.acquire().await?;
    let claim = tokio::select! {
        c = claim_cell(&fence, &mut keeper, &opts) => c,
        s = signals.recv() => Err(Failure::new(128 + s as i32 as u8, format!("{s} while waiting for lease {}", opts.lease))),
    };
    let claim = match claim {
        Ok(c) => c,
        Err(f) => {
            retire(&fence, keeper).await;
            return Err(f);
        }
    };
    let child = match spawn(program, &opts, &node, claim.epoch()) {
        Ok(c) => c,
        Err(f) => {
            finish(&fence, claim, keeper).await;
            return Err(f);
        }
    };
    supervise(&fence, child, claim, keeper, signals, &opts).await
}

/// `run-<host>-<pid>-<random>`.
fn node_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "host".into());
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let random = Entropy::from_os().next_u64() as u32;
    format!("run-{host}-{}-{random:08x}", std::process::id())
}

/// Claims the cell; with `--wait`, retries while it is busy (every ~TTL/4, with jitter),
/// and acquires a fresh node lease if its own was lost while waiting.
async fn claim_cell(
    fence: &Fence,
    keeper: &mut LeaseKeeper,
    opts: &RunOptions,
) -> Result<CellClaim, Failure> {
    let clock = fence.clock();
    let deadline = opts.timeout.map(|t| clock.mono_ms() + t.as_millis() as u64);
    let entropy = Entropy::from_os();
    let poll_ms = (opts.ttl.as_millis() as u64 / 4).max(10);
    loop {
        let failure = match keeper.claim(&opts.lease).await {
            Ok(claim) => return Ok(claim),
            Err(e) if e.kind() == ErrorKind::Busy => {
                let waited = if opts.wait { " (wait timed out)" } else { "" };
                Failure::new(BUSY, format!("lease {} is busy{waited}: {e}", opts.lease))
            }
            Err(e) if e.kind() == ErrorKind::Fenced && opts.wait && !keeper.is_held() => {
                *keeper = fence.acquire().await?;
                continue;
            }
            Err(e) if opts.wait && e.is_retryable() => e.into(),
            Err(e) => return Err(e.into()),
        };
        let now = clock.mono_ms();
        if !opts.wait || deadline.is_some_and(|d| now >= d) {
            return Err(failure);
        }
        let pause = poll_ms / 2 + entropy.below(poll_ms);
        let until = deadline.map_or(now + pause, |d| d.min(now + pause));
        clock.sleep_until(until).await;
    }
}

fn spawn(program: &str, opts: &RunOptions, node: &str, epoch: u64) -> Result<Child, Failure> {
    Command::new(program)
        .args(&opts.command[1..])
        .env("FENCE_EPOCH", epoch.to_string())
        .env("FENCE_LEASE", &opts.lease)
        .env("FENCE_STORE", &opts.store.url)
        .env("FENCE_NODE", node)
        .spawn()
        .map_err(|e| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => COMMAND_NOT_FOUND,
                _ => CANNOT_EXECUTE,
            };
            Failure::new(code, format!("cannot run {program:?}: {e}"))
        })
}

/// Waits for the command, forwarding signals and watching the lease.
async fn supervise(
    fence: &Fence,
    mut child: Child,
    claim: CellClaim,
    keeper: LeaseKeeper,
    mut signals: Forwarded,
    opts: &RunOptions,
) -> Result<u8, Failure> {
    let pid = child.id().map(|id| Pid::from_raw(id as i32));
    let check_every = opts.ttl / 4;
    let outcome = {
        let lost = keeper.lost();
        tokio::pin!(lost);
        loop {
            tokio::select! {
                status = child.wait() => break Ok(status),
                s = signals.recv() => forward(pid, s),
                status = &mut lost => break Err(loss_reason(&status)),
                _ = tokio::time::sleep(check_every) => {
                    if !keeper.is_held() {
                        break Err("its authority expired".to_owned());
                    }
                }
            }
        }
    };
    match outcome {
        Ok(status) => {
            let status =
                status.map_err(|e| Failure::new(STORE, format!("waiting for the command: {e}")))?;
            finish(fence, claim, keeper).await;
            Ok(exit_code(status))
        }
        Err(why) => {
            let failure = lose(child, pid, opts, &why).await;
            drop(claim);
            retire(fence, keeper).await;
            Err(failure)
        }
    }
}

fn loss_reason(status: &LeaseStatus) -> String {
    match status {
        LeaseStatus::Fenced { reason } => format!("fenced: {reason:?}"),
        other => format!("{other:?}"),
    }
}

fn forward(pid: Option<Pid>, signal: Signal) {
    if let Some(pid) = pid {
        let _ = kill(pid, signal);
    }
}

/// The lease is gone: SIGTERM, then SIGKILL after the grace period.
async fn lose(mut child: Child, pid: Option<Pid>, opts: &RunOptions, why: &str) -> Failure {
    eprintln!(
        "fence run: lease {} lost ({why}); terminating the command",
        opts.lease
    );
    forward(pid, Signal::SIGTERM);
    if tokio::time::timeout(opts.grace, child.wait())
        .await
        .is_err()
    {
        forward(pid, Signal::SIGKILL);
        let _ = child.wait().await;
    }
    Failure::new(
        FENCED,
        format!(
            "lease {} was lost while the command ran; the command was terminated",
            opts.lease
        ),
    )
}

/// Releases the cell (keeping its epoch), then the node lease.
async fn finish(fence: &Fence, claim: CellClaim, keeper: LeaseKeeper) {
    let cell = claim.cell().to_owned();
    if let Err(e) = claim.release().await {
        eprintln!("fence run: warning: could not release lease {cell}: {e}");
    }
    retire(fence, keeper).await;
}

/// Releases the node lease and, where the store can delete conditionally, removes its
/// record: the node id is this process's alone, so nobody else can have rewritten it, and a
/// peer that finds no lease record treats its node as expired.
async fn retire(fence: &Fence, keeper: LeaseKeeper) {
    let generation = keeper.generation();
    keeper.release().await;
    let own = fence.ownership();
    if !own.store().capabilities().conditional_delete {
        return;
    }
    let Ok(Some(lease)) = own.read_node_lease(own.node()).await else {
        return;
    };
    if lease.record.expires_ms == 0 && lease.record.generation == generation {
        if let Ok(key) = own.lease_key(own.node()) {
            let _ = own.store().delete(&key, &lease.etag).await;
        }
    }
}

fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        (None, None) => STORE,
    }
}
