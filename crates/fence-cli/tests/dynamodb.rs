//! `dynamodb://` stores through the real `fence` binary, against the moto of
//! `scripts/servers/dynamodb.sh` (its address from `$FENCE_SERVERS_DIR/dynamodb.env`; skipped
//! without it, failing when `FENCE_REQUIRE_SERVERS=1`), configured the way an operator does:
//! the `AWS_*` variables and `AWS_ENDPOINT_URL_DYNAMODB`.
#![cfg(feature = "dynamodb")]

mod common;

use std::process::Command;

use common::fence;
use serde_json::Value;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `fence ARGS` against the test moto, or `None` with a notice.
fn fence_on_moto(test: &str, args: &[&str]) -> Option<Command> {
    let names = [
        "FENCE_DYNAMODB_ENDPOINT",
        "FENCE_DYNAMODB_ACCESS_KEY_ID",
        "FENCE_DYNAMODB_SECRET_ACCESS_KEY",
    ];
    let [endpoint, key, secret] = fence_testkit::servers::from_env(test, &names)?
        .try_into()
        .ok()?;
    let mut c = fence(args);
    c.env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", key)
        .env("AWS_SECRET_ACCESS_KEY", secret);
    Some(c)
}

/// `dynamodb://<table>/<fresh prefix>`.
fn fresh_url(test: &str) -> String {
    let table = var("FENCE_DYNAMODB_TABLE").unwrap_or_else(|| "fence-test".into());
    let n = fence_core::Entropy::from_os().next_u64();
    format!("dynamodb://{table}/fence-cli-tests/{test}-{n:016x}")
}

fn succeeded(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    stdout
}

#[test]
fn probe_run_and_check_of_a_dynamodb_store() {
    let test = "probe_run_and_check_of_a_dynamodb_store";
    let url = fresh_url("cli");
    let Some(mut probe) = fence_on_moto(test, &["probe", &url, "--rounds", "2", "--json"]) else {
        return;
    };
    let stdout = succeeded(&probe.output().unwrap());
    let json: Value = serde_json::from_str(&stdout).expect("probe --json parses");
    assert_eq!(json["verdict"], "honest", "{stdout}");
    let run = [
        "run",
        "--store",
        url.as_str(),
        "--lease",
        "nightly",
        "--",
        "true",
    ];
    succeeded(&fence_on_moto(test, &run).unwrap().output().unwrap());
    let check = ["check", "--store", url.as_str(), "--json"];
    let stdout = succeeded(&fence_on_moto(test, &check).unwrap().output().unwrap());
    let report: Value = serde_json::from_str(&stdout).expect("check --json parses");
    println!("fence check {url}: {report}");
}

#[test]
fn a_dynamodb_url_without_a_table_is_a_usage_error() {
    for url in ["dynamodb://", "dynamodb://a b/x", "dynamodb:///p"] {
        let err = fence_cli::stores::open(url, None).unwrap_err();
        assert_eq!(err.code, 2, "{url}");
    }
}
