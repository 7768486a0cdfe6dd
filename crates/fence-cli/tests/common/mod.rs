//! Helpers for tests that spawn the real `fence` binary on local files.
#![allow(dead_code)]
// Tests bound their waits with wall time; the crate's clock rules are for the library.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// The binary under test: this build's, or `FENCE_TEST_BIN` (to run these tests against
/// another build, e.g. to check that a test fails on the code before a fix).
pub fn fence_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("FENCE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_fence").to_owned())
    })
}

/// The `--ttl` of a holder that a test pauses (SIGSTOP) to make it lose its lease. Not
/// shorter: the holder must keep its lease until the pause on a loaded two-core CI machine,
/// and a 1 s lease once lapsed there before its command had started.
pub const PAUSED_TTL: &str = "2s";

/// A pause past [`PAUSED_TTL`]: when the holder continues, its lease is over by its own
/// monotonic clock.
pub const PAST_TTL: Duration = Duration::from_millis(2_500);

/// A fresh store directory and its URL.
pub struct Store {
    pub dir: tempfile::TempDir,
    pub url: String,
}

impl Store {
    pub fn new() -> Store {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("file://{}", dir.path().display());
        Store { dir, url }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// `fence ARGS` with FENCE_* variables cleared; `FENCE_TEST_CONTAINMENT` (e.g. `fallback`),
/// if set, becomes every run's `FENCE_CONTAINMENT`, to run a whole suite in one mode.
pub fn fence(args: &[&str]) -> Command {
    let mut c = Command::new(fence_bin());
    c.args(args);
    for v in [
        "FENCE_STORE",
        "FENCE_LEASE",
        "FENCE_EPOCH",
        "FENCE_NODE",
        "FENCE_CONTAINMENT",
    ] {
        c.env_remove(v);
    }
    if let Ok(mode) = std::env::var("FENCE_TEST_CONTAINMENT") {
        c.env("FENCE_CONTAINMENT", mode);
    }
    c
}

/// `run --store STORE --lease LEASE REST...`
pub fn run_args<'a>(store: &'a Store, lease: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--store", store.url.as_str(), "--lease", lease];
    args.extend_from_slice(rest);
    args
}

/// Runs `fence ARGS` to completion.
pub fn output(args: &[&str]) -> Output {
    fence(args).output().expect("spawn fence")
}

/// Waits for `child` up to `limit`; kills it and panics past that.
pub fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `path` exists and is non-empty; panics after `limit`.
pub fn wait_for_file(path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if !s.trim().is_empty() {
                return s.trim().to_owned();
            }
        }
        assert!(
            start.elapsed() < limit,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `path` exists and is non-empty, as [`wait_for_file`], while `child` (the
/// `fence` that runs the command writing it) lives: if `child` exits first, panics at once
/// with its exit status instead of waiting out `limit` (a lease lost before the command got
/// to write, say, is then told apart from a slow start).
pub fn wait_for_file_of(child: &mut Child, path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if !s.trim().is_empty() {
                return s.trim().to_owned();
            }
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            // The command may have written it just before fence exited.
            if let Ok(s) = std::fs::read_to_string(path) {
                if !s.trim().is_empty() {
                    return s.trim().to_owned();
                }
            }
            panic!(
                "fence exited ({status}) before {} appeared, after {:?}",
                path.display(),
                start.elapsed()
            );
        }
        assert!(
            start.elapsed() < limit,
            "{} did not appear within {limit:?} (fence still running)",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still exists (a zombie counts).
pub fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// Reads a pid written by a test command into `path` (waiting for it).
pub fn pid_in(path: &Path) -> i32 {
    wait_for_file(path, Duration::from_secs(10))
        .parse()
        .expect("a pid")
}

/// Waits until none of `pids` exists; returns how long that took, or `None` past `limit`.
pub fn all_gone_within(pids: &[i32], limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() <= limit {
        if pids.iter().all(|&p| !alive(p)) {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// A mark that every process of a test command carries in its environment
/// (`FENCE_TEST_MARK=…`), so that the test finds them from outside, whatever PID namespace
/// they run in and whatever PIDs they see. Dropping it SIGKILLs whatever still carries it.
pub struct Mark(String);

impl Mark {
    pub fn new() -> Mark {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Mark(format!("FENCE_TEST_MARK={}-{n}-{t:x}", std::process::id()))
    }

    /// The command `env FENCE_TEST_MARK=… sh -c SCRIPT`, as arguments after `--`.
    pub fn sh(&self, script: &str) -> Vec<String> {
        ["env", &self.0, "sh", "-c", script]
            .map(str::to_owned)
            .to_vec()
    }

    /// The host PIDs of the living processes that carry the mark (a zombie has no
    /// environment left, so it does not count).
    pub fn processes(&self) -> Vec<i32> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|&b| b == 0)
                        .any(|entry| entry == self.0.as_bytes())
                })
            })
            .collect()
    }

    /// Waits until no process carries the mark; `false` if some still do after `limit`.
    pub fn gone_within(&self, limit: Duration) -> bool {
        let start = Instant::now();
        while !self.processes().is_empty() {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// SIGKILLs every process that carries the mark, until none is left (at most 10 s).
    pub fn kill_all(&self) {
        let start = Instant::now();
        loop {
            let left = self.processes();
            if left.is_empty() || start.elapsed() > Duration::from_secs(10) {
                return;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// The state letter of process `pid` from `/proc` (`T`: stopped), if it exists.
pub fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Waits until `ok` holds; panics after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The children of process `pid`, by `/proc`.
pub fn children_of(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                stat.rfind(')')
                    .and_then(|i| stat[i + 1..].split_whitespace().nth(1)?.parse::<i32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// `fence run` of `lease` with `flags`, running `sh -c script` under `mark`.
pub fn run_marked(
    store: &Store,
    lease: &str,
    flags: &[&str],
    mark: &Mark,
    script: &str,
) -> Command {
    let command = mark.sh(script);
    let mut rest: Vec<&str> = flags.to_vec();
    rest.push("--");
    rest.extend(command.iter().map(String::as_str));
    fence(&run_args(store, lease, &rest))
}

/// Waits until the file at `path` has `count` lines equal to `needle`; panics after 30 s.
pub fn wait_for_count(path: &Path, needle: &str, count: usize) {
    let start = Instant::now();
    while std::fs::read_to_string(path).map_or(0, |s| s.lines().filter(|l| *l == needle).count())
        < count
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{count} × {needle} did not appear in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lines of the file at `path` between the lines `from` and `to`.
pub fn lines_between(path: &Path, from: &str, to: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .skip_while(|l| *l != from)
        .skip(1)
        .take_while(|l| *l != to)
        .map(str::to_owned)
        .collect()
}

/// Waits until `child` has written a line containing `needle` to the file at `path`.
pub fn wait_for_line(path: &Path, needle: &str, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() <= limit {
        if std::fs::read_to_string(path).is_ok_and(|s| s.contains(needle)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A canned HTTP server on 127.0.0.1 answering every request with `status` and an empty
/// body, closing each connection after its answer. Runs until the test process ends.
pub fn canned_http(status: &'static str) -> String {
    Canned::answering(status, "").url
}

/// A canned HTTP server on 127.0.0.1 that answers every request with one status and body and
/// keeps the head (request line and headers) of every request it got.
pub struct Canned {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Canned {
    /// Serves `status` with `body` (as `application/xml`) until the test process ends.
    pub fn answering(status: &'static str, body: &'static str) -> Canned {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = heads.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut stream = stream;
                let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 65536];
                let mut seen = Vec::new();
                // Read the head and any body the request announces (small ones only).
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if head_and_body_done(&seen) {
                        break;
                    }
                }
                let head = String::from_utf8_lossy(&seen);
                let head = head.split("\r\n\r\n").next().unwrap_or_default().to_owned();
                kept.lock().unwrap().push(head);
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/xml\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Canned {
            url: format!("http://{addr}"),
            heads,
        }
    }

    /// The heads of the requests served so far.
    pub fn requests(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn head_and_body_done(seen: &[u8]) -> bool {
    let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    seen.len() >= end + 4 + length
}

/// A TCP proxy on 127.0.0.1 to `upstream` that refuses connections (nothing listens on its
/// port) until [`Outage::end`] is called: a store outage, then recovery.
pub struct Outage {
    port: u16,
    upstream: String,
}

impl Outage {
    /// Reserves a port and leaves it closed.
    pub fn begin(upstream: &str) -> Outage {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = probe.local_addr().expect("addr").port();
        drop(probe);
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        Outage { port, upstream }
    }

    /// The proxy's endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts forwarding to the upstream.
    pub fn end(&self) {
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", self.port)).expect("rebind the proxy port");
        let upstream = self.upstream.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = std::net::TcpStream::connect(&upstream) else {
                    continue;
                };
                pipe_both(client, server);
            }
        });
    }
}

fn pipe_both(a: std::net::TcpStream, b: std::net::TcpStream) {
    let (a2, b2) = (a.try_clone().expect("clone"), b.try_clone().expect("clone"));
    std::thread::spawn(move || copy_then_close(a, b2));
    std::thread::spawn(move || copy_then_close(b, a2));
}

fn copy_then_close(mut from: std::net::TcpStream, mut to: std::net::TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The shared S3 test server (moto) from `FENCE_S3_MOTO_ENDPOINT` and friends, if set.
pub struct S3Env {
    pub endpoint: String,
    pub bucket: String,
    pub key_id: String,
    pub secret: String,
}

impl S3Env {
    /// The moto server, or `None` with a notice (a failure when `FENCE_REQUIRE_SERVERS=1`).
    pub fn moto(test: &str) -> Option<S3Env> {
        S3Env::server(test, "FENCE_S3_MOTO_ENDPOINT")
    }

    /// The SeaweedFS server, or `None` with a notice (a failure when
    /// `FENCE_REQUIRE_SERVERS=1`).
    pub fn seaweed(test: &str) -> Option<S3Env> {
        S3Env::server(test, "FENCE_S3_SEAWEED_ENDPOINT")
    }

    fn server(test: &str, endpoint: &str) -> Option<S3Env> {
        let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
        let found = (|| {
            Some(S3Env {
                endpoint: var(endpoint)?,
                bucket: var("FENCE_S3_BUCKET")?,
                key_id: var("FENCE_S3_ACCESS_KEY_ID")?,
                secret: var("FENCE_S3_SECRET_ACCESS_KEY")?,
            })
        })();
        if found.is_none() {
            assert!(
                var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
                "{test}: FENCE_S3_* variables missing but FENCE_REQUIRE_SERVERS=1"
            );
            eprintln!("SKIPPED {test}: no S3 test servers (run scripts/servers/s3.sh start)");
        }
        found
    }

    /// `fence ARGS` against `endpoint` with this server's credentials.
    pub fn fence(&self, endpoint: &str, args: &[&str]) -> Command {
        let mut c = fence(args);
        c.env("AWS_ENDPOINT", endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", &self.key_id)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret);
        c
    }

    /// The store at `url` on this server, opened directly (not through `fence`).
    #[cfg(feature = "s3")]
    pub fn direct(&self, url: &str) -> fence::s3::S3Store {
        fence::s3::S3StoreBuilder::new()
            .with_url(url)
            .with_endpoint(&self.endpoint)
            .with_region("us-east-1")
            .with_credentials(&self.key_id, &self.secret)
            .with_allow_http(true)
            .build()
            .unwrap()
    }

    /// A fresh `s3://bucket/prefix` URL.
    pub fn fresh_url(&self) -> String {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!(
            "s3://{}/fence-cli-test-{n:x}-{}",
            self.bucket,
            std::process::id()
        )
    }
}
