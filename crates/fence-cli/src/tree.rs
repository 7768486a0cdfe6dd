//! `fence run`'s side of the command's process tree: starts the supervising process
//! ([`crate::reaper`]), passes signals to it, asks it to end the command, and waits until the
//! whole tree is gone.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::ExitStatus;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::procs;
use crate::reaper::{self_exe, self_name};
use crate::signals::Caught;

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
}

/// The command's running tree.
#[derive(Debug)]
pub struct CommandTree {
    reaper: Child,
    pid: Pid,
    control: File,
    report: Option<tokio::net::unix::pipe::Receiver>,
    /// The command's process group, once the reaper reported it.
    group: Option<Pid>,
    /// Signals that came before the reaper was ready for them.
    pending: Vec<Caught>,
    /// Whether the terminal was handed to the command (and must be taken back).
    foreground: bool,
}

/// A pipe whose `ours` end is closed on exec and whose `theirs` end is inherited.
fn pipe_pair(ours_is_read: bool) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe()?;
    let (ours, theirs) = if ours_is_read {
        (read, write)
    } else {
        (write, read)
    };
    fcntl(&ours, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok((ours, theirs))
}

impl CommandTree {
    /// Starts the supervising process, which starts the command in a process group of its
    /// own. Must be called from the thread that lives as long as this process (the main
    /// thread): on Linux the supervising process's parent-death signal follows the thread
    /// that started it.
    pub fn spawn(spec: &TreeSpec) -> std::io::Result<CommandTree> {
        let (control, control_theirs) = pipe_pair(false)?;
        // A stuck reaper must not block us: a full pipe just drops a heartbeat.
        let flags = OFlag::from_bits_truncate(fcntl(&control, FcntlArg::F_GETFL)?);
        fcntl(&control, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        let (report, report_theirs) = pipe_pair(true)?;
        let foreground = procs::in_foreground();
        let mut cmd = Command::new(self_exe()?);
        cmd.arg0(self_name())
            .arg("__reaper")
            .args(["--supervisor", &std::process::id().to_string()])
            .args(["--control-fd", &control_theirs.as_raw_fd().to_string()])
            .args(["--report-fd", &report_theirs.as_raw_fd().to_string()])
            .args(["--grace-ms", &spec.grace.as_millis().to_string()])
            .args([
                "--orphan-grace-ms",
                &spec.orphan_grace.as_millis().to_string(),
            ])
            .args(["--silence-ms", &spec.silence.as_millis().to_string()]);
        if foreground {
            cmd.arg("--foreground");
        }
        cmd.arg("--")
            .args(&spec.command)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .process_group(0);
        let reaper = cmd.spawn()?;
        drop((control_theirs, report_theirs));
        let pid = Pid::from_raw(reaper.id().unwrap_or(0) as i32);
        let report = tokio::net::unix::pipe::Receiver::from_owned_fd(report)?;
        Ok(CommandTree {
            reaper,
            pid,
            control: File::from(control),
            report: Some(report),
            group: None,
            pending: Vec::new(),
            foreground,
        })
    }

    /// Passes `signal` to the command's process group (through the supervising process).
    pub fn forward(&mut self, signal: Caught) {
        if self.group.is_none() {
            self.pending.push(signal);
            return;
        }
        procs::send_number(self.pid, signal.0, false);
    }

    /// Asks for the command's end: SIGTERM to the whole tree, SIGKILL after the grace period.
    pub fn terminate(&mut self) {
        let _ = self.control.write_all(b"T");
    }

    /// Tells the supervising process that the lease still holds.
    pub fn heartbeat(&mut self) {
        let _ = self.control.write(b"H");
    }

    /// Waits until the supervising process has exited, which it does only when no process of
    /// the command's tree is left. Returns its status: the command's exit code (or 128 + N),
    /// or a signal if the supervising process itself was killed.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            let Some(report) = self.report.as_mut() else {
                return self.reaper.wait().await;
            };
            let mut line = Vec::new();
            tokio::select! {
                status = self.reaper.wait() => return status,
                _ = report.read_to_end(&mut line) => {
                    self.report = None;
                    self.on_report(&line);
                }
            }
        }
    }

    fn on_report(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let group = text
            .trim()
            .strip_prefix("ready ")
            .and_then(|g| g.parse::<i32>().ok());
        self.group = Some(Pid::from_raw(group.unwrap_or(0)));
        for s in std::mem::take(&mut self.pending) {
            procs::send_number(self.pid, s.0, false);
        }
    }

    /// After the supervising process was killed: kills what is left of the command's tree
    /// (its group, and on Linux every orphan that reparented to us), until nothing is left.
    pub async fn kill_remains(&mut self) {
        let clock = fence_core::Clock::system();
        let until = clock.mono_ms() + 10_000;
        loop {
            let group = self.group.filter(|g| g.as_raw() > 0);
            let in_group = group.is_some_and(|g| procs::signal_group(g, Some(Signal::SIGKILL)));
            let children: Vec<_> = procs::children()
                .into_iter()
                .filter(|c| !procs::reap(c.pid))
                .collect();
            children
                .iter()
                .for_each(|&c| procs::signal_child(c, Signal::SIGKILL));
            if (!in_group && children.is_empty()) || clock.mono_ms() > until {
                return;
            }
            clock.sleep(Duration::from_millis(10)).await;
        }
    }

    /// Takes the terminal back if it was handed to the command.
    pub fn restore_terminal(&self) {
        if self.foreground {
            procs::hand_terminal(nix::unistd::getpgrp());
        }
    }
}
