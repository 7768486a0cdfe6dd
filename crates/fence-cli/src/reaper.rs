//! The supervising process between `fence run` and its command, and the exec stage that
//! becomes the command. Both are the `fence` binary run with a hidden subcommand.
//!
//! ```text
//! fence run            holds the lease; forwards signals to the reaper
//!  └─ fence __reaper   its own process group; child subreaper (Linux); parent-death signal
//!      └─ fence __exec → CMD   leader of the command's process group; parent-death SIGKILL
//! ```
//!
//! The reaper talks to `fence run` through two pipes. On the control pipe, `fence run` writes
//! `H` (a heartbeat) every TTL/10 while it holds the lease, and `T` to ask for the command's
//! end with the full grace period; end of file means that `fence run` is gone (exited or
//! killed), and the grace period is then capped, so the tree is gone before a lease that was
//! being renewed can expire. When the heartbeats stop for longer than TTL/3 (`fence run` was
//! stopped, or is stuck), the reaper stops the command's process group with SIGSTOP, and
//! continues it when they come back: a command never runs on while its supervisor, who alone
//! knows whether the lease still holds, cannot act. On the report pipe the reaper writes
//! `ready <pgid>` once it forwards signals.
//!
//! When the command exits, when asked, or when `fence run` dies, the reaper signals the
//! command's process group and every process that became its child (orphans reparent to a
//! subreaper, also after `setsid` or a double fork): SIGTERM (and SIGCONT, so stopped ones
//! see it), SIGKILL after the grace period, again and again until it has no child left and
//! the group is empty. Only then does it exit (with the command's exit code, or 128 + N), and
//! only then does `fence run` release the lease.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use fence_core::Clock;
use nix::sys::signal::{kill, Signal};
use nix::unistd::{getpgid, getppid, Pid};
use tokio::sync::mpsc;

use crate::procs::{self, ChildProc, LeaderState};
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

/// What `fence __reaper` is told.
#[derive(Debug, Clone)]
pub struct ReaperArgs {
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
    /// Heartbeats missing for this long stop the command's group until they come back.
    pub silence: Duration,
    /// Whether `fence run` was the foreground of its terminal (the command gets the terminal).
    pub foreground: bool,
    /// The command.
    pub command: Vec<OsString>,
}

/// Opens an inherited pipe end by its number through `/dev/fd` (a new handle on the same
/// pipe; no unsafe adoption of a raw descriptor needed), then closes the inherited number so
/// the command does not inherit it.
fn adopt_pipe(fd: i32, write: bool) -> std::io::Result<File> {
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

/// `fence __reaper`: runs the command's tree until it is gone; returns the command's exit code.
pub fn reaper_main(args: ReaperArgs) -> u8 {
    let pipes =
        adopt_pipe(args.control_fd, false).and_then(|c| Ok((c, adopt_pipe(args.report_fd, true)?)));
    let (control, report) = match pipes {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fence run: the supervising process cannot start: {e}");
            return CANNOT_START;
        }
    };
    if let Some(&s) = PARENT_DEATH.first() {
        procs::signal_on_parent_death(s);
    }
    procs::become_subreaper();
    if getppid().as_raw() != args.supervisor {
        return CANNOT_START;
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
    /// `fence run` is gone.
    Gone,
}

/// Reads the control pipe on a thread of its own (blocking reads; the pipe is tiny).
fn read_control(mut control: File) -> mpsc::UnboundedReceiver<Control> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut bytes = [0u8; 64];
        loop {
            let event = match control.read(&mut bytes) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Control::Gone);
                    return;
                }
                Ok(n) if bytes[..n].contains(&b'T') => Control::Terminate,
                Ok(_) => Control::Beat,
            };
            let _ = tx.send(event);
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
    supervisor_group: Option<Pid>,
    phase: Phase,
    exit: Option<u8>,
    /// Children already sent SIGTERM.
    termed: Vec<Pid>,
    /// The last heartbeat (monotonic ms).
    beat_at: u64,
    /// Whether we stopped the group for want of heartbeats.
    frozen: bool,
}

impl Reaper {
    async fn run(args: ReaperArgs, control: File, mut report: File) -> u8 {
        let setup = Signals::install(PARENT_DEATH).and_then(|signals| {
            let chld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
            Ok((signals, chld, spawn_exec_stage(&args)?))
        });
        let (mut signals, mut chld, leader) = match setup {
            Ok(s) => s,
            Err(e) => return cannot_start(&e),
        };
        let _ = writeln!(report, "ready {leader}");
        drop(report);
        let mut reaper = Reaper::new(args, leader);
        let mut control = read_control(control);
        let mut control_open = true;
        loop {
            tokio::select! {
                c = control.recv(), if control_open => match c {
                    Some(Control::Beat) => reaper.on_beat(),
                    Some(Control::Terminate) => reaper.end(reaper.args.grace),
                    Some(Control::Gone) | None => {
                        control_open = false;
                        reaper.end(reaper.args.orphan_grace);
                    }
                },
                s = signals.recv() => reaper.on_signal(s),
                _ = chld.recv() => {}
                _ = reaper.clock.sleep(reaper.tick()) => {}
            }
            if let Some(code) = reaper.step() {
                return code;
            }
        }
    }

    fn new(args: ReaperArgs, leader: Pid) -> Reaper {
        let clock = Clock::system();
        Reaper {
            supervisor_group: getpgid(Some(Pid::from_raw(args.supervisor))).ok(),
            args,
            beat_at: clock.mono_ms(),
            clock,
            leader,
            phase: Phase::Running,
            exit: None,
            termed: Vec::new(),
            frozen: false,
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

    fn supervisor_alive(&self) -> bool {
        getppid().as_raw() == self.args.supervisor
    }

    /// A signal: `fence run` gone (its death is what the parent-death signal says) ends the
    /// tree; otherwise the signal is forwarded to the command's group — the parent-death
    /// signal too, which then came from `fence run` forwarding it.
    fn on_signal(&mut self, s: Caught) {
        if !self.supervisor_alive() {
            return self.end(self.args.orphan_grace);
        }
        if s.is(Signal::SIGCONT) {
            self.frozen = false;
            if self.args.foreground && self.phase == Phase::Running {
                self.reclaim_terminal();
            }
        }
        procs::send_number(self.leader, s.0, true);
    }

    fn on_beat(&mut self) {
        self.beat_at = self.clock.mono_ms();
        if self.frozen && self.phase == Phase::Running {
            self.frozen = false;
            procs::signal_group(self.leader, Some(Signal::SIGCONT));
        }
    }

    /// Heartbeats missing: stop the group until they come back (or `fence run` ends it).
    fn watch_silence(&mut self) {
        let silent_for = self.clock.mono_ms().saturating_sub(self.beat_at);
        if self.phase == Phase::Running
            && !self.frozen
            && silent_for > self.args.silence.as_millis() as u64
        {
            self.frozen = true;
            procs::signal_group(self.leader, Some(Signal::SIGSTOP));
        }
    }

    /// After `fg`, the shell gave the terminal to `fence run`'s group: pass it on.
    fn reclaim_terminal(&self) {
        if self.supervisor_group.is_some() && procs::foreground_group() == self.supervisor_group {
            procs::hand_terminal(self.leader);
        }
    }

    /// Starts ending the tree (or shortens the grace period of an end under way).
    fn end(&mut self, grace: Duration) {
        let kill_at = self.clock.mono_ms() + grace.as_millis() as u64;
        match self.phase {
            Phase::Running => {
                self.phase = Phase::Ending { kill_at };
                procs::signal_group(self.leader, Some(Signal::SIGTERM));
                procs::signal_group(self.leader, Some(Signal::SIGCONT));
            }
            Phase::Ending { kill_at: old } => {
                self.phase = Phase::Ending {
                    kill_at: old.min(kill_at),
                }
            }
        }
    }

    /// Looks at the tree; returns the exit code once it is gone.
    fn step(&mut self) -> Option<u8> {
        if !self.supervisor_alive() {
            self.end(self.args.orphan_grace);
        }
        self.watch_silence();
        self.watch_leader();
        let children = self.reap_orphans();
        let Phase::Ending { kill_at } = self.phase else {
            return None;
        };
        if self.clock.mono_ms() >= kill_at {
            procs::signal_group(self.leader, Some(Signal::SIGKILL));
            children
                .iter()
                .for_each(|&c| procs::signal_child(c, Signal::SIGKILL));
        } else {
            self.term_new(&children);
        }
        self.gone(&children).then(|| {
            procs::reap(self.leader);
            self.exit.unwrap_or(0)
        })
    }

    fn watch_leader(&mut self) {
        if self.exit.is_some() {
            return;
        }
        match procs::leader_state(self.leader) {
            LeaderState::Running => {}
            LeaderState::TerminalStop if self.phase == Phase::Running => {
                // A terminal stop of the command stops `fence run` too, so the shell sees
                // its job stop (and `fg` resumes both).
                let _ = kill(Pid::from_raw(self.args.supervisor), Signal::SIGTSTP);
            }
            LeaderState::TerminalStop => {}
            LeaderState::Exited(code) => {
                self.exit = Some(code);
                self.end(self.args.grace);
            }
        }
    }

    /// Reaps exited orphans; returns the children (besides the leader) still there.
    fn reap_orphans(&self) -> Vec<ChildProc> {
        procs::children()
            .into_iter()
            .filter(|c| c.pid != self.leader)
            .filter(|c| !procs::reap(c.pid))
            .collect()
    }

    fn term_new(&mut self, children: &[ChildProc]) {
        for c in children {
            if !self.termed.contains(&c.pid) {
                procs::signal_child(*c, Signal::SIGTERM);
                procs::signal_child(*c, Signal::SIGCONT);
                self.termed.push(c.pid);
            }
        }
    }

    /// Whether nothing of the tree is left but the leader's unreaped exit.
    fn gone(&self, children: &[ChildProc]) -> bool {
        if self.exit.is_none() || !children.is_empty() {
            return false;
        }
        if cfg!(target_os = "linux") {
            // Every living member of the group is our descendant (we are the subreaper), so
            // with no child left besides the leader's zombie, the group is empty.
            true
        } else {
            !procs::signal_group(self.leader, None)
        }
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
