//! The supervising process between `fence run` and its command, and the exec stage that
//! becomes the command. Both are the `fence` binary run with a hidden subcommand.
//!
//! ```text
//! fence run                 holds the lease; forwards signals to the supervising process
//!  └─ fence __reaper        the supervising process (or, with a namespace, the gate of
//!      │                    crate::contain, whose child is the supervising process)
//!      └─ fence __exec → CMD   leader of the command's process group; parent-death SIGKILL
//! ```
//!
//! The supervising process reaches the command's processes through [`Members`]: as the init
//! of the command's PID namespace ([`Role::Init`], [`crate::members::Namespace`]), or, where
//! no namespace can be made, as a child subreaper that walks `/proc` ([`Role::Tracker`],
//! [`crate::members::Tracked`]).
//!
//! It talks to `fence run` through two pipes. On the control pipe, `fence run` writes `H` (a
//! heartbeat) every TTL/10 while it holds the lease, `T` to ask for the command's end with
//! the full grace period, and `F` when it was continued in the foreground of its terminal
//! (hand the terminal to the command, then continue it); end of file means that `fence run`
//! is gone (exited or killed), and the grace period is then capped, so the processes are gone
//! before a lease that was being renewed can expire. When the heartbeats stop for longer than
//! TTL/3 (`fence run` was stopped, or is stuck), every process of the command is stopped
//! (SIGSTOP), and continued when they come back: a command never runs on while its
//! supervisor, who alone knows whether the lease still holds, cannot act. On the report pipe
//! the supervising process writes `ready …` once it forwards signals, and `stop N` when the
//! command stopped on its terminal (`fence run` then stops too, so the shell sees the job
//! stop). A stop that follows a SIGTSTP from `fence run` is not reported (`fence run` stopped
//! itself already), and N counts the SIGCONTs passed on for `fence run` so far, so that a stop
//! `fence run` has continued the command past before it read the line is not acted on.
//!
//! A third pipe carries the deadlines of the kill timer ([`crate::killtimer`]) of the process
//! `fence run` starts: the tracker's own, or in a namespace the gate's (the init has none).
//!
//! When the command exits, when asked, or when `fence run` dies, every process of the command
//! gets SIGTERM (and SIGCONT, so stopped ones see it), and SIGKILL after the grace period,
//! again and again until none is left — SIGKILL at once if they are frozen for want of
//! heartbeats (the lease may have run out meanwhile). Only then does the supervising process exit (with the
//! command's exit code, or 128 + N), and only then does `fence run` release the lease.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use fence_core::Clock;
use nix::sys::signal::Signal;
use nix::unistd::{getppid, Pid};
use tokio::sync::mpsc;

use crate::contain::orphan_deadline;
use crate::killtimer::KillTimer;
use crate::members::{Members, Namespace, Tracked};
use crate::procs::{self, LeaderState};
use crate::signals::{Caught, Signals};

/// The exit code when the command stage cannot start at all.
pub const CANNOT_START: u8 = 126;

/// The reaper's parent-death signal (Linux). `fence run` forwards it like any other signal;
/// the reaper tells the two apart by whether `fence run` is still its parent.
#[cfg(target_os = "linux")]
const PARENT_DEATH: &[Signal] = &[Signal::SIGPWR];
#[cfg(not(target_os = "linux"))]
const PARENT_DEATH: &[Signal] = &[];

/// The path this binary re-executes itself by: on Linux `/proc/self/exe`, which is this very
/// binary even after it was replaced or deleted on disk (an upgrade while a command runs must
/// not pair this `fence run` with another version's supervising process); elsewhere the path
/// it was started from.
pub fn self_exe() -> std::io::Result<std::path::PathBuf> {
    if cfg!(target_os = "linux") {
        Ok("/proc/self/exe".into())
    } else {
        std::env::current_exe()
    }
}

/// The name this binary was started as, for the `argv[0]` of its re-executions (so `ps`
/// shows `fence __reaper …`, not `/proc/self/exe __reaper …`).
pub fn self_name() -> OsString {
    std::env::args_os()
        .next()
        .unwrap_or_else(|| OsString::from("fence"))
}

/// The part a `fence __reaper` process plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Makes the command's PID namespace, starts its init and passes signals to it
    /// ([`crate::contain::gate_main`]).
    Gate,
    /// The init (pid 1) of the command's PID namespace: the supervising process.
    Init,
    /// The supervising process without a namespace: a child subreaper that walks `/proc`.
    Tracker,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Gate => "gate",
            Role::Init => "init",
            Role::Tracker => "tracker",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        [Role::Gate, Role::Init, Role::Tracker]
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?}"))
    }
}

/// What `fence __reaper` is told.
#[derive(Debug, Clone)]
pub struct ReaperArgs {
    /// The part this process plays.
    pub role: Role,
    /// The pid of `fence run`.
    pub supervisor: i32,
    /// The read end of the control pipe (an inherited file descriptor number).
    pub control_fd: i32,
    /// The write end of the report pipe.
    pub report_fd: i32,
    /// SIGTERM → SIGKILL when the command exits or `fence run` asks.
    pub grace: Duration,
    /// SIGTERM → SIGKILL when `fence run` is gone.
    pub orphan_grace: Duration,
    /// Heartbeats missing for this long stop the command's processes until they come back.
    pub silence: Duration,
    /// Whether `fence run` was the foreground of its terminal (the command gets the terminal).
    pub foreground: bool,
    /// The kill timer of the process `fence run` starts ([`crate::killtimer`]): its first
    /// deadline (`CLOCK_BOOTTIME` ms) and the read end of the pipe that moves it. `None` for
    /// the init, and where the host has no such clock.
    pub kill: Option<KillArgs>,
    /// The command.
    pub command: Vec<OsString>,
}

/// Where the kill timer starts and how `fence run` moves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillArgs {
    /// The first deadline (`CLOCK_BOOTTIME` ms).
    pub at: u64,
    /// The read end of the deadline pipe (an inherited file descriptor number).
    pub deadline_fd: i32,
}

impl ReaperArgs {
    /// The arguments of `fence` that start a process with these (`__reaper …`).
    pub fn argv(&self) -> Vec<OsString> {
        let mut argv: Vec<OsString> = [
            "__reaper".to_owned(),
            format!("--role={}", self.role.as_str()),
            format!("--supervisor={}", self.supervisor),
            format!("--control-fd={}", self.control_fd),
            format!("--report-fd={}", self.report_fd),
            format!("--grace-ms={}", self.grace.as_millis()),
            format!("--orphan-grace-ms={}", self.orphan_grace.as_millis()),
            format!("--silence-ms={}", self.silence.as_millis()),
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        if self.foreground {
            argv.push("--foreground".into());
        }
        if let Some(kill) = self.kill {
            argv.push(format!("--kill-at-boot-ms={}", kill.at).into());
            argv.push(format!("--deadline-fd={}", kill.deadline_fd).into());
        }
        argv.push("--".into());
        argv.extend(self.command.iter().cloned());
        argv
    }
}

/// Opens an inherited pipe end by its number through `/dev/fd` (a new handle on the same
/// pipe; no unsafe adoption of a raw descriptor needed), then closes the inherited number so
/// the command does not inherit it.
pub(crate) fn adopt_pipe(fd: i32, write: bool) -> std::io::Result<File> {
    use std::os::unix::fs::FileTypeExt;
    let open = |dir: &str| {
        File::options()
            .read(!write)
            .write(write)
            .open(format!("{dir}/{fd}"))
    };
    let file = open("/dev/fd").or_else(|e| {
        if cfg!(target_os = "linux") {
            open("/proc/self/fd")
        } else {
            Err(e)
        }
    })?;
    if !file.metadata()?.file_type().is_fifo() {
        return Err(std::io::Error::other(format!(
            "descriptor {fd} is not a pipe"
        )));
    }
    nix::unistd::close(fd)?;
    Ok(file)
}

/// `fence __reaper`: runs the command until none of its processes is left; returns the
/// command's exit code.
pub fn reaper_main(args: ReaperArgs) -> u8 {
    if args.role == Role::Gate {
        return crate::contain::gate_main(&args);
    }
    let pipes =
        adopt_pipe(args.control_fd, false).and_then(|c| Ok((c, adopt_pipe(args.report_fd, true)?)));
    let (control, report) = match pipes {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fence run: the supervising process cannot start: {e}");
            return CANNOT_START;
        }
    };
    if args.role == Role::Tracker {
        if let Some(&s) = PARENT_DEATH.first() {
            procs::signal_on_parent_death(s);
        }
        procs::become_subreaper();
        if getppid().as_raw() != args.supervisor {
            return CANNOT_START;
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(rt) => rt.block_on(Reaper::run(args, control, report)),
        Err(e) => {
            eprintln!("fence run: the supervising process cannot start: {e}");
            CANNOT_START
        }
    }
}

/// What the control pipe says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Control {
    /// `fence run` still holds the lease.
    Beat,
    /// End the command, with the full grace period.
    Terminate,
    /// `fence run` was continued in the foreground of its terminal.
    Foreground,
    /// `fence run` is gone.
    Gone,
}

/// Reads the control pipe on a thread of its own (blocking reads; the pipe is tiny).
fn read_control(mut control: File) -> mpsc::UnboundedReceiver<Control> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut bytes = [0u8; 64];
        loop {
            let n = match control.read(&mut bytes) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Control::Gone);
                    return;
                }
                Ok(n) => n,
            };
            for event in bytes[..n].iter().filter_map(|b| match b {
                b'H' => Some(Control::Beat),
                b'T' => Some(Control::Terminate),
                b'F' => Some(Control::Foreground),
                _ => None,
            }) {
                let _ = tx.send(event);
            }
        }
    });
    rx
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    /// Ending: SIGKILL from `kill_at` (monotonic ms) on.
    Ending {
        kill_at: u64,
    },
}

struct Reaper {
    args: ReaperArgs,
    clock: Clock,
    leader: Pid,
    members: Box<dyn Members>,
    report: File,
    phase: Phase,
    exit: Option<u8>,
    /// The last heartbeat (monotonic ms).
    beat_at: u64,
    /// Whether we stopped the command's processes for want of heartbeats.
    frozen: bool,
    /// SIGCONTs passed on to the command's group for `fence run`.
    continues: u64,
    /// Whether a SIGTSTP from `fence run` was passed on (and not yet continued): the
    /// command's stop is then the echo of `fence run`'s own, not news to it.
    tstp_passed: bool,
}

impl Reaper {
    async fn run(args: ReaperArgs, control: File, mut report: File) -> u8 {
        let extra = if args.role == Role::Tracker {
            PARENT_DEATH
        } else {
            &[]
        };
        // The tracker's kill timer, before the command starts (the init has none: the gate's
        // is the namespace's).
        let mut kill = args.kill.and_then(|k| {
            KillTimer::arm(k.at, k.deadline_fd)
                .inspect_err(|e| {
                    eprintln!("fence run: warning: the supervising process has no kill timer: {e}")
                })
                .ok()
        });
        let setup = Signals::install(extra).and_then(|signals| {
            let chld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
            Ok((signals, chld, spawn_exec_stage(&args)?))
        });
        let (mut signals, mut chld, leader) = match setup {
            Ok(s) => s,
            Err(e) => return cannot_start(&e),
        };
        let members: Box<dyn Members> = match args.role {
            Role::Init => Box::new(Namespace::new(leader)),
            _ => Box::new(Tracked::new(leader)),
        };
        let _ = writeln!(report, "{}", members.ready_line());
        let mut reaper = Reaper::new(args, leader, members, report);
        let mut control = read_control(control);
        let mut control_open = true;
        loop {
            tokio::select! {
                c = control.recv(), if control_open => match c {
                    Some(Control::Beat) => reaper.on_beat(),
                    Some(Control::Terminate) => reaper.end(reaper.args.grace),
                    Some(Control::Foreground) => reaper.on_foreground(),
                    Some(Control::Gone) | None => {
                        control_open = false;
                        reaper.end(reaper.args.orphan_grace);
                    }
                },
                s = signals.recv() => reaper.on_signal(s),
                _ = chld.recv() => {}
                _ = reaper.clock.sleep(reaper.tick()) => {}
                () = follow(&mut kill, orphan_deadline(&reaper.args)) => {}
            }
            if let Some(code) = reaper.step() {
                return code;
            }
            if let Some(kill) = kill.as_mut().filter(|_| !reaper.supervisor_alive()) {
                kill.orphan(orphan_deadline(&reaper.args));
            }
        }
    }

    fn new(args: ReaperArgs, leader: Pid, members: Box<dyn Members>, report: File) -> Reaper {
        let clock = Clock::system();
        Reaper {
            args,
            leader,
            members,
            report,
            phase: Phase::Running,
            exit: None,
            beat_at: clock.mono_ms(),
            frozen: false,
            continues: 0,
            tstp_passed: false,
            clock,
        }
    }

    /// How often to look without an event: often enough to notice missing heartbeats in
    /// time while running, and to sweep promptly while ending.
    fn tick(&self) -> Duration {
        match self.phase {
            Phase::Running => {
                (self.args.silence / 4).clamp(Duration::from_millis(5), Duration::from_millis(250))
            }
            Phase::Ending { .. } => Duration::from_millis(20),
        }
    }

    /// Whether `fence run` is still there, as far as the parent tells: the tracker is its
    /// child; the init is not (it learns of `fence run`'s end from the control pipe alone).
    fn supervisor_alive(&self) -> bool {
        self.args.role != Role::Tracker || getppid().as_raw() == self.args.supervisor
    }

    /// A signal: `fence run` gone (its death is what the parent-death signal says) ends the
    /// command; otherwise the signal is forwarded to the command's group — the parent-death
    /// signal too, which then came from `fence run` forwarding it.
    fn on_signal(&mut self, s: Caught) {
        if !self.supervisor_alive() {
            return self.end(self.args.orphan_grace);
        }
        if s.is(Signal::SIGCONT) {
            self.continues += 1;
            self.tstp_passed = false;
        }
        if s.is(Signal::SIGTSTP) {
            self.tstp_passed = true;
        }
        procs::send_number(self.leader, s.0, true);
    }

    fn on_beat(&mut self) {
        self.beat_at = self.clock.mono_ms();
        if self.frozen && self.phase == Phase::Running {
            self.frozen = false;
            self.members.resume();
        }
    }

    /// `fence run` was continued in the foreground (`fg`): the terminal goes to the command,
    /// then the command's group continues.
    fn on_foreground(&mut self) {
        if self.args.foreground && self.phase == Phase::Running {
            procs::hand_terminal(self.leader);
        }
        self.continues += 1;
        self.tstp_passed = false;
        procs::signal_group(self.leader, Some(Signal::SIGCONT));
    }

    /// Heartbeats missing: stop every process of the command until they come back (or
    /// `fence run` ends it). Repeated on every step while frozen, so that a process the
    /// fallback's walk missed is stopped by the next one.
    fn watch_silence(&mut self) {
        let silent_for = self.clock.mono_ms().saturating_sub(self.beat_at);
        if self.phase == Phase::Running && silent_for > self.args.silence.as_millis() as u64 {
            self.frozen = true;
            self.members.stop();
        }
    }

    /// Starts ending the command (or shortens the grace period of an end under way). A
    /// command frozen for want of heartbeats is killed where it stands, never continued to
    /// handle SIGTERM: its end comes from a `fence run` that was silent for longer than
    /// TTL/3 and has now lost the lease or died, so another holder may already run.
    fn end(&mut self, grace: Duration) {
        let grace = if self.frozen { Duration::ZERO } else { grace };
        let kill_at = self.clock.mono_ms() + grace.as_millis() as u64;
        match self.phase {
            Phase::Running if self.frozen => {
                self.phase = Phase::Ending { kill_at };
                self.members.kill();
            }
            Phase::Running => {
                self.phase = Phase::Ending { kill_at };
                self.members.terminate();
            }
            Phase::Ending { kill_at: old } => {
                self.phase = Phase::Ending {
                    kill_at: old.min(kill_at),
                }
            }
        }
    }

    /// Looks at the command's processes; returns the exit code once none is left.
    fn step(&mut self) -> Option<u8> {
        if !self.supervisor_alive() {
            self.end(self.args.orphan_grace);
        }
        self.watch_silence();
        self.watch_leader();
        if let Phase::Ending { kill_at } = self.phase {
            if self.clock.mono_ms() >= kill_at {
                self.members.kill();
            } else {
                self.members.terminate();
            }
        }
        let empty = self.members.sweep(self.exit.is_some());
        self.exit.filter(|_| empty)
    }

    fn watch_leader(&mut self) {
        if self.exit.is_some() {
            return;
        }
        match self.members.leader_state() {
            LeaderState::Running => {}
            LeaderState::TerminalStop if self.phase == Phase::Running => {
                // A terminal stop of the command stops `fence run` too, so the shell sees
                // its job stop (and `fg` resumes both) — unless `fence run` stopped first.
                if !std::mem::replace(&mut self.tstp_passed, false) {
                    let _ = writeln!(self.report, "stop {}", self.continues);
                }
            }
            LeaderState::TerminalStop => {}
            LeaderState::Exited(code) => {
                self.exit = Some(code);
                self.end(self.args.grace);
            }
        }
    }
}

/// Applies the next deadline `fence run` sends for the kill timer, if there is one.
async fn follow(kill: &mut Option<KillTimer>, orphan_limit: Duration) {
    match kill {
        Some(kill) => kill.follow(orphan_limit).await,
        None => std::future::pending().await,
    }
}

fn cannot_start(e: &dyn std::fmt::Display) -> u8 {
    eprintln!("fence run: the supervising process cannot start the command: {e}");
    CANNOT_START
}

/// Starts `fence __exec`, the leader of a new process group, which becomes the command.
fn spawn_exec_stage(args: &ReaperArgs) -> std::io::Result<Pid> {
    let mut cmd = std::process::Command::new(self_exe()?);
    cmd.arg0(self_name())
        .arg("__exec")
        .arg("--parent")
        .arg(std::process::id().to_string());
    if args.foreground {
        cmd.arg("--foreground");
    }
    let child = cmd.arg("--").args(&args.command).process_group(0).spawn()?;
    Ok(Pid::from_raw(child.id() as i32))
}

/// `fence __exec`: becomes the command. Asks for SIGKILL when its parent (the reaper) dies,
/// checks the parent is still there, takes the terminal if told, and execs `command`. Returns
/// only if that fails: 127 when the command is not found, 126 otherwise.
pub fn exec_main(parent: i32, foreground: bool, command: &[OsString]) -> u8 {
    restore_default_sigpipe();
    procs::signal_on_parent_death(Signal::SIGKILL);
    if getppid().as_raw() != parent {
        return CANNOT_START;
    }
    if foreground {
        procs::hand_terminal(nix::unistd::getpgrp());
    }
    let Some(program) = command.first() else {
        return CANNOT_START;
    };
    let argv: Result<Vec<CString>, _> =
        command.iter().map(|a| CString::new(a.as_bytes())).collect();
    let errno = match argv {
        Ok(argv) => match nix::unistd::execvp(&argv[0], &argv) {
            Err(errno) => errno,
            Ok(never) => match never {},
        },
        Err(_) => nix::errno::Errno::EINVAL,
    };
    eprintln!(
        "fence run: cannot run {}: {}",
        crate::exit::shown(&program.to_string_lossy()),
        std::io::Error::from(errno)
    );
    match errno {
        nix::errno::Errno::ENOENT => crate::exit::COMMAND_NOT_FOUND,
        _ => crate::exit::CANNOT_EXECUTE,
    }
}

/// Gives the command the default SIGPIPE action. Rust's runtime starts every program with
/// SIGPIPE ignored, and an ignored signal survives `exec`: without this, `CMD | head` would
/// leave CMD writing into a closed pipe instead of ending.
#[allow(unsafe_code)]
fn restore_default_sigpipe() {
    // SAFETY: installing SIG_DFL runs none of our code in signal context, and this process
    // is still single-threaded (the exec stage starts no runtime), so nothing races the change.
    unsafe {
        let _ = nix::sys::signal::signal(Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl);
    }
}
