//! `fence run`: hold a lease while a command runs.
//!
//! Every `fence run` of lease `NAME` acts as node `run.NAME` ([`node_of`]): they all contend
//! for that one node lease, so at most one holds it. The holder claims the cell `NAME` at a
//! new epoch, which the command receives as `FENCE_EPOCH`, and starts the command through a
//! supervising process ([`crate::reaper`]) that keeps the command's whole process tree
//! together: the tree is ended (SIGTERM, SIGKILL after `--grace`) when the command exits, when
//! the lease is lost, and when `fence run` dies, and the lease is released only once the tree
//! is gone. Every catchable signal sent to `fence run` is forwarded to the command's process
//! group ([`crate::signals`]). Without a command, `fence run` holds the lease until a signal.
//!
//! Waiting (`--wait`, `--timeout`) is [`Fence::acquire_wait`]: it rides through store
//! failures until its time is up and takes the lease over once its holder is gone.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use fence_core::{CellClaim, Clock, Error, ErrorKind, Fence, LeaseKeeper};
use nix::sys::signal::Signal;

use crate::contain::Containment;
use crate::exit::{describe, lease_lost, shown, Failure, CANNOT_EXECUTE, OK, STORE};
use crate::names::{check_lease, node_of};
use crate::procs;
use crate::signals::{stop_self, terminates, Caught, Signals};
use crate::stores::OpenedStore;
use crate::tree::{CommandTree, StartError, TreeSpec};

/// A wait without end (`--wait` without `--timeout`): a century.
pub const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// What `fence run` does.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The store.
    pub store: OpenedStore,
    /// The lease (cell) name.
    pub lease: String,
    /// Node lease TTL.
    pub ttl: Duration,
    /// How long to wait for a busy lease: `None` fails at once, [`FOREVER`] never gives up.
    pub wait: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the command's tree is ended.
    pub grace: Duration,
    /// Say nothing on stderr while waiting.
    pub quiet: bool,
    /// The exit code when the lease is busy (75 by default).
    pub conflict_exit_code: u8,
    /// The exit code when the lease is lost while the command runs (76 by default).
    pub fenced_exit_code: u8,
    /// How the command's processes are held (`--containment`).
    pub containment: Containment,
    /// The command and its arguments; empty: hold the lease until a signal.
    pub command: Vec<OsString>,
}

impl RunOptions {
    fn lease_shown(&self) -> String {
        shown(&self.lease)
    }

    /// The grace period when `fence run` itself is gone: at most TTL/4, so a holder that was
    /// renewing (every TTL/3) has its tree gone before its lease can expire.
    fn orphan_grace(&self) -> Duration {
        self.grace.min(self.ttl / 4)
    }
}

/// The lease while it is held: the node lease and the claimed cell.
///
/// The node lease's record stays after release (marked released): every run of the lease
/// uses the same node id, so records do not pile up.
struct Held {
    keeper: LeaseKeeper,
    claim: CellClaim,
}

impl Held {
    /// Releases the cell (keeping its epoch), then the node lease.
    async fn release(self) {
        let cell = self.claim.cell().to_owned();
        if let Err(e) = self.claim.release().await {
            errln!(
                "fence run: warning: could not release lease {}: {}",
                shown(&cell),
                describe(&e)
            );
        }
        self.keeper.release().await;
    }

    /// Gives up a lost lease.
    async fn abandon(self) {
        drop(self.claim);
        self.keeper.release().await;
    }
}

/// Runs the command under the lease (or holds it); returns the exit code.
pub async fn run(opts: RunOptions) -> Result<u8, Failure> {
    check_lease(&opts.lease)?;
    // Orphans of the command's tree come to us if the supervising process is killed.
    procs::become_subreaper();
    let mut signals = Signals::install(&[])
        .map_err(|e| Failure::new(CANNOT_EXECUTE, format!("cannot catch signals: {e}")))?;
    let fence = Fence::builder(opts.store.store.clone(), node_of(&opts.lease))
        .ttl(opts.ttl)
        .addr(holder_addr())
        .build()?;
    let started_ms = fence.clock().mono_ms();
    let keeper = tokio::select! {
        k = acquire(&fence, &opts) => k?,
        s = until_terminating(&mut signals) => {
            let code = 128u8.saturating_add(s.0 as u8);
            return Err(Failure::new(code, format!("{s} while waiting for lease {}", opts.lease_shown())));
        }
    };
    let claim = match claim(&keeper, &opts, started_ms).await {
        Ok(c) => c,
        Err(f) => {
            keeper.release().await;
            return Err(f);
        }
    };
    let held = Held { keeper, claim };
    if opts.command.is_empty() {
        return hold(held, signals, &opts).await;
    }
    supervise(held, signals, &opts).await
}

/// `pid:<pid>@<host>`: who holds the lease, for `fence status` and waiters.
fn holder_addr() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "host".into());
    let host: String = host.chars().take(64).collect();
    format!("pid:{}@{host}", std::process::id())
}

/// Signals before there is a command: TSTP stops us, WINCH, URG and CONT are nothing to us,
/// every other one ends `fence`.
async fn until_terminating(signals: &mut Signals) -> Caught {
    loop {
        let s = signals.recv().await;
        if s.is(Signal::SIGTSTP) {
            stop_self();
        } else if terminates(s) {
            return s;
        }
    }
}

/// The lease record as a waiter sees it.
struct Holder {
    /// "held by …" in words.
    words: String,
    /// Unexpired (by this machine's clock) and not released.
    live: bool,
}

async fn holder(fence: &Fence) -> Result<Option<Holder>, Error> {
    let own = fence.ownership();
    let Some(lease) = own.read_node_lease(own.node()).await? else {
        return Ok(None);
    };
    if lease.record.expires_ms == 0 {
        return Ok(None);
    }
    let left_ms = crate::status::ms_until(lease.record.expires_ms, fence.clock().wall_ms());
    let by = match lease.record.addr.as_str() {
        "" => "another process".to_owned(),
        addr => shown(addr),
    };
    let when = if left_ms > 0 {
        format!(
            "its lease runs {:.1}s more unless renewed",
            left_ms as f64 / 1e3
        )
    } else {
        format!(
            "its lease expired {:.1}s ago",
            left_ms.unsigned_abs() as f64 / 1e3
        )
    };
    Ok(Some(Holder {
        words: format!("held by {by} ({when})"),
        live: left_ms > 0,
    }))
}

async fn acquire(fence: &Fence, opts: &RunOptions) -> Result<LeaseKeeper, Failure> {
    let result = match opts.wait {
        None => fence.acquire().await,
        Some(limit) => {
            if !opts.quiet {
                announce(fence, opts, limit).await;
            }
            fence.acquire_wait(limit).await
        }
    };
    match result {
        Ok(keeper) => Ok(keeper),
        Err(e) => Err(acquire_failure(fence, opts, e).await),
    }
}

/// Says once on stderr that we wait, and for whom.
async fn announce(fence: &Fence, opts: &RunOptions, limit: Duration) {
    let whom = match holder(fence).await {
        Ok(Some(h)) => h.words,
        Ok(None) => return,
        Err(e) => format!("its lease record cannot be read now ({})", describe(&e)),
    };
    let most = if limit >= FOREVER {
        String::new()
    } else {
        format!(" (at most {})", humantime::format_duration(limit))
    };
    errln!(
        "fence run: waiting for lease {}{most}: {whom}",
        opts.lease_shown()
    );
}

async fn acquire_failure(fence: &Fence, opts: &RunOptions, e: Error) -> Failure {
    let lease = opts.lease_shown();
    let waited = if opts.wait.is_some() {
        " (the wait ran out)"
    } else {
        ""
    };
    match e.kind() {
        ErrorKind::Busy | ErrorKind::Fenced => match holder(fence).await {
            Ok(Some(h)) if h.live => Failure::new(
                opts.conflict_exit_code,
                format!("lease {lease} is busy{waited}: {}", h.words),
            ),
            Ok(Some(h)) if e.kind() == ErrorKind::Busy => Failure::new(
                opts.conflict_exit_code,
                format!(
                    "lease {lease} is busy{waited}: {}; {}",
                    h.words,
                    unobserved_expiry(opts)
                ),
            ),
            Ok(_) if e.kind() == ErrorKind::Busy => Failure::new(
                opts.conflict_exit_code,
                format!("lease {lease} is busy{waited}"),
            ),
            Ok(_) => Failure::new(
                STORE,
                format!(
                    "lease {lease}: the store did not take the lease record (FENCE_LOG=fence_core=debug shows why)"
                ),
            ),
            Err(read) => Failure::from(read).prefixed(&format!("lease {lease}")),
        },
        _ => Failure::from(e).prefixed(&format!("lease {lease}")),
    }
}

/// Why an expired lease still reads as busy, and what to do: a takeover never trusts the
/// holder's wall clock, so it first watches the record unchanged for a whole TTL (see
/// docs/design.md), which a run that does not wait (or whose wait ran out first) cannot do.
fn unobserved_expiry(opts: &RunOptions) -> String {
    let watch = "its holder may be gone, but a takeover first watches the lease record \
                 unchanged for a whole TTL";
    match opts.wait {
        None => format!("{watch}: use --wait or --timeout"),
        Some(_) => format!("{watch}: wait longer (--timeout)"),
    }
}

/// Claims the cell. While it waits (`--wait`, `--timeout`), a claim that failed for a store
/// reason is retried, as the acquire is, until the wait runs out (measured from
/// `started_ms`): a waiter never exits 69 while its wait lasts.
async fn claim(
    keeper: &LeaseKeeper,
    opts: &RunOptions,
    started_ms: u64,
) -> Result<CellClaim, Failure> {
    let clock = Clock::system();
    let mut pause = Duration::from_millis(50);
    let mut said = false;
    loop {
        let e = match keeper.claim(&opts.lease).await {
            Ok(claim) => return Ok(claim),
            Err(e) => e,
        };
        let waited = Duration::from_millis(clock.mono_ms().saturating_sub(started_ms));
        let left = opts
            .wait
            .map_or(Duration::ZERO, |w| w.saturating_sub(waited));
        let not_the_store = matches!(
            e.kind(),
            ErrorKind::Busy | ErrorKind::Fenced | ErrorKind::InvalidInput | ErrorKind::InvalidKey
        );
        if not_the_store || left.is_zero() || !keeper.is_held() {
            return Err(claim_failure(opts, e));
        }
        if !said && !opts.quiet {
            eprintln!(
                "fence run: claiming lease {} failed ({}); retrying while the wait lasts",
                opts.lease_shown(),
                describe(&e)
            );
            said = true;
        }
        clock.sleep(pause.min(left)).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

fn claim_failure(opts: &RunOptions, e: Error) -> Failure {
    let lease = opts.lease_shown();
    match e.kind() {
        ErrorKind::Busy => Failure::new(
            opts.conflict_exit_code,
            format!("lease {lease} is held by a process other than a fence run of it"),
        ),
        ErrorKind::Fenced => Failure::new(
            opts.conflict_exit_code,
            format!("lease {lease} was lost before the command started"),
        ),
        _ => Failure::from(e).prefixed(&format!("lease {lease}")),
    }
}

/// Resolves once the lease is lost, with the reason in words. Besides the keeper's own
/// verdict, looks at the monotonic authority now and then (after a pause of this process, the
/// keeper's timer and this check race; either one ends the command).
async fn lease_gone(keeper: &LeaseKeeper, ttl: Duration) -> String {
    let clock = Clock::system();
    let every = (ttl / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    tokio::select! {
        status = keeper.lost() => lease_lost(&status),
        () = async {
            while keeper.is_held() {
                clock.sleep(every).await;
            }
        } => AUTHORITY_RAN_OUT.to_owned(),
    }
}

/// No command: prints the epoch and holds the lease until a signal (exit 0) or its loss.
async fn hold(held: Held, mut signals: Signals, opts: &RunOptions) -> Result<u8, Failure> {
    outln!("{}", held.claim.epoch());
    let lost = tokio::select! {
        _ = until_terminating(&mut signals) => None,
        why = lease_gone(&held.keeper, opts.ttl) => Some(why),
    };
    match lost {
        None => {
            held.release().await;
            Ok(OK)
        }
        Some(why) => {
            held.abandon().await;
            Err(Failure::new(
                opts.fenced_exit_code,
                format!("lease {} lost: {why}", opts.lease_shown()),
            ))
        }
    }
}

/// Runs the command's tree to its end; releases the lease only once the tree is gone.
async fn supervise(held: Held, mut signals: Signals, opts: &RunOptions) -> Result<u8, Failure> {
    let mut tree = match CommandTree::start(&tree_spec(&held, opts)).await {
        Ok(t) => t,
        Err(e) => {
            held.release().await;
            return Err(cannot_start(e));
        }
    };
    let (status, lost) = watch(&mut tree, &held, &mut signals, opts).await;
    tree.restore_terminal();
    let code = exit_code(&mut tree, status).await;
    if lost.is_some() {
        held.abandon().await;
        // `lose` said why on stderr when it began ending the command: one line is enough.
        return Err(Failure::silent(opts.fenced_exit_code));
    }
    held.release().await;
    Ok(code)
}

fn cannot_start(e: StartError) -> Failure {
    match e {
        StartError::Uncontained(why) => Failure::new(
            CANNOT_EXECUTE,
            format!("--containment=required, and no PID namespace can be made here: {why}"),
        ),
        StartError::Io(e) => Failure::new(CANNOT_EXECUTE, format!("cannot start the command: {e}")),
    }
}

fn tree_spec(held: &Held, opts: &RunOptions) -> TreeSpec {
    let mut env: Vec<(String, String)> = vec![
        ("FENCE_EPOCH".into(), held.claim.epoch().to_string()),
        ("FENCE_LEASE".into(), opts.lease.clone()),
        ("FENCE_STORE".into(), opts.store.url.clone()),
        ("FENCE_NODE".into(), held.keeper.node().to_owned()),
    ];
    if let Some(mode) = opts.store.file_mode {
        env.push(("FENCE_FILE_MODE".into(), format!("{mode:04o}")));
    }
    TreeSpec {
        command: opts.command.clone(),
        env,
        grace: opts.grace,
        orphan_grace: opts.orphan_grace(),
        silence: opts.ttl / 3,
        containment: opts.containment,
    }
}

/// Forwards signals, sends heartbeats and watches the lease until the tree is gone; returns
/// how the supervising process ended and, if the lease was lost, why.
async fn watch(
    tree: &mut CommandTree,
    held: &Held,
    signals: &mut Signals,
    opts: &RunOptions,
) -> (std::io::Result<ExitStatus>, Option<String>) {
    let clock = Clock::system();
    let beat = (opts.ttl / 10).max(Duration::from_millis(5));
    let mut lost: Option<String> = None;
    let mut next_beat = clock.mono_ms();
    loop {
        tokio::select! {
            status = tree.wait() => return (status, lost),
            s = signals.recv() => on_signal(tree, &held.keeper, &mut lost, s, opts),
            status = held.keeper.lost(), if lost.is_none() => {
                lose(tree, &mut lost, lease_lost(&status), opts);
            }
            () = clock.sleep_until(next_beat), if lost.is_none() => {
                next_beat = clock.mono_ms() + beat.as_millis() as u64;
                if held.keeper.is_held() {
                    tree.heartbeat();
                } else {
                    lose(tree, &mut lost, AUTHORITY_RAN_OUT.to_owned(), opts);
                }
            }
        }
    }
}

/// The command's exit code from the supervising process's status, once no process of the
/// command is left: if the supervising process itself was killed, what is left is ended
/// here first (and in every case `fence run`'s own orphans are swept).
async fn exit_code(tree: &mut CommandTree, status: std::io::Result<ExitStatus>) -> u8 {
    match status {
        Ok(status) => {
            tree.sweep(status.signal().is_some()).await;
            match status.signal() {
                None => status.code().unwrap_or(0) as u8,
                Some(signal) => 128u8.saturating_add(signal as u8),
            }
        }
        Err(e) => {
            tree.sweep(true).await;
            eprintln!("fence run: lost track of the command: {e}");
            STORE
        }
    }
}

const AUTHORITY_RAN_OUT: &str = "its authority ran out before a renewal got through";

/// The lease is lost: says so (the one line of this failure) and asks for the command's end.
fn lose(tree: &mut CommandTree, lost: &mut Option<String>, why: String, opts: &RunOptions) {
    eprintln!(
        "fence run: lease {} lost while the command ran: {why}; ending the command's processes",
        opts.lease_shown()
    );
    *lost = Some(why);
    tree.terminate();
}

/// A signal while the command runs: forwarded to its process group. A terminal stop is
/// passed on and then stops `fence` too (so the shell sees the job stop); a SIGCONT after the
/// lease ran out is not passed on: the command is ended instead.
fn on_signal(
    tree: &mut CommandTree,
    keeper: &LeaseKeeper,
    lost: &mut Option<String>,
    s: Caught,
    opts: &RunOptions,
) {
    if lost.is_none() && !keeper.is_held() {
        lose(tree, lost, AUTHORITY_RAN_OUT.to_owned(), opts);
    }
    if s.is(Signal::SIGCONT) && lost.is_some() {
        return;
    }
    tree.forward(s);
    if s.is(Signal::SIGTSTP) && lost.is_none() {
        stop_self();
    }
}
