//! Takeover after SIGKILL of the holder, on local files: how long after `kill -9` of a
//! `fence run` holder does a waiting `fence run --wait` start its command? And, side by side,
//! how long after a holder's command simply exits (a release)?
//!
//! ```sh
//! cargo build -p fence-cli --examples && target/debug/examples/takeover [TRIALS] [TTL...]
//! # defaults: 10 trials each of TTL 2s and 5s
//! ```
//!
//! Each trial: a holder whose command runs for good; a waiter started after it (it waits a
//! random part of a TTL, so the holder is killed at a random phase of its renewals and of the
//! waiter's polling); `kill -9` of the holder's `fence`; the time until the waiter's command
//! prints its start. The line per TTL gives min, median, max and the worst case as a ratio of
//! the TTL and of the goal TTL + TTL/3 + 100 ms. The release trials instead let the holder's
//! command exit at a random moment and time the waiter's start from then.
// A benchmark of real processes measures real time (wall clock, shared with `date +%s%N` of
// the waiter's command); the crate's clock rules are for the library.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fence_core::Entropy;

fn fence_bin() -> PathBuf {
    if let Ok(path) = std::env::var("FENCE_BIN") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/examples/takeover → target/<profile>/fence
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("fence"))
        .expect("target dir")
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A `fence run` that is killed and reaped when dropped.
struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(fence: &Path, url: &str, ttl: &str, extra: &[&str], script: &str) -> Run {
    let child = Command::new(fence)
        .args(["run", "--store", url, "--lease", "bench", "--ttl", ttl])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn fence run");
    Run(child)
}

fn wait_file(path: &Path, limit: Duration) -> Option<String> {
    let start = Instant::now();
    while start.elapsed() < limit {
        match std::fs::read_to_string(path) {
            Ok(s) if !s.trim().is_empty() => return Some(s.trim().to_owned()),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    None
}

/// How a trial's holder goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// `kill -9` of its `fence`.
    Killed,
    /// Its command exits, so it releases the lease.
    Released,
}

/// One trial: milliseconds from the holder's end to the waiter's command start.
fn trial(fence: &Path, ttl: Duration, exit: Exit, entropy: &Entropy) -> Option<f64> {
    let dir = tempfile::tempdir().ok()?;
    let url = format!("file://{}", dir.path().display());
    let ttl_arg = format!("{}ms", ttl.as_millis());
    let (ready, started, gone) = (
        dir.path().join("ready"),
        dir.path().join("started"),
        dir.path().join("gone"),
    );
    let phase = ttl.as_millis() as u64 / 2 + entropy.below(ttl.as_millis() as u64 / 2 + 1);
    let holder_script = match exit {
        Exit::Killed => format!("echo 1 > {}; exec sleep 1000", ready.display()),
        Exit::Released => format!(
            "echo 1 > {}; sleep {}; date +%s%N > {}",
            ready.display(),
            phase as f64 / 1e3,
            gone.display()
        ),
    };
    let holder = run(fence, &url, &ttl_arg, &[], &holder_script);
    wait_file(&ready, Duration::from_secs(10))?;
    let waiter = run(
        fence,
        &url,
        &ttl_arg,
        &["--wait", "--quiet"],
        &format!("date +%s%N > {}", started.display()),
    );
    let ended_at = match exit {
        Exit::Killed => {
            std::thread::sleep(Duration::from_millis(phase));
            let at = now_ns();
            drop(holder);
            at
        }
        Exit::Released => wait_file(&gone, ttl * 4)?.parse().ok()?,
    };
    let start = wait_file(&started, ttl * 4 + Duration::from_secs(5));
    drop(waiter);
    let start: u128 = start?.parse().ok()?;
    Some(start.saturating_sub(ended_at) as f64 / 1e6)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let trials: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10);
    let mut ttls: Vec<Duration> = args
        .iter()
        .skip(1)
        .filter_map(|a| humantime::parse_duration(a).ok())
        .collect();
    if ttls.is_empty() {
        ttls = vec![Duration::from_secs(2), Duration::from_secs(5)];
    }
    let fence = fence_bin();
    let entropy = Entropy::from_os();
    println!(
        "takeover by a waiting fence run, local files, {trials} trials each ({})",
        fence.display()
    );
    for ttl in ttls {
        for exit in [Exit::Killed, Exit::Released] {
            let mut ms: Vec<f64> = (0..trials)
                .filter_map(|_| trial(&fence, ttl, exit, &entropy))
                .collect();
            ms.sort_by(f64::total_cmp);
            report(ttl, exit, &ms);
        }
    }
}

fn report(ttl: Duration, exit: Exit, ms: &[f64]) {
    let what = match exit {
        Exit::Killed => "after SIGKILL",
        Exit::Released => "after release",
    };
    if ms.is_empty() {
        println!("TTL {ttl:?} {what}: no trial completed");
        return;
    }
    let ttl_ms = ttl.as_millis() as f64;
    let goal = ttl_ms + ttl_ms / 3.0 + 100.0;
    let (min, median, max) = (ms[0], ms[ms.len() / 2], ms[ms.len() - 1]);
    println!(
        "TTL {ttl:?} {what}: n={} min {min:.0} ms, median {median:.0} ms, max {max:.0} ms; \
         worst / TTL = {:.2}, worst / goal (TTL + TTL/3 + 100 ms = {goal:.0} ms) = {:.2}",
        ms.len(),
        max / ttl_ms,
        max / goal
    );
}
