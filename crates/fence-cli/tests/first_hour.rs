//! A new operator's first hour: typos get clap's suggestions, bad lease names and stores that
//! exclude nothing are refused before anything is written, `status` shows who holds what in
//! one row per lock and hides what was released.
#![allow(clippy::disallowed_methods)]

mod common;

use std::process::Output;

use common::{fence, output, run_args, Store};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit 2 with one line on stderr; returns it.
fn usage_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(out));
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

#[test]
fn typos_keep_clap_suggestions_on_one_line() {
    let store = Store::new();
    let ttl = usage_line(&output(&run_args(
        &store,
        "t",
        &["--tll", "5s", "--", "true"],
    )));
    assert!(ttl.contains("'--ttl'"), "{ttl}");
    let status = usage_line(&output(&["stauts", "--store", &store.url]));
    assert!(status.contains("'status'"), "{status}");
    let command = usage_line(&output(&run_args(&store, "t", &["true"])));
    assert!(command.contains("after `--`"), "{command}");
}

/// The rows of the CELLS section of a status table, as whitespace-split fields.
fn cell_rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip_while(|l| !l.starts_with("CELLS"))
        .skip(2)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// One `fence run` lock is one row, naming the holder's process; released locks are counted,
/// not shown, unless `--all` (or the lease is named).
#[test]
fn status_shows_one_row_per_lock_with_its_holders_process_and_hides_released_ones() {
    let store = Store::new();
    assert_eq!(
        output(&run_args(&store, "done", &["--", "true"]))
            .status
            .code(),
        Some(0)
    );
    let mut held = fence(&run_args(&store, "held", &[]))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut epoch = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(held.stdout.as_mut().unwrap()),
        &mut epoch,
    )
    .unwrap();

    let table = output(&["status", "--store", &store.url]);
    assert_eq!(table.status.code(), Some(0));
    let text = String::from_utf8_lossy(&table.stdout).into_owned();
    let rows = cell_rows(&text);
    assert_eq!(rows.len(), 1, "only the held lock: {text}");
    assert_eq!(rows[0][0], "held");
    assert_eq!(rows[0][2], "run.held");
    assert_eq!(
        rows[0][3],
        format!("pid:{}@", held.id()) + &hostname(),
        "{text}"
    );
    assert!(
        !text.contains("NODE LEASES"),
        "its node lease is in its row: {text}"
    );
    assert!(
        text.contains("--all"),
        "the hidden rows are counted: {text}"
    );

    let all = String::from_utf8_lossy(&output(&["status", "--store", &store.url, "--all"]).stdout)
        .into_owned();
    let names: Vec<String> = cell_rows(&all).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(names, ["done", "held"], "{all}");
    let named = output(&["status", "--store", &store.url, "done"]);
    assert_eq!(cell_rows(&String::from_utf8_lossy(&named.stdout)).len(), 1);
    let json: serde_json::Value =
        serde_json::from_slice(&output(&["status", "--store", &store.url, "--json"]).stdout)
            .unwrap();
    assert_eq!(
        json["cells"].as_array().unwrap().len(),
        2,
        "JSON lists every record"
    );
    let _ = held.kill();
    let _ = held.wait();
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .into_string()
        .unwrap()
        .chars()
        .take(64)
        .collect()
}
