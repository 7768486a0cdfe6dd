//! `fence acquire` / `fence release`: a lease held across a section of a shell script, as
//! `exec 9>f; flock 9` … `flock -u 9` hold a lock.
//!
//! `fence acquire` starts a background holder — `fence run` without a command, in a process
//! group of its own — waits until it holds the lease, and prints its epoch and the other
//! `FENCE_*` variables as shell assignments for `eval`, `FENCE_HOLDER` among them: the
//! holder's token, which proves to `fence release` which process is the holder
//! ([`crate::holder`]). The holder renews the lease and watches the script (the process that
//! ran `fence acquire`, or `--pid`):
//!
//! - the script ends (also by SIGKILL) → the holder releases the lease, as the kernel drops a
//!   `flock` when the last descriptor closes;
//! - `fence release` → the holder releases it and says so in its holder file, and `fence
//!   release` exits 0 — or 76 if the lease was lost first;
//! - the lease is lost (renewals failed for a TTL, the holder was stopped past its TTL) → the
//!   holder sends the script SIGTERM and exits 76; the script's `fence put`s of that epoch
//!   are refused by the store from the next claim on.
//!
//! `fence release` signals the holder only once its token is proven (never a process a lease
//! record names: whoever can write the store writes those).
//!
//! The script's processes are not the holder's children: nothing freezes or kills them the
//! way `fence run` does its command's. A script that must stop the instant its lease is lost
//! belongs in `fence run`.

use std::process::{Command, Stdio};
use std::time::Duration;

use fence_core::Clock;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::exit::{describe, shown, Failure, FENCED, OK, STORE};
use crate::holder::{Ended, Found, HolderRecord, HolderToken};
use crate::names::node_of;
use crate::run::{lease_gone, until_terminating, Held, RunOptions};
use crate::signals::Signals;

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

    /// Process `pid` if it runs now and started at `start` (`None`: where `/proc` does not
    /// tell); `None` if it does not, or another process has taken its pid.
    pub fn exact(pid: i32, start: Option<u64>) -> Option<Watched> {
        let w = Watched::at(pid, start);
        w.is_running().then_some(w)
    }

    /// Process `pid` that started at `start`, as seen once (it may have ended since).
    pub fn at(pid: i32, start: Option<u64>) -> Watched {
        Watched { pid, start }
    }

    /// `PID:START` (`PID` where `/proc` does not tell the start time): what `fence acquire`
    /// hands its holder, parsed back by [`parse_watched`].
    pub fn to_arg(&self) -> String {
        match self.start {
            Some(start) => format!("{}:{start}", self.pid),
            None => self.pid.to_string(),
        }
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its start time in clock ticks since boot, where `/proc` tells.
    pub fn start(&self) -> Option<u64> {
        self.start
    }

    /// Whether the same process still exists (a zombie counts as ended). Never for a pid
    /// below 1, which `kill` would take for a process group.
    pub fn is_running(&self) -> bool {
        let exists = self.pid > 0 && kill(Pid::from_raw(self.pid), None).is_ok();
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

/// A process held by a pidfd where the system has them (Linux 5.3): a pidfd names one
/// process for good, and this one was opened while process `pid` still had the start time
/// asked for, so a signal sent through it reaches that process or nobody — never one that
/// took its pid since. Without pidfds, a [`Watched`] process whose start time is checked
/// just before the signal.
#[derive(Debug)]
pub struct Pinned {
    watched: Watched,
    #[cfg(target_os = "linux")]
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Pinned {
    /// Process `pid` if it runs now with start time `start` (see [`Watched::exact`]).
    #[cfg(target_os = "linux")]
    pub fn open(pid: i32, start: Option<u64>) -> Option<Pinned> {
        use rustix::process::{pidfd_open, Pid as RawPid, PidfdFlags};
        let pidfd = match pidfd_open(RawPid::from_raw(pid)?, PidfdFlags::empty()) {
            Ok(fd) => Some(fd),
            Err(rustix::io::Errno::NOSYS) => None,
            Err(_) => return None,
        };
        // Checked after the pidfd is open: if process `pid` has that start time now, the
        // pidfd names it (or a process that ended before it took the pid: then nobody).
        let watched = Watched::exact(pid, start)?;
        Some(Pinned { watched, pidfd })
    }

    /// Process `pid` if it runs now with start time `start` (see [`Watched::exact`]).
    #[cfg(not(target_os = "linux"))]
    pub fn open(pid: i32, start: Option<u64>) -> Option<Pinned> {
        Watched::exact(pid, start).map(|watched| Pinned { watched })
    }

    /// Sends it SIGTERM.
    pub fn terminate(&self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(pidfd) = &self.pidfd {
            use rustix::process::{pidfd_send_signal, Signal as RawSignal};
            return pidfd_send_signal(pidfd, RawSignal::TERM).map_err(std::io::Error::from);
        }
        self.watched.terminate();
        Ok(())
    }

    /// The process, to wait for its end.
    pub fn watched(&self) -> &Watched {
        &self.watched
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
    /// The script's process to watch ([`script_of`]).
    pub script: Watched,
    /// The `file://` store's file mode, for the script's `FENCE_FILE_MODE`.
    pub file_mode: Option<u32>,
}

/// The first line a holder started by `fence acquire` prints: `EPOCH SLOT TOKEN CELL` (`-`
/// when there are no slots; the token as `FENCE_HOLDER` carries it). Parsed back by
/// [`acquire`].
pub fn report_line(epoch: u64, slot: Option<u32>, token: &HolderToken, cell: &str) -> String {
    let slot = slot.map_or("-".to_owned(), |s| s.to_string());
    format!("{epoch} {slot} {token} {cell}")
}

/// What the holder reported: its epoch, slot, token and cell.
struct Report {
    epoch: u64,
    slot: Option<u32>,
    token: HolderToken,
    cell: String,
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
        .args(["--for-pid", &opts.script.to_arg()])
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
        Some(report) => Ok(eval_lines(&report, opts)),
        None => {
            let status = child.wait().ok().and_then(|s| s.code());
            Err(Failure::silent(status.map_or(STORE, |c| c as u8)))
        }
    }
}

fn parse_report(said: &str) -> Option<Report> {
    let mut fields = said.lines().next()?.splitn(4, ' ');
    let (epoch, slot, token, cell) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let slot = match slot {
        "-" => None,
        n => Some(n.parse().ok()?),
    };
    Some(Report {
        epoch: epoch.parse().ok()?,
        slot,
        token: HolderToken::parse(token)?,
        cell: cell.to_owned(),
    })
}

fn eval_lines(report: &Report, opts: &AcquireOptions) -> String {
    let mut vars = vec![
        ("FENCE_EPOCH", report.epoch.to_string()),
        ("FENCE_LEASE", report.cell.clone()),
        ("FENCE_STORE", opts.store_url.clone()),
        ("FENCE_NODE", node_of(&report.cell)),
        ("FENCE_HOLDER", report.token.to_string()),
    ];
    if let Some(slot) = report.slot {
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

/// `fence acquire`'s holder (`fence run --for-pid PID` without a command), once it holds the
/// lease: writes its holder file, reports to `fence acquire`, then holds the lease until
/// the script ends (released; the file removed), until a signal — `fence release`'s —
/// (released; how it ended written to the file), or until the lease is lost (the script
/// gets SIGTERM; exit 76).
pub(crate) async fn hold_for(
    held: Held,
    mut signals: Signals,
    opts: &RunOptions,
    script: Watched,
) -> Result<u8, Failure> {
    // The script ended before the lease was taken (its pid free, or another process's now):
    // nobody to hold it for.
    let script = Watched::exact(script.pid(), script.start());
    let Some(script) = script.and_then(|w| Pinned::open(w.pid(), w.start())) else {
        held.release().await;
        return Ok(OK);
    };
    let (record, token) = match HolderRecord::create(
        &opts.store.url,
        held.claim.cell(),
        script.watched(),
    ) {
        Ok(made) => made,
        Err(why) => {
            held.release().await;
            return Err(Failure::usage(format!(
                "cannot keep the holder's file, without which fence release could not prove which process holds lease {}: {why}",
                opts.lease_shown()
            )));
        }
    };
    // `fence acquire` is gone (Ctrl-C): nobody will eval the epoch, so nobody holds it.
    if !report_to_acquire(&held, &token) {
        held.release().await;
        record.remove();
        return Ok(OK);
    }
    let every = (opts.ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(250));
    let lost = tokio::select! {
        _ = until_terminating(&mut signals) => {
            record.finish(ended_by(held.release_quietly().await));
            return Ok(OK);
        }
        () = script.watched().ended(every) => {
            held.release().await;
            record.remove();
            return Ok(OK);
        }
        why = lease_gone(&held.keeper, opts.ttl) => why,
    };
    held.abandon().await;
    record.finish(Ended::Lost(lost.clone()));
    let told = match script.terminate() {
        Ok(()) => "sent SIGTERM to the script",
        Err(_) => "could not signal the script",
    };
    Err(Failure::new(
        opts.fenced_exit_code,
        format!(
            "lease {} lost: {lost}; {told} (pid {})",
            opts.lease_shown(),
            script.watched().pid()
        ),
    ))
}

/// How a holder's release ended, for its file.
fn ended_by(released: Result<(), fence_core::Error>) -> Ended {
    match released {
        Ok(()) => Ended::Released,
        Err(e) if e.kind() == fence_core::ErrorKind::Fenced => Ended::Lost(describe(&e)),
        Err(e) => Ended::NotReleased(describe(&e)),
    }
}

/// Tells `fence acquire` what was taken, then lets go of stdout (its end of the pipe sees
/// EOF, so `$(fence acquire …)` returns while this holder runs on). `false` if `fence
/// acquire` is no longer there to read it (the write fails: SIGPIPE is ignored in Rust
/// programs).
fn report_to_acquire(held: &Held, token: &HolderToken) -> bool {
    use std::io::Write;
    let line = report_line(held.claim.epoch(), held.slot, token, held.claim.cell());
    let mut out = std::io::stdout().lock();
    let told = writeln!(out, "{line}").and_then(|()| out.flush()).is_ok();
    drop(out);
    if let Ok(null) = std::fs::File::options().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
    }
    told
}

/// `fence release`: ends the holder `token` (`FENCE_HOLDER`) names, once its holder file
/// proves it the holder of `cell` on the store `store` (its canonical URL), and reports how
/// the holder ended. Nothing read from the store chooses what is signalled: without that
/// proof it refuses (exit 2) and signals nothing (see [`crate::holder`]).
///
/// Exit 0: released by its holder (also when asked again). Exit 76: the lease was lost before
/// (another process holds it, it expired, it was broken, its holder was killed); the
/// script's section was not protected to its end. Exit 69: the holder could not release it
/// (the store failed), or did not end within `wait`.
pub async fn release(
    store: &str,
    cell: &str,
    token: Option<&str>,
    wait: Duration,
) -> Result<u8, Failure> {
    let found = proven(store, cell, token)?;
    if let Some(ended) = found.ended() {
        return verdict(cell, ended);
    }
    let pid = found.pid();
    let Some(holder) = found.running() else {
        let why = format!("its holder (pid {pid}) ended without releasing it");
        return Err(lost(cell, &why));
    };
    holder.terminate().map_err(|e| {
        let why = format!(
            "cannot signal the holder of lease {} (pid {pid}): {e}",
            shown(cell)
        );
        Failure::new(STORE, why)
    })?;
    let ended = holder.watched().ended(Duration::from_millis(10));
    if Clock::system().timeout(ms(wait), ended).await.is_none() {
        let wait = humantime::format_duration(wait);
        let why = format!(
            "the holder of lease {} (pid {pid}) did not end within {wait}",
            shown(cell)
        );
        return Err(Failure::new(STORE, why));
    }
    match found.reread().ended() {
        Some(ended) => verdict(cell, ended),
        None => Err(lost(
            cell,
            "its holder ended without saying that it released it",
        )),
    }
}

/// The holder file `token` names, if it proves `token` the holder of `cell` on `store`;
/// else the refusal (exit 2) that says why.
fn proven(store: &str, cell: &str, token: Option<&str>) -> Result<Found, Failure> {
    let token = token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| refused("FENCE_HOLDER is not set (nor --holder)"))?;
    let token = HolderToken::parse(token).ok_or_else(|| {
        refused("FENCE_HOLDER is not a holder token (PID:START:SECRET, as fence acquire prints it)")
    })?;
    Found::prove(&token, store, cell).map_err(|why| refused(&why))
}

/// The exit of `fence release` for how the holder ended.
fn verdict(cell: &str, ended: &Ended) -> Result<u8, Failure> {
    match ended {
        Ended::Released => Ok(OK),
        Ended::Lost(why) => Err(lost(cell, why)),
        Ended::NotReleased(why) => Err(Failure::new(
            STORE,
            format!(
                "the holder of lease {} could not release it ({why}); it expires a TTL after its last renewal",
                shown(cell)
            ),
        )),
    }
}

fn lost(cell: &str, why: &str) -> Failure {
    Failure::new(FENCED, format!("lease {} was lost: {why}", shown(cell)))
}

/// A release without proof: said why, nothing signalled.
fn refused(why: &str) -> Failure {
    Failure::usage(format!(
        "{why}; nothing was signalled: fence release ends only the holder that fence acquire \
         started for this script, never a process a lease record names (run it where fence \
         acquire ran; if the holder is gone, use fence break)"
    ))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `PID` or `PID:START` as [`Watched::to_arg`] writes it (a pid of at least 1).
pub fn parse_watched(arg: &str) -> Result<Watched, String> {
    let (pid, start) = match arg.split_once(':') {
        Some((pid, start)) => (pid, Some(start)),
        None => (arg, None),
    };
    let pid: i32 = pid.parse().map_err(|_| format!("not a pid: {pid:?}"))?;
    if pid < 1 {
        return Err(format!("not a process: {pid}"));
    }
    let start = match start {
        Some(s) => Some(s.parse().map_err(|_| format!("not a start time: {s:?}"))?),
        None => None,
    };
    Ok(Watched::at(pid, start))
}

/// The process `fence acquire` watches: `pid` if given (`--pid`), else its parent (the
/// shell running the script), read once at the start — pid and start time — so that a
/// script that ends while the lease is awaited is never mistaken for the process that
/// takes its pid later. Refused: a pid that does not run, and a parent that is already
/// gone (`fence acquire` was re-parented to init or a subreaper: there is no script to
/// hold the lease for).
pub fn script_of(pid: Option<i32>) -> Result<Watched, Failure> {
    let given = pid.is_some();
    let pid = pid.unwrap_or_else(parent_pid);
    let watched = Watched::new(pid).filter(|w| w.pid() > 1);
    let Some(watched) = watched else {
        return Err(Failure::usage(format!(
            "process {pid} is not a script fence acquire can hold a lease for (it does not run, or it is init)"
        )));
    };
    if !given && parent_pid() != pid {
        return Err(Failure::usage(
            "the script that ran fence acquire ended before its lease was asked for".to_owned(),
        ));
    }
    Ok(watched)
}

/// The pid `fence acquire` watches by default: its parent (the shell running the script;
/// `eval "$(fence acquire …)"` runs it straight from that shell).
pub fn parent_pid() -> i32 {
    nix::unistd::getppid().as_raw()
}
