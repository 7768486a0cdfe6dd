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

/// `fence ARGS` with FENCE_* variables cleared.
pub fn fence(args: &[&str]) -> Command {
    let mut c = Command::new(fence_bin());
    c.args(args);
    for v in ["FENCE_STORE", "FENCE_LEASE", "FENCE_EPOCH", "FENCE_NODE"] {
        c.env_remove(v);
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
        let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
        let found = (|| {
            Some(S3Env {
                endpoint: var("FENCE_S3_MOTO_ENDPOINT")?,
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
