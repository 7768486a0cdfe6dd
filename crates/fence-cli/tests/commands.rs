//! `fence status`, `put`, `get`, `probe` and `--help` as separate processes on local files.
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use common::{fence, output, wait_bounded, wait_for_file, Store};
use serde_json::Value;

fn status_json(store: &Store, name: &str) -> Value {
    let out = output(&["status", "--store", &store.url, name, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json parses")
}

#[test]
fn status_json_shows_what_run_and_put_did() {
    let store = Store::new();
    let (node, epoch, done) = (store.path("node"), store.path("epoch"), store.path("done"));
    let script = format!(
        "{} put x --value 1 && echo $FENCE_NODE > {} && echo $FENCE_EPOCH > {}; \
         for i in $(seq 200); do [ -f {} ] && exit 0; sleep 0.05; done",
        common::fence_bin(),
        node.display(),
        epoch.display(),
        done.display()
    );
    // A first holder, so the one we inspect runs at epoch 2.
    let first = output(&["run", "--store", &store.url, "--lease", "st", "--", "true"]);
    assert_eq!(first.status.code(), Some(0));
    let mut holder = fence(&[
        "run", "--store", &store.url, "--lease", "st", "--", "sh", "-c", &script,
    ])
    .spawn()
    .expect("spawn");
    let epoch: u64 = wait_for_file(&epoch, Duration::from_secs(10))
        .parse()
        .unwrap();
    let node = wait_for_file(&node, Duration::from_secs(1));
    assert_eq!(epoch, 2);

    let json = status_json(&store, "st");
    let cell = &json["cells"][0];
    assert_eq!(json["cells"].as_array().unwrap().len(), 1);
    assert_eq!(cell["name"], "st");
    assert_eq!(cell["holder"], node.as_str());
    assert_eq!(cell["epoch"], epoch);
    assert_eq!(cell["live"], true);
    assert_eq!(cell["data"]["epoch"], epoch);
    assert_eq!(cell["data"]["keys"], serde_json::json!(["x"]));
    let lease = &json["leases"][0];
    assert_eq!(lease["node"], node.as_str());
    assert_eq!(lease["live"], true);
    assert!(lease["expires_in_ms"].as_i64().unwrap() > 0);

    std::fs::write(&done, "1").unwrap();
    assert_eq!(
        wait_bounded(&mut holder, Duration::from_secs(10), "holder").code(),
        Some(0)
    );
    let json = status_json(&store, "st");
    assert_eq!(
        json["cells"][0]["holder"],
        Value::Null,
        "released: no holder"
    );
    assert_eq!(json["cells"][0]["epoch"], epoch, "release keeps the epoch");
    let table = output(&["status", "--store", &store.url, "--all"]);
    assert_eq!(table.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&table.stdout).contains("(released)"));
}

#[test]
fn put_and_get_round_trip_binary_values_and_refuse_unclaimed_epochs() {
    let store = Store::new();
    let claim = output(&[
        "run",
        "--store",
        &store.url,
        "--lease",
        "kv",
        "--",
        "sh",
        "-c",
        "echo $FENCE_EPOCH",
    ]);
    assert_eq!(claim.status.code(), Some(0));
    // The lease was released when its command ended: its epoch is no longer current.
    let late = output(&[
        "put", "--store", &store.url, "--lease", "kv", "--epoch", "1", "k", "--value", "v",
    ]);
    assert_eq!(late.status.code(), Some(76));
    let never = output(&[
        "put", "--store", &store.url, "--lease", "none", "--epoch", "1", "k", "--value", "v",
    ]);
    assert_eq!(never.status.code(), Some(76));

    let bytes: Vec<u8> = vec![0, 159, 146, 150, 255, b'\n'];
    let script = format!(
        "{} put bin - && {} get bin",
        common::fence_bin(),
        common::fence_bin()
    );
    let mut child = fence(&[
        "run", "--store", &store.url, "--lease", "kv", "--", "sh", "-c", &script,
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .expect("spawn");
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, bytes);
    let got = output(&["get", "--store", &store.url, "--lease", "kv", "bin"]);
    assert_eq!(got.stdout, bytes);
    let missing = output(&["get", "--store", &store.url, "--lease", "kv", "nope"]);
    assert_eq!(missing.status.code(), Some(3));
}

#[test]
fn probe_finds_local_files_honest() {
    let store = Store::new();
    let out = output(&["probe", &store.url, "--rounds", "2", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("probe --json parses");
    assert_eq!(json["verdict"], "honest");
    assert!(!json["steps"].as_array().unwrap().is_empty());
}

#[test]
fn bad_urls_and_missing_directories_are_usage_errors_on_one_line() {
    let store = Store::new();
    let missing = format!("{}/not-here", store.url);
    for args in [
        vec!["status", "--store", "ftp://x"],
        vec!["status", "--store", missing.as_str()],
        vec!["probe", "file://"],
    ] {
        let out = output(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).lines().count(),
            1,
            "{args:?}"
        );
    }
    for args in [
        vec!["run", "--store", store.url.as_str()],
        vec![
            "run",
            "--store",
            store.url.as_str(),
            "--lease",
            "x",
            "--ttl",
            "soon",
        ],
        vec!["bogus"],
    ] {
        let out = output(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).lines().count(),
            1,
            "usage errors are one line too: {args:?}"
        );
    }
    let not_found = output(&[
        "run",
        "--store",
        &store.url,
        "--lease",
        "x",
        "--",
        "/no/such/cmd",
    ]);
    assert_eq!(not_found.status.code(), Some(127));
}

#[test]
fn every_command_help_has_an_example() {
    for cmd in [
        vec![],
        vec!["run"],
        vec!["put"],
        vec!["get"],
        vec!["status"],
        vec!["probe"],
        vec!["demo"],
    ] {
        let mut args = cmd.clone();
        args.push("--help");
        let out = output(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Example"),
            "{args:?}"
        );
    }
}

#[cfg(feature = "s3")]
#[test]
fn probe_of_an_unreachable_s3_endpoint_is_an_error_not_a_verdict() {
    let out = fence(&["probe", "s3://fence-unreachable/p", "--rounds", "1"])
        .env("AWS_ENDPOINT", "http://127.0.0.1:9")
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(feature = "gcs")]
#[test]
fn probe_of_an_unreachable_gcs_endpoint_is_an_error_not_a_verdict() {
    let out = fence(&["probe", "gs://fence-unreachable/p", "--rounds", "1"])
        .env("FENCE_GCS_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (A 3 s TTL: with 1 s a loaded machine was seen to take 1.2 s for one claim, and the
/// demo failed for want of time, not of correctness.)
#[test]
fn the_demo_runs_on_local_files_and_its_store_can_be_inspected() {
    let tmp = tempfile::tempdir().unwrap();
    let out = fence(&["demo", "--ttl", "3s"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("took over from node-0"), "{text}");
    assert!(text.contains("REJECTED"), "{text}");
    let url = text
        .lines()
        .find_map(|l| l.strip_prefix("the store is kept: fence status --store "))
        .expect("the demo names its store");
    assert!(url.starts_with(&format!("file://{}", tmp.path().display())));
    let status = output(&["status", "--store", url, "--json"]);
    let json: Value = serde_json::from_slice(&status.stdout).expect("status parses");
    assert_eq!(json["cells"].as_array().unwrap().len(), 8);
}
