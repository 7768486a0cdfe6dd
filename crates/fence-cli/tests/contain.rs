//! `fence run` contains its command so that no process of it outruns the lease: in a PID
//! namespace whose init is fence's supervising process (`--containment=required` here, so a
//! machine without namespaces skips these loudly instead of testing the fallback twice), and
//! in the tracked fallback (`--containment=fallback`), which claims the same for these cases.
//! Each test is an escape that used to work: a helper forked while the command was being
//! ended, a process that forks again and again, a helper that left the process group while
//! `fence run` was stopped, a stopped supervising process, and every fence process that
//! could end the command stopped at once (the kill timer's cases).
//!
//! The mode goes through `FENCE_CONTAINMENT`, not the flag, so that these tests run (and fail)
//! against a build that predates containment (`FENCE_TEST_BIN`).
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{
    children_of, fence, fence_bin, lines_between, run_args, run_marked, wait_bounded,
    wait_for_count, wait_for_line, wait_until, Mark, Store, PAST_TTL, PAUSED_TTL,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const NAMESPACE: &str = "required";
const FALLBACK: &str = "fallback";

/// Whether fence can make a PID namespace here; if not, a namespace test says so and passes.
fn namespaces(test: &str) -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    let available = *PROBE.get_or_init(|| {
        let store = Store::new();
        let out = fence(&run_args(&store, "probe", &["--", "true"]))
            .env("FENCE_CONTAINMENT", NAMESPACE)
            .output()
            .expect("spawn fence");
        out.status.code() == Some(0)
    });
    if !available {
        eprintln!("SKIPPED {test}: fence cannot make a PID namespace on this machine");
    }
    available
}

/// `fence run` of `lease` in `mode` with `flags`, running `sh -c script` under `mark`.
fn holder(
    store: &Store,
    lease: &str,
    mode: &str,
    flags: &[&str],
    mark: &Mark,
    script: &str,
) -> Command {
    let mut c = run_marked(store, lease, flags, mark, script);
    c.env("FENCE_CONTAINMENT", mode);
    c
}

/// The next holder of `lease`: its command writes `next-start`, waits, writes `next-end`.
fn next_holder(store: &Store, lease: &str, log: &Path) -> Command {
    next_holder_for(store, lease, log, "1")
}

/// [`next_holder`] whose command waits `secs` seconds between its two lines.
fn next_holder_for(store: &Store, lease: &str, log: &Path, secs: &str) -> Command {
    let script = format!(
        "echo next-start >> {log}; sleep {secs}; echo next-end >> {log}",
        log = log.display()
    );
    fence(&run_args(
        store,
        lease,
        &[
            "--ttl",
            "2s",
            "--timeout",
            "30s",
            "--quiet",
            "--",
            "sh",
            "-c",
            &script,
        ],
    ))
}

// Case 1: a worker that hands its cleanup to a detached helper when it gets SIGTERM. The
// helper is forked while the supervising process is ending the command; a `/proc` scan that
// is not a snapshot missed it, and the lease was released under it.

fn cleanup_helper_never_runs_after_release(mode: &str) {
    let store = Store::new();
    for attempt in 0..20 {
        let mark = Mark::new();
        let ready = store.path(&format!("ready{attempt}"));
        // Three workers whose fork-and-exit lands at different moments of the end.
        let workers: String = (0..3)
            .map(|w| {
                let delay = (attempt * 3 + w * 7) % 10;
                format!(
                    "sh -c 'trap \"sleep 0.0{delay}; setsid sleep 30 & exit 0\" TERM; \
                     echo up >> {ready}; while :; do sleep 0.05; done' & ",
                    ready = ready.display()
                )
            })
            .collect();
        let script = format!("{workers} wait");
        let mut run = holder(
            &store,
            "cleanup",
            mode,
            &["--grace", "500ms"],
            &mark,
            &script,
        )
        .spawn()
        .expect("spawn fence run");
        wait_for_count(&ready, "up", 3);
        kill(Pid::from_raw(run.id() as i32), Signal::SIGTERM).expect("SIGTERM");
        wait_bounded(&mut run, Duration::from_secs(30), "fence run");
        let left = mark.processes();
        assert!(
            left.is_empty(),
            "attempt {attempt}: a cleanup helper outlived the lease: {left:?}"
        );
    }
}

#[test]
fn a_cleanup_helper_forked_on_sigterm_never_outlives_the_lease_in_a_namespace() {
    if namespaces("case 1 in a namespace") {
        cleanup_helper_never_runs_after_release(NAMESPACE);
    }
}

#[test]
fn a_cleanup_helper_forked_on_sigterm_never_outlives_the_lease_in_the_fallback() {
    cleanup_helper_never_runs_after_release(FALLBACK);
}

// Case 2: a process that leaves the group, ignores SIGTERM, forks, and lets its parent exit,
// again and again.

fn fork_hopper_is_gone_before_the_next_holder_starts(mode: &str) {
    let store = Store::new();
    let mark = Mark::new();
    let log = store.path("log");
    let hop = store.path("hop.sh");
    std::fs::write(
        &hop,
        format!(
            "trap '' TERM; echo hop >> {log}; sleep 0.02; sh {hop} & exit 0",
            log = log.display(),
            hop = hop.display()
        ),
    )
    .unwrap();
    let script = format!("setsid sh {} & sleep 0.3; exit 0", hop.display());
    let mut first = holder(
        &store,
        "hop",
        mode,
        &["--ttl", "2s", "--grace", "500ms"],
        &mark,
        &script,
    )
    .spawn()
    .expect("spawn fence run");
    let status = wait_bounded(&mut first, Duration::from_secs(30), "the first holder");
    assert_eq!(status.code(), Some(0));
    let next = next_holder(&store, "hop", &log).output().expect("next");
    assert_eq!(next.status.code(), Some(0), "the next holder ran");
    let beside = lines_between(&log, "next-start", "next-end");
    assert!(
        beside.is_empty(),
        "the hopper ran beside the next holder: {} lines",
        beside.len()
    );
    assert_eq!(
        mark.processes(),
        Vec::<i32>::new(),
        "the hopper outlived the lease"
    );
}

#[test]
fn a_fork_hopper_is_gone_before_the_next_holder_starts_in_a_namespace() {
    if namespaces("case 2 in a namespace") {
        fork_hopper_is_gone_before_the_next_holder_starts(NAMESPACE);
    }
}

#[test]
fn a_fork_hopper_is_gone_before_the_next_holder_starts_in_the_fallback() {
    fork_hopper_is_gone_before_the_next_holder_starts(FALLBACK);
}

// Case 3: `fence run` stopped; a helper that left the command's process group keeps writing.
// Woken while the next holder runs, the frozen command must not be continued to handle
// SIGTERM either: it would run for `--grace` beside the next holder.

/// When the stopped `fence run` is continued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    /// Once the next holder is done.
    AfterNext,
    /// While the next holder runs.
    DuringNext,
}

fn a_stopped_holders_command_never_runs_beside_the_next(mode: &str, wake: Wake) {
    let store = Store::new();
    let mark = Mark::new();
    let log = store.path("log");
    let script = format!(
        "setsid sh -c 'trap \"\" TERM; while :; do echo tick-helper >> {log}; sleep 0.02; done' & \
         trap '' TERM; while :; do echo tick-main >> {log}; sleep 0.02; done",
        log = log.display()
    );
    let (grace, next_secs) = match wake {
        Wake::AfterNext => ("500ms", "1"),
        Wake::DuringNext => ("3s", "4"),
    };
    let mut first = holder(
        &store,
        "freeze",
        mode,
        &["--ttl", "2s", "--grace", grace],
        &mark,
        &script,
    )
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn fence run");
    assert!(wait_for_line(&log, "tick-helper", Duration::from_secs(20)));
    let first_pid = Pid::from_raw(first.id() as i32);
    kill(first_pid, Signal::SIGSTOP).expect("SIGSTOP");
    let mut next = next_holder_for(&store, "freeze", &log, next_secs)
        .spawn()
        .expect("spawn the next holder");
    if wake == Wake::DuringNext {
        let started = wait_for_line(&log, "next-start", Duration::from_secs(60));
        kill(first_pid, Signal::SIGCONT).expect("SIGCONT");
        assert!(started, "the next holder started");
    }
    let next = wait_bounded(&mut next, Duration::from_secs(60), "the next holder");
    if wake == Wake::AfterNext {
        kill(first_pid, Signal::SIGCONT).expect("SIGCONT");
    }
    assert_eq!(next.code(), Some(0), "the next holder ran");
    let beside = lines_between(&log, "next-start", "next-end");
    assert!(
        beside.is_empty(),
        "the stopped holder's command wrote beside the next holder ({wake:?}): {} lines",
        beside.len()
    );
    let status = wait_bounded(&mut first, Duration::from_secs(30), "the woken holder");
    assert_eq!(status.code(), Some(76), "the woken holder lost its lease");
    assert_eq!(mark.processes(), Vec::<i32>::new());
}

#[test]
fn a_stopped_fence_freezes_every_process_of_the_command_in_a_namespace() {
    if namespaces("case 3 in a namespace") {
        a_stopped_holders_command_never_runs_beside_the_next(NAMESPACE, Wake::AfterNext);
    }
}

#[test]
fn a_stopped_fence_freezes_every_process_of_the_command_in_the_fallback() {
    a_stopped_holders_command_never_runs_beside_the_next(FALLBACK, Wake::AfterNext);
}

#[test]
fn a_frozen_command_is_killed_not_thawed_once_the_lease_ran_out_in_a_namespace() {
    if namespaces("a frozen command woken late in a namespace") {
        a_stopped_holders_command_never_runs_beside_the_next(NAMESPACE, Wake::DuringNext);
    }
}

#[test]
fn a_frozen_command_is_killed_not_thawed_once_the_lease_ran_out_in_the_fallback() {
    a_stopped_holders_command_never_runs_beside_the_next(FALLBACK, Wake::DuringNext);
}

// A stopped supervising process: `fence run` wakes to a lost lease, and ends the command
// itself when the supervising process does not.

/// The supervising process of the `fence run` `pid`: its child (fallback), or its
/// grandchild, the namespace's init.
fn supervising_process(pid: u32, mode: &str) -> Pid {
    let start = Instant::now();
    loop {
        let mut level = children_of(pid as i32);
        if mode == NAMESPACE {
            level = level.into_iter().flat_map(children_of).collect();
        }
        if let [one] = level[..] {
            return Pid::from_raw(one);
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{level:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn a_stopped_supervisor_does_not_keep_a_lost_lease_command_running(mode: &str) {
    let store = Store::new();
    let mark = Mark::new();
    let log = store.path("log");
    let script = format!(
        "trap '' TERM; echo up >> {log}; while :; do sleep 0.05; done",
        log = log.display()
    );
    let mut run = holder(
        &store,
        "stuck",
        mode,
        &["--ttl", PAUSED_TTL, "--grace", "300ms"],
        &mark,
        &script,
    )
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn fence run");
    wait_for_count(&log, "up", 1);
    let supervisor = supervising_process(run.id(), mode);
    let run_pid = Pid::from_raw(run.id() as i32);
    kill(supervisor, Signal::SIGSTOP).expect("SIGSTOP the supervising process");
    kill(run_pid, Signal::SIGSTOP).expect("SIGSTOP fence run");
    std::thread::sleep(PAST_TTL);
    kill(run_pid, Signal::SIGCONT).expect("SIGCONT fence run");
    let status = wait_bounded(&mut run, Duration::from_secs(30), "the woken holder");
    let _ = kill(supervisor, Signal::SIGCONT);
    assert_eq!(status.code(), Some(76));
    assert_eq!(mark.processes(), Vec::<i32>::new());
}

#[test]
fn a_stopped_supervising_process_does_not_keep_a_lost_lease_command_running_in_a_namespace() {
    if namespaces("a stopped init") {
        a_stopped_supervisor_does_not_keep_a_lost_lease_command_running(NAMESPACE);
    }
}

#[test]
fn a_stopped_supervising_process_does_not_keep_a_lost_lease_command_running_in_the_fallback() {
    a_stopped_supervisor_does_not_keep_a_lost_lease_command_running(FALLBACK);
}

// What only the namespace guarantees.

#[test]
fn sigkill_of_fence_run_and_both_supervising_processes_ends_a_namespace() {
    if !namespaces("both supervisors killed") {
        return;
    }
    let store = Store::new();
    let mark = Mark::new();
    let log = store.path("log");
    let script = format!(
        "trap '' TERM; echo up >> {log}; setsid sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' & \
         while :; do sleep 0.05; done",
        log = log.display()
    );
    let mut run = holder(
        &store,
        "killall",
        NAMESPACE,
        &["--ttl", "2s"],
        &mark,
        &script,
    )
    .spawn()
    .expect("spawn fence run");
    wait_for_count(&log, "up", 1);
    let gate = children_of(run.id() as i32);
    let init = supervising_process(run.id(), NAMESPACE);
    for pid in gate.iter().map(|&p| Pid::from_raw(p)).chain([init]) {
        kill(pid, Signal::SIGKILL).expect("SIGKILL a supervising process");
    }
    run.kill().expect("SIGKILL fence run");
    let _ = run.wait();
    assert!(
        mark.gone_within(Duration::from_secs(20)),
        "the command outlived every supervisor: {:?}",
        mark.processes()
    );
}

/// The script of an outer `fence run` that starts the command line `inner` in the
/// background, writes its pid to `pid_file`, and stays.
fn outer_script(inner: &[impl AsRef<str>], pid_file: &Path) -> String {
    let quoted: Vec<String> = inner
        .iter()
        .map(|a| format!("'{}'", a.as_ref().replace('\'', "'\\''")))
        .collect();
    format!(
        "{} 2>/dev/null & echo $! > {}; while :; do sleep 1; done",
        quoted.join(" "),
        pid_file.display()
    )
}

/// `fence run` killed while the namespace's init is stopped, under a subreaper of the same
/// session (here an outer `fence run`; as well systemd's user manager, tini, a container's
/// init, ...): the gate's process group is not orphaned by the death, so the kernel does not
/// continue the stopped init (as it does, with SIGHUP and SIGCONT, for a group orphaned with
/// a stopped member). Nothing reads the closed control pipe; the gate, which outlives
/// `fence run`, kills the init in its place.
#[test]
fn sigkill_of_fence_run_while_the_init_is_stopped_ends_the_namespace() {
    if !namespaces("fence run killed, init stopped") {
        return;
    }
    let store = Store::new();
    let mark = Mark::new();
    let (log, inner_pid) = (store.path("log"), store.path("inner.pid"));
    let command = mark.sh(&format!(
        "trap '' TERM; echo up >> {log}; while :; do sleep 0.05; done",
        log = log.display()
    ));
    let inner = inner_holder(&store, command);
    let outer_script = outer_script(&inner, &inner_pid);
    let mut outer = fence(&run_args(
        &store,
        "outer",
        &["--containment", "fallback", "--", "sh", "-c", &outer_script],
    ))
    .spawn()
    .expect("spawn the outer fence run");
    wait_for_count(&log, "up", 1);
    let inner_run = common::pid_in(&inner_pid);
    let init = supervising_process(inner_run as u32, NAMESPACE);
    kill(init, Signal::SIGSTOP).expect("SIGSTOP the init");
    wait_until("the init stopped", Duration::from_secs(10), || {
        common::state_of(init.as_raw()) == Some('T')
    });
    kill(Pid::from_raw(inner_run), Signal::SIGKILL).expect("SIGKILL the inner fence run");
    let gone = mark.gone_within(Duration::from_secs(20));
    let left = mark.processes();
    let _ = kill(init, Signal::SIGKILL);
    let _ = kill(Pid::from_raw(outer.id() as i32), Signal::SIGTERM);
    wait_bounded(&mut outer, Duration::from_secs(30), "the outer fence run");
    assert!(gone, "the command outlived fence run: {left:?}");
}

#[test]
fn the_command_sees_its_own_pid_namespace() {
    if !namespaces("the command's view") {
        return;
    }
    let store = Store::new();
    let out = store.path("out");
    let script = format!(
        "echo \"$$ $(cut -d' ' -f1,4 /proc/$$/stat)\" > {out}; \
         tr '\\0' ' ' < /proc/1/cmdline >> {out}",
        out = out.display()
    );
    let mark = Mark::new();
    let status = holder(&store, "view", NAMESPACE, &[], &mark, &script)
        .status()
        .expect("fence run");
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    let ids: Vec<&str> = lines.next().unwrap().split(' ').collect();
    // The command (the shell, after `env` exec'd it) is pid 2 of the namespace, `/proc`
    // agrees, and its parent is pid 1: fence's supervising process.
    assert_eq!(ids, ["2", "2", "1"], "{text}");
    assert!(lines.next().unwrap().contains("__reaper"), "{text}");
}

#[test]
fn an_unprivileged_user_gets_a_namespace_too() {
    // As nobody: needs root to become it, `setpriv`, and a fence binary nobody may run.
    let as_nobody = || {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            fence_bin(),
        ]);
        c
    };
    let runs = nix::unistd::geteuid().is_root()
        && as_nobody()
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !runs || !namespaces("unprivileged") {
        eprintln!(
            "SKIPPED an_unprivileged_user_gets_a_namespace_too: needs root, setpriv and a fence binary that nobody may run"
        );
        return;
    }
    let store = Store::new();
    std::fs::set_permissions(
        store.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = store.path("out");
    let script = format!("echo \"$$ $(id -u)\" > {}", out.display());
    let status = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            fence_bin(),
        ])
        .args(run_args(&store, "nobody", &["--", "sh", "-c", &script]))
        .env("FENCE_CONTAINMENT", NAMESPACE)
        .status()
        .expect("setpriv");
    assert_eq!(status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "2 65534");
}

#[test]
fn the_containment_flag_takes_auto_required_or_fallback() {
    let store = Store::new();
    for mode in ["auto", "fallback"] {
        let out = fence(&run_args(
            &store,
            "flag",
            &["--containment", mode, "--", "true"],
        ))
        .output()
        .expect("fence run");
        assert_eq!(out.status.code(), Some(0), "{mode}");
    }
    let bad = fence(&run_args(
        &store,
        "flag",
        &["--containment", "maybe", "--", "true"],
    ))
    .output()
    .expect("fence run");
    assert_eq!(bad.status.code(), Some(2), "a usage error");
}

/// `fence run ARGS` in a user namespace of its own whose PID namespaces are used up, so no
/// PID namespace can be made there (the limit is the namespace's own: nothing else changes).
fn without_pid_namespaces(mode: &str, args: &[&str]) -> Option<std::process::Output> {
    let probe = Command::new("unshare")
        .args(["--user", "--map-root-user", "true"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: no `unshare --user` to make a user namespace without PID namespaces");
        return None;
    }
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_pid_namespaces && exec \"$@\"")
        .args(["sh", fence_bin()])
        .args(args)
        .env("FENCE_CONTAINMENT", mode)
        .output()
        .expect("unshare");
    Some(out)
}

#[test]
fn where_no_namespace_can_be_made_required_refuses_and_auto_says_so() {
    let store = Store::new();
    let ran = store.path("ran");
    let script = format!("echo yes >> {}", ran.display());
    let args = run_args(&store, "nons", &["--", "sh", "-c", &script]);
    let Some(refused) = without_pid_namespaces("required", &args) else {
        return;
    };
    assert_eq!(refused.status.code(), Some(126));
    assert!(!ran.exists(), "the command ran without a namespace");
    let auto = without_pid_namespaces("auto", &args).unwrap();
    assert_eq!(auto.status.code(), Some(0), "the lease was released");
    let said = String::from_utf8_lossy(&auto.stderr);
    assert_eq!(said.lines().count(), 1, "one warning line: {said}");
    let quiet = without_pid_namespaces("fallback", &args).unwrap();
    assert_eq!(quiet.status.code(), Some(0));
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "yes\nyes\n");
}

// The kill timer: once the lease's authority has ended, the namespace ends even if every
// fence process that could end it is stopped. The command's writer left its process group
// (no stop reaches it) and ignores SIGTERM and SIGHUP; the next holder starts when the
// stopped holder's lease has expired, and nothing of the command may run beside it.

/// How the fence processes of the holder are stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stopped {
    /// `kill -STOP -PGID` of the gate's process group (the gate and the init), then SIGKILL
    /// of `fence run`, under a subreaper of the same session (an outer `fence run`), which
    /// keeps the group from being orphaned (the kernel would continue it).
    GateGroupThenKill,
    /// `fence run`, the gate and the init all stopped, and left so.
    Everything,
    /// In a terminal, under the same subreaper: Ctrl-Z stops the command and then `fence
    /// run`; a stop catches the gate's group as well (SIGSTOP: the gate and the init catch
    /// SIGTSTP and pass it on, so a Ctrl-Z alone does not stop them); SIGKILL of `fence
    /// run`; and once the next holder is done, `fg` (SIGCONT to every group).
    CtrlZThenKill,
}

/// What one try saw; times in ms after the end of the stopped holder's authority (its lease
/// record's `expires_ms`; negative: before it).
#[derive(Debug)]
struct Try {
    /// Lines the command wrote once the next holder had started.
    escapes: usize,
    /// When the command wrote its last line (the modification time of a file it touches
    /// with every line).
    last_line: i64,
    /// When no process of the command was left, as seen by polling (at most a poll late);
    /// `i64::MAX`: not within 20 s.
    gone: i64,
}

/// Tries of each stop scenario: 1, or `FENCE_STOP_TRIALS` (to measure).
fn stop_trials() -> usize {
    std::env::var("FENCE_STOP_TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

fn ms_since_epoch(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The command line of a holder of lease `inner` in a namespace, running `command`.
fn inner_holder(store: &Store, command: Vec<String>) -> Vec<String> {
    let head = [
        fence_bin(),
        "run",
        "--store",
        &store.url,
        "--lease",
        "inner",
        "--ttl",
        PAUSED_TTL,
        "--containment",
        NAMESPACE,
        "--",
    ];
    head.iter().map(|a| a.to_string()).chain(command).collect()
}

/// A terminal for the outer `fence run`: its session's controlling terminal, whose other end
/// the test types into (and reads, so that nothing written to it blocks).
struct Terminal {
    master: std::fs::File,
    slave: std::os::fd::OwnedFd,
}

impl Terminal {
    fn open() -> Option<Terminal> {
        let ctty = Command::new("setsid").arg("--help").output();
        if !ctty.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--ctty")) {
            eprintln!("SKIPPED: no `setsid --ctty` (util-linux) to start a terminal session");
            return None;
        }
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let master = std::fs::File::from(pty.master);
        let mut drain = master.try_clone().expect("dup");
        std::thread::spawn(move || std::io::copy(&mut drain, &mut std::io::sink()));
        Some(Terminal {
            master,
            slave: pty.slave,
        })
    }

    fn stdio(&self) -> Stdio {
        Stdio::from(self.slave.try_clone().expect("dup"))
    }

    /// The terminal's foreground process group.
    fn foreground(&self) -> Option<i32> {
        nix::unistd::tcgetpgrp(&self.master)
            .ok()
            .map(|p| p.as_raw())
    }

    fn ctrl_z(&mut self) {
        use std::io::Write;
        self.master.write_all(b"\x1a").expect("type Ctrl-Z");
    }
}

/// The stopped holder's authority's end: its lease record's `expires_ms` (read once it
/// renews no more).
fn authority_end(store: &Store) -> i64 {
    let out = fence(&["status", "--store", &store.url, "--json"])
        .output()
        .expect("fence status");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    json["leases"]
        .as_array()
        .and_then(|l| l.iter().find(|r| r["node"] == "run.inner"))
        .and_then(|r| r["expires_ms"].as_i64())
        .expect("the holder's lease record")
}

/// The command's lines in `log` once the next holder had started.
fn ticks_since_the_next_started(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .skip_while(|l| *l != "next-start")
        .filter(|l| *l == "tick")
        .count()
}

/// Waits until each of `pids` is stopped (or gone: the kill timer may be quicker).
fn until_stopped(pids: &[i32]) {
    wait_until("the stop", Duration::from_secs(10), || {
        pids.iter()
            .all(|&p| matches!(common::state_of(p), Some('T' | 'Z') | None))
    });
}

/// The holder: under an outer `fence run` (fallback: a subreaper in the same session, in
/// the foreground of `terminal` if there is one), or, for [`Stopped::Everything`], alone.
/// Returns the outer (or the holder itself) and the holder's pid.
fn start_holder(
    stopped: Stopped,
    store: &Store,
    inner: &[String],
    terminal: Option<&Terminal>,
) -> (std::process::Child, i32) {
    if stopped == Stopped::Everything {
        let child = Command::new(&inner[0])
            .args(&inner[1..])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn fence run");
        let pid = child.id() as i32;
        return (child, pid);
    }
    let pid_file = store.path("inner.pid");
    let outer_script = outer_script(inner, &pid_file);
    let outer_args = run_args(
        store,
        "outer",
        &["--containment", FALLBACK, "--", "sh", "-c", &outer_script],
    );
    let mut outer = match terminal {
        Some(t) => {
            let mut c = Command::new("setsid");
            c.arg("--ctty").arg(fence_bin()).args(&outer_args);
            c.stdin(t.stdio()).stdout(t.stdio()).stderr(t.stdio());
            c
        }
        None => {
            let mut c = fence(&outer_args);
            c.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            c
        }
    };
    let outer = outer.spawn().expect("spawn the outer fence run");
    (outer, common::pid_in(&pid_file))
}

fn stopped_fence_processes_do_not_keep_the_namespace(stopped: Stopped) -> Option<Try> {
    let store = Store::new();
    let mark = Mark::new();
    let (log, touched) = (store.path("log"), store.path("touched"));
    // The writer leaves the command's process group: a Ctrl-Z does not stop it.
    let command = mark.sh(&format!(
        "setsid sh -c 'trap \"\" TERM HUP; \
         while :; do echo tick >> {log}; echo >> {touched}; sleep 0.02; done' & \
         trap '' TERM HUP; wait",
        log = log.display(),
        touched = touched.display()
    ));
    let inner = inner_holder(&store, command);
    let mut terminal = match stopped {
        Stopped::CtrlZThenKill => Some(Terminal::open()?),
        _ => None,
    };
    let (mut first, run) = start_holder(stopped, &store, &inner, terminal.as_ref());
    assert!(
        wait_for_line(&log, "tick", Duration::from_secs(20)),
        "the command ran"
    );
    let gate = children_of(run)[0];
    let init = children_of(gate)[0];
    let command = children_of(init)[0];
    let pid = |p: i32| Pid::from_raw(p);
    match stopped {
        Stopped::GateGroupThenKill => {
            nix::sys::signal::killpg(pid(gate), Signal::SIGSTOP).expect("stop the gate's group");
            until_stopped(&[gate, init]);
            kill(pid(run), Signal::SIGKILL).expect("SIGKILL fence run");
        }
        Stopped::Everything => {
            nix::sys::signal::killpg(pid(gate), Signal::SIGSTOP).expect("stop the gate's group");
            kill(pid(run), Signal::SIGSTOP).expect("stop fence run");
            until_stopped(&[run, gate, init]);
        }
        Stopped::CtrlZThenKill => {
            let t = terminal.as_mut().expect("a terminal");
            wait_until(
                "the command has the terminal",
                Duration::from_secs(10),
                || t.foreground() == Some(command),
            );
            t.ctrl_z();
            until_stopped(&[command, run]);
            // `fence run` is stopped now, and renews no more: the kill timer may be first.
            let _ = nix::sys::signal::killpg(pid(gate), Signal::SIGSTOP);
            until_stopped(&[gate, init]);
            kill(pid(run), Signal::SIGKILL).expect("SIGKILL fence run");
        }
    }
    let end = authority_end(&store);
    let mut next = next_holder(&store, "inner", &log)
        .spawn()
        .expect("spawn the next holder");
    let gone = mark
        .gone_within(Duration::from_secs(20))
        .then(|| ms_since_epoch(std::time::SystemTime::now()));
    let next = wait_bounded(&mut next, Duration::from_secs(60), "the next holder");
    // `fg`: whatever is still there runs again.
    for group in [gate, command] {
        let _ = nix::sys::signal::killpg(pid(group), Signal::SIGCONT);
    }
    let _ = kill(pid(run), Signal::SIGCONT);
    let escapes = ticks_since_the_next_started(&log);
    // Leave nothing behind, whatever the outcome.
    for p in [gate, init, run] {
        let _ = kill(pid(p), Signal::SIGKILL);
    }
    mark.kill_all();
    if stopped == Stopped::Everything {
        let _ = first.wait();
    } else {
        let _ = kill(pid(first.id() as i32), Signal::SIGTERM);
        wait_bounded(&mut first, Duration::from_secs(30), "the outer fence run");
    }
    assert_eq!(next.code(), Some(0), "the next holder ran");
    let last_line = std::fs::metadata(&touched)
        .and_then(|m| m.modified())
        .expect("the command wrote");
    Some(Try {
        escapes,
        last_line: ms_since_epoch(last_line) - end,
        gone: gone.map_or(i64::MAX, |at| at - end),
    })
}

/// Runs `stopped` [`stop_trials`] times; every try: nothing of the command beside the next
/// holder, and no process of it left once the next holder is done. Says when, relative to
/// the end of the stopped holder's authority, its last line was written and its last process
/// was gone (the figures docs/cli.md gives).
fn the_namespace_ends_by_the_authoritys_end(stopped: Stopped) {
    let tries: Vec<Try> = (0..stop_trials())
        .map_while(|_| stopped_fence_processes_do_not_keep_the_namespace(stopped))
        .collect();
    if tries.is_empty() {
        return;
    }
    let spread = |of: fn(&Try) -> i64| {
        let mut ms: Vec<i64> = tries.iter().map(of).collect();
        ms.sort_unstable();
        let shown = |ms: i64| match ms {
            i64::MAX => "never (20 s)".to_owned(),
            ms => format!("{ms} ms"),
        };
        format!(
            "median {}, worst {}",
            shown(ms[ms.len() / 2]),
            shown(ms[ms.len() - 1])
        )
    };
    let escaped = tries.iter().filter(|t| t.escapes > 0).count();
    eprintln!(
        "{stopped:?}: {} tries, {escaped} with lines beside the next holder; after the \
         authority's end, the last line: {}; the last process gone: {}",
        tries.len(),
        spread(|t| t.last_line),
        spread(|t| t.gone)
    );
    for (n, t) in tries.iter().enumerate() {
        assert_eq!(
            t.escapes, 0,
            "try {n}: the command wrote {} lines beside the next holder",
            t.escapes
        );
        assert_ne!(t.gone, i64::MAX, "try {n}: the command outlived its lease");
    }
}

/// A test of [`the_namespace_ends_by_the_authoritys_end`] for one way of stopping.
macro_rules! stop_case {
    ($name:ident, $stopped:expr) => {
        #[test]
        fn $name() {
            if namespaces(stringify!($name)) {
                the_namespace_ends_by_the_authoritys_end($stopped);
            }
        }
    };
}

stop_case!(
    a_stopped_gate_and_init_do_not_keep_the_namespace_after_fence_run_is_killed,
    Stopped::GateGroupThenKill
);
stop_case!(
    every_fence_process_stopped_does_not_keep_the_namespace_past_the_authority,
    Stopped::Everything
);
stop_case!(
    ctrl_z_and_a_killed_fence_run_do_not_keep_the_namespace_until_fg,
    Stopped::CtrlZThenKill
);

/// The fallback has the kill timer too, on the supervising process: with `fence run` and the
/// supervising process both stopped, the timer kills the supervising process at the
/// authority's end, and its death the command's first process (its parent-death signal):
/// a command that is one process does not run beside the next holder. (Processes it
/// started would: the fallback cannot reach them without a fence process that runs.)
#[test]
fn in_the_fallback_the_kill_timer_ends_the_command_when_fence_is_stopped() {
    let store = Store::new();
    let mark = Mark::new();
    let log = store.path("log");
    let script = format!(
        "trap '' TERM HUP; while :; do echo tick >> {}; sleep 0.02; done",
        log.display()
    );
    let mut first = holder(
        &store,
        "fb",
        FALLBACK,
        &["--ttl", PAUSED_TTL],
        &mark,
        &script,
    )
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn fence run");
    assert!(wait_for_line(&log, "tick", Duration::from_secs(20)));
    let run = first.id() as i32;
    let supervisor = children_of(run)[0];
    for p in [supervisor, run] {
        kill(Pid::from_raw(p), Signal::SIGSTOP).expect("SIGSTOP");
    }
    until_stopped(&[supervisor, run]);
    let next = next_holder(&store, "fb", &log).output().expect("next");
    let escapes = ticks_since_the_next_started(&log);
    let _ = kill(Pid::from_raw(supervisor), Signal::SIGCONT);
    kill(Pid::from_raw(run), Signal::SIGCONT).expect("SIGCONT");
    let status = wait_bounded(&mut first, Duration::from_secs(30), "the woken holder");
    assert_eq!(next.status.code(), Some(0), "the next holder ran");
    assert_eq!(escapes, 0, "the command wrote beside the next holder");
    assert_eq!(status.code(), Some(76), "the woken holder lost its lease");
    assert_eq!(mark.processes(), Vec::<i32>::new());
}
