//! What a reader of a store may conclude, checked against the `fence` binary: a listing it
//! could not read is never an empty store; a record docs/protocol.md calls corrupt is refused
//! in the words of `fence check`; a reader that follows the page literally never takes over
//! a live `fence run`.

// Tests bound their waits with wall time; the crate's clock rules are for the library.
#![allow(clippy::disallowed_methods)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{fence_bin, output, run_args, Store};
use fence_core::{CasGuard, ConditionalStore, Key, PutOutcome};
use fence_fs::FsStore;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// The unprivileged user the permission tests run `fence` as (`nobody`).
const NOBODY: &str = "65534";

/// A command running `bin ARGS` as [`NOBODY`] with no supplementary groups, or why that
/// cannot be had here (no `setpriv`, or not root: only root can switch users).
fn as_nobody(bin: &Path, args: &[&str]) -> Result<Command, String> {
    let root = nix::unistd::geteuid().is_root();
    let setpriv = Command::new("setpriv").arg("--version").output();
    match (root, setpriv) {
        (false, _) => Err("not root: cannot run a command as another user".into()),
        (true, Err(e)) => Err(format!("setpriv (util-linux) is missing: {e}")),
        (true, Ok(_)) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups"]);
            c.arg(bin).args(args);
            Ok(c)
        }
    }
}

/// This build's `fence`, where [`NOBODY`] can run it: in place when every directory on its
/// path lets others through, else a copy in `dir`.
fn fence_for_nobody(dir: &Path) -> PathBuf {
    let bin = Path::new(fence_bin());
    let open = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
    if bin.ancestors().all(open) {
        return bin.to_owned();
    }
    let copy = dir.join("fence");
    std::fs::copy(bin, &copy).expect("copy fence");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

fn text(out: &Output) -> (String, String) {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (s(&out.stdout), s(&out.stderr))
}

/// Issue 35, item 3: on a store root made (its `cells/` and `nodes/` are 0700, fence's
/// default), `fence status` (table and `--json`) and `fence check` run as another user fail
/// with the store-error code (69), naming the directory they could not read. On main they
/// printed `CELLS (none)` / `"cells": []` and "0 record(s) checked", exit 0: fence-fs's
/// listing skipped every directory it could not open.
#[test]
fn a_listing_it_cannot_read_is_an_error_never_an_empty_store() {
    let store = Store::new();
    let made = output(&run_args(&store, "held", &["--", "true"]));
    assert_eq!(made.status.code(), Some(0), "{:?}", text(&made));
    // The root itself may be entered by anyone (as a shared store's root is); what lies
    // below is root's alone.
    std::fs::set_permissions(store.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bins = tempfile::tempdir().unwrap();
    let bin = fence_for_nobody(bins.path());
    for args in [
        &["status", "--store", &store.url][..],
        &["status", "--store", &store.url, "--json"],
        &["check", "--store", &store.url],
    ] {
        let cmd = match as_nobody(&bin, args) {
            Ok(cmd) => cmd,
            Err(why) => return eprintln!("SKIPPED: {why}"),
        };
        let out = { cmd }.output().expect("run fence as nobody");
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {stdout}\n{stderr}");
        assert!(
            !stdout.contains("(none)") && !stdout.contains("\"cells\""),
            "{stdout}"
        );
        let cells = store.path("cells").display().to_string();
        let nodes = store.path("nodes").display().to_string();
        assert!(
            stderr.contains(&cells) || stderr.contains(&nodes),
            "{args:?} names the directory it could not read: {stderr}"
        );
    }
}

/// The store of `store`, opened as the tests' raw reader and writer (no fence-core runtime).
fn raw(store: &Store) -> FsStore {
    FsStore::open(store.dir.path()).expect("open the store")
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Writes `body` as the new version of `key` (created, or over whatever is there).
fn overwrite(store: &FsStore, key: &str, body: &str) {
    let key = Key::new(key).unwrap();
    block_on(async {
        let guard = match store.get(&key).await.unwrap() {
            Some(s) => CasGuard::Match(s.version),
            None => CasGuard::Absent,
        };
        let put = store.put(&key, body.to_owned().into(), guard).await;
        assert!(matches!(put, Ok(PutOutcome::Applied(_))), "{put:?}");
    })
}

/// `fence check`'s line about `key`.
fn check_line(store: &Store, key: &str) -> String {
    let out = output(&["check", "--store", &store.url]);
    let (stdout, _) = text(&out);
    stdout
        .lines()
        .find(|l| l.starts_with("VIOLATION") && l.contains(key))
        .unwrap_or_else(|| panic!("check names no violation at {key}: {stdout}"))
        .to_owned()
}

/// Issue 35, item 4: `fence run` refuses a version-2 head that names `null` as its owner, and
/// one at epoch 0, in the words `fence check` uses for them (on main it claimed over both: 3 →
/// 4, and 0 → 1; only `fence check` flagged them).
#[test]
fn fence_run_refuses_the_heads_fence_check_calls_corrupt_in_its_words() {
    let store = Store::new();
    let key = "cells/c/own.json";
    for (head, rule, detail) in [
        (
            r#"{"v":2,"node":null,"epoch":3,"nonce":"h1"}"#,
            "wrong-type",
            "null where a string is needed",
        ),
        (
            r#"{"v":2,"node":"","epoch":0,"nonce":"h2"}"#,
            "epoch-not-raisable",
            "epoch 0 cannot be written by a claim",
        ),
    ] {
        overwrite(&raw(&store), key, head);
        let line = check_line(&store, key);
        assert!(
            line.contains(rule) && line.contains(detail),
            "{head}: {line}"
        );
        let run = output(&run_args(&store, "c", &["--", "true"]));
        let (_, stderr) = text(&run);
        assert_eq!(run.status.code(), Some(69), "{head}: {stderr}");
        assert!(
            stderr.contains(rule) && stderr.contains(detail),
            "{head}: {stderr}"
        );
        let after = block_on(raw(&store).get(&Key::new(key).unwrap())).unwrap();
        assert_eq!(
            after.unwrap().body,
            head.as_bytes(),
            "the head was overwritten"
        );
    }
}

/// The rules of docs/protocol.md that [`Follower`] implements, quoted (whitespace aside): it is
/// that page's reader, written from it alone, and this test fails when the page stops saying
/// them. (Main's page said instead that "a `ttl_ms` larger than `stale_after` is not believed"
/// and that `ttl_ms` is OPTIONAL: a 3 s-TTL reader following it took over a live `fence run
/// --ttl 700s` after 3.1 s, and `fence run --ttl 2s` took over a live 8 s-TTL writer that left
/// `ttl_ms` out after 2.1 s.)
const FOLLOWED: [&str; 5] = [
    "`hold` is the longer of the reader's own TTL and the record's `ttl_ms`, plus 0.2 %",
    "A reader MUST believe a `ttl_ms` up to 3153600000000",
    "`stale_after` is computed from the reader's own TTL",
    "REQUIRED unless `expires_ms` is `0`",
    "a **released** record (`expires_ms: 0`)",
];

/// `text` with every run of whitespace (a line break of the page included) one space.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A century in ms: the longest `ttl_ms` docs/protocol.md §9 says to believe.
const CENTURY_MS: u64 = 3_153_600_000_000;

/// A reader of one node lease following docs/protocol.md §9 to the letter, with its own TTL,
/// over raw reads of the store (no fence-core runtime, no fence record types), and a taker
/// of it by §5.3 once it judged it dead.
struct Follower {
    store: FsStore,
    key: Key,
    ttl_ms: u64,
}

/// What the follower saw first of one state of the record (§9's `(V, N)`).
struct Sighting {
    version: fence_core::Version,
    nonce: String,
    first_seen: Instant,
    hold: Duration,
}

impl Follower {
    fn wall_ms() -> u64 {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        since.as_millis() as u64
    }

    /// `stale_after`: max(10 min, 30 × the reader's own TTL).
    fn stale_after_ms(&self) -> u64 {
        (30 * self.ttl_ms).max(600_000)
    }

    /// `hold` for a record stating `ttl_ms`.
    fn hold(&self, ttl_ms: Option<u64>) -> Duration {
        let theirs = ttl_ms.filter(|t| *t <= CENTURY_MS).unwrap_or(0);
        let hold = self.ttl_ms.max(theirs);
        Duration::from_millis(hold + hold.div_ceil(500))
    }

    /// Watches the lease for up to `limit`; when it judges it dead (released, stale, or seen
    /// unchanged for a full `hold` by a read sent that late), takes it over and says after
    /// how long. `None`: still live at the end.
    fn watch(&self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        let mut seen: Option<Sighting> = None;
        while start.elapsed() < limit {
            let sent = Instant::now();
            let stored = block_on(self.store.get(&self.key)).unwrap();
            let stored = stored.expect("a lease record to watch");
            let record: Value = serde_json::from_slice(&stored.body).unwrap();
            let nonce = record["nonce"].as_str().unwrap_or_default().to_owned();
            let expires_ms = record["expires_ms"].as_u64().expect("expires_ms");
            let stale = Self::wall_ms() > expires_ms.saturating_add(self.stale_after_ms());
            let same = seen
                .as_ref()
                .is_some_and(|s| s.version == stored.version && s.nonce == nonce);
            let confirmed = same && seen.as_ref().is_some_and(|s| sent >= s.first_seen + s.hold);
            if expires_ms == 0 || stale || confirmed {
                self.take_over(&record, stored.version);
                return Some(start.elapsed());
            }
            if !same {
                seen = Some(Sighting {
                    version: stored.version,
                    nonce,
                    first_seen: Instant::now(),
                    hold: self.hold(record["ttl_ms"].as_u64()),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// §5.3's takeover: its own complete record under Match(the version judged dead), the
    /// replaced record's unknown fields carried forward.
    fn take_over(&self, replaced: &Value, version: fence_core::Version) {
        let generation = format!("{:016x}", u64::from(std::process::id()) << 20 | 0x35);
        let mut body = serde_json::json!({
            "v": 1, "node": replaced["node"], "expires_ms": Self::wall_ms() + self.ttl_ms,
            "addr": "", "peer_protocol": 1, "generation": generation,
            "nonce": format!("{generation}-1"), "ttl_ms": self.ttl_ms,
        });
        for (name, value) in replaced.as_object().unwrap() {
            body.as_object_mut()
                .unwrap()
                .entry(name.clone())
                .or_insert(value.clone());
        }
        let put = self
            .store
            .put(&self.key, body.to_string().into(), CasGuard::Match(version));
        assert!(matches!(block_on(put), Ok(PutOutcome::Applied(_))));
    }
}

/// Issue 35, item 4: docs/protocol.md, followed literally, never takes over a live `fence
/// run`: a follower with a 3 s TTL watches a `fence run --ttl 700s` for 6 s and never judges
/// it dead; once the holder ends (it releases), the follower takes the lease over at once,
/// with a record `fence check` accepts.
#[test]
fn a_reader_following_the_spec_never_takes_over_a_live_long_ttl_holder() {
    let page = flat(&repo_file("docs/protocol.md"));
    for rule in FOLLOWED {
        assert!(
            page.contains(&flat(rule)),
            "docs/protocol.md no longer says: {rule}"
        );
    }
    let store = Store::new();
    let mut holder = common::fence(&run_args(
        &store,
        "a",
        &["--ttl", "700s", "--", "sleep", "60"],
    ))
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let follower = Follower {
        store: raw(&store),
        key: Key::new("nodes/run.a.json").unwrap(),
        ttl_ms: 3_000,
    };
    common::wait_until("the holder's lease", Duration::from_secs(20), || {
        block_on(follower.store.get(&follower.key))
            .unwrap()
            .is_some()
    });
    let verdict = follower.watch(Duration::from_secs(6));
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).unwrap();
    let ended = common::wait_bounded(&mut holder, Duration::from_secs(20), "the holder");
    assert_eq!(verdict, None, "the follower took over a live holder");
    assert!(
        !ended.success(),
        "the holder's command ran to its end: {ended}"
    );
    let taken = follower.watch(Duration::from_secs(5));
    assert!(taken.is_some(), "the released lease was not taken over");
    let check = output(&["check", "--store", &store.url]);
    assert_eq!(check.status.code(), Some(0), "{:?}", text(&check));
}

/// Issue 35, item 4: a live version-1 lease without `ttl_ms` (a writer with an 8 s TTL that
/// followed main's docs/protocol.md, where it was OPTIONAL) is never taken over by `fence run
/// --ttl 2s` waiting 4 s: it waits, and fails when its wait runs out, in the words of `fence
/// check`, the record kept. (On main `fence run` judged it by its own 2 s TTL and took it over
/// after 2.1 s, while its writer could act for 8 s.)
#[test]
fn a_live_lease_without_its_ttl_is_refused_in_the_words_of_fence_check() {
    let store = Store::new();
    let key = "nodes/run.b.json";
    let record = format!(
        r#"{{"v":1,"node":"run.b","expires_ms":{},"addr":"","peer_protocol":1,"generation":"0000000000000035","nonce":"0000000000000035-1"}}"#,
        Follower::wall_ms() + 8_000
    );
    overwrite(&raw(&store), key, &record);
    let (rule, detail) = (
        "missing-field",
        "a version-1 lease that is not released must state its holder's TTL",
    );
    let waiting = ["--ttl", "2s", "--timeout", "4s", "--", "true"];
    let mut run = common::fence(&run_args(&store, "b", &waiting))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = common::wait_bounded(&mut run, Duration::from_secs(30), "fence run --timeout");
    let out = run.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(status.code(), Some(69), "{stderr}");
    assert!(stderr.contains(rule) && stderr.contains(detail), "{stderr}");
    let after = block_on(raw(&store).get(&Key::new(key).unwrap())).unwrap();
    assert_eq!(
        after.unwrap().body,
        record.as_bytes(),
        "the lease was overwritten"
    );
    let line = check_line(&store, key);
    assert!(line.contains(rule) && line.contains(detail), "{line}");
}

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}
