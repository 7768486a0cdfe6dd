//! `fence` for operators, part two (issue 29): one-shot runs after a crash (cron), breaking a
//! lease, semaphores, holding a lease across a script, "acquired" once a wait ends, `--probe`,
//! continuing cells no `fence run` holds, and parallel puts of one holder.
#![allow(clippy::disallowed_methods)]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Child;
use std::time::Duration;

use common::{fence, fence_bin, output, run_args, wait_for_file, Mark, Store};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_hundred_parallel_puts_of_one_holder_all_land() {
    let store = Store::new();
    let fails = store.path("fails");
    let script = format!(
        "for i in $(seq 1 100); do ( \"$FENCE_BIN\" put k$i --value v$i 2>>{err} || echo $? >> {fails} ) & done; wait",
        err = store.path("put.err").display(),
        fails = fails.display(),
    );
    let out = fence(&run_args(
        &store,
        "jobs",
        &["--ttl", "30s", "--", "sh", "-c", &script],
    ))
    .env("FENCE_BIN", fence_bin())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let failed = std::fs::read_to_string(&fails).unwrap_or_default();
    let why = std::fs::read_to_string(store.path("put.err")).unwrap_or_default();
    assert!(failed.is_empty(), "exit codes {failed:?}: {why}");
    for i in [1, 50, 100] {
        let get = output(&[
            "get",
            "--store",
            &store.url,
            "--lease",
            "jobs",
            &format!("k{i}"),
        ]);
        assert_eq!(get.stdout, format!("v{i}").as_bytes(), "{}", stderr(&get));
    }
}

/// A private runtime directory for the sightings one-shot runs keep (`XDG_RUNTIME_DIR`).
struct Runtime(tempfile::TempDir);

impl Runtime {
    fn new() -> Runtime {
        Runtime(tempfile::tempdir().unwrap())
    }

    fn fence(&self, args: &[&str]) -> std::process::Command {
        let mut c = fence(args);
        c.env("XDG_RUNTIME_DIR", self.0.path());
        c
    }

    /// A one-shot `fence run` of `lease` (no wait) that writes its epoch into `got`.
    fn one_shot(&self, store: &Store, lease: &str, ttl: &str) -> (Option<i32>, String) {
        let got = store.path("got");
        let _ = std::fs::remove_file(&got);
        let script = format!("echo $FENCE_EPOCH > {}", got.display());
        let out = self
            .fence(&run_args(
                store,
                lease,
                &["--ttl", ttl, "--", "sh", "-c", &script],
            ))
            .output()
            .unwrap();
        let epoch = std::fs::read_to_string(&got).unwrap_or_default();
        (out.status.code(), epoch.trim().to_owned())
    }
}

/// Sleeps `ms` of real time: the "minute" between two cron runs.
fn minute(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// A holder of `lease` (TTL `ttl`) whose command runs until killed; returns it once it holds.
fn start_holder(rt: &Runtime, store: &Store, lease: &str, ttl: &str, mark: &Mark) -> Child {
    let ready = store.path(&format!("{lease}.ready"));
    let script = format!("echo 1 > {}; exec sleep 600", ready.display());
    let mut cmd = common::run_marked(store, lease, &["--ttl", ttl], mark, &script);
    cmd.env("XDG_RUNTIME_DIR", rt.0.path());
    let child = cmd.spawn().unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    child
}

#[test]
fn cron_runs_take_over_a_killed_holder_by_their_second_run() {
    let (store, rt, mark) = (Store::new(), Runtime::new(), Mark::new());
    let mut holder = start_holder(&rt, &store, "nightly", "1s", &mark);
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGKILL).unwrap();
    holder.wait().unwrap();
    // As in the issue: the dead holder's record has expired (by the clock) before cron runs.
    common::wait_until(
        "the dead holder's record expires",
        Duration::from_secs(60),
        || {
            let json = status_json(&store, "nightly");
            json["leases"][0]["live"] == false && json["leases"][0]["released"] == false
        },
    );
    // Run 1 sees the dead holder's record for the first time: busy, and it says when.
    let (code, _) = rt.one_shot(&store, "nightly", "1s");
    assert_eq!(code, Some(75), "a first sighting never takes over");
    // A "minute" (more than a TTL) later, run 2 continues run 1's watch and holds.
    minute(1_500);
    let (code, epoch) = rt.one_shot(&store, "nightly", "1s");
    assert_eq!(
        code,
        Some(0),
        "the second run takes the dead holder's lease over"
    );
    assert_eq!(epoch, "2");
    // Run 2 released it at its end: run 3 takes it at once, at the next epoch.
    assert_eq!(
        rt.one_shot(&store, "nightly", "1s"),
        (Some(0), "3".to_owned())
    );
}

#[test]
fn a_shorter_timeout_than_the_ttl_succeeds_on_a_later_run() {
    let (store, rt, mark) = (Store::new(), Runtime::new(), Mark::new());
    let mut holder = start_holder(&rt, &store, "t", "2s", &mark);
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGKILL).unwrap();
    holder.wait().unwrap();
    let short = ["--ttl", "2s", "--timeout", "200ms", "--quiet", "--", "true"];
    let first = rt.fence(&run_args(&store, "t", &short)).output().unwrap();
    assert_eq!(first.status.code(), Some(75), "{}", stderr(&first));
    minute(2_500);
    let second = rt.fence(&run_args(&store, "t", &short)).output().unwrap();
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
}

#[test]
fn one_shot_runs_never_take_over_a_live_holder() {
    let (store, rt, mark) = (Store::new(), Runtime::new(), Mark::new());
    // TTL 5 s: renewals every 1.7 s have slack on a loaded machine (with 2 s, a holder
    // whose renewals ran late for a whole TTL was once taken over: rightly, it had lapsed).
    let mut holder = start_holder(&rt, &store, "live", "5s", &mark);
    // Runs close together and runs more than the holder's TTL apart: every one is busy.
    for pause in [0, 5_500, 100, 5_500] {
        minute(pause);
        let (code, _) = rt.one_shot(&store, "live", "2s");
        assert_eq!(code, Some(75), "a one-shot run took over a renewing holder");
    }
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder still runs"
    );
    let status = output(&["status", "--store", &store.url, "live", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["cells"][0]["epoch"], 1, "nobody else claimed it");
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// `unshare` ARGS, if this machine lets the test make namespaces (root, or user namespaces).
fn unshare(args: &[&str]) -> Option<std::process::Command> {
    for user in [&[][..], &["--user", "--map-root-user"]] {
        let probe = std::process::Command::new("unshare")
            .args(user)
            .args(args)
            .arg("true")
            .output();
        if probe.is_ok_and(|o| o.status.success()) {
            let mut c = std::process::Command::new("unshare");
            c.args(user).args(args);
            return Some(c);
        }
    }
    None
}

/// A sighting left by a run in another time namespace — whose boot clock runs 1000 s ahead
/// of this one's — is not taken for 1000 s of watching: a one-shot run there never takes
/// over a live holder.
#[test]
fn a_sighting_from_another_time_namespace_is_not_used() {
    let ahead = [
        "--time",
        "--fork",
        "--boottime",
        "1000",
        "--monotonic",
        "1000",
    ];
    let Some(mut later) = unshare(&ahead) else {
        eprintln!("skipped: no time namespace can be made here");
        return;
    };
    let (store, rt, mark) = (Store::new(), Runtime::new(), Mark::new());
    // TTL 60 s: the holder renews every 20 s, so both runs most likely see one record.
    let mut holder = start_holder(&rt, &store, "ns", "60s", &mark);
    let (code, _) = rt.one_shot(&store, "ns", "60s");
    assert_eq!(code, Some(75));
    let got = store.path("got");
    let script = format!("echo $FENCE_EPOCH > {}", got.display());
    let inner = rt.fence(&run_args(
        &store,
        "ns",
        &["--ttl", "60s", "--", "sh", "-c", &script],
    ));
    later.arg(inner.get_program()).args(inner.get_args());
    for (var, value) in inner.get_envs() {
        match value {
            Some(v) => later.env(var, v),
            None => later.env_remove(var),
        };
    }
    let out = later.output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(!got.exists(), "the live holder's lease was taken over");
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder still runs"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// A sighting file that is not sound — open to others, a symlink, garbage, of another boot,
/// store or node, from the future, too large — is ignored: it can never make a takeover
/// earlier.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_sighting_file_is_ignored() {
    use fence_cli::sightings::Sightings;
    use fence_core::{CasGuard, Clock, ConditionalStore, Fence, Key, MemoryStore};
    use std::os::unix::fs::PermissionsExt;
    if Clock::host().host_instant_of(0).is_none() {
        return; // no host clock here (not Linux)
    }
    let dir = tempfile::tempdir().unwrap();
    let store: std::sync::Arc<dyn ConditionalStore> = std::sync::Arc::new(MemoryStore::new());
    // A dead holder of TTL 200 ms whose wall clock ran an hour ahead.
    let record = format!(
        r#"{{"v":1,"node":"run.x","expires_ms":{},"addr":"pid:1@elsewhere","peer_protocol":1,"generation":"dead","nonce":"dead-1","ttl_ms":200}}"#,
        fence_core::now_ms() + 3_600_000
    );
    let key = Key::new("nodes/run.x.json").unwrap();
    store
        .put(&key, record.into(), CasGuard::Absent)
        .await
        .unwrap();
    let process = || {
        Fence::builder(store.clone(), "run.x")
            .ttl(Duration::from_millis(200))
            .clock(Clock::host())
            .build()
            .unwrap()
    };
    let sightings = Sightings::in_dir(dir.path(), "memory://x");
    assert_eq!(sightings.unavailable(), None);
    let first = process();
    assert!(first.acquire().await.is_err());
    sightings.save_from(&first, "run.x");
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let sound = std::fs::read_to_string(&file).unwrap();
    Clock::system().sleep(Duration::from_millis(500)).await;

    let edited = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_str(&sound).unwrap();
        edit(&mut v);
        v.to_string()
    };
    let hour_ahead = |v: &mut serde_json::Value| {
        let at = v["first_seen_boot_ms"].as_u64().unwrap();
        v["first_seen_boot_ms"] = (at + 3_600_000).into();
    };
    let bad_bodies = [
        "garbage".to_owned(),
        edited(&|v| v["boot_id"] = "another-boot".into()),
        edited(&hour_ahead),
        edited(&|v| v["store"] = "memory://y".into()),
        edited(&|v| v["node"] = "run.y".into()),
        edited(&|v| v["extra"] = 1.into()),
        format!("{sound}{}", " ".repeat(5000)),
    ];
    for body in bad_bodies {
        std::fs::write(&file, &body).unwrap();
        assert!(
            !sightings.load_into(&process(), "run.x"),
            "taken: {body:.80}"
        );
    }
    std::fs::write(&file, &sound).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(
        !sightings.load_into(&process(), "run.x"),
        "a file others can write"
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::rename(&file, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    assert!(!sightings.load_into(&process(), "run.x"), "a symlink");
    std::fs::remove_file(&file).unwrap();
    std::fs::rename(&elsewhere, &file).unwrap();

    // The sound file continues the watch: the record stayed unchanged, so it is taken over.
    let next = process();
    assert!(sightings.load_into(&next, "run.x"));
    next.acquire().await.expect("taken over").release().await;

    // A directory others can write is not used at all.
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(Sightings::in_dir(open.path(), "memory://x")
        .unavailable()
        .is_some());
}

/// The seed's owner record for `billing`: owned by `node_gone` at epoch 7, which has no lease
/// record at all.
const SEED_RECORD: &str = r#"{"node": "node_gone", "epoch": 7}"#;

async fn seed(store: &dyn fence_core::ConditionalStore) {
    let key = fence_core::Key::new("cells/billing/own.json").unwrap();
    store
        .put(&key, SEED_RECORD.into(), fence_core::CasGuard::Absent)
        .await
        .unwrap();
}

fn fs_store(store: &Store) -> fence_fs::FsStore {
    fence_fs::FsStore::open(store.dir.path()).unwrap()
}

#[tokio::test]
async fn a_seed_cell_whose_owner_has_no_lease_is_continued_at_epoch_plus_one() {
    let (store, rt) = (Store::new(), Runtime::new());
    seed(&fs_store(&store)).await;
    // Without a wait: the first run starts watching node_gone's (missing) lease …
    let (code, _) = rt.one_shot(&store, "billing", "1s");
    assert_eq!(code, Some(75));
    // … and a run a TTL later continues the cell at epoch 8.
    minute(1_500);
    let (code, epoch) = rt.one_shot(&store, "billing", "1s");
    assert_eq!(code, Some(0));
    assert_eq!(epoch, "8");

    // Waiting: one run does both.
    let (other, rt) = (Store::new(), Runtime::new());
    seed(&fs_store(&other)).await;
    let wait = [
        "--ttl",
        "1s",
        "--wait",
        "--timeout",
        "20s",
        "--",
        "sh",
        "-c",
        "echo $FENCE_EPOCH",
    ];
    let out = rt
        .fence(&run_args(&other, "billing", &wait))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "8");
}

#[cfg(feature = "s3")]
#[tokio::test]
async fn the_seed_record_on_s3_is_continued_at_epoch_8() {
    let Some(s3) = common::S3Env::moto("the_seed_record_on_s3_is_continued_at_epoch_8") else {
        return;
    };
    let url = s3.fresh_url();
    let direct = s3.direct(&url);
    seed(&direct).await;
    let rt = Runtime::new();
    let args = [
        "run",
        "--store",
        &url,
        "--lease",
        "billing",
        "--wait",
        "--timeout",
        "20s",
        "--ttl",
        "1s",
        "--",
        "sh",
        "-c",
        "echo $FENCE_EPOCH",
    ];
    let out = s3
        .fence(&s3.endpoint, &args)
        .env("XDG_RUNTIME_DIR", rt.0.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "8");
}

/// Runs `cmd` to its end without holding up the test's runtime (a library lease renews there).
async fn off_thread(mut cmd: std::process::Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// A cell that a live process holds through the library (not a `fence run`) is refused, and
/// the refusal names that node; neither runs more than a TTL apart nor a wait take it over.
/// (The worker's TTL, 4 s, leaves its renewals slack on a loaded machine: with 2 s it once
/// lost its lease to a late renewal.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_a_live_library_process_holds_is_refused_and_named() {
    let (store, rt) = (Store::new(), Runtime::new());
    let worker = fence_core::Fence::builder(std::sync::Arc::new(fs_store(&store)), "worker-7")
        .ttl(Duration::from_secs(4))
        .build()
        .unwrap();
    let lease = worker.acquire().await.unwrap();
    let cell = lease.claim("billing").await.unwrap();
    for pause in [0, 4_500] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let once = rt.fence(&run_args(&store, "billing", &["--ttl", "2s", "--", "true"]));
        let out = off_thread(once).await;
        assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
        assert!(stderr(&out).contains("worker-7"), "{}", stderr(&out));
    }
    let waits = rt.fence(&run_args(
        &store,
        "billing",
        &["--ttl", "2s", "--timeout", "5s", "--quiet", "--", "true"],
    ));
    let out = off_thread(waits).await;
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(
        lease.is_held() && cell.epoch() == 1,
        "the worker keeps its cell"
    );
    let status = output(&["status", "--store", &store.url, "billing", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["cells"][0]["holder"], "worker-7");
}

/// A holder whose command writes `$FENCE_SLOT $FENCE_LEASE $FENCE_EPOCH` to `<name>.env` and
/// runs until `<name>.done` appears.
fn slot_holder(store: &Store, name: &str, flags: &[&str]) -> Child {
    let script = format!(
        "echo $FENCE_SLOT $FENCE_LEASE $FENCE_EPOCH > {env}.tmp; mv {env}.tmp {env}; while [ ! -f {done} ]; do sleep 0.02; done",
        env = store.path(&format!("{name}.env")).display(),
        done = store.path(&format!("{name}.done")).display(),
    );
    let mut rest = flags.to_vec();
    rest.extend(["--", "sh", "-c", &script]);
    fence(&run_args(store, "jobs", &rest)).spawn().unwrap()
}

#[test]
fn a_limit_of_two_admits_two_holders_each_with_its_own_slot_and_epoch() {
    let store = Store::new();
    let env =
        |name: &str| wait_for_file(&store.path(&format!("{name}.env")), Duration::from_secs(20));
    let mut a = slot_holder(&store, "a", &["--limit", "2"]);
    let a_env = env("a");
    let mut b = slot_holder(&store, "b", &["--limit", "2"]);
    let b_env = env("b");
    let mut slots = [a_env.clone(), b_env];
    slots.sort();
    assert_eq!(slots, ["0 jobs#0 1", "1 jobs#1 1"]);
    let third = output(&run_args(&store, "jobs", &["--limit", "2", "--", "true"]));
    assert_eq!(third.status.code(), Some(75), "{}", stderr(&third));
    // A waiter gets the first slot freed, at that slot's next epoch.
    let mut c = slot_holder(&store, "c", &["--limit", "2", "--wait", "--quiet"]);
    std::fs::write(store.path("a.done"), "").unwrap();
    assert_eq!(
        common::wait_bounded(&mut a, Duration::from_secs(20), "a").code(),
        Some(0)
    );
    let slot = a_env.split(' ').take(2).collect::<Vec<_>>().join(" ");
    assert_eq!(env("c"), format!("{slot} 2"));
    let status = output(&["status", "--store", &store.url, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let mut cells: Vec<String> = json["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    cells.sort();
    assert_eq!(cells, ["jobs#0", "jobs#1"], "status shows each slot");
    for (child, name) in [(&mut b, "b"), (&mut c, "c")] {
        std::fs::write(store.path(&format!("{name}.done")), "").unwrap();
        assert_eq!(
            common::wait_bounded(child, Duration::from_secs(20), name).code(),
            Some(0)
        );
    }
}

#[test]
fn verbose_says_which_lease_and_epoch_were_acquired() {
    let store = Store::new();
    let quiet = output(&run_args(&store, "v", &["--", "true"]));
    assert_eq!(quiet.status.code(), Some(0));
    assert_eq!(stderr(&quiet), "", "nothing without a wait or -v");
    let loud = output(&run_args(&store, "v", &["-v", "--", "true"]));
    assert_eq!(loud.status.code(), Some(0));
    let said = stderr(&loud);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("epoch 2"), "{said}");
}

#[test]
fn probe_first_runs_the_command_on_an_honest_store_and_leaves_nothing() {
    let store = Store::new();
    let ran = store.path("ran");
    let script = format!("touch {}", ran.display());
    let out = output(&run_args(
        &store,
        "p",
        &["--probe", "--", "sh", "-c", &script],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(ran.exists());
    assert!(
        !store.path("fence-probe").exists(),
        "the probe's keys are removed"
    );
}

/// S3 stores have no conditional delete: the probe removes its own scratch keys with a plain
/// DELETE, so a cron job's `--probe` runs do not pile them up.
#[cfg(feature = "s3")]
#[tokio::test]
async fn probe_first_on_seaweedfs_leaves_nothing_under_its_prefix() {
    let test = "probe_first_on_seaweedfs_leaves_nothing_under_its_prefix";
    let Some(s3) = common::S3Env::seaweed(test) else {
        return;
    };
    let url = s3.fresh_url();
    let args = [
        "run", "--store", &url, "--lease", "p", "--probe", "--", "true",
    ];
    let out = s3.fence(&s3.endpoint, &args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let direct = s3.direct(&url);
    let probe = fence_core::Key::new("fence-probe").unwrap();
    let left = fence_core::ConditionalStore::list(&direct, Some(&probe))
        .await
        .unwrap();
    assert_eq!(
        left,
        Vec::<fence_core::Key>::new(),
        "the probe's keys are removed"
    );
}

#[cfg(feature = "s3")]
#[test]
fn probe_first_refuses_a_lying_store_before_the_command_starts() {
    let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let (Some(endpoint), Some(id), Some(secret), Some(bucket)) = (
        var("FENCE_S3_LIAR_ENDPOINT"),
        var("FENCE_S3_LIAR_ACCESS_KEY_ID"),
        var("FENCE_S3_LIAR_SECRET_ACCESS_KEY"),
        var("FENCE_S3_BUCKET"),
    ) else {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "no FENCE_S3_LIAR_*"
        );
        eprintln!("SKIPPED probe_first_refuses_a_lying_store: no FENCE_S3_LIAR_* variables");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("touch {}", ran.display());
    let url = format!("s3://{bucket}/fence-cli-probe-{}", std::process::id());
    let args = [
        "run", "--store", &url, "--lease", "p", "--probe", "--", "sh", "-c", &script,
    ];
    let out = fence(&args)
        .env("AWS_ENDPOINT", &endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", id)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!ran.exists(), "the command must not start on a lying store");
}

/// `fence status NAME --json` as JSON.
fn status_json(store: &Store, name: &str) -> serde_json::Value {
    let out = output(&["status", "--store", &store.url, name, "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

#[test]
fn break_refuses_a_live_holder_without_force_and_fences_it_with_force() {
    let (store, rt, mark) = (Store::new(), Runtime::new(), Mark::new());
    let mut holder = start_holder(&rt, &store, "b", "5s", &mark);
    let brk = |force: bool| {
        let mut args = vec!["break", "--store", store.url.as_str(), "--lease", "b"];
        if force {
            args.push("--force");
        }
        output(&args)
    };
    let refused = brk(false);
    assert_eq!(refused.status.code(), Some(75), "{}", stderr(&refused));
    assert!(
        holder.try_wait().unwrap().is_none(),
        "a refused break touches nothing"
    );
    let broken = brk(true);
    assert_eq!(broken.status.code(), Some(0), "{}", stderr(&broken));
    assert!(!stderr(&broken).is_empty(), "a break says what it did");
    // The holder's next renewal is rejected: it ends its command and exits 76.
    let status = common::wait_bounded(&mut holder, Duration::from_secs(20), "the holder");
    assert_eq!(status.code(), Some(76));
    let put = output(&[
        "put", "--store", &store.url, "--lease", "b", "--epoch", "1", "k", "--value", "late",
    ]);
    assert_eq!(
        put.status.code(),
        Some(76),
        "epoch 1 is fenced: {}",
        stderr(&put)
    );
    // The next run takes it at once, at the next epoch.
    let (code, epoch) = rt.one_shot(&store, "b", "5s");
    assert_eq!((code, epoch.as_str()), (Some(0), "2"));
}

#[tokio::test]
async fn break_lets_the_next_run_take_a_dead_holders_or_a_seed_cell_at_once() {
    let (store, rt, mark) = (Store::new(), Runtime::new(), Mark::new());
    let mut holder = start_holder(&rt, &store, "d", "1s", &mark);
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGKILL).unwrap();
    holder.wait().unwrap();
    minute(1_200); // its record has expired by the clock: no --force needed
    let broken = output(&["break", "--store", &store.url, "--lease", "d"]);
    assert_eq!(broken.status.code(), Some(0), "{}", stderr(&broken));
    let (code, epoch) = rt.one_shot(&store, "d", "1s");
    assert_eq!(
        (code, epoch.as_str()),
        (Some(0), "2"),
        "no TTL of watching after a break"
    );

    seed(&fs_store(&store)).await;
    let broken = output(&["break", "--store", &store.url, "--lease", "billing"]);
    assert_eq!(broken.status.code(), Some(0), "{}", stderr(&broken));
    assert_eq!(
        status_json(&store, "billing")["cells"][0]["holder"],
        serde_json::Value::Null
    );
    let (code, epoch) = rt.one_shot(&store, "billing", "1s");
    assert_eq!((code, epoch.as_str()), (Some(0), "8"));

    let missing = output(&["break", "--store", &store.url, "--lease", "nothing"]);
    assert_eq!(missing.status.code(), Some(3));
}

/// `sh -c SCRIPT` with the fence under test first on PATH and the store in FENCE_STORE.
fn script(store: &Store, rt: &Runtime, text: &str) -> std::process::Command {
    let bin = std::path::Path::new(fence_bin())
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg(text)
        .env("PATH", path)
        .env("FENCE_STORE", &store.url)
        .env("XDG_RUNTIME_DIR", rt.0.path())
        .env_remove("FENCE_LEASE")
        .env_remove("FENCE_EPOCH")
        .env_remove("FENCE_HOLDER");
    c
}

#[test]
fn a_script_section_holds_the_lease_between_acquire_and_release() {
    let (store, rt) = (Store::new(), Runtime::new());
    let busy = store.path("busy");
    let text = format!(
        r#"set -e
eval "$(fence acquire --lease sect --ttl 2s)"
echo "$FENCE_EPOCH" > {epoch}
fence put k --value "in the section"
fence run --lease sect -- true 2>/dev/null || echo $? > {busy}
fence release"#,
        epoch = store.path("epoch").display(),
        busy = busy.display(),
    );
    let out = script(&store, &rt, &text).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(store.path("epoch")).unwrap().trim(),
        "1"
    );
    assert_eq!(
        std::fs::read_to_string(&busy).unwrap().trim(),
        "75",
        "held meanwhile"
    );
    let json = status_json(&store, "sect");
    assert_eq!(
        json["cells"][0]["holder"],
        serde_json::Value::Null,
        "released"
    );
    assert_eq!(json["cells"][0]["epoch"], 1);
    let get = output(&["get", "--store", &store.url, "--lease", "sect", "k"]);
    assert_eq!(get.stdout, b"in the section");
}

#[test]
fn a_killed_script_lets_go_of_its_lease() {
    let (store, rt) = (Store::new(), Runtime::new());
    let text = r#"eval "$(fence acquire --lease gone --ttl 5s)"; kill -9 $$"#;
    let out = script(&store, &rt, text).output().unwrap();
    assert_eq!(out.status.signal(), Some(9));
    common::wait_until("the lease released", Duration::from_secs(10), || {
        status_json(&store, "gone")["cells"][0]["holder"].is_null()
    });
    let (code, epoch) = rt.one_shot(&store, "gone", "5s");
    assert_eq!((code, epoch.as_str()), (Some(0), "2"));
}

#[test]
fn a_script_whose_lease_is_lost_is_told_and_its_release_says_so() {
    let (store, rt) = (Store::new(), Runtime::new());
    let text = format!(
        r#"eval "$(fence acquire --lease lost --ttl 2s)"
trap 'echo term > {term}' TERM
echo ready > {ready}
while [ ! -f {go} ]; do sleep 0.05; done
fence release; echo $? > {released}"#,
        term = store.path("term").display(),
        ready = store.path("ready").display(),
        go = store.path("go").display(),
        released = store.path("released").display(),
    );
    let mut sh = script(&store, &rt, &text).spawn().unwrap();
    wait_for_file(&store.path("ready"), Duration::from_secs(20));
    let broken = output(&["break", "--store", &store.url, "--lease", "lost", "--force"]);
    assert_eq!(broken.status.code(), Some(0), "{}", stderr(&broken));
    wait_for_file(&store.path("term"), Duration::from_secs(20));
    std::fs::write(store.path("go"), "").unwrap();
    common::wait_bounded(&mut sh, Duration::from_secs(20), "the script");
    let released = std::fs::read_to_string(store.path("released")).unwrap();
    assert_eq!(released.trim(), "76", "release reports the loss");
}

/// Ctrl-C of `fence acquire` while it waits (the shell goes on without the variables): its
/// holder must not keep the lease for a shell that never learnt its epoch.
#[test]
fn a_holder_whose_acquire_was_interrupted_lets_go() {
    let (store, rt, mark) = (Store::new(), Runtime::new(), Mark::new());
    let mut first = start_holder(&rt, &store, "int", "5s", &mark);
    let shell = script(&store, &rt, "exec sleep 600").spawn().unwrap();
    let mut acquire = rt
        .fence(&[
            "acquire", "--store", &store.url, "--lease", "int", "--wait", "--quiet",
        ])
        .args(["--pid", &shell.id().to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    minute(300);
    kill(Pid::from_raw(acquire.id() as i32), Signal::SIGINT).unwrap();
    acquire.wait().unwrap();
    drop(acquire.stdout.take());
    kill(Pid::from_raw(first.id() as i32), Signal::SIGTERM).unwrap();
    first.wait().unwrap();
    // The orphaned holder takes the lease (epoch 2), finds nobody to tell, and releases it.
    common::wait_until("epoch 2 released", Duration::from_secs(20), || {
        let cell = &status_json(&store, "int")["cells"][0];
        cell["epoch"] == 2 && cell["holder"].is_null()
    });
    let mut shell = shell;
    shell.kill().unwrap();
    shell.wait().unwrap();
}
