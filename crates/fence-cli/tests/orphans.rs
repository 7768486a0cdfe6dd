//! Payload objects that SIGKILLed `fence put`s leave behind (issue 35 item 2): each put of a
//! 12 KB value first creates `cells/NAME/blobs/<epoch>-<nonce>`, then writes the head; one
//! killed in between leaves an object no head names. The next claim at a new epoch collects
//! them. On local files and on SeaweedFS.
//!
//! `FENCE_ORPHAN_KILLS` sets how many puts are killed (default 60, about 3 s on local files
//! and 6 s on SeaweedFS); the figures in docs/design.md are from a run with 500.

// Kill times and waits are wall time; the crate's clock rules are for the library.
#![allow(clippy::disallowed_methods)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fence, wait_bounded, wait_for_file, Store};
use fence_core::{ConditionalStore, Entropy, Key, Ownership};

/// How many `fence put`s are killed in all.
fn kills() -> usize {
    std::env::var("FENCE_ORPHAN_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

const LEASE: &str = "orphans";

/// A store the test drives through the `fence` binary and inspects in-process.
struct Backend {
    url: String,
    /// Environment for the binary.
    env: Vec<(&'static str, String)>,
    store: Arc<dyn ConditionalStore>,
    /// The longest a put lives before it is killed, at the latest.
    kill_within_ms: u64,
    /// Puts started (and killed) at once.
    batch: usize,
}

impl Backend {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = fence(args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// The holder of epoch 1: `fence run` of a command that says it started, then sleeps.
    fn holder(&self, dir: &Path) -> Child {
        let started = dir.join("started");
        let script = format!("echo started > {}; exec sleep 600", started.display());
        let args = [
            "run", "--store", &self.url, "--lease", LEASE, "--ttl", "30s", "--", "sh", "-c",
            &script,
        ];
        let holder = self.command(&args).stderr(Stdio::null()).spawn().unwrap();
        wait_for_file(&started, Duration::from_secs(30));
        holder
    }

    fn put(&self, value: &Path) -> Command {
        let value = value.to_str().unwrap();
        let args = [
            "put", "--store", &self.url, "--lease", LEASE, "--epoch", "1", "k", value,
        ];
        let mut c = self.command(&args);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c
    }

    /// (payload objects, the one the head names).
    async fn objects(&self) -> (Vec<String>, Option<String>) {
        let prefix = Key::new(format!("cells/{LEASE}/blobs")).unwrap();
        let listed = self.store.list(Some(&prefix)).await.unwrap();
        let names = listed
            .iter()
            .map(|k| k.as_str().rsplit('/').next().unwrap().to_owned());
        let own = Ownership::new(self.store.clone(), "inspector");
        let head = own.read_head(LEASE).await.unwrap().map(|(h, _)| h);
        let current = head.and_then(|h| h.payload.blob().map(|b| b.name.clone()));
        (names.collect(), current)
    }

    async fn orphans(&self) -> usize {
        let (names, current) = self.objects().await;
        names
            .iter()
            .filter(|n| Some(*n) != current.as_ref())
            .count()
    }
}

/// Kills `n` puts, a batch at a time, each at a random moment of its life.
fn kill_puts(backend: &Backend, value: &Path, n: usize) {
    let entropy = Entropy::from_os();
    let batch = backend.batch;
    for round in 0..n.div_ceil(batch) {
        let size = batch.min(n - round * batch);
        let mut puts: Vec<(Child, Instant)> = (0..size)
            .map(|_| {
                let at = Duration::from_millis(entropy.below(backend.kill_within_ms));
                (backend.put(value).spawn().unwrap(), Instant::now() + at)
            })
            .collect();
        puts.sort_by_key(|(_, at)| *at);
        for (mut put, at) in puts {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            let _ = put.kill();
            let _ = put.wait();
        }
    }
}

/// Kills one put right after its payload object appears (between creating it and the end of
/// its head write, or of the delete of the object it replaced, mostly): a killed put that
/// surely leaves an orphan, for when the random kills left none (rare on SeaweedFS, where
/// a put spends most of its life starting up). Up to 10 tries.
async fn kill_one_at_its_object(backend: &Backend, value: &Path) {
    for _ in 0..10 {
        let (seen, _) = backend.objects().await;
        let mut put = backend.put(value).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let (now, _) = backend.objects().await;
            if now.iter().any(|n| !seen.contains(n)) {
                break;
            }
        }
        let _ = put.kill();
        let _ = put.wait();
        if backend.orphans().await > 0 {
            return;
        }
    }
}

/// The whole scenario: a holder at epoch 1, one put that lands, `kills()` killed puts; the
/// holder ends (releasing the lease) and one later `fence run` claims epoch 2. Returns the
/// orphans (objects no head names) before and after that claim.
fn orphans_after_one_claim(backend: &Backend, dir: &Path) -> (usize, usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let value = dir.join("value");
    std::fs::write(&value, "v".repeat(12 * 1024)).unwrap();
    let mut holder = backend.holder(dir);
    let landed = backend.put(&value).status().unwrap();
    assert!(landed.success(), "the first put lands");
    kill_puts(backend, &value, kills());
    let random = rt.block_on(backend.orphans());
    if random == 0 {
        rt.block_on(kill_one_at_its_object(backend, &value));
    }
    let before = rt.block_on(backend.orphans());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    wait_bounded(&mut holder, Duration::from_secs(60), "the holder");
    let args = [
        "run",
        "--store",
        &backend.url,
        "--lease",
        LEASE,
        "--",
        "true",
    ];
    let claim = backend.command(&args).output().unwrap();
    assert!(claim.status.success(), "{claim:?}");
    let after = rt.block_on(backend.orphans());
    eprintln!(
        "{}: {} puts killed at random moments left {random} orphans ({before} in all); after \
         one claim: {after}",
        backend.url,
        kills()
    );
    (before, after)
}

fn assert_collected(before: usize, after: usize) {
    assert!(
        before > 0,
        "no killed put left an orphan: the test proves nothing"
    );
    assert_eq!(after, 0, "orphans of epoch 1 survived the claim at epoch 2");
}

#[test]
fn a_claim_collects_what_killed_puts_left_on_local_files() {
    let store = Store::new();
    let backend = Backend {
        url: store.url.clone(),
        env: Vec::new(),
        store: Arc::new(fence_fs::FsStore::open(store.dir.path()).unwrap()),
        kill_within_ms: 60,
        batch: 10,
    };
    let work = tempfile::tempdir().unwrap();
    let (before, after) = orphans_after_one_claim(&backend, work.path());
    assert_collected(before, after);
}

#[cfg(feature = "s3")]
#[test]
fn a_claim_collects_what_killed_puts_left_on_seaweedfs() {
    let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let found = (|| {
        Some((
            var("FENCE_S3_SEAWEED_ENDPOINT")?,
            var("FENCE_S3_BUCKET")?,
            var("FENCE_S3_ACCESS_KEY_ID")?,
            var("FENCE_S3_SECRET_ACCESS_KEY")?,
        ))
    })();
    let Some((endpoint, bucket, key_id, secret)) = found else {
        assert!(
            var("FENCE_REQUIRE_SERVERS").as_deref() != Some("1"),
            "FENCE_S3_* variables missing but FENCE_REQUIRE_SERVERS=1"
        );
        eprintln!("SKIPPED: no SeaweedFS test server (run scripts/servers/s3.sh start)");
        return;
    };
    let prefix = format!("fence-cli-orphans-{:016x}", Entropy::from_os().next_u64());
    let store = fence_s3::S3Store::builder()
        .with_bucket(&bucket)
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_credentials(&key_id, &secret)
        .with_prefix(&prefix)
        .build()
        .unwrap();
    let backend = Backend {
        url: format!("s3://{bucket}/{prefix}"),
        env: vec![
            ("AWS_ENDPOINT", endpoint),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", key_id),
            ("AWS_SECRET_ACCESS_KEY", secret),
        ],
        store: Arc::new(store),
        kill_within_ms: 400,
        batch: 5,
    };
    let work = tempfile::tempdir().unwrap();
    let (before, after) = orphans_after_one_claim(&backend, work.path());
    assert_collected(before, after);
}
