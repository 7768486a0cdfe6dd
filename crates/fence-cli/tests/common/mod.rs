//! Helpers for tests that spawn the real `fence` binary on local files.
#![allow(dead_code)]
// Tests bound their waits with wall time; the crate's clock rules are for the library.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// The binary under test.
pub const FENCE: &str = env!("CARGO_BIN_EXE_fence");

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
    let mut c = Command::new(FENCE);
    c.args(args);
    for v in ["FENCE_STORE", "FENCE_LEASE", "FENCE_EPOCH", "FENCE_NODE"] {
        c.env_remove(v);
    }
    c
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
