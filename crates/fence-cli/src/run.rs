//! `fence run`: hold a lease while a command runs.
//!
//! Every `fence run` of lease `NAME` acts as node `run.NAME`
//! ([`node_of`](crate::names::node_of)): they all contend for that one node lease, so at most
//! one holds it. The holder claims the cell `NAME` at a new epoch ([`crate::take`]), which the
//! command receives as `FENCE_EPOCH`, and starts the command through a supervising process
//! ([`crate::reaper`]) that keeps the command's whole process tree together: the tree is
//! ended (SIGTERM, SIGKILL after `--grace`) when the command exits, when the lease is lost,
//! and when `fence run` dies, and the lease is released only once the tree is gone. Every
//! catchable signal sent to `fence run` is forwarded to the command's process group
//! ([`crate::signals`]). Without a command, `fence run` holds the lease until a signal.
//!
//! Waiting (`--wait`, `--timeout`) is
//! [`Fence::acquire_wait`](fence_core::Fence::acquire_wait): it rides through store failures
//! until its time is up and takes the lease over once its holder is gone; a run that does not
//! wait continues the watch of an earlier run on this host ([`crate::sightings`]).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use fence_core::{CellClaim, Clock, ErrorKind, LeaseKeeper};
use nix::sys::signal::Signal;

use crate::contain::Containment;
use crate::exit::{describe, lease_lost, shown, Failure, CANNOT_EXECUTE, OK, STORE};
use crate::names::check_lease;
use crate::script;
use crate::signals::{stop_self, terminates, Caught, Signals};
use crate::stores::OpenedStore;
use crate::take::{self, Taken};
use crate::tree::{CommandTree, StartError, TreeSpec};
use crate::{probe, procs};

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
    /// At most this many holders (`--limit`): slots `NAME#0` … `NAME#N-1`, each its own
    /// lease and epoch; `None`: the one lease `NAME`.
    pub limit: Option<u32>,
    /// Run the contract probe first and refuse a store that fails it (`--probe`).
    pub probe: bool,
    /// Say on stderr which lease and epoch were acquired, also without a wait.
    pub verbose: bool,
    /// Without a command: hold the lease for this process (a script that ran `fence
    /// acquire`): report on stdout for `fence acquire`, then close stdout; release when the
    /// process ends; send it SIGTERM if the lease is lost.
    pub for_pid: Option<script::Watched>,
    /// The command and its arguments; empty: hold the lease until a signal.
    pub command: Vec<OsString>,
}

impl RunOptions {
    pub(crate) fn lease_shown(&self) -> String {
        shown(&self.lease)
    }

    /// How this process's messages begin: `fence acquire` for its holder (`for_pid`), else
    /// `fence run`.
    pub fn said_as(&self) -> &'static str {
        if self.for_pid.is_some() {
            "fence acquire"
        } else {
            "fence run"
        }
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
pub(crate) struct Held {
    pub(crate) keeper: LeaseKeeper,
    pub(crate) claim: CellClaim,
    /// The slot, with `--limit`.
    pub(crate) slot: Option<u32>,
    /// How warnings begin ([`RunOptions::said_as`]).
    said_as: &'static str,
}

impl Held {
    /// Releases the cell (keeping its epoch), then the node lease; says on stderr if the cell
    /// could not be released.
    pub(crate) async fn release(self) {
        let (cell, said_as) = (self.claim.cell().to_owned(), self.said_as);
        match self.release_quietly().await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Fenced => errln!(
                "{said_as}: warning: lease {} was no longer this process's when it released it: {}",
                shown(&cell),
                describe(&e)
            ),
            Err(e) => errln!(
                "{said_as}: warning: could not release lease {}: {}",
                shown(&cell),
                describe(&e)
            ),
        }
    }

    /// Releases the cell (keeping its epoch), then the node lease; the cell's release's
    /// error, if any (the node lease is released whatever it was).
    pub(crate) async fn release_quietly(self) -> Result<(), fence_core::Error> {
        let released = self.claim.release().await;
        self.keeper.release().await;
        released
    }

    /// Gives up a lost lease.
    pub(crate) async fn abandon(self) {
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
    if opts.probe {
        probe_first(&opts).await?;
    }
    let Taken {
        keeper,
        claim,
        slot,
    } = take::take(&opts, &mut signals).await?;
    let held = Held {
        keeper,
        claim,
        slot,
        said_as: opts.said_as(),
    };
    match (opts.command.is_empty(), opts.for_pid) {
        (true, Some(script)) => return script::hold_for(held, signals, &opts, script).await,
        (true, None) => return hold(held, signals, &opts).await,
        (false, _) => {}
    }
    supervise(held, signals, &opts).await
}

/// Signals before there is a command: TSTP stops us, WINCH, URG and CONT are nothing to us,
/// every other one ends `fence`.
pub(crate) async fn until_terminating(signals: &mut Signals) -> Caught {
    loop {
        let s = signals.recv().await;
        if s.is(Signal::SIGTSTP) {
            stop_self();
        } else if terminates(s) {
            return s;
        }
    }
}

/// Resolves once the lease is lost, with the reason in words. Besides the keeper's own
/// verdict, looks at the monotonic authority now and then (after a pause of this process, the
/// keeper's timer and this check race; either one ends the command).
pub(crate) async fn lease_gone(keeper: &LeaseKeeper, ttl: Duration) -> String {
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

/// No command: prints the epoch and holds the lease until a signal (exit 0) or its loss
/// (`fence acquire`'s holder is [`script::hold_for`]).
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
    TreeSpec {
        command: opts.command.clone(),
        env: command_env(held, opts),
        grace: opts.grace,
        orphan_grace: opts.orphan_grace(),
        silence: opts.ttl / 3,
        containment: opts.containment,
        kill_at: kill_at(&held.keeper, opts.ttl),
    }
}

/// When the kernel kills the command's processes unless a renewal moves it on
/// ([`crate::killtimer`]; `CLOCK_BOOTTIME` ms): the authority's end, less
/// [`kill_margin`]. `None` where the host has no such clock.
fn kill_at(keeper: &LeaseKeeper, ttl: Duration) -> Option<u64> {
    crate::killtimer::boot_ms_in(keeper.remaining().saturating_sub(kill_margin(ttl)))
}

/// How long before the authority's end the kill timer fires: TTL/20, at most 250 ms. The
/// kernel kills at once, but the processes must be gone before a peer can take over, which
/// it may from the authority's end on (it waits a TTL from when it first saw the last
/// renewal, which was sent after the authority's anchor). Twice this before the end, a
/// `fence run` that can act ends the command itself, with `--grace`, and so first.
fn kill_margin(ttl: Duration) -> Duration {
    (ttl / 20).min(Duration::from_millis(250))
}

/// How long to the next heartbeat: TTL/10, but only 10 ms once a renewal is due (normally
/// TTL/3 into the lease, when 2/3 are left) and has not landed yet, so that the new end of
/// the authority reaches the kill timer as soon as it lands.
fn beat_after(keeper: &LeaseKeeper, ttl: Duration) -> Duration {
    let beat = (ttl / 10).max(Duration::from_millis(5));
    if keeper.remaining() < ttl * 2 / 3 {
        beat.min(Duration::from_millis(10))
    } else {
        beat
    }
}

/// The command's `FENCE_*` variables: its lease (a slot's own name with `--limit`), epoch,
/// store and node; `FENCE_SLOT` with `--limit`; `FENCE_FILE_MODE` for a store with one.
fn command_env(held: &Held, opts: &RunOptions) -> Vec<(String, String)> {
    let mut env = vec![
        ("FENCE_EPOCH".into(), held.claim.epoch().to_string()),
        ("FENCE_LEASE".into(), held.claim.cell().to_owned()),
        ("FENCE_STORE".into(), opts.store.url.clone()),
        ("FENCE_NODE".into(), held.keeper.node().to_owned()),
    ];
    if let Some(slot) = held.slot {
        env.push(("FENCE_SLOT".into(), slot.to_string()));
    }
    if let Some(mode) = opts.store.file_mode {
        env.push(("FENCE_FILE_MODE".into(), format!("{mode:04o}")));
    }
    env
}

/// `--probe`: the contract probe (one round of each race) before anything is taken; a store
/// that fails it is refused (exit 1), one the probe could not judge is exit 69.
async fn probe_first(opts: &RunOptions) -> Result<(), Failure> {
    let report = probe::run(opts.store.store.as_ref(), 1, false).await;
    opts.store.prune_dirs(&report.prefix);
    match probe::exit_code(&report.verdict) {
        OK => Ok(()),
        code => Err(Failure::new(
            code,
            format!("--probe: {}; the command was not started", report.verdict),
        )),
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
    let mut lost: Option<String> = None;
    let mut next_beat = clock.mono_ms();
    loop {
        tokio::select! {
            status = tree.wait() => {
                if lost.is_none() && status.as_ref().is_ok_and(|s| tree.killed_by_timer(s)) {
                    eprintln!(
                        "fence run: lease {} lost while the command ran: {AUTHORITY_RAN_OUT}; the kernel killed the command's processes at its end",
                        opts.lease_shown()
                    );
                    lost = Some(AUTHORITY_RAN_OUT.to_owned());
                }
                return (status, lost);
            }
            s = signals.recv() => on_signal(tree, &held.keeper, &mut lost, s, opts),
            status = held.keeper.lost(), if lost.is_none() => {
                lose(tree, &mut lost, lease_lost(&status), opts);
            }
            () = clock.sleep_until(next_beat), if lost.is_none() => {
                next_beat = clock.mono_ms() + beat_after(&held.keeper, opts.ttl).as_millis() as u64;
                if held.keeper.remaining() > 2 * kill_margin(opts.ttl) {
                    tree.heartbeat();
                    if let Some(at) = kill_at(&held.keeper, opts.ttl) {
                        tree.kill_at(at);
                    }
                } else {
                    // Ended by us, with `--grace`, rather than by the kill timer a moment later.
                    lose(tree, &mut lost, AUTHORITY_RUNNING_OUT.to_owned(), opts);
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
const AUTHORITY_RUNNING_OUT: &str = "its authority was running out and no renewal had got through";

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
