//! `fence release` and `fence acquire` (issues 42 and 38): nothing read from the store
//! chooses which process is signalled — a hostile lease record naming a live process, a
//! `FENCE_HOLDER` naming it, a holder whose pid another process took since — and what
//! `fence release`, `fence acquire` and a broken holder say.
#![allow(clippy::disallowed_methods)]

mod common;

use std::process::{Child, Command, Output};
use std::time::Duration;

use common::{fence, fence_bin, output, wait_for_file, Store};
use fence_cli::holder::HolderRecord;
use fence_cli::script::Watched;
use fence_core::{CasGuard, ConditionalStore, Key};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A private runtime directory (`XDG_RUNTIME_DIR`, mode 0700) for holder files.
struct Runtime(tempfile::TempDir);

impl Runtime {
    fn new() -> Runtime {
        Runtime(tempfile::tempdir().unwrap())
    }

    /// `fence ARGS` with this runtime directory.
    fn fence(&self, args: &[&str]) -> Command {
        let mut c = fence(args);
        c.env("XDG_RUNTIME_DIR", self.0.path())
            .env_remove("FENCE_HOLDER");
        c
    }

    /// `sh -c SCRIPT` with the fence under test first on PATH, the store in FENCE_STORE.
    fn script(&self, store: &Store, text: &str) -> Command {
        let bin = std::path::Path::new(fence_bin())
            .parent()
            .unwrap()
            .to_owned();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(text)
            .env("PATH", path)
            .env("FENCE_STORE", &store.url)
            .env("XDG_RUNTIME_DIR", self.0.path())
            .env_remove("FENCE_LEASE")
            .env_remove("FENCE_EPOCH")
            .env_remove("FENCE_HOLDER");
        c
    }
}

/// A process of this host that nobody may signal on the store's say-so; killed on drop.
struct Victim(Child);

impl Victim {
    fn start() -> Victim {
        Victim(Command::new("sleep").arg("600").spawn().unwrap())
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    fn start_time(&self) -> u64 {
        Watched::new(self.pid()).unwrap().start().unwrap()
    }

    /// A holder token naming this process, as a forger would write it.
    fn token(&self) -> String {
        format!("{}:{}:{}", self.pid(), self.start_time(), "5e".repeat(16))
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lease record a bucket writer forges: `fence run`'s node lease of `lease`, naming
/// process `pid` on this host, expiring in ten years.
fn hostile_record(lease: &str, pid: i32) -> (Key, bytes::Bytes) {
    let host = fence_cli::take::holder_addr();
    let host = host.split_once('@').unwrap().1;
    let expires = fence_core::now_ms() + 10 * 365 * 24 * 3600 * 1000;
    let body = serde_json::json!({
        "v": 1, "node": format!("run.{lease}"), "expires_ms": expires,
        "addr": format!("pid:{pid}@{host}"), "generation": "g-hostile", "nonce": "n-hostile",
    });
    let key = Key::new(format!("nodes/run.{lease}.json")).unwrap();
    (key, body.to_string().into())
}

async fn write_hostile(store: &dyn ConditionalStore, lease: &str, pid: i32) {
    let (key, body) = hostile_record(lease, pid);
    store.put(&key, body, CasGuard::Absent).await.unwrap();
}

/// `fence release` refused: exit 2, said why, signalled nothing.
fn assert_refused(out: &Output, case: &str) {
    let said = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{case}: {said}");
    assert!(said.contains("nothing was signalled"), "{case}: {said}");
}

#[tokio::test]
async fn a_hostile_lease_record_gets_no_process_signalled() {
    let (store, rt) = (Store::new(), Runtime::new());
    let (mut victim, mut bystander) = (Victim::start(), Victim::start());
    write_hostile(
        &fence_fs::FsStore::open(store.dir.path()).unwrap(),
        "x",
        victim.pid(),
    )
    .await;
    // A live holder, of another lease.
    let other = rt
        .fence(&["acquire", "--store", &store.url, "--lease", "other"])
        .args(["--pid", &bystander.pid().to_string()])
        // Its holder keeps stderr open while it holds: do not wait for that.
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(0), "{}", stderr(&other));
    let other_token = String::from_utf8_lossy(&other.stdout)
        .lines()
        .find_map(|l| {
            Some(
                l.strip_prefix("FENCE_HOLDER='")?
                    .split_once('\'')?
                    .0
                    .to_owned(),
            )
        })
        .unwrap();
    let cases = [
        ("no FENCE_HOLDER", None),
        ("the victim's bare pid", Some(victim.pid().to_string())),
        ("a token naming the victim", Some(victim.token())),
        (
            "a token naming a process that is no holder",
            Some(bystander.token()),
        ),
        ("the token of a holder of another lease", Some(other_token)),
    ];
    for (case, holder) in cases {
        let mut release = rt.fence(&["release", "--store", &store.url, "--lease", "x"]);
        if let Some(h) = &holder {
            release.env("FENCE_HOLDER", h);
        }
        assert_refused(&release.output().unwrap(), case);
        assert!(
            victim.alive() && bystander.alive(),
            "{case}: a process was killed"
        );
    }
    let status = output(&["status", "--store", &store.url, "other", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        status["cells"][0]["holder"], "run.other",
        "its holder holds on"
    );
}

/// The same record on an S3 store (moto).
#[cfg(feature = "s3")]
#[tokio::test]
async fn a_hostile_lease_record_on_s3_gets_no_process_signalled() {
    let test = "a_hostile_lease_record_on_s3_gets_no_process_signalled";
    let Some(s3) = common::S3Env::moto(test) else {
        return;
    };
    let url = s3.fresh_url();
    let direct = s3.direct(&url);
    let (rt, mut victim) = (Runtime::new(), Victim::start());
    write_hostile(&direct, "x", victim.pid()).await;
    for holder in [None, Some(victim.pid().to_string())] {
        let mut release = s3.fence(&s3.endpoint, &["release", "--store", &url, "--lease", "x"]);
        release
            .env("XDG_RUNTIME_DIR", rt.0.path())
            .env_remove("FENCE_HOLDER");
        if let Some(h) = &holder {
            release.env("FENCE_HOLDER", h);
        }
        assert_refused(&release.output().unwrap(), &format!("{holder:?}"));
        assert!(victim.alive(), "{holder:?}: the victim was killed");
    }
}

/// A holder was SIGKILLed and its pid went to another process: its token and its file
/// still name that pid, with the holder's start time, which the new process does not have.
#[tokio::test]
async fn a_holder_whose_pid_another_process_took_is_not_signalled() {
    let (store, rt) = (Store::new(), Runtime::new());
    let mut victim = Victim::start();
    // The dead holder's own lease record names the pid too.
    write_hostile(
        &fence_fs::FsStore::open(store.dir.path()).unwrap(),
        "x",
        victim.pid(),
    )
    .await;
    let url = fence_cli::stores::open(&store.url, None).unwrap().url;
    let dir = rt.0.path().join("fence");
    std::fs::create_dir(&dir).unwrap();
    let dead_holder = Watched::at(victim.pid(), Some(victim.start_time() - 1));
    let script = Watched::new(std::process::id() as i32).unwrap();
    let (_file, token) = HolderRecord::create_in(&dir, &dead_holder, &url, "x", &script).unwrap();
    let out = rt
        .fence(&["release", "--store", &store.url, "--lease", "x"])
        .env("FENCE_HOLDER", token.to_string())
        .output()
        .unwrap();
    let said = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(76),
        "the section was not protected to its end: {said}"
    );
    assert!(said.contains("ended without releasing it"), "{said}");
    assert!(victim.alive(), "the process that took the pid was killed");
}

#[test]
fn a_second_release_after_a_clean_one_is_not_a_loss() {
    let (store, rt) = (Store::new(), Runtime::new());
    let text = r#"eval "$(fence acquire --lease twice --ttl 5s)" || exit 9
fence release; first=$?
fence release; echo "$first $?""#;
    let out = rt.script(&store, text).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0 0",
        "{}",
        stderr(&out)
    );
}

#[test]
fn acquire_speaks_as_fence_acquire() {
    let (store, rt) = (Store::new(), Runtime::new());
    let mut holder = fence(&["run", "--store", &store.url, "--lease", "b", "--ttl", "5s"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut epoch = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut epoch,
    )
    .unwrap();
    let busy = rt
        .fence(&[
            "acquire",
            "--store",
            &store.url,
            "--lease",
            "b",
            "--timeout",
            "300ms",
        ])
        .output()
        .unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    let said = stderr(&busy);
    assert_eq!(busy.status.code(), Some(75), "{said}");
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 2, "{said}");
    assert!(
        lines[0].starts_with("fence acquire: waiting for lease \"b\""),
        "{said}"
    );
    assert!(
        lines[1].starts_with("fence acquire: lease \"b\" is busy"),
        "{said}"
    );
}

/// `fence break --force` while the command runs on to its end before the holder renews: the
/// holder's release finds the cell released at its own epoch, and says so.
#[test]
fn a_holder_broken_before_its_release_says_the_cell_was_released_by_another() {
    let store = Store::new();
    let (ready, go) = (store.path("ready"), store.path("go"));
    let script = format!(
        "echo ready > {}; while [ ! -f {} ]; do sleep 0.05; done",
        ready.display(),
        go.display()
    );
    let args = [
        "run", "--store", &store.url, "--lease", "w", "--ttl", "30s", "--", "sh", "-c",
    ];
    let run = fence(&args)
        .arg(&script)
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut run = run.unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    let broken = output(&["break", "--store", &store.url, "--lease", "w", "--force"]);
    assert_eq!(broken.status.code(), Some(0), "{}", stderr(&broken));
    std::fs::write(&go, "").unwrap();
    common::wait_bounded(&mut run, Duration::from_secs(20), "fence run");
    let said = stderr(&run.wait_with_output().unwrap());
    assert!(!said.contains("superseded (now 1)"), "{said}");
    assert!(
        said.contains("epoch 1 was released by another process"),
        "{said}"
    );
}

/// `kill` takes pid 0 for the caller's process group and -1 for every process it may
/// signal: `--pid` names one process, so the holder never signals a group on the store's say.
#[test]
fn acquire_refuses_a_pid_that_kill_takes_for_a_group() {
    let (store, rt) = (Store::new(), Runtime::new());
    for pid in ["0", "-1"] {
        let err = tempfile::NamedTempFile::new().unwrap();
        let out = rt
            .fence(&["acquire", "--store", &store.url, "--lease", "g"])
            .arg(format!("--pid={pid}"))
            .stderr(err.reopen().unwrap())
            .output()
            .unwrap();
        let said = std::fs::read_to_string(err.path()).unwrap();
        if out.status.success() {
            // A holder was started (before the fix): end it before it can signal anything.
            let vars = String::from_utf8_lossy(&out.stdout);
            let holder = vars.split("FENCE_HOLDER='").nth(1).unwrap_or_default();
            let pid: String = holder.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(pid) = pid.parse::<i32>() {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        assert_eq!(out.status.code(), Some(2), "--pid={pid}: {said}");
        assert!(said.contains("--pid"), "--pid={pid}: {said}");
    }
}

/// A holder is handed the script's pid and start time, read by `fence acquire` before any
/// wait: a script that ended while its lease was awaited is never mistaken for the process
/// that took its pid since, which the holder would otherwise watch, keep the lease for and
/// signal on a loss (on main the holder read the start time itself, once it held the lease).
#[test]
fn a_holder_never_holds_for_the_process_that_took_its_scripts_pid() {
    let (store, rt) = (Store::new(), Runtime::new());
    let mut victim = Victim::start();
    let taken = format!("{}:{}", victim.pid(), victim.start_time() + 1);
    let held = rt
        .fence(&[
            "run",
            "--store",
            &store.url,
            "--lease",
            "p",
            "--for-pid",
            &taken,
        ])
        .output()
        .unwrap();
    assert_eq!(held.status.code(), Some(0), "{}", stderr(&held));
    assert!(
        victim.alive(),
        "the process with the script's pid was signalled"
    );
    let next = output(&["run", "--store", &store.url, "--lease", "p", "--", "true"]);
    assert_eq!(
        next.status.code(),
        Some(0),
        "the lease was kept: {}",
        stderr(&next)
    );
}

/// `fence acquire --pid` of a process that does not run is refused before anything is
/// taken (on main a holder took the lease and gave it back at once).
#[test]
fn acquire_refuses_a_script_that_does_not_run() {
    let (store, rt) = (Store::new(), Runtime::new());
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id().to_string();
    gone.wait().unwrap();
    let out = rt
        .fence(&[
            "acquire", "--store", &store.url, "--lease", "g", "--pid", &pid,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&pid), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "lines for eval: {:?}", out.stdout);
}
