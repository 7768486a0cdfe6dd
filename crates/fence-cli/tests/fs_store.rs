//! The `fence` binary on local files (fence-fs): a stopped holder is taken over, a read-only
//! store can be inspected, a waiter rides through a claim that fails for a store reason, and
//! a store can be shared by a group.

mod common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{fence, fence_bin, output, run_args, wait_bounded, wait_for_file, Mark, Store};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `PATH` with this build's `fence` first, for commands that call `fence put`.
fn path_with_fence() -> String {
    let dir = Path::new(fence_bin())
        .parent()
        .unwrap()
        .display()
        .to_string();
    format!("{dir}:{}", std::env::var("PATH").unwrap_or_default())
}

/// The holder of docs/cli.md's walk-through: its command writes with `fence put` in a loop
/// (here without the sleep, so that a stop finds a `fence put` in flight more often). Its
/// processes carry `mark` (they run in their own PID namespace, so their `$$` means nothing
/// here).
fn start_writing_holder(store: &Store, lease: &str, ttl: &str, mark: &Mark) -> Child {
    let started = store.path(&format!("{lease}.started"));
    let script = format!(
        "echo started > {}; while fence put beat --value \"$FENCE_EPOCH\"; do :; done",
        started.display()
    );
    let command = mark.sh(&script);
    let mut args = run_args(store, lease, &["--ttl", ttl, "--"]);
    args.extend(command.iter().map(String::as_str));
    let holder = fence(&args)
        .env("PATH", path_with_fence())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(30));
    holder
}

/// Ctrl-Z of the walk-through: the command's processes stop, then `fence run`.
fn stop_job(holder: &Child, mark: &Mark) {
    for pid in mark.processes() {
        let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
    }
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGSTOP).unwrap();
}

/// A `fence run --timeout 30s` of `lease` (with `flags`) whose command prints its epoch.
fn spawn_waiter(store: &Store, lease: &str, flags: &[&str]) -> Child {
    let mut rest = flags.to_vec();
    rest.extend([
        "--timeout",
        "30s",
        "--",
        "sh",
        "-c",
        "echo got epoch $FENCE_EPOCH",
    ]);
    fence(&run_args(store, lease, &rest))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a finished `child` wrote to its piped stdout and stderr.
fn outputs(child: &mut Child) -> (String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (out, err)
}

/// Ends a stopped holder and its command for good.
fn kill_job(mut holder: Child, mark: &Mark) {
    let _ = kill(Pid::from_raw(holder.id() as i32), Signal::SIGKILL);
    holder.wait().unwrap();
    mark.kill_all();
}

/// docs/cli.md's walk-through, 12 times: a holder whose command writes with `fence put` in a
/// loop is stopped (Ctrl-Z: the command, then `fence run`, often in the middle of a `fence
/// put` or of a renewal), and a `fence run --timeout` waiter takes over every time. (With
/// the first fence-fs layout, a `fence put` stopped while it held the head's lock made the
/// waiter's claim time out — exit 69 — and a `fence run` stopped in a renewal kept the node
/// lease's lock, so the waiter's wait ran out — exit 75.)
#[test]
fn a_stopped_holder_is_taken_over_every_time() {
    for attempt in 0..12 {
        let store = Store::new();
        let mark = Mark::new();
        // TTL 2 s: with 1 s a loaded CI machine once kept the holder from starting its
        // command at all (its renewals, every 333 ms, fell behind).
        let holder = start_writing_holder(&store, "demo", "2s", &mark);
        std::thread::sleep(Duration::from_millis(200 + 37 * (attempt % 7)));
        stop_job(&holder, &mark);
        // The waiter's own TTL is longer than the holder's: its renewals must not be what a
        // loaded machine fails (the point is that the stopped holder's 2 s lease is taken).
        let mut waiter = spawn_waiter(&store, "demo", &["--ttl", "3s"]);
        let status = wait_bounded(&mut waiter, Duration::from_secs(60), "the waiter");
        kill_job(holder, &mark);
        let (out, err) = outputs(&mut waiter);
        assert_eq!(status.code(), Some(0), "attempt {attempt}: {err}");
        let epoch: u64 = out
            .trim()
            .strip_prefix("got epoch ")
            .unwrap()
            .parse()
            .unwrap();
        assert!(epoch >= 2, "attempt {attempt}: {out}");
    }
}

/// Runs `script` as root of a new mount namespace (a user namespace too when this process is
/// not root), so that it can bind-mount without touching the host's mounts.
fn in_mount_namespace(script: &str) -> std::process::Output {
    use std::os::unix::fs::MetadataExt;
    let mine = tempfile::tempfile().unwrap().metadata().unwrap();
    let mut unshare = Command::new("unshare");
    if mine.uid() != 0 {
        unshare.args(["--user", "--map-root-user"]);
    }
    unshare
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .output()
        .expect("unshare (util-linux) runs")
}

/// `fence status` and `fence get` on a read-only bind mount of a store (a snapshot, a
/// read-only mount): they read and print, and write nothing (the first layout refused to
/// open such a store: exit 69 "not writable"). Runs in a private mount namespace, so the
/// host is untouched; it fails rather than skips where that cannot be made.
#[test]
fn status_and_get_work_on_a_read_only_bind_mount() {
    let store = Store::new();
    let put = fence(&run_args(
        &store,
        "ro",
        &["--", "fence", "put", "k", "--value", "v1"],
    ))
    .env("PATH", path_with_fence())
    .output()
    .unwrap();
    assert_eq!(
        put.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let view = tempfile::tempdir().unwrap();
    let (src, dst, bin) = (
        store.dir.path().display(),
        view.path().display(),
        fence_bin(),
    );
    let script = format!(
        "set -e; mount --bind {src} {dst}; mount -o remount,bind,ro {dst}; \
         if touch {dst}/probe 2>/dev/null; then echo WRITABLE; exit 9; fi; \
         {bin} status --store file://{dst} --json; \
         {bin} get --store file://{dst} --lease ro k"
    );
    let out = in_mount_namespace(&script);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("\"name\": \"ro\""), "{stdout}");
    assert!(stdout.ends_with("v1"), "{stdout}");
    assert!(!store.path("probe").exists());
}

/// A waiter whose claim fails for a store reason (something fence-fs did not make sits where
/// the cell's head belongs) retries it while its wait lasts, and takes the lease once the
/// store is sound again (the first layout's `fence run --timeout` gave up at once: exit 69).
#[test]
fn a_waiter_retries_a_claim_that_failed_for_a_store_reason() {
    let store = Store::new();
    assert_eq!(
        output(&run_args(&store, "w", &["--", "true"]))
            .status
            .code(),
        Some(0)
    );
    let head = store.path("cells/w/own.json.fence");
    let aside = store.path("own.json.aside");
    std::fs::rename(&head, &aside).unwrap();
    nix::unistd::mkfifo(&head, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut waiter = spawn_waiter(&store, "w", &[]);
    std::thread::sleep(Duration::from_millis(1_500));
    let gave_up_early = waiter.try_wait().unwrap();
    std::fs::remove_file(&head).unwrap();
    std::fs::rename(&aside, &head).unwrap();
    let status = wait_bounded(&mut waiter, Duration::from_secs(30), "the waiter");
    let (out, err) = outputs(&mut waiter);
    assert!(gave_up_early.is_none(), "the waiter gave up: {err}");
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(out.trim(), "got epoch 2");
    assert!(err.contains("retrying while the wait lasts"), "{err}");
}

/// Every file and directory below `dir` with its mode bits.
fn modes_below(dir: &Path, out: &mut Vec<(String, bool, u32)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        let name = entry.path().display().to_string();
        out.push((name, meta.is_dir(), meta.permissions().mode() & 0o7777));
        if meta.is_dir() {
            modes_below(&entry.path(), out);
        }
    }
}

/// `--file-mode` (and `FENCE_FILE_MODE`) give the modes of what a file store creates — also
/// by the command `fence run` starts — so that a group can share a store, as /var/lock is
/// shared; a mode the store cannot work with is a usage error.
#[test]
fn a_group_shares_a_store_with_file_mode() {
    for (how, file, dir) in [("flag", 0o660, 0o2770), ("env", 0o640, 0o2750)] {
        let store = Store::new();
        std::fs::set_permissions(store.dir.path(), std::fs::Permissions::from_mode(0o2770))
            .unwrap();
        let mut args = vec![];
        if how == "flag" {
            args.extend(["--file-mode", "0660"]);
        }
        args.extend(run_args(
            &store,
            "g",
            &["--", "fence", "put", "k", "--value", "v"],
        ));
        let mut cmd = fence(&args);
        cmd.env("PATH", path_with_fence());
        if how == "env" {
            cmd.env("FENCE_FILE_MODE", "0640");
        }
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut modes = Vec::new();
        modes_below(store.dir.path(), &mut modes);
        assert!(modes
            .iter()
            .any(|(n, _, _)| n.contains("cells/g/own.json.fence/i")));
        for (name, is_dir, mode) in modes {
            let want = if is_dir { dir } else { file };
            assert_eq!(mode, want, "{how}: {name} is {mode:o}");
        }
    }
    let bad = output(&["--file-mode", "0755", "status", "--store", "file:///tmp"]);
    assert_eq!(bad.status.code(), Some(2));
}
