//! `fence run` keeps its command's whole process tree together: nothing of it outlives the
//! lease, also when `fence` itself is SIGKILLed, stopped, or the command leaves background
//! jobs behind; every catchable signal reaches the command's process group.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{
    fence, lines_between, output, run_args, run_marked, state_of, wait_bounded, wait_for_count,
    wait_for_file_of, wait_for_line, wait_until, Mark, Store, PAST_TTL, PAUSED_TTL,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A command that leaves three processes that all ignore SIGTERM and write `tick` lines to
/// `log`: the shell itself, a background job in its process group, and a job that left it
/// with `setsid`. Each writes `up` once it runs.
fn stubborn_tree(store: &Store, log: &std::path::Path) -> String {
    let ticker = store.path("tick.sh");
    std::fs::write(
        &ticker,
        format!(
            "trap '' TERM; echo up >> {log}; while :; do echo tick >> {log}; sleep 0.05; done",
            log = log.display()
        ),
    )
    .unwrap();
    format!("sh {t} & setsid sh {t} & exec sh {t}", t = ticker.display())
}

#[test]
fn sigkill_of_fence_takes_the_whole_command_tree_down_before_a_waiter_starts() {
    let store = Store::new();
    let log = store.path("log");
    let mark = Mark::new();
    let mut holder = run_marked(
        &store,
        "k",
        &["--ttl", "2s", "--grace", "5s"],
        &mark,
        &stubborn_tree(&store, &log),
    )
    .spawn()
    .expect("spawn holder");
    wait_for_count(&log, "up", 3);
    // The waiter's command marks where it ran in the holder's log.
    let check = format!(
        "echo waiter-start >> {log}; sleep 0.5; echo waiter-end >> {log}",
        log = log.display()
    );
    let mut waiter = fence(&run_args(
        &store,
        "k",
        &[
            "--ttl",
            "2s",
            "--timeout",
            "20s",
            "--quiet",
            "--",
            "sh",
            "-c",
            &check,
        ],
    ))
    .spawn()
    .expect("spawn waiter");
    std::thread::sleep(Duration::from_millis(300));
    holder.kill().expect("SIGKILL the holder");
    let _ = holder.wait();
    let status = wait_bounded(&mut waiter, Duration::from_secs(25), "the waiter");
    assert_eq!(status.code(), Some(0));
    let beside = lines_between(&log, "waiter-start", "waiter-end");
    assert!(
        beside.is_empty(),
        "the SIGKILLed holder's command ran beside the waiter's: {beside:?}"
    );
    assert_eq!(mark.processes(), Vec::<i32>::new());
}

#[test]
fn a_background_job_never_outlives_the_lease() {
    let store = Store::new();
    let mark = Mark::new();
    let ready = store.path("ready");
    let script = format!(
        "sleep 1000 & setsid sleep 1000 & echo up > {}; exit 0",
        ready.display()
    );
    // No pipes: a job that outlives fence must not keep the test waiting for their end.
    let mut run = run_marked(&store, "bg", &["--grace", "2s"], &mark, &script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let status = wait_bounded(&mut run, Duration::from_secs(10), "fence run");
    assert_eq!(status.code(), Some(0));
    assert!(ready.exists(), "the command ran");
    assert_eq!(
        mark.processes(),
        Vec::<i32>::new(),
        "a job outlived the lease"
    );
    let next = output(&run_args(&store, "bg", &["--", "true"]));
    assert_eq!(next.status.code(), Some(0), "the lease was released");
}

#[test]
fn a_lost_lease_ends_grandchildren_too() {
    let store = Store::new();
    let mark = Mark::new();
    let ready = store.path("ready");
    let script = format!(
        "sleep 1000 & setsid sleep 1000 & echo up > {}; while :; do sleep 0.05; done",
        ready.display()
    );
    let mut holder = run_marked(
        &store,
        "lost",
        &["--ttl", PAUSED_TTL, "--grace", "300ms"],
        &mark,
        &script,
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn holder");
    wait_for_file_of(&mut holder, &ready, Duration::from_secs(10));
    let fence_pid = Pid::from_raw(holder.id() as i32);
    kill(fence_pid, Signal::SIGSTOP).expect("SIGSTOP");
    std::thread::sleep(PAST_TTL);
    kill(fence_pid, Signal::SIGCONT).expect("SIGCONT");
    let status = wait_bounded(&mut holder, Duration::from_secs(10), "the fenced holder");
    assert_eq!(status.code(), Some(76));
    assert_eq!(
        mark.processes(),
        Vec::<i32>::new(),
        "still running after the lease was lost"
    );
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut holder.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    // Plain words, no Rust debug text such as `Fenced { reason: Expired }`.
    assert!(
        !stderr.contains('{') && !stderr.contains("Expired") && !stderr.contains("Fenced"),
        "{stderr}"
    );
}

#[test]
fn a_stopped_fence_stops_its_command_until_it_continues() {
    let store = Store::new();
    let ticks = store.path("ticks");
    let script = format!(
        "while :; do echo t >> {}; sleep 0.02; done",
        ticks.display()
    );
    let mut holder = fence(&run_args(
        &store,
        "frozen",
        &["--ttl", "6s", "--", "sh", "-c", &script],
    ))
    .spawn()
    .expect("spawn holder");
    assert!(wait_for_line(&ticks, "t", Duration::from_secs(10)));
    let fence_pid = Pid::from_raw(holder.id() as i32);
    let count = || std::fs::read_to_string(&ticks).map_or(0, |s| s.lines().count());
    kill(fence_pid, Signal::SIGSTOP).expect("SIGSTOP");
    // TTL 6 s: the command is stopped once fence has been silent for TTL/3 (2 s). fence is
    // stopped for 3.2 s in all, and renews every TTL/3, so at least 4 s of its lease are left
    // when it stops however late a loaded machine started it: the lease outlives the stop.
    std::thread::sleep(Duration::from_millis(2_600));
    let frozen_at = count();
    std::thread::sleep(Duration::from_millis(600));
    let later = count();
    kill(fence_pid, Signal::SIGCONT).expect("SIGCONT");
    assert_eq!(
        frozen_at, later,
        "the command ran on while fence was stopped"
    );
    // Within the TTL the lease still holds: the command continues.
    std::thread::sleep(Duration::from_millis(600));
    assert!(count() > later, "the command did not continue with fence");
    assert!(
        holder.try_wait().unwrap().is_none(),
        "fence ended the command"
    );
    kill(fence_pid, Signal::SIGTERM).unwrap();
    wait_bounded(&mut holder, Duration::from_secs(10), "the holder");
}

#[test]
fn a_terminal_stop_stops_fence_with_its_command_and_sigcont_resumes_both_for_good() {
    let store = Store::new();
    let ticks = store.path("ticks");
    let script = format!(
        "while :; do echo t >> {}; sleep 0.02; done",
        ticks.display()
    );
    let mut holder = fence(&run_args(
        &store,
        "tstp",
        &["--ttl", "5s", "--", "sh", "-c", &script],
    ))
    .spawn()
    .expect("spawn holder");
    assert!(wait_for_line(&ticks, "t", Duration::from_secs(10)));
    let pid = holder.id() as i32;
    let count = || std::fs::read_to_string(&ticks).map_or(0, |s| s.lines().count());
    // Ctrl-Z as a shell without job control passes it: to fence, which passes it on.
    kill(Pid::from_raw(pid), Signal::SIGTSTP).expect("SIGTSTP");
    wait_until("fence stopping", Duration::from_secs(10), || {
        state_of(pid) == Some('T')
    });
    wait_until("the command stopping", Duration::from_secs(10), || {
        let before = count();
        std::thread::sleep(Duration::from_millis(200));
        count() == before
    });
    let stopped_at = count();
    kill(Pid::from_raw(pid), Signal::SIGCONT).expect("SIGCONT");
    wait_until("the command continuing", Duration::from_secs(10), || {
        count() > stopped_at
    });
    // The stop it was continued past is not acted on again: fence runs on.
    std::thread::sleep(Duration::from_millis(500));
    assert_ne!(state_of(pid), Some('T'), "fence stopped again");
    kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM");
    let status = wait_bounded(&mut holder, Duration::from_secs(10), "fence run");
    assert_eq!(status.code(), Some(143));
}

#[test]
fn a_command_that_stops_on_its_terminal_stops_fence_until_both_are_continued() {
    let store = Store::new();
    let log = store.path("log");
    let script = format!(
        "echo before >> {log}; kill -TSTP $$; echo after >> {log}",
        log = log.display()
    );
    let mut holder = fence(&run_args(&store, "self", &["--", "sh", "-c", &script]))
        .spawn()
        .expect("spawn holder");
    let pid = holder.id() as i32;
    wait_until(
        "fence stopping with its command",
        Duration::from_secs(10),
        || state_of(pid) == Some('T'),
    );
    assert!(!wait_for_line(&log, "after", Duration::from_millis(100)));
    kill(Pid::from_raw(pid), Signal::SIGCONT).expect("SIGCONT");
    let status = wait_bounded(&mut holder, Duration::from_secs(10), "fence run");
    assert_eq!(status.code(), Some(0));
    assert!(wait_for_line(&log, "after", Duration::from_secs(1)));
}

#[test]
fn catchable_signals_reach_the_command_group_and_fence_keeps_running() {
    let store = Store::new();
    let log = store.path("log");
    let done = store.path("done");
    let signals = ["HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "WINCH", "URG"];
    let traps: String = signals
        .iter()
        .map(|s| format!("trap 'echo cmd {s} >> {}' {s}; ", log.display()))
        .collect();
    let script = format!(
        "{traps} (trap '' HUP USR2 ALRM; trap 'echo grandchild USR1 >> {log}' USR1; \
         while :; do sleep 0.05; done) & \
         echo ready >> {log}; while [ ! -f {done} ]; do sleep 0.05; done; kill $!",
        log = log.display(),
        done = done.display()
    );
    let mut run = start_ready(&store, "sig", &script, &log);
    let pid = Pid::from_raw(run.id() as i32);
    for name in signals {
        let signal: Signal = format!("SIG{name}").parse().unwrap();
        kill(pid, signal).expect("signal fence");
        assert!(
            wait_for_line(&log, &format!("cmd {name}"), Duration::from_secs(5)),
            "{name} did not reach the command"
        );
        assert!(run.try_wait().unwrap().is_none(), "fence died of {name}");
    }
    assert!(
        wait_for_line(&log, "grandchild USR1", Duration::from_secs(5)),
        "USR1 did not reach the command's process group"
    );
    std::fs::write(&done, "").unwrap();
    let status = wait_bounded(&mut run, Duration::from_secs(10), "fence run");
    assert_eq!(status.code(), Some(0));
}

/// `fence run` of `lease` running `sh -c script`, once the script logged `ready` to `log`
/// (and its traps are set).
fn start_ready(store: &Store, lease: &str, script: &str, log: &std::path::Path) -> Child {
    let run = fence(&run_args(store, lease, &["--", "sh", "-c", script]))
        .spawn()
        .expect("spawn");
    assert!(wait_for_line(log, "ready", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(100));
    run
}

/// The catchable signals that only Linux has, real-time ones included, by number: each
/// used to end `fence run` by its default action (the lease stayed held until it expired).
#[cfg(target_os = "linux")]
#[test]
fn linux_only_and_realtime_signals_reach_the_command_and_fence_keeps_running() {
    let store = Store::new();
    let log = store.path("log");
    let done = store.path("done");
    let (rtmin, rtmax) = (nix::libc::SIGRTMIN(), nix::libc::SIGRTMAX());
    let numbers = [
        Signal::SIGSTKFLT as i32,
        Signal::SIGIO as i32,
        Signal::SIGPWR as i32,
        rtmin,
        rtmin + 5,
        rtmax,
    ];
    let traps: String = numbers
        .iter()
        .map(|n| format!("trap 'echo cmd {n}. >> {}' {n}; ", log.display()))
        .collect();
    let script = format!(
        "{traps} echo ready >> {log}; while [ ! -f {done} ]; do sleep 0.05; done",
        log = log.display(),
        done = done.display()
    );
    let mut run = start_ready(&store, "rt", &script, &log);
    for n in numbers {
        let sent = Command::new("kill")
            .args([format!("-{n}"), run.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        assert!(
            wait_for_line(&log, &format!("cmd {n}."), Duration::from_secs(5)),
            "signal {n} did not reach the command"
        );
        assert!(
            run.try_wait().unwrap().is_none(),
            "fence died of signal {n}"
        );
    }
    std::fs::write(&done, "").unwrap();
    let status = wait_bounded(&mut run, Duration::from_secs(10), "fence run");
    assert_eq!(status.code(), Some(0));
    let again = output(&run_args(&store, "rt", &["--", "true"]));
    assert_eq!(again.status.code(), Some(0), "the lease was not released");
}

#[test]
fn the_command_starts_with_sigpipe_at_its_default_and_no_signal_blocked() {
    let store = Store::new();
    let out = output(&run_args(
        &store,
        "disp",
        &[
            "--",
            "sh",
            "-c",
            "exec grep -E '^Sig(Blk|Ign)' /proc/self/status",
        ],
    ));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let mask = |name: &str| {
        let line = text.lines().find(|l| l.starts_with(name)).expect(name);
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk"), 0, "{text}");
    assert_eq!(
        mask("SigIgn") & (1 << (13 - 1)),
        0,
        "SIGPIPE ignored: {text}"
    );
}

#[test]
fn a_command_in_the_foreground_of_a_terminal_can_read_it() {
    // `script` runs fence in the foreground of a fresh pseudo-terminal and types our stdin
    // into it; the command's process group must get the terminal, or its read stops it.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no `script` (util-linux) to make a pseudo-terminal");
        return;
    }
    let store = Store::new();
    let line = format!(
        "{} run --store {} --lease tty -- sh -c 'read x; echo got $x'",
        common::fence_bin(),
        store.url
    );
    let mut script = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn script");
    script.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let status = wait_bounded(&mut script, Duration::from_secs(10), "the command reading");
    let mut out = String::new();
    script
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.contains("got hello"), "{out}");
}
