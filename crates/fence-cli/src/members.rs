//! The command's processes as the supervising process reaches them ([`Members`]), one
//! implementation per containment mode ([`crate::contain`] says how each is set up):
//!
//! - [`Namespace`]: the supervising process is the init (pid 1) of the command's PID
//!   namespace. `kill(-1, sig)` from init reaches every other process of the namespace in one
//!   call: the kernel signals them under its task-list lock, and a fork that races the signal
//!   is restarted, so no process can slip past it. Every orphan of the namespace becomes
//!   init's child, so "nothing is left" is `waitpid` answering ECHILD. Once init is gone, the
//!   kernel kills whatever is left and no process can enter the namespace again.
//! - [`Tracked`]: the fallback, where no namespace can be made. The supervising process is a
//!   child subreaper (Linux): every process of the command stays its descendant (an orphan
//!   reparents to it, also after `setsid` or a double fork), and `/proc` lists them. A read of
//!   `/proc` is not a snapshot: a process that forks and exits while it is read hides its
//!   child. So signals are sent again on every walk, and the tree is judged empty only by a
//!   walk that found no child at all (neither a living one nor one to reap), after the
//!   command itself was reaped and `killpg(G, 0)` answers ESRCH. A process that forks again
//!   and again keeps every walk from concluding: the end waits for it rather than miss it.

use std::collections::HashSet;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::procs::{self, LeaderState};

/// Every process of the command, as one supervising process reaches them.
pub trait Members {
    /// What the supervising process reports to `fence run` once the command runs.
    fn ready_line(&self) -> String;
    /// How the command (the first process, its group's leader) is doing.
    fn leader_state(&mut self) -> LeaderState;
    /// SIGTERM, then SIGCONT (so a stopped process sees it), to every process of the
    /// command that has not had them yet.
    fn terminate(&mut self);
    /// SIGKILL to every process of the command.
    fn kill(&mut self);
    /// SIGSTOP to every process of the command (called again and again while frozen).
    fn stop(&mut self);
    /// SIGCONT to every process of the command.
    fn resume(&mut self);
    /// Reaps what has exited; returns whether no process of the command is left. It is never
    /// true before the command itself has exited (`leader_exited`).
    fn sweep(&mut self, leader_exited: bool) -> bool;
}

/// The command's processes in its own PID namespace, seen from the namespace's init.
#[derive(Debug)]
pub struct Namespace {
    leader: Pid,
    leader_exit: Option<u8>,
    terminated: bool,
}

impl Namespace {
    /// The processes of this namespace, whose init is this process; `leader` is the command.
    pub fn new(leader: Pid) -> Namespace {
        Namespace {
            leader,
            leader_exit: None,
            terminated: false,
        }
    }

    /// `kill(-1, signal)`: every process of the namespace but init.
    fn signal_all(signal: Signal) {
        let _ = kill(Pid::from_raw(-1), signal);
    }
}

impl Members for Namespace {
    fn ready_line(&self) -> String {
        "ready".to_owned()
    }

    fn leader_state(&mut self) -> LeaderState {
        match self.leader_exit {
            Some(code) => LeaderState::Exited(code),
            None => procs::leader_state(self.leader),
        }
    }

    fn terminate(&mut self) {
        if !std::mem::replace(&mut self.terminated, true) {
            Self::signal_all(Signal::SIGTERM);
            Self::signal_all(Signal::SIGCONT);
        }
    }

    fn kill(&mut self) {
        Self::signal_all(Signal::SIGKILL);
    }

    fn stop(&mut self) {
        Self::signal_all(Signal::SIGSTOP);
    }

    fn resume(&mut self) {
        Self::signal_all(Signal::SIGCONT);
    }

    fn sweep(&mut self, _leader_exited: bool) -> bool {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => return false,
                Ok(status) => {
                    if status.pid() == Some(self.leader) {
                        self.leader_exit = procs::exit_code(status);
                    }
                }
                Err(Errno::EINTR) => {}
                Err(Errno::ECHILD) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// The command's processes found by walking `/proc` from the supervising process (and the
/// command's process group).
#[derive(Debug)]
pub struct Tracked {
    leader: Option<Pid>,
    /// The command's process group, until it is seen empty.
    group: Option<Pid>,
    leader_reaped: bool,
    /// Processes already sent SIGTERM.
    terminated: HashSet<Pid>,
}

impl Tracked {
    /// The command `leader`, leader of its own process group, and everything it starts.
    pub fn new(leader: Pid) -> Tracked {
        Tracked {
            leader: Some(leader),
            group: Some(leader),
            leader_reaped: false,
            terminated: HashSet::new(),
        }
    }

    /// What is left of a tree whose supervising process is gone: this process's descendants
    /// (orphans reparent to it, a subreaper) and the command's process group `group`.
    pub fn orphans(group: Option<Pid>) -> Tracked {
        Tracked {
            leader: None,
            group,
            leader_reaped: true,
            terminated: HashSet::new(),
        }
    }

    /// `signal` to the group and to every descendant (with the group it leads, if any).
    fn signal_all(&mut self, signal: Signal) {
        self.signal_group(Some(signal));
        for d in procs::descendants() {
            procs::signal_child(d, signal);
        }
    }

    /// Signals the command's group; forgets it once it is empty (its number may then be
    /// reused by a stranger). Returns whether it has members.
    fn signal_group(&mut self, signal: Option<Signal>) -> bool {
        let Some(group) = self.group else {
            return false;
        };
        let members = procs::signal_group(group, signal);
        if !members {
            self.group = None;
        }
        members
    }

    /// Reaps exited children other than the command; returns whether there were any
    /// (living, or reaped now).
    fn children_found(&self) -> bool {
        let unreaped_leader = self.leader.filter(|_| !self.leader_reaped);
        let others: Vec<_> = procs::children()
            .into_iter()
            .filter(|c| Some(c.pid) != unreaped_leader)
            .collect();
        for c in &others {
            procs::reap(c.pid);
        }
        !others.is_empty()
    }
}

impl Members for Tracked {
    fn ready_line(&self) -> String {
        format!("ready {}", self.leader.map_or(0, Pid::as_raw))
    }

    fn leader_state(&mut self) -> LeaderState {
        match self.leader {
            Some(leader) if !self.leader_reaped => procs::leader_state(leader),
            _ => LeaderState::Exited(0),
        }
    }

    fn terminate(&mut self) {
        if !procs::WALKS_PROC && self.terminated.is_empty() {
            self.signal_group(Some(Signal::SIGTERM));
            self.signal_group(Some(Signal::SIGCONT));
            self.terminated.extend(self.group);
        }
        for d in procs::descendants() {
            if self.terminated.insert(d.pid) {
                let _ = kill(d.pid, Signal::SIGTERM);
                let _ = kill(d.pid, Signal::SIGCONT);
            }
        }
    }

    fn kill(&mut self) {
        self.signal_all(Signal::SIGKILL);
    }

    fn stop(&mut self) {
        self.signal_all(Signal::SIGSTOP);
    }

    fn resume(&mut self) {
        self.signal_all(Signal::SIGCONT);
    }

    fn sweep(&mut self, leader_exited: bool) -> bool {
        if self.children_found() || !leader_exited {
            return false;
        }
        if let Some(leader) = self.leader.filter(|_| !self.leader_reaped) {
            procs::reap(leader);
            self.leader_reaped = true;
        }
        !self.signal_group(None)
    }
}
