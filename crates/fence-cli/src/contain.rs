//! Containment of `fence run`'s command by the kernel: the command runs in a PID namespace
//! of its own, whose init (pid 1) is fence's supervising process.
//!
//! ```text
//! fence run                 holds the lease; forwards signals to the gate
//!  └─ fence __reaper        the gate: makes the namespaces, starts the init, passes signals
//!      └─ fence __reaper    (role init) pid 1 of the new PID namespace: the supervising process
//!          └─ CMD           pid 2, leader of the command's process group
//! ```
//!
//! **Why a PID namespace, not a cgroup.** Both let the kernel reach every process of the
//! command at once (`kill(-1, sig)` from the namespace's init; `cgroup.kill` and
//! `cgroup.freeze` of a cgroup v2 leaf). Only the namespace has an end the kernel enforces:
//! when its init exits — also when it is SIGKILLed, or killed because the gate died — the
//! kernel kills every process in it, and no process can ever enter it again. A cgroup
//! outlives its owner: if `fence run` and its supervisor are both killed, the command runs
//! on in it. A namespace also needs no privilege: a user namespace lets any user make one
//! (where the kernel's policy allows), while a cgroup v2 leaf needs a writable, delegated
//! cgroup v2 hierarchy, which many hosts do not give (hybrid hosts mount cgroup v1
//! controllers beside a controller-less cgroup2 tree that only root may write).
//!
//! **How.** The gate (`fence __reaper`, role gate) calls `unshare(CLONE_NEWPID)`, which only
//! root may; when refused, it first makes a user namespace that maps its own uid and gid to
//! themselves (so the command keeps its identity) and then the PID namespace. Its next child
//! is the namespace's init: between fork and exec that child makes a mount namespace of its
//! own (mounts propagate into it from the host, never out of it) and mounts a `/proc` of the
//! new PID namespace, so that what the command reads in `/proc` agrees with the PIDs it is
//! given; it also asks for SIGKILL when the gate dies. The gate then passes every signal from
//! `fence run` to the init and exits with its status.
//!
//! **The kill timer.** Before it starts the init, the gate arms a kernel timer that SIGKILLs
//! the gate at the end of the lease's authority ([`crate::killtimer`]); `fence run` moves it
//! on after every renewal. The gate's death kills the init, and the init's the namespace, so
//! the namespace ends by the authority's end even if `fence run`, the gate and the init are
//! all stopped. Should `fence run` die (the gate's parent-death signal, or the end of the
//! deadline pipe), the timer moves to the init's orphan grace and TTL/3 more, if that is
//! sooner: a stopped or stuck init does not keep the command running for the rest of the
//! authority. Where any step is refused, the gate reports why and exits, and `fence run`
//! falls back to [`crate::members::Tracked`] (or refuses, with `--containment=required`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::reaper::{ReaperArgs, Role};

/// How `fence run` holds its command's processes (`--containment`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Containment {
    /// A PID namespace where the kernel allows one; otherwise, said once on stderr, the
    /// fallback.
    #[default]
    Auto,
    /// A PID namespace, or refuse to run the command.
    Required,
    /// No namespace: the supervising process tracks the command's processes through `/proc`.
    Fallback,
}

impl FromStr for Containment {
    type Err = String;

    fn from_str(s: &str) -> Result<Containment, String> {
        match s {
            "auto" => Ok(Containment::Auto),
            "required" => Ok(Containment::Required),
            "fallback" => Ok(Containment::Fallback),
            _ => Err("expected auto, required or fallback".to_owned()),
        }
    }
}

impl fmt::Display for Containment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Containment::Auto => "auto",
            Containment::Required => "required",
            Containment::Fallback => "fallback",
        })
    }
}

/// Why no PID namespace could be made, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uncontained(pub String);

impl fmt::Display for Uncontained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The report line of a gate that could not make the namespace.
pub const UNCONTAINED: &str = "uncontained";

/// `fence __reaper` in the gate role: makes the namespace, starts its init and passes
/// signals to it until it exits; returns its exit code (128 + N if signal N killed it).
/// Must run while this process is single-threaded (a user namespace requires it).
pub fn gate_main(args: &ReaperArgs) -> u8 {
    if let Err(why) = enter() {
        return refuse(args, &why);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(rt) => rt.block_on(gate(args)),
        Err(e) => refuse(args, &Uncontained(format!("cannot start: {e}"))),
    }
}

/// Reports to `fence run` why there is no namespace; exit 0 (nothing ran).
fn refuse(args: &ReaperArgs, why: &Uncontained) -> u8 {
    use std::io::Write;
    match crate::reaper::adopt_pipe(args.report_fd, true) {
        Ok(mut report) => {
            let line = why.0.replace('\n', " ");
            let _ = writeln!(report, "{UNCONTAINED} {line}");
            0
        }
        Err(_) => crate::reaper::CANNOT_START,
    }
}

async fn gate(args: &ReaperArgs) -> u8 {
    // The kill timer first: from here on the namespace cannot outlive the lease's authority.
    let mut kill = match args.kill {
        Some(k) => match crate::killtimer::KillTimer::arm(k.at, k.deadline_fd) {
            Ok(timer) => timer,
            Err(e) => {
                return refuse(
                    args,
                    &Uncontained(format!("cannot arm its kill timer: {e}")),
                )
            }
        },
        None => {
            return refuse(
                args,
                &Uncontained("no boot clock for its kill timer".to_owned()),
            )
        }
    };
    let started = crate::signals::Signals::install(&[]).and_then(|s| Ok((s, spawn_init(args)?)));
    let (mut signals, mut init) = match started {
        Ok(s) => s,
        Err(e) => return refuse(args, &Uncontained(format!("cannot start its init: {e}"))),
    };
    // The init holds the pipes now; ours would keep `fence run` from seeing their end.
    let _ = nix::unistd::close(args.control_fd);
    let _ = nix::unistd::close(args.report_fd);
    let pid = nix::unistd::Pid::from_raw(init.id().map_or(0, |p| p as i32));
    crate::procs::signal_on_parent_death(GATE_PARENT_DEATH);
    loop {
        if !supervisor_alive(args) {
            kill.orphan(orphan_deadline(args));
        }
        tokio::select! {
            status = init.wait() => return status_code(status),
            s = signals.recv() => {
                if supervisor_alive(args) {
                    crate::procs::send_number(pid, s.0, false);
                }
            }
            () = kill.follow(orphan_deadline(args)) => {}
        }
    }
}

/// The gate's parent-death signal: `fence run`'s death arrives as this signal, told apart
/// from one `fence run` forwards by `fence run` no longer being the gate's parent.
const GATE_PARENT_DEATH: nix::sys::signal::Signal = nix::sys::signal::Signal::SIGPWR;

fn supervisor_alive(args: &ReaperArgs) -> bool {
    nix::unistd::getppid().as_raw() == args.supervisor
}

/// How long after `fence run`'s death the gate's kill timer gives the init to end the
/// command (if the authority does not end sooner): its orphan grace (at most TTL/4) and the
/// heartbeat silence (TTL/3) more. Together under 2/3 of a TTL, the least time before a peer
/// can take over a lease renewed every TTL/3: a stopped or stuck init does not keep the
/// command running beside the next holder.
pub fn orphan_deadline(args: &ReaperArgs) -> Duration {
    args.orphan_grace + args.silence
}

fn status_code(status: std::io::Result<std::process::ExitStatus>) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => code as u8,
            (None, Some(signal)) => 128u8.saturating_add(signal as u8),
            (None, None) => crate::reaper::CANNOT_START,
        },
        Err(_) => crate::reaper::CANNOT_START,
    }
}

/// Starts the namespace's init: `fence __reaper` in the init role, with this gate's pipes.
fn spawn_init(args: &ReaperArgs) -> std::io::Result<tokio::process::Child> {
    let init = ReaperArgs {
        role: Role::Init,
        kill: None,
        ..args.clone()
    };
    let mut cmd = tokio::process::Command::new(crate::reaper::self_exe()?);
    cmd.arg0(crate::reaper::self_name()).args(init.argv());
    prepare_init(&mut cmd);
    cmd.spawn()
}

/// Makes this process's next child the init of a new PID namespace: in the user namespace
/// it is in, or, where that is refused (not root), in a new user namespace that maps this
/// process's uid and gid to themselves.
#[cfg(target_os = "linux")]
pub fn enter() -> Result<(), Uncontained> {
    use nix::sched::{unshare, CloneFlags};
    let Err(refused) = unshare(CloneFlags::CLONE_NEWPID) else {
        return Ok(());
    };
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
        Uncontained(format!(
            "cannot make a PID namespace ({refused}) nor a user namespace ({e})"
        ))
    })?;
    map_identity(uid.as_raw(), gid.as_raw())
        .map_err(|e| Uncontained(format!("cannot map the user namespace's ids: {e}")))?;
    unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|e| Uncontained(format!("cannot make a PID namespace: {e}")))
}

/// Without Linux namespaces there is nothing to enter.
#[cfg(not(target_os = "linux"))]
pub fn enter() -> Result<(), Uncontained> {
    Err(Uncontained("PID namespaces are a Linux feature".to_owned()))
}

/// Maps `uid` and `gid` to themselves in this process's (new) user namespace. An
/// unprivileged process may map only its own ids, and only after denying `setgroups`.
#[cfg(target_os = "linux")]
fn map_identity(uid: u32, gid: u32) -> std::io::Result<()> {
    match std::fs::write("/proc/self/setgroups", "deny") {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
}

/// Between fork and exec, the init: a mount namespace with a `/proc` of its PID namespace,
/// and SIGKILL when the gate dies.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn prepare_init(cmd: &mut tokio::process::Command) {
    // SAFETY: the closure runs in the forked child before exec and makes only system calls
    // (unshare, mount, prctl) on short literal paths, which nix passes from stack buffers:
    // nothing allocates, takes a lock or touches state shared with other threads, so it is
    // async-signal-safe as a pre-exec hook must be.
    unsafe {
        cmd.pre_exec(|| own_proc().map_err(std::io::Error::from));
    }
}

#[cfg(not(target_os = "linux"))]
fn prepare_init(_cmd: &mut tokio::process::Command) {}

/// In the init, before exec: its own mount namespace (a slave of the host's: mounts come in,
/// none go out), a fresh `/proc` there, and SIGKILL when the gate, its parent, dies.
#[cfg(target_os = "linux")]
fn own_proc() -> nix::Result<()> {
    use nix::mount::{mount, MsFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
    let none: Option<&str> = None;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_SLAVE, none)?;
    let hardened = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), "/proc", Some("proc"), hardened, none)?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
}
