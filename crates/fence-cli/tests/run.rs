//! `fence run` as separate processes on local files: mutual exclusion across ten waiters,
//! and a paused holder that is fenced when it wakes.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use common::{
    fence, fence_bin, output, wait_bounded, wait_for_file, wait_for_file_of, Mark, Store, PAST_TTL,
    PAUSED_TTL,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

#[test]
fn ten_waiters_hold_the_lease_one_at_a_time_with_rising_epochs() {
    let store = Store::new();
    let log = store.path("intervals.log");
    let script = format!(
        "s=$(date +%s%N); sleep 0.05; e=$(date +%s%N); echo \"$FENCE_EPOCH $s $e\" >> {}",
        log.display()
    );
    let mut children: Vec<_> = (0..10)
        .map(|_| {
            fence(&[
                "run",
                "--store",
                &store.url,
                "--lease",
                "exclusive",
                "--ttl",
                "2s",
                "--wait",
                "--timeout",
                "40s",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .spawn()
            .expect("spawn fence run")
        })
        .collect();
    for (i, child) in children.iter_mut().enumerate() {
        let status = wait_bounded(child, Duration::from_secs(45), "fence run");
        assert_eq!(status.code(), Some(0), "run {i} failed");
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let mut intervals: Vec<(u64, u128, u128)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "bad line {l:?}");
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(intervals.len(), 10, "{text}");
    intervals.sort_by_key(|i| i.1);
    for w in intervals.windows(2) {
        assert!(w[0].2 < w[1].1, "intervals overlap: {w:?}");
        assert!(w[0].0 < w[1].0, "epochs did not rise: {w:?}");
    }
}

#[test]
fn a_paused_holder_is_fenced_when_it_wakes_and_its_stale_put_is_refused() {
    let store = Store::new();
    let a_epoch = store.path("a.epoch");
    let a_mark = Mark::new();
    let a_script = format!("echo $FENCE_EPOCH > {}; exec sleep 30", a_epoch.display());
    let mut a_args = vec![
        "run", "--store", &store.url, "--lease", "job", "--ttl", PAUSED_TTL, "--grace", "1s", "--",
    ];
    let a_command = a_mark.sh(&a_script);
    a_args.extend(a_command.iter().map(String::as_str));
    let mut a = fence(&a_args).spawn().expect("spawn holder");
    let a_epoch: u64 = wait_for_file_of(&mut a, &a_epoch, Duration::from_secs(10))
        .parse()
        .unwrap();
    let a_fence = Pid::from_raw(a.id() as i32);
    kill(a_fence, Signal::SIGSTOP).expect("SIGSTOP");
    std::thread::sleep(PAST_TTL);

    let (b_epoch, b_put) = (store.path("b.epoch"), store.path("b.put"));
    let b_script = format!(
        "echo $FENCE_EPOCH > {}; {} put k --value from-b && echo ok > {}; sleep 2",
        b_epoch.display(),
        fence_bin(),
        b_put.display()
    );
    let mut b = fence(&[
        "run",
        "--store",
        &store.url,
        "--lease",
        "job",
        "--ttl",
        PAUSED_TTL,
        "--wait",
        "--timeout",
        "20s",
        "--",
        "sh",
        "-c",
        &b_script,
    ])
    .spawn()
    .expect("spawn taker");
    wait_for_file_of(&mut b, &b_put, Duration::from_secs(20));
    let b_epoch: u64 = wait_for_file(&b_epoch, Duration::from_secs(1))
        .parse()
        .unwrap();
    assert_eq!(b_epoch, a_epoch + 1);

    kill(a_fence, Signal::SIGCONT).expect("SIGCONT");
    let a_status = wait_bounded(&mut a, Duration::from_secs(10), "the woken holder");
    assert_eq!(
        a_status.code(),
        Some(76),
        "the woken holder must exit 76 (fenced)"
    );
    assert_eq!(
        a_mark.processes(),
        Vec::<i32>::new(),
        "the woken holder's command must be terminated"
    );

    let stale = output(&[
        "put",
        "--store",
        &store.url,
        "--lease",
        "job",
        "--epoch",
        &a_epoch.to_string(),
        "k",
        "--value",
        "from-a",
    ]);
    assert_eq!(
        stale.status.code(),
        Some(76),
        "a put with the old epoch must be refused"
    );
    assert_eq!(String::from_utf8_lossy(&stale.stderr).lines().count(), 1);

    assert_eq!(
        wait_bounded(&mut b, Duration::from_secs(10), "the new holder").code(),
        Some(0)
    );
    let got = output(&["get", "--store", &store.url, "--lease", "job", "k"]);
    assert_eq!(got.stdout, b"from-b", "the new holder's write must stand");
}

#[test]
fn a_busy_lease_fails_at_once_without_wait_and_after_the_timeout_with_it() {
    let store = Store::new();
    let ready = store.path("ready");
    let done = store.path("done");
    let script = format!(
        "echo 1 > {}; for i in $(seq 200); do [ -f {} ] && exit 0; sleep 0.05; done",
        ready.display(),
        done.display()
    );
    let mut holder = fence(&[
        "run", "--store", &store.url, "--lease", "busy", "--ttl", "5s", "--", "sh", "-c", &script,
    ])
    .spawn()
    .expect("spawn holder");
    wait_for_file_of(&mut holder, &ready, Duration::from_secs(10));
    let now = output(&[
        "run", "--store", &store.url, "--lease", "busy", "--", "true",
    ]);
    assert_eq!(now.status.code(), Some(75));
    let waited = output(&[
        "run",
        "--store",
        &store.url,
        "--lease",
        "busy",
        "--ttl",
        "1s",
        "--wait",
        "--timeout",
        "300ms",
        "--",
        "true",
    ]);
    assert_eq!(waited.status.code(), Some(75));
    std::fs::write(&done, "1").unwrap();
    assert_eq!(
        wait_bounded(&mut holder, Duration::from_secs(10), "holder").code(),
        Some(0)
    );
    let after = output(&[
        "run", "--store", &store.url, "--lease", "busy", "--", "sh", "-c", "exit 9",
    ]);
    assert_eq!(
        after.status.code(),
        Some(9),
        "the command's exit code passes through"
    );
}

#[test]
fn signals_sent_to_fence_reach_the_command() {
    let store = Store::new();
    let pid_file = store.path("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let mut run = fence(&[
        "run", "--store", &store.url, "--lease", "sig", "--", "sh", "-c", &script,
    ])
    .spawn()
    .expect("spawn");
    wait_for_file_of(&mut run, &pid_file, Duration::from_secs(10));
    kill(Pid::from_raw(run.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let status = wait_bounded(&mut run, Duration::from_secs(10), "fence run");
    assert_eq!(
        status.code(),
        Some(128 + 15),
        "killed by the forwarded SIGTERM"
    );
    let status = output(&["status", "--store", &store.url, "sig", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        json["cells"][0]["holder"],
        serde_json::Value::Null,
        "released afterwards"
    );
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let store = Store::new();
    let ready = store.path("ready");
    let mark = Mark::new();
    let script = format!(
        "trap '' TERM; echo up > {}; while true; do sleep 0.1; done",
        ready.display()
    );
    let mut args = vec![
        "run", "--store", &store.url, "--lease", "stubborn", "--ttl", PAUSED_TTL, "--grace",
        "500ms", "--",
    ];
    let command = mark.sh(&script);
    args.extend(command.iter().map(String::as_str));
    let mut holder = fence(&args).spawn().expect("spawn holder");
    wait_for_file_of(&mut holder, &ready, Duration::from_secs(10));
    // Pause the holder past its TTL: when it wakes it must fence itself, SIGTERM the command
    // (ignored), and SIGKILL it after the grace period.
    let fence_pid = Pid::from_raw(holder.id() as i32);
    kill(fence_pid, Signal::SIGSTOP).expect("SIGSTOP");
    std::thread::sleep(PAST_TTL);
    kill(fence_pid, Signal::SIGCONT).expect("SIGCONT");
    let status = wait_bounded(&mut holder, Duration::from_secs(10), "the fenced holder");
    assert_eq!(status.code(), Some(76), "a fenced holder exits 76");
    assert_eq!(
        mark.processes(),
        Vec::<i32>::new(),
        "the command that ignored SIGTERM must have been killed"
    );
}
