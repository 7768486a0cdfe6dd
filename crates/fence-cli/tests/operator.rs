//! What an operator meets: exit codes, one plain line per failure, waiting, holding a lease
//! without a command, `status` on a damaged store, probe and demo leaving nothing behind.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use common::{
    fence, output, run_args, wait_bounded, wait_for_file, wait_for_file_of, Store, PAST_TTL,
    PAUSED_TTL,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// A holder of `lease` whose command runs until the file `done` appears.
struct Holder {
    child: Child,
    done: PathBuf,
}

impl Holder {
    fn start(store: &Store, lease: &str, ttl: &str) -> Holder {
        let ready = store.path(&format!("{lease}.ready"));
        let done = store.path(&format!("{lease}.done"));
        let script = format!(
            "echo 1 > {}; while [ ! -f {} ]; do sleep 0.02; done",
            ready.display(),
            done.display()
        );
        let child = fence(&run_args(
            store,
            lease,
            &["--ttl", ttl, "--", "sh", "-c", &script],
        ))
        .spawn()
        .expect("spawn holder");
        wait_for_file(&ready, Duration::from_secs(10));
        Holder { child, done }
    }

    fn finish(mut self) {
        std::fs::write(&self.done, "").unwrap();
        let status = wait_bounded(&mut self.child, Duration::from_secs(10), "the holder");
        assert_eq!(status.code(), Some(0));
    }
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Exactly one stderr line, without Rust debug text.
fn one_plain_line(out: &Output, what: &str) -> String {
    let lines = stderr_lines(out);
    assert_eq!(lines.len(), 1, "{what}: {lines:?}");
    let line = lines[0].clone();
    assert!(
        !line.contains(" { ") && !line.contains("Fenced") && !line.contains("AttemptsExhausted"),
        "{what}: debug text in {line:?}"
    );
    line
}

/// `fence ARGS` against the S3 endpoint `endpoint`, with dummy credentials or none.
#[cfg(feature = "s3")]
fn s3_fence(endpoint: &str, credentials: bool, args: &[&str]) -> Output {
    let mut cmd = fence(args);
    cmd.env("AWS_ENDPOINT", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1");
    if credentials {
        cmd.env("AWS_ACCESS_KEY_ID", "k")
            .env("AWS_SECRET_ACCESS_KEY", "s");
    } else {
        cmd.env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY");
    }
    cmd.output().unwrap()
}

#[cfg(feature = "s3")]
#[test]
fn a_store_answering_404_to_everything_is_exit_69_with_a_plain_message() {
    let endpoint = common::canned_http("404 Not Found");
    let run = [
        "run",
        "--store",
        "s3://bucket/p",
        "--lease",
        "x",
        "--",
        "true",
    ];
    let out = s3_fence(&endpoint, true, &run);
    assert_eq!(out.status.code(), Some(69), "{:?}", stderr_lines(&out));
    one_plain_line(&out, "404 store");
}

#[cfg(feature = "s3")]
#[test]
fn status_says_why_an_s3_endpoint_failed_and_what_credentials_to_set() {
    let status = ["status", "--store", "s3://bucket/p"];
    let unreachable = s3_fence("http://127.0.0.1:9", true, &status);
    assert_eq!(unreachable.status.code(), Some(69));
    let line = one_plain_line(&unreachable, "unreachable");
    assert!(line.contains("127.0.0.1:9"), "the cause is missing: {line}");

    let no_credentials = s3_fence("http://127.0.0.1:9", false, &status);
    assert_eq!(no_credentials.status.code(), Some(2));
    let line = one_plain_line(&no_credentials, "no credentials");
    assert!(line.contains("AWS_ACCESS_KEY_ID"), "{line}");
}

#[test]
fn a_relative_file_url_is_refused() {
    let store = Store::new();
    std::fs::create_dir(store.path("locks")).unwrap();
    let out = fence(&["status", "--store", "file://locks"])
        .current_dir(store.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_plain_line(&out, "relative file URL");
}

#[test]
fn status_lists_every_healthy_record_and_marks_the_bad_ones() {
    let store = Store::new();
    for lease in ["good", "corrupt", "dir", "link"] {
        let out = output(&run_args(&store, lease, &["--", "true"]));
        assert_eq!(out.status.code(), Some(0));
    }
    // fence-fs's layout (docs/fs.md): the owner record is the newest version file in
    // cells/<cell>/own.json.fence/i<random>/.
    let owner = |cell: &str| store.path(&format!("cells/{cell}/own.json.fence"));
    let newest = |cell: &str| {
        let inc = std::fs::read_dir(owner(cell))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let mut versions: Vec<_> = std::fs::read_dir(inc)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        versions.sort_by_key(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        });
        versions.pop().unwrap()
    };
    std::fs::write(newest("corrupt"), "garbage").unwrap();
    let dir = newest("dir");
    std::fs::remove_file(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    std::fs::remove_dir_all(owner("link")).unwrap();
    std::os::unix::fs::symlink(owner("good"), owner("link")).unwrap();

    let out = output(&["status", "--store", &store.url, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(69),
        "a bad record shows in the exit code"
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("status still prints JSON");
    let cells: Vec<&str> = json["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cells, ["good"]);
    let mut bad: Vec<&str> = json["bad"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap())
        .collect();
    bad.sort();
    assert_eq!(
        bad,
        [
            "cells/corrupt/own.json",
            "cells/dir/own.json",
            "cells/link/own.json"
        ]
    );
    let table = output(&["status", "--store", &store.url, "--all"]);
    assert_eq!(table.status.code(), Some(69));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("good") && text.contains("cells/link/own.json"),
        "{text}"
    );
}

#[test]
fn status_of_a_missing_lease_exits_3() {
    let store = Store::new();
    let out = output(&run_args(&store, "there", &["--", "true"]));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        output(&["status", "--store", &store.url, "there"])
            .status
            .code(),
        Some(0)
    );
    let missing = output(&["status", "--store", &store.url, "not-there"]);
    assert_eq!(missing.status.code(), Some(3));
    one_plain_line(&missing, "missing lease");
}

#[test]
fn timeout_without_wait_waits_at_most_that_long() {
    let store = Store::new();
    let holder = Holder::start(&store, "t", "5s");
    let waited = output(&run_args(
        &store,
        "t",
        &["--timeout", "300ms", "--quiet", "--", "true"],
    ));
    assert_eq!(waited.status.code(), Some(75), "busy after the timeout");
    let mut waiter = fence(&run_args(
        &store,
        "t",
        &["--timeout", "20s", "--quiet", "--", "true"],
    ))
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(waiter.try_wait().unwrap().is_none(), "it waits");
    holder.finish();
    let status = wait_bounded(&mut waiter, Duration::from_secs(20), "the waiter");
    assert_eq!(status.code(), Some(0), "it got the lease once released");
}

#[test]
fn a_waiter_says_once_for_whom_it_waits_unless_quiet() {
    let store = Store::new();
    let holder = Holder::start(&store, "w", "5s");
    let holder_pid = holder.child.id().to_string();
    let mut loud = fence(&run_args(&store, "w", &["--wait", "--", "true"]))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut quiet = fence(&run_args(&store, "w", &["--wait", "--quiet", "--", "true"]))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut loud_err = BufReader::new(loud.stderr.take().unwrap());
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut line = String::new();
        while loud_err.read_line(&mut line).is_ok_and(|n| n > 0) {
            lines.push(std::mem::take(&mut line));
            let _ = tx.send(lines.clone());
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(5));
    holder.finish();
    for (child, what) in [(&mut loud, "loud"), (&mut quiet, "quiet")] {
        let status = wait_bounded(child, Duration::from_secs(30), what);
        assert_eq!(status.code(), Some(0), "{what}");
    }
    let first = first.expect("the waiter says that it waits");
    assert!(
        first[0].contains(&holder_pid),
        "the message names the holder (pid {holder_pid}): {first:?}"
    );
    let all = rx.try_iter().last().unwrap_or(first);
    let waits = all.iter().filter(|l| l.contains("waiting")).count();
    assert_eq!(waits, 1, "said once: {all:?}");
    let mut said = String::new();
    quiet
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert_eq!(said, "", "--quiet says nothing");
}

#[cfg(feature = "s3")]
#[test]
fn a_waiter_rides_through_a_store_outage() {
    let Some(s3) = common::S3Env::moto("a_waiter_rides_through_a_store_outage") else {
        return;
    };
    let outage = common::Outage::begin(&s3.endpoint);
    let url = s3.fresh_url();
    let mut waiter = s3
        .fence(
            &outage.endpoint(),
            &[
                "run",
                "--store",
                &url,
                "--lease",
                "o",
                "--ttl",
                "2s",
                "--wait",
                "--timeout",
                "30s",
                "--",
                "true",
            ],
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "gave up during the outage: {:?}",
        waiter
            .wait_with_output()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
    );
    outage.end();
    let status = wait_bounded(&mut waiter, Duration::from_secs(30), "the waiter");
    let mut err = String::new();
    waiter
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
}

#[test]
fn busy_and_lost_exit_codes_can_be_chosen_so_a_commands_own_75_stands_out() {
    let store = Store::new();
    let own = output(&run_args(&store, "c", &["--", "sh", "-c", "exit 75"]));
    assert_eq!(
        own.status.code(),
        Some(75),
        "the command's own code passes through"
    );
    let holder = Holder::start(&store, "c", "5s");
    let busy = output(&run_args(
        &store,
        "c",
        &["--conflict-exit-code", "99", "--", "true"],
    ));
    assert_eq!(busy.status.code(), Some(99));
    holder.finish();

    let pid_file = store.path("lost.pid");
    let mut lost = fence(&run_args(
        &store,
        "c",
        &[
            "--ttl",
            PAUSED_TTL,
            "--grace",
            "200ms",
            "--fenced-exit-code",
            "98",
            "--",
            "sh",
            "-c",
            &format!("echo $$ > {}; sleep 30", pid_file.display()),
        ],
    ))
    .spawn()
    .unwrap();
    wait_for_file_of(&mut lost, &pid_file, Duration::from_secs(10));
    let pid = Pid::from_raw(lost.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    std::thread::sleep(PAST_TTL);
    kill(pid, Signal::SIGCONT).unwrap();
    let status = wait_bounded(&mut lost, Duration::from_secs(10), "the fenced holder");
    assert_eq!(status.code(), Some(98));
}

#[test]
fn run_without_a_command_holds_the_lease_until_a_signal_and_prints_its_epoch() {
    let store = Store::new();
    let first = output(&run_args(&store, "h", &["--", "true"]));
    assert_eq!(first.status.code(), Some(0));
    let mut hold = fence(&run_args(&store, "h", &[]))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut epoch = String::new();
    BufReader::new(hold.stdout.as_mut().unwrap())
        .read_line(&mut epoch)
        .unwrap();
    assert_eq!(epoch.trim(), "2");
    let busy = output(&run_args(&store, "h", &["--", "true"]));
    assert_eq!(busy.status.code(), Some(75), "held");
    assert!(hold.try_wait().unwrap().is_none());
    kill(Pid::from_raw(hold.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_bounded(&mut hold, Duration::from_secs(10), "the holder");
    assert_eq!(status.code(), Some(0));
    let after = output(&run_args(&store, "h", &["--", "true"]));
    assert_eq!(after.status.code(), Some(0), "released on the signal");
}

#[test]
fn errors_echo_about_100_bytes_of_a_name_escaped_once() {
    let store = Store::new();
    let long = "x".repeat(5_000);
    // A store directory below a long path (15 components of 200 bytes): missing, and present
    // but inside the fence root `store` (refused as nested).
    let deep: std::path::PathBuf = (0..15).map(|i| format!("{i:0>200}")).collect();
    let (missing, nested) = (
        format!("{}/{}/gone", store.url, deep.display()),
        format!("{}/{}", store.url, deep.display()),
    );
    std::fs::create_dir_all(store.dir.path().join(&deep)).unwrap();
    // A writing command makes `store` a fence root (status only reads, and marks nothing).
    assert_eq!(
        output(&run_args(&store, "mark", &["--", "true"]))
            .status
            .code(),
        Some(0)
    );
    for args in [
        vec!["run", "--store", &store.url, "--lease", &long, "--", "true"],
        vec!["status", "--store", &store.url, &long],
        vec!["get", "--store", &store.url, "--lease", "l", &long],
        vec!["status", "--store", &long],
        vec!["run", "--store", &missing, "--lease", "l", "--", "true"],
        vec!["status", "--store", &nested],
    ] {
        let out = output(&args);
        assert_ne!(out.status.code(), Some(0));
        let line = one_plain_line(&out, &args[0..2].join(" "));
        assert!(line.len() < 400, "{} bytes: {line}", line.len());
    }
    // The longest valid name (196 bytes), in a store error that names its key: said once.
    let longest = "y".repeat(196);
    // Something fence-fs did not make in the cell's object directory (docs/fs.md's layout).
    let object = store.path(&format!("cells/{longest}/own.json.fence"));
    std::fs::create_dir_all(object.join("junk")).unwrap();
    for args in [
        vec!["get", "--store", &store.url, "--lease", &longest, "k"],
        vec![
            "put", "--store", &store.url, "--lease", &longest, "--epoch", "1", "k",
        ],
        vec![
            "run", "--store", &store.url, "--lease", &longest, "--", "true",
        ],
    ] {
        let out = fence(&args).stdin(Stdio::null()).output().unwrap();
        assert_eq!(out.status.code(), Some(69), "{:?}", stderr_lines(&out));
        let line = one_plain_line(&out, args[0]);
        assert!(!line.contains(&longest), "the whole name repeated: {line}");
        assert!(line.len() < 400, "{} bytes: {line}", line.len());
    }
    let odd = output(&run_args(&store, "a\"b\\c", &["--", "true"]));
    assert_eq!(odd.status.code(), Some(2));
    let line = one_plain_line(&odd, "odd name");
    assert!(line.contains(r#""a\"b\\c""#), "escaped once: {line}");
}

#[test]
fn probe_leaves_nothing_behind_and_refuses_zero_rounds() {
    let store = Store::new();
    let out = output(&["probe", &store.url, "--rounds", "1", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["left_behind"], serde_json::json!([]));
    assert_eq!(json["left_dirs"], serde_json::json!([]));
    assert!(
        !store.path("fence-probe").exists(),
        "the probe's directories are left"
    );
    let zero = output(&["probe", &store.url, "--rounds", "0"]);
    assert_eq!(zero.status.code(), Some(2));
    one_plain_line(&zero, "--rounds 0");
}

#[test]
fn demo_with_a_zero_ttl_leaves_no_temp_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let out = fence(&["demo", "--ttl", "0s"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    one_plain_line(&out, "demo --ttl 0s");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[cfg(all(feature = "gcs", not(feature = "gcs-auth")))]
#[test]
fn gs_without_credentials_or_with_a_malformed_endpoint_says_what_to_set() {
    let bare = fence(&["status", "--store", "gs://bucket/p"])
        .env_remove("FENCE_GCS_ENDPOINT")
        .env_remove("STORAGE_EMULATOR_HOST")
        .output()
        .unwrap();
    assert_eq!(bare.status.code(), Some(2));
    let line = one_plain_line(&bare, "gs:// without credentials");
    assert!(line.contains("FENCE_GCS_ENDPOINT"), "{line}");
    assert!(
        !line.contains("with_token_provider"),
        "library advice: {line}"
    );
    for endpoint in ["http://[::1", "127.0.0.1:notaport", "ftp://x"] {
        let out = fence(&["status", "--store", "gs://bucket/p"])
            .env("FENCE_GCS_ENDPOINT", endpoint)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{endpoint}");
        let line = one_plain_line(&out, endpoint);
        assert!(line.contains("FENCE_GCS_ENDPOINT"), "{line}");
    }
}

/// After `kill -9` of a holder its lease record expires by the clock, yet a run that does not
/// wait is still refused: a takeover first watches the record unchanged for a whole TTL. The
/// refusal must say so and what to do, not leave "busy … expired 1.5s ago" unexplained.
#[test]
fn a_dead_holders_expired_lease_is_busy_without_a_wait_and_says_to_wait() {
    let store = Store::new();
    let mut holder = Holder::start(&store, "dead", "1s");
    kill(Pid::from_raw(holder.child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = holder.child.wait();
    // Past the TTL by the wall clock: `status` would show it expired.
    std::thread::sleep(Duration::from_millis(1_500));
    let now = output(&run_args(&store, "dead", &["--ttl", "1s", "--", "true"]));
    assert_eq!(now.status.code(), Some(75));
    let line = one_plain_line(&now, "an unobserved expiry");
    assert!(line.contains("expired"), "{line}");
    assert!(line.contains("--wait"), "no way forward in {line:?}");
    let waited = output(&run_args(
        &store,
        "dead",
        &["--ttl", "1s", "--timeout", "5s", "--", "true"],
    ));
    assert_eq!(waited.status.code(), Some(0), "{:?}", stderr_lines(&waited));
}

/// Durations past any use (more than a century) are usage errors before anything touches the
/// store: they used to overflow the lease arithmetic (a panic) or the supervising process's
/// millisecond flags (after the lease was taken, naming a flag the user never gave).
#[test]
fn absurd_durations_are_usage_errors_that_touch_nothing() {
    let store = Store::new();
    for flag in [
        ["--ttl", "18446744073709551615s"],
        ["--grace", "99999999999999d"],
        ["--timeout", "99999999999999d"],
    ] {
        let out = output(&run_args(
            &store,
            "absurd",
            &[flag[0], flag[1], "--", "true"],
        ));
        usage_error(&out, flag[0]);
        let listed = std::fs::read_dir(store.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != ".fence")
            .collect::<Vec<_>>();
        assert!(listed.is_empty(), "{flag:?} wrote to the store: {listed:?}");
    }
    let demo = output(&["demo", "--store", "memory://", "--ttl", "99999999999999d"]);
    usage_error(&demo, "demo --ttl");
}

/// A demo fleet too large for one process is a usage error, not an allocation abort or
/// a hundred million tasks.
#[test]
fn a_demo_fleet_too_large_for_one_process_is_a_usage_error() {
    for size in [["--cells", "4000000000"], ["--nodes", "100000000"]] {
        let out = fence(&["demo", "--store", "memory://", size[0], size[1]])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        usage_error(&out, size[0]);
    }
}

/// `out` is exit 2 with one plain line about `what`.
fn usage_error(out: &Output, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: {:?}",
        stderr_lines(out)
    );
    one_plain_line(out, what);
}
