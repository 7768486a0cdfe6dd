//! What the operating system offers for keeping a process tree together, behind one small
//! surface: on Linux a child subreaper, parent-death signals and `/proc`; on macOS (and other
//! Unixes) only process groups.

use std::fs::File;
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// A child process of this one, and its process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildProc {
    /// Its pid.
    pub pid: Pid,
    /// Its process group.
    pub pgid: Pid,
}

/// Makes orphaned descendants (also ones that `setsid` or double-fork) reparent to this
/// process instead of to init. Returns whether the system can do that (Linux only).
pub fn become_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_child_subreaper(true).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Asks for `signal` when the parent dies (Linux only; elsewhere a no-op).
pub fn signal_on_parent_death(signal: Signal) {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_pdeathsig(signal);
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = signal;
    }
}

/// Whether [`children`] and [`descendants`] see anything: they read `/proc` (Linux).
pub const WALKS_PROC: bool = cfg!(target_os = "linux");

/// This process's children that are still listed (alive or not yet reaped). Linux reads
/// `/proc`; elsewhere the list is empty (without a subreaper, orphans never become ours).
pub fn children() -> Vec<ChildProc> {
    let me = nix::unistd::getpid();
    table()
        .into_iter()
        .filter(|p| p.ppid == me)
        .map(|p| p.child)
        .collect()
}

/// Every descendant of this process that `/proc` lists (Linux; elsewhere none): children,
/// their children, and so on. One read of `/proc` is not a snapshot: a process that forks
/// and exits while it is read can hide its child, so callers repeat the walk.
pub fn descendants() -> Vec<ChildProc> {
    let all = table();
    let mut found = std::collections::HashSet::from([nix::unistd::getpid()]);
    let mut out: Vec<ChildProc> = Vec::new();
    let mut next = 0;
    let mut parent = nix::unistd::getpid();
    loop {
        for p in all.iter().filter(|p| p.ppid == parent) {
            if found.insert(p.child.pid) {
                out.push(p.child);
            }
        }
        let Some(child) = out.get(next) else {
            return out;
        };
        parent = child.pid;
        next += 1;
    }
}

/// A process as `/proc` lists it.
#[derive(Clone, Copy, Debug)]
struct ProcEntry {
    child: ChildProc,
    ppid: Pid,
}

/// Every process `/proc` lists (Linux; elsewhere none).
fn table() -> Vec<ProcEntry> {
    #[cfg(target_os = "linux")]
    {
        linux::table()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{ChildProc, ProcEntry};
    use nix::unistd::Pid;

    pub(super) fn table() -> Vec<ProcEntry> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(entry_of)
            .collect()
    }

    /// From `/proc/PID/stat`: the fields after the last `)`, since the command name may
    /// contain anything.
    fn entry_of(pid: i32) -> Option<ProcEntry> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace().skip(1);
        let ppid = fields.next()?.parse().ok()?;
        let pgid = fields.next()?.parse().ok()?;
        Some(ProcEntry {
            child: ChildProc {
                pid: Pid::from_raw(pid),
                pgid: Pid::from_raw(pgid),
            },
            ppid: Pid::from_raw(ppid),
        })
    }
}

/// How the group leader (the command) is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaderState {
    /// Running (or stopped by something other than the terminal).
    Running,
    /// Stopped by a terminal stop signal (TSTP, TTIN, TTOU).
    TerminalStop,
    /// Exited with this code (128 + N for signal N). On Linux it is left unreaped (a zombie
    /// keeps its pid, so its process-group id cannot be reused while we signal the group);
    /// call [`reap`] at the end.
    Exited(u8),
}

/// Looks at `leader` without blocking.
pub fn leader_state(leader: Pid) -> LeaderState {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::wait::{waitid, Id};
        let stop = waitid(
            Id::Pid(leader),
            WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG,
        );
        let exit = waitid(
            Id::Pid(leader),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        );
        match (exit, stop) {
            (Ok(status), _) if exit_code(status).is_some() => {
                LeaderState::Exited(exit_code(status).unwrap_or(0))
            }
            (_, Ok(WaitStatus::Stopped(_, s))) if is_terminal_stop(s) => LeaderState::TerminalStop,
            (Err(Errno::ECHILD), _) => LeaderState::Exited(0),
            _ => LeaderState::Running,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        match waitpid(leader, Some(WaitPidFlag::WUNTRACED | WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Stopped(_, s)) if is_terminal_stop(s) => LeaderState::TerminalStop,
            Ok(status) => exit_code(status).map_or(LeaderState::Running, LeaderState::Exited),
            Err(_) => LeaderState::Exited(0),
        }
    }
}

fn is_terminal_stop(s: Signal) -> bool {
    matches!(s, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU)
}

/// The shell convention: an exit code, or 128 + N for signal N.
pub fn exit_code(status: WaitStatus) -> Option<u8> {
    match status {
        WaitStatus::Exited(_, code) => Some(code as u8),
        WaitStatus::Signaled(_, s, _) => Some(128u8.saturating_add(s as i32 as u8)),
        _ => None,
    }
}

/// Reaps `pid` if it has exited; returns whether it is gone.
pub fn reap(pid: Pid) -> bool {
    match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => false,
        Ok(_) | Err(_) => true,
    }
}

/// Sends signal number `signo` to process `pid`, or with `group` to every process of group
/// `pid`. A real-time signal has no `nix` name, so it goes through the C library directly.
pub fn send_number(pid: Pid, signo: i32, group: bool) {
    match Signal::try_from(signo) {
        Ok(named) if group => drop(killpg(pid, named)),
        Ok(named) => drop(kill(pid, named)),
        Err(_) => send_raw(pid.as_raw(), signo, group),
    }
}

#[allow(unsafe_code)]
fn send_raw(pid: i32, signo: i32, group: bool) {
    // SAFETY: kill(2) and killpg(2) take plain integers and touch no memory of this process;
    // a bad number or pid is an error return, which (as for every forwarded signal) is ignored.
    unsafe {
        if group {
            nix::libc::killpg(pid, signo);
        } else {
            nix::libc::kill(pid, signo);
        }
    }
}

/// Sends `signal` to every process of group `pgid`; returns whether the group has members.
pub fn signal_group(pgid: Pid, signal: Option<Signal>) -> bool {
    !matches!(killpg(pgid, signal), Err(Errno::ESRCH))
}

/// Sends `signal` to `child`, and to its whole process group when it leads one of its own
/// (a group it made with `setsid` or `setpgid`, so nobody outside our tree is in it).
pub fn signal_child(child: ChildProc, signal: Signal) {
    if child.pgid == child.pid {
        let _ = killpg(child.pgid, signal);
    }
    let _ = kill(child.pid, signal);
}

/// The controlling terminal, if this process has one.
pub fn controlling_tty() -> Option<File> {
    File::options().read(true).write(true).open("/dev/tty").ok()
}

/// Whether this process's group is the foreground of its controlling terminal.
pub fn in_foreground() -> bool {
    controlling_tty().is_some_and(|tty| {
        nix::unistd::tcgetpgrp(tty.as_fd()).is_ok_and(|fg| fg == nix::unistd::getpgrp())
    })
}

/// The foreground process group of the controlling terminal.
pub fn foreground_group() -> Option<Pid> {
    controlling_tty().and_then(|tty| nix::unistd::tcgetpgrp(tty.as_fd()).ok())
}

/// Makes `pgid` the foreground of the controlling terminal, also from a background group
/// (SIGTTOU, which would stop us, is blocked for the call).
pub fn hand_terminal(pgid: Pid) {
    let Some(tty) = controlling_tty() else {
        return;
    };
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let blocked = ttou.thread_block().is_ok();
    let _ = nix::unistd::tcsetpgrp(tty.as_fd(), pgid);
    if blocked {
        let _ = ttou.thread_unblock();
    }
}
