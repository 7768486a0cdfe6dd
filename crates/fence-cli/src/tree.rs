//! `fence run`'s side of the command's processes: starts the supervising process
//! ([`crate::reaper`]) in the containment asked for ([`crate::contain`]), passes signals to
//! it, moves its kill timer on ([`crate::killtimer`]), asks it to end the command, and waits
//! until every process of the command is gone.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::ExitStatus;
use std::time::Duration;

use fence_core::Clock;
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::net::unix::pipe::Receiver;
use tokio::process::{Child, Command};

use crate::contain::{Containment, Uncontained, UNCONTAINED};
use crate::members::{Members, Tracked};
use crate::reaper::{self_exe, self_name, KillArgs, ReaperArgs, Role};
use crate::signals::{stop_self, Caught};
use crate::{killtimer, procs};

/// How the command is started.
#[derive(Debug, Clone)]
pub struct TreeSpec {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// SIGTERM → SIGKILL when the command ends or is ended.
    pub grace: Duration,
    /// SIGTERM → SIGKILL when `fence run` itself is gone.
    pub orphan_grace: Duration,
    /// Heartbeats ([`CommandTree::heartbeat`]) missing for this long stop the command until
    /// they come back.
    pub silence: Duration,
    /// In a PID namespace of its own, or tracked.
    pub containment: Containment,
    /// When the kill timer of the process `fence run` starts first fires (`CLOCK_BOOTTIME`
    /// ms; [`crate::killtimer`]): the lease's authority's end, less a margin. `None` where
    /// the host has no such clock.
    pub kill_at: Option<u64>,
}

/// Why the command did not start.
#[derive(Debug)]
pub enum StartError {
    /// `--containment=required`, and no PID namespace could be made.
    Uncontained(Uncontained),
    /// The supervising process could not be started.
    Io(std::io::Error),
}

impl From<std::io::Error> for StartError {
    fn from(e: std::io::Error) -> StartError {
        StartError::Io(e)
    }
}

/// After `terminate`, the supervising process has the grace period and this much more to
/// end the command before `fence run` kills it (which ends a namespace at once, and leaves
/// the fallback's remains to [`CommandTree::sweep`]): a stopped or stuck supervising process
/// must not keep a lost lease's command running.
const TERMINATE_SLACK: Duration = Duration::from_secs(1);

/// The command's running processes.
#[derive(Debug)]
pub struct CommandTree {
    reaper: Child,
    pid: Pid,
    control: File,
    report: Option<Lines<BufReader<Receiver>>>,
    /// The command's process group, once the tracker reported it (fallback only).
    group: Option<Pid>,
    /// Whether the command runs in a PID namespace of its own.
    contained: bool,
    /// Whether the terminal was handed to the command (and must be taken back).
    foreground: bool,
    grace: Duration,
    /// Whether the command's end was asked for.
    ending: bool,
    /// When to kill the supervising process if it has not ended the command (monotonic ms).
    end_by: Option<u64>,
    /// SIGCONTs passed on to the command.
    continues: u64,
    /// The write end of the deadline pipe of the kill timer.
    deadlines: Option<File>,
    /// The last deadline the kill timer was given (`CLOCK_BOOTTIME` ms).
    kill_at: Option<u64>,
    clock: Clock,
}

/// A pipe to the supervising process (or the gate) that never blocks our writes: ours (the
/// write end, closed on exec) and theirs (inherited).
fn nonblocking_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (ours, theirs) = pipe_pair(false)?;
    let flags = OFlag::from_bits_truncate(fcntl(&ours, FcntlArg::F_GETFL)?);
    fcntl(&ours, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok((ours, theirs))
}

/// A pipe whose `ours` end is closed on exec and whose `theirs` end is inherited.
fn pipe_pair(ours_is_read: bool) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (ours, theirs) = if ours_is_read {
        (read, write)
    } else {
        (write, read)
    };
    fcntl(&theirs, FcntlArg::F_SETFD(FdFlag::empty()))?;
    Ok((ours, theirs))
}

impl CommandTree {
    /// Starts the command, in a PID namespace of its own unless `spec` says `fallback` (or,
    /// with `auto`, none can be made: that is said on stderr). Returns once the supervising
    /// process forwards signals (or has failed to start; [`CommandTree::wait`] then tells).
    /// Must be called from the thread that lives as long as this process (the main thread):
    /// on Linux the supervising process's parent-death signal follows the thread that
    /// started it.
    pub async fn start(spec: &TreeSpec) -> Result<CommandTree, StartError> {
        if spec.containment != Containment::Fallback {
            let mut tree = CommandTree::spawn(spec, Role::Gate)?;
            let line = tree.first_report().await;
            match line.as_deref().and_then(|l| l.strip_prefix(UNCONTAINED)) {
                None => {
                    tree.contained = true;
                    return Ok(tree);
                }
                Some(why) => {
                    let why = Uncontained(why.trim().to_owned());
                    let _ = tree.reaper.wait().await;
                    if spec.containment == Containment::Required {
                        return Err(StartError::Uncontained(why));
                    }
                    eprintln!(
                        "fence run: warning: no PID namespace for the command ({why}); its processes are tracked instead (see \"The command's processes\" in docs/cli.md; --containment=required refuses, --containment=fallback does not try)"
                    );
                }
            }
        }
        let mut tree = CommandTree::spawn(spec, Role::Tracker)?;
        let line = tree.first_report().await;
        tree.group = line
            .as_deref()
            .and_then(|l| l.strip_prefix("ready "))
            .and_then(|g| g.trim().parse::<i32>().ok())
            .filter(|&g| g > 0)
            .map(Pid::from_raw);
        Ok(tree)
    }

    /// Starts `fence __reaper` in `role`, in a process group of its own.
    fn spawn(spec: &TreeSpec, role: Role) -> std::io::Result<CommandTree> {
        // A stuck reaper must not block us: a full pipe just drops a heartbeat.
        let (control, control_theirs) = nonblocking_pipe()?;
        let (report, report_theirs) = pipe_pair(true)?;
        let deadlines = match spec.kill_at {
            Some(at) => Some((at, nonblocking_pipe()?)),
            None => None,
        };
        let foreground = procs::in_foreground();
        let args = ReaperArgs {
            role,
            supervisor: std::process::id() as i32,
            control_fd: control_theirs.as_raw_fd(),
            report_fd: report_theirs.as_raw_fd(),
            grace: spec.grace,
            orphan_grace: spec.orphan_grace,
            silence: spec.silence,
            foreground,
            kill: deadlines.as_ref().map(|(at, (_, theirs))| KillArgs {
                at: *at,
                deadline_fd: theirs.as_raw_fd(),
            }),
            command: spec.command.clone(),
        };
        let reaper = Command::new(self_exe()?)
            .arg0(self_name())
            .args(args.argv())
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .spawn()?;
        drop((control_theirs, report_theirs));
        let kill_at = deadlines.as_ref().map(|(at, _)| *at);
        let deadlines = deadlines.map(|(_, (ours, _theirs))| File::from(ours));
        let pid = Pid::from_raw(reaper.id().unwrap_or(0) as i32);
        let report = BufReader::new(Receiver::from_owned_fd(report)?).lines();
        Ok(CommandTree {
            reaper,
            pid,
            control: File::from(control),
            report: Some(report),
            group: None,
            contained: false,
            foreground,
            grace: spec.grace,
            ending: false,
            end_by: None,
            continues: 0,
            deadlines,
            kill_at,
            clock: Clock::system(),
        })
    }

    /// Whether the command runs in a PID namespace of its own.
    pub fn contained(&self) -> bool {
        self.contained
    }

    /// The first line the supervising process (or the gate) reports; `None` if it ended
    /// without one.
    async fn first_report(&mut self) -> Option<String> {
        let line = next_line(&mut self.report).await;
        if line.is_none() {
            self.report = None;
        }
        line
    }

    /// Passes `signal` to the command's process group (through the supervising process). A
    /// SIGCONT while `fence run` is the foreground of its terminal (after `fg`) first hands
    /// the terminal to the command.
    pub fn forward(&mut self, signal: Caught) {
        if signal.is(Signal::SIGCONT) {
            self.continues += 1;
        }
        let handed = signal.is(Signal::SIGCONT)
            && self.foreground
            && procs::in_foreground()
            && self.control.write_all(b"F").is_ok();
        if !handed {
            procs::send_number(self.pid, signal.0, false);
        }
    }

    /// Asks for the command's end: SIGTERM to every process, SIGKILL after the grace period.
    /// If the supervising process has not ended the command soon after that (it is stopped
    /// or stuck), it is killed.
    pub fn terminate(&mut self) {
        let _ = self.control.write_all(b"T");
        let first = !std::mem::replace(&mut self.ending, true);
        let limit = self.grace + TERMINATE_SLACK;
        let by = self.clock.mono_ms() + limit.as_millis() as u64;
        self.end_by = Some(self.end_by.map_or(by, |old| old.min(by)));
        // The same limit for the kernel, in case we are stopped before we can keep it.
        if let Some(at) = killtimer::boot_ms_in(limit).filter(|_| first) {
            self.kill_at(at);
        }
    }

    /// Moves the kill timer to `at` (`CLOCK_BOOTTIME` ms), unless it is there already (give
    /// or take the few ms by which two readings of one instant differ). A full pipe (its
    /// reader stopped for a very long time) drops the line, which is sent again next time.
    pub fn kill_at(&mut self, at: u64) {
        let Some(pipe) = self.deadlines.as_mut() else {
            return;
        };
        let moved = self.kill_at.is_none_or(|old| old.abs_diff(at) > 2);
        if moved && pipe.write_all(format!("{at}\n").as_bytes()).is_ok() {
            self.kill_at = Some(at);
        }
    }

    /// Whether the supervising process (or the gate) was killed by its kill timer: SIGKILL,
    /// and the last deadline we gave it has passed. The command's processes were then killed
    /// by the kernel, at the end of the lease's authority or of an end we asked for.
    pub fn killed_by_timer(&self, status: &ExitStatus) -> bool {
        use std::os::unix::process::ExitStatusExt;
        let passed = self
            .kill_at
            .zip(killtimer::boot_ms_in(Duration::ZERO))
            .is_some_and(|(at, now)| now >= at);
        passed && status.signal() == Some(Signal::SIGKILL as i32)
    }

    /// Tells the supervising process that the lease still holds.
    pub fn heartbeat(&mut self) {
        let _ = self.control.write(b"H");
    }

    /// Waits until the supervising process has exited, which it does only when no process of
    /// the command is left. Returns its status: the command's exit code (or 128 + N), or a
    /// signal if the supervising process itself was killed.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            let end_by = self.end_by;
            tokio::select! {
                status = self.reaper.wait() => return status,
                line = next_line(&mut self.report), if self.report.is_some() => match line {
                    Some(line) => self.on_report(&line),
                    None => self.report = None,
                },
                () = self.clock.sleep_until(end_by.unwrap_or(0)), if end_by.is_some() => {
                    self.end_by = None;
                    let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
                }
            }
        }
    }

    /// `stop N`: the command stopped on its terminal, after N of our SIGCONTs; `fence run`
    /// stops too, unless it has continued the command since (it was stopped itself, and the
    /// line waited for it) or is ending it.
    fn on_report(&mut self, line: &str) {
        let stopped_after = line
            .strip_prefix("stop ")
            .and_then(|n| n.trim().parse::<u64>().ok());
        if !self.ending && stopped_after.is_some_and(|n| n >= self.continues) {
            stop_self();
        }
    }

    /// After the supervising process has exited: SIGKILL to every process of the command
    /// that is still there — `fence run`'s own descendants (orphans come to it, a subreaper)
    /// and, if the supervising process was `killed`, the tracked command's process group —
    /// until none is left. Nothing is found when the supervising process ended the command
    /// itself; this is the check before the lease is released.
    pub async fn sweep(&mut self, killed: bool) {
        let group = self.group.filter(|_| killed && !self.contained);
        let mut orphans = Tracked::orphans(group);
        loop {
            orphans.kill();
            if orphans.sweep(true) {
                return;
            }
            self.clock.sleep(Duration::from_millis(10)).await;
        }
    }

    /// Takes the terminal back if it was handed to the command.
    pub fn restore_terminal(&self) {
        if self.foreground {
            procs::hand_terminal(nix::unistd::getpgrp());
        }
    }
}

/// The next line of the report pipe; `None` at its end (or when there is no pipe).
async fn next_line(report: &mut Option<Lines<BufReader<Receiver>>>) -> Option<String> {
    match report.as_mut() {
        Some(lines) => lines.next_line().await.ok().flatten(),
        None => None,
    }
}
