//! `fence acquire` / `fence release`: a lease held across a section of a shell script, as
//! `exec 9>f; flock 9` … `flock -u 9` hold a lock.
//!
//! `fence acquire` starts a background holder — `fence run` without a command, in a process
//! group of its own — waits until it holds the lease, and prints its epoch and the other
//! `FENCE_*` variables as shell assignments for `eval`. The holder renews the lease and
//! watches the script (the process that ran `fence acquire`, or `--pid`):
//!
//! - the script ends (also by SIGKILL) → the holder releases the lease, as the kernel drops a
//!   `flock` when the last descriptor closes;
//! - `fence release` → the holder releases it (exit 0), or reports that it was lost;
//! - the lease is lost (renewals failed for a TTL, the holder was stopped past its TTL) → the
//!   holder sends the script SIGTERM and exits 76; the script's `fence put`s of that epoch
//!   are refused by the store from the next claim on.
//!
//! The script's processes are not the holder's children: nothing freezes or kills them the
//! way `fence run` does its command's. A script that must stop the instant its lease is lost
//! belongs in `fence run`.

use std::process::{Command, Stdio};
use std::time::Duration;

use fence_core::{Clock, ConditionalStore, Ownership};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::exit::{shown, Failure, FENCED, OK, STORE};
use crate::names::node_of;

/// A process being watched: its pid and, where `/proc` tells, its start time (so a reused
/// pid is not mistaken for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched {
    pid: i32,
    start: Option<u64>,
}

impl Watched {
    /// Process `pid` as it is now; `None` if there is none.
    pub fn new(pid: i32) -> Option<Watched> {
        let w = Watched {
            pid,
            start: start_time(pid),
        };
        w.is_running().then_some(w)
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the same process still exists (a zombie counts as ended).
    pub fn is_running(&self) -> bool {
        let exists = kill(Pid::from_raw(self.pid), None).is_ok();
        exists && start_time(self.pid) == self.start && !is_zombie(self.pid)
    }

    /// Returns once the process has ended, looking every `every`.
    pub async fn ended(&self, every: Duration) {
        let clock = Clock::system();
        while self.is_running() {
            clock.sleep(every).await;
        }
    }

    /// Sends it SIGTERM, if it is still the same process.
    pub fn terminate(&self) {
        if self.is_running() {
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGTERM);
        }
    }
}

/// Field 22 of `/proc/PID/stat`: the start time in clock ticks since boot (Linux).
fn start_time(pid: i32) -> Option<u64> {
    stat_field(pid, 19)
}

fn is_zombie(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rfind(')')
        .is_some_and(|i| stat[i + 1..].trim_start().starts_with('Z'))
}

/// The `n`-th field after the command name of `/proc/PID/stat` (0: the state).
fn stat_field(pid: i32, n: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(n)?
        .parse()
        .ok()
}

/// What `fence acquire` needs to start its holder.
#[derive(Debug, Clone)]
pub struct AcquireOptions {
    /// `fence run`'s arguments for the holder (store, lease, TTL, wait, limit …), without a
    /// command.
    pub run_args: Vec<String>,
    /// The store URL the script's `FENCE_STORE` gets.
    pub store_url: String,
    /// The script's process to watch.
    pub pid: i32,
    /// The `file://` store's file mode, for the script's `FENCE_FILE_MODE`.
    pub file_mode: Option<u32>,
}

/// The first line a holder started by `fence acquire` prints: `EPOCH SLOT CELL` (`-` when
/// there are no slots). Parsed back by [`acquire`].
pub fn report_line(epoch: u64, slot: Option<u32>, cell: &str) -> String {
    let slot = slot.map_or("-".to_owned(), |s| s.to_string());
    format!("{epoch} {slot} {cell}")
}

/// Starts the holder and waits until it holds the lease; returns the lines for `eval`.
/// The holder's own failure (busy, the store failed) is its exit code, its message already
/// on stderr.
pub fn acquire(opts: &AcquireOptions) -> Result<String, Failure> {
    let me = std::env::current_exe()
        .map_err(|e| Failure::new(STORE, format!("cannot find the fence binary: {e}")))?;
    let mut holder = Command::new(me);
    holder
        .args(&opts.run_args)
        .args(["--for-pid", &opts.pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // Its own process group: Ctrl-C at the script's terminal reaches the script, which the
    // holder watches, not the holder itself.
    std::os::unix::process::CommandExt::process_group(&mut holder, 0);
    let mut child = holder
        .spawn()
        .map_err(|e| Failure::new(STORE, format!("cannot start the holder: {e}")))?;
    let mut said = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut out, &mut said);
    }
    match parse_report(&said) {
        Some((epoch, slot, cell)) => Ok(eval_lines(epoch, slot, &cell, opts, child.id())),
        None => {
            let status = child.wait().ok().and_then(|s| s.code());
            Err(Failure::silent(status.map_or(STORE, |c| c as u8)))
        }
    }
}

fn parse_report(said: &str) -> Option<(u64, Option<u32>, String)> {
    let line = said.lines().next()?;
    let (epoch, rest) = line.split_once(' ')?;
    let (slot, cell) = rest.split_once(' ')?;
    let slot = match slot {
        "-" => None,
        n => Some(n.parse().ok()?),
    };
    Some((epoch.parse().ok()?, slot, cell.to_owned()))
}

fn eval_lines(
    epoch: u64,
    slot: Option<u32>,
    cell: &str,
    opts: &AcquireOptions,
    holder: u32,
) -> String {
    let mut vars = vec![
        ("FENCE_EPOCH", epoch.to_string()),
        ("FENCE_LEASE", cell.to_owned()),
        ("FENCE_STORE", opts.store_url.clone()),
        ("FENCE_NODE", node_of(cell)),
        ("FENCE_HOLDER", holder.to_string()),
    ];
    if let Some(slot) = slot {
        vars.push(("FENCE_SLOT", slot.to_string()));
    }
    if let Some(mode) = opts.file_mode {
        vars.push(("FENCE_FILE_MODE", format!("{mode:04o}")));
    }
    vars.iter()
        .map(|(k, v)| format!("{k}={}; export {k}\n", quoted(v)))
        .collect()
}

/// `text` as one shell word: single-quoted, with `'` written `'\''`.
///
/// ```
/// assert_eq!(fence_cli::script::quoted("it's"), r"'it'\''s'");
/// ```
pub fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// `fence release`: ends the holder of `cell` on this host (`holder`: its pid, else the
/// one the lease record names) and checks that it released the lease.
///
/// Exit 0: released by its holder. Exit 76: the lease was lost before (another process holds
/// it, or it expired); the script's section was not protected to its end. Exit 69: the store
/// failed, or the holder did not end within `wait`.
pub async fn release(
    store: &std::sync::Arc<dyn ConditionalStore>,
    cell: &str,
    holder: Option<i32>,
    wait: Duration,
) -> Result<u8, Failure> {
    let node = node_of(cell);
    let own = Ownership::new(store.clone(), node.clone());
    let lost = |why: String| Failure::new(FENCED, format!("lease {} was lost: {why}", shown(cell)));
    let Some(before) = own.read_node_lease(&node).await? else {
        return Err(lost("it has no lease record".into()));
    };
    let here = crate::take::holder_addr();
    let named = before.record.addr.strip_prefix("pid:").and_then(|a| {
        let (pid, host) = a.split_once('@')?;
        (Some(host) == here.split_once('@').map(|h| h.1)).then(|| pid.parse::<i32>().ok())?
    });
    let pid = match (holder, named) {
        (Some(h), Some(n)) if h == n => h,
        (None, Some(n)) => n,
        _ if before.record.is_released() => return Err(lost("it was released already".into())),
        _ => {
            return Err(lost(format!(
                "its lease record names {}, not this script's holder",
                shown(&before.record.addr)
            )))
        }
    };
    let Some(watched) = Watched::new(pid) else {
        return Err(lost(format!("its holder (pid {pid}) is gone")));
    };
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    let clock = Clock::system();
    if clock
        .timeout(ms(wait), watched.ended(Duration::from_millis(10)))
        .await
        .is_none()
    {
        return Err(Failure::new(
            STORE,
            format!(
                "the holder of lease {} (pid {pid}) did not end within {}",
                shown(cell),
                humantime::format_duration(wait)
            ),
        ));
    }
    match own.read_node_lease(&node).await? {
        Some(after)
            if after.record.is_released()
                && after.record.generation == before.record.generation =>
        {
            Ok(OK)
        }
        _ => Err(lost("its holder did not hold it to the end".into())),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The pid `fence acquire` watches by default: its parent (the shell running the script;
/// `eval "$(fence acquire …)"` runs it straight from that shell).
pub fn parent_pid() -> i32 {
    nix::unistd::getppid().as_raw()
}
