//! The shardd example as its users run it: three processes on local files, one SIGKILLed and
//! restarted, one SIGSTOPped past its lease and continued. Every acknowledged append must be
//! in the shards' logs, none acknowledged twice, and every shard must keep being appended to.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const CELLS: usize = 12;

/// The example itself, compiled into this test binary: each shardd process is this binary
/// run again as [`shardd_process`] (a test's selection of targets need not build the
/// example's own binary).
#[allow(dead_code)]
#[path = "../examples/shardd.rs"]
mod shardd;

const CHILD: &str = "FENCE_SHARDD_ARGS";

/// A shardd process when run with [`CHILD`] set (its arguments, one per line); else nothing.
#[test]
fn shardd_process() {
    if let Ok(args) = std::env::var(CHILD) {
        use clap::Parser;
        shardd::serve(shardd::Args::parse_from(args.lines()));
    }
}

type Acks = Arc<Mutex<Vec<(String, u64, u64)>>>;

fn spawn(store: &Path, state: &Path, node: &str, acks: &Acks) -> Child {
    let args = [
        "shardd".to_owned(),
        "--store".into(),
        format!("file://{}", store.display()),
        "--node".into(),
        node.into(),
        "--cells".into(),
        CELLS.to_string(),
        "--ttl-ms".into(),
        "600".into(),
        "--every-ms".into(),
        "40".into(),
        "--state-dir".into(),
        state.display().to_string(),
    ];
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "shardd_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, args.join("\n"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("this test binary runs again as a shardd process");
    let out = BufReader::new(child.stdout.take().unwrap());
    let acks = acks.clone();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let f: Vec<&str> = line.split(' ').collect();
            if let ["ack", cell, epoch, seq] = f[..] {
                let parsed = (
                    cell.to_owned(),
                    epoch.parse().unwrap(),
                    seq.parse().unwrap(),
                );
                acks.lock().unwrap().push(parsed);
            }
        }
    });
    child
}

/// Kills every process it was given when dropped: a failing test leaves none running.
struct Reaper(Vec<u32>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
        }
    }
}

fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(child.id() as i32), sig).unwrap();
}

#[test]
fn shards_survive_sigkill_and_sigstop_with_every_ack_kept_once() {
    let store = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let acks: Acks = Arc::default();
    let mut n1 = spawn(store.path(), state.path(), "n1", &acks);
    let mut n2 = spawn(store.path(), state.path(), "n2", &acks);
    let mut n3 = spawn(store.path(), state.path(), "n3", &acks);
    let mut reaper = Reaper(vec![n1.id(), n2.id(), n3.id()]);
    sleep(Duration::from_millis(2_500));
    signal(&n2, Signal::SIGKILL);
    n2.wait().unwrap();
    sleep(Duration::from_millis(1_500));
    let mut n2 = spawn(store.path(), state.path(), "n2", &acks);
    reaper.0.push(n2.id());
    sleep(Duration::from_millis(1_500));
    signal(&n3, Signal::SIGSTOP);
    sleep(Duration::from_millis(2_000));
    signal(&n3, Signal::SIGCONT);
    sleep(Duration::from_millis(1_000));
    // Liveness after the disruptions: every shard is appended to again. The window is 2 s on a
    // quiet machine; on a loaded one it extends (up to 30 s) until every shard has an ack —
    // but not for a shard left behind: once another shard has 75 acks (3 s of its appends at
    // one per 40 ms), every shard must have one.
    let before_end = acks.lock().unwrap().len();
    sleep(Duration::from_millis(2_000));
    for _ in 0..150 {
        let counts = acks_per_shard_since(&acks, before_end);
        let busiest = counts.values().copied().max().unwrap_or(0);
        if counts.len() == CELLS || busiest >= 75 {
            break;
        }
        sleep(Duration::from_millis(200));
    }
    for c in [&n1, &n2, &n3] {
        signal(c, Signal::SIGTERM);
    }
    for c in [&mut n1, &mut n2, &mut n3] {
        c.wait().unwrap();
    }
    let acks = acks.lock().unwrap().clone();

    let mut seen = BTreeSet::new();
    for (cell, _, seq) in &acks {
        assert!(
            seen.insert((cell.clone(), *seq)),
            "{cell} seq {seq} acknowledged twice"
        );
    }
    let recent: BTreeSet<&String> = acks[before_end..].iter().map(|a| &a.0).collect();
    assert_eq!(
        recent.len(),
        CELLS,
        "every shard is appended to after the disruptions"
    );
    let logs = read_logs(store.path());
    for (cell, epoch, seq) in &acks {
        let (head, records) = &logs[cell];
        assert_eq!(
            head.epoch_of(*seq),
            Some(*epoch),
            "{cell} seq {seq}: committed under its epoch"
        );
        assert_eq!(
            records[*seq as usize],
            seq.to_string(),
            "{cell} seq {seq}: the acknowledged record"
        );
    }
}

/// How many acks each shard had from the `from`-th ack on (shards with none are absent).
fn acks_per_shard_since(acks: &Acks, from: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (cell, _, _) in &acks.lock().unwrap()[from..] {
        *counts.entry(cell.clone()).or_default() += 1;
    }
    counts
}

fn read_logs(store: &Path) -> BTreeMap<String, (fence_fleet::log::LogHead, Vec<String>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Arc::new(fence_fs::FsStore::open(store).unwrap());
        let fence = fence_core::runtime::Fence::builder(store, "reader")
            .build()
            .unwrap();
        let mut out = BTreeMap::new();
        for i in 0..CELLS {
            let cell = format!("shard-{i:03}");
            let read = fence_fleet::log::read_log(&fence, &cell, 0).await.unwrap();
            let records = read
                .records
                .iter()
                .map(|(_, r)| String::from_utf8_lossy(r).into_owned())
                .collect();
            out.insert(cell, (read.head, records));
        }
        out
    })
}

#[test]
fn shardd_refuses_zero_shards_and_a_zero_period() {
    use clap::Parser;
    let with = |extra: &[&str]| {
        let base = ["shardd", "--store", "memory://", "--node", "n1"];
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        shardd::Args::try_parse_from(args).map(|_| ())
    };
    assert!(with(&["--cells", "4"]).is_ok());
    let kind = |r: Result<(), clap::Error>| r.unwrap_err().kind();
    let invalid = clap::error::ErrorKind::ValueValidation;
    assert_eq!(kind(with(&["--cells", "0"])), invalid);
    assert_eq!(kind(with(&["--cells", "4", "--every-ms", "0"])), invalid);
}
