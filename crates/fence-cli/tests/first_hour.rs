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

/// The entries of the store directory besides fence-fs's own `.fence`.
fn written(store: &Store) -> Vec<String> {
    std::fs::read_dir(store.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".fence")
        .collect()
}

/// `--lease .fence` used to write the node lease `run..fence` and only then fail on the cell.
#[test]
fn a_lease_name_some_store_cannot_hold_is_refused_before_anything_is_written() {
    let store = Store::new();
    for name in [".fence", "backup.fence"] {
        usage_line(&output(&run_args(&store, name, &["--", "true"])));
        assert_eq!(written(&store), Vec::<String>::new(), "{name}");
    }
}

/// NFC and NFD spellings of one name would be two locks that look alike: the NFD one is
/// refused, saying the NFC spelling; so are names with invisible characters.
#[test]
fn a_decomposed_lease_name_is_refused_and_its_composed_spelling_works() {
    let store = Store::new();
    let nfd = "cafe\u{301}";
    let line = usage_line(&output(&run_args(&store, nfd, &["--", "true"])));
    assert!(line.contains("caf\u{e9}"), "says the NFC spelling: {line}");
    assert_eq!(written(&store), Vec::<String>::new());
    for lookalike in ["night\u{200b}ly", "a\u{202e}b"] {
        usage_line(&output(&run_args(&store, lookalike, &["--", "true"])));
    }
    assert_eq!(written(&store), Vec::<String>::new());
    let nfc = output(&run_args(&store, "caf\u{e9}", &["--", "true"]));
    assert_eq!(nfc.status.code(), Some(0), "{}", stderr(&nfc));
}

/// `memory://` is one process's store: `fence run` on it would exclude nothing.
#[test]
fn run_refuses_a_memory_store_without_running_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = output(&[
        "run",
        "--store",
        "memory://",
        "--lease",
        "m",
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    usage_line(&out);
    assert!(!marker.exists(), "the command ran");
    for args in [
        vec!["status", "--store", "memory://"],
        vec!["get", "--store", "memory://", "--lease", "m", "k"],
    ] {
        usage_line(&output(&args));
    }
    assert_eq!(
        output(&["probe", "memory://", "--rounds", "1"])
            .status
            .code(),
        Some(0)
    );
}

/// `fence ARGS` with no AWS or Azure variable but those given, and HOME elsewhere.
fn clean_env(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = fence(args);
    for (k, _) in std::env::vars_os().filter(|(k, _)| {
        let k = k.to_string_lossy();
        k.starts_with("AWS_") || k.starts_with("AZURE") || k == "HOME"
    }) {
        cmd.env_remove(k);
    }
    cmd.envs(vars.iter().copied()).output().unwrap()
}

/// With no credential source, the instance metadata service is the last one tried, at the
/// configured endpoint (a canned server here, never 169.254.169.254); when it gives none, the
/// error names every source tried instead of "access denied".
#[cfg(feature = "s3")]
#[test]
fn s3_without_credentials_names_the_sources_tried_and_asks_only_the_configured_imds() {
    let imds = common::Canned::answering("404 Not Found", "");
    let status = ["status", "--store", "s3://bucket/p"];
    let out = clean_env(&status, &[("AWS_METADATA_ENDPOINT", imds.url.as_str())]);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let line = stderr(&out);
    assert_eq!(line.lines().count(), 1, "{line}");
    for source in [
        "AWS_ACCESS_KEY_ID",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "~/.aws",
        &imds.url,
    ] {
        assert!(line.contains(source), "{source} not named: {line}");
    }
    let asked = imds.requests();
    assert!(
        !asked.is_empty(),
        "the configured metadata endpoint was asked"
    );
    assert!(asked
        .iter()
        .all(|r| r.contains("/latest/api/token") || r.contains("/latest/meta-data")));

    // IMDS turned off (the AWS SDKs' switch): a usage error before any I/O.
    let off = clean_env(
        &status,
        &[
            ("AWS_METADATA_ENDPOINT", imds.url.as_str()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    let line = usage_line(&off);
    assert!(line.contains("AWS_ACCESS_KEY_ID") && line.contains("AWS_EC2_METADATA_DISABLED"));
    assert_eq!(imds.requests().len(), asked.len(), "asked although off");
}

type Vars<'a> = Vec<(&'a str, &'a str)>;

/// Errors about the configuration are usage errors that say what to fix, before any request
/// (to the endpoint or to a metadata service).
#[cfg(feature = "s3")]
#[test]
fn s3_configuration_mistakes_are_usage_errors_before_any_request() {
    let server = common::Canned::answering("200 OK", "");
    let endpoint = server.url.as_str();
    let cases: [(&str, Vars, &str); 3] = [
        (
            "s3://bucket with space/x",
            vec![("AWS_ACCESS_KEY_ID", "k"), ("AWS_SECRET_ACCESS_KEY", "s")],
            "bucket names",
        ),
        (
            "s3://bucket/x",
            vec![
                ("AWS_ENDPOINT", endpoint),
                ("AWS_ACCESS_KEY_ID", "k"),
                ("AWS_SECRET_ACCESS_KEY", "s"),
            ],
            "AWS_ALLOW_HTTP=true",
        ),
        (
            "s3://bucket/x",
            vec![("AWS_ENDPOINT", endpoint), ("AWS_ALLOW_HTTP", "true")],
            "AWS_ACCESS_KEY_ID",
        ),
    ];
    for (url, mut vars, says) in cases {
        vars.push(("AWS_METADATA_ENDPOINT", endpoint));
        let line = usage_line(&clean_env(&["status", "--store", url], &vars));
        assert!(line.contains(says), "{url} {vars:?}: {line}");
    }
    assert_eq!(
        server.requests(),
        Vec::<String>::new(),
        "a request was sent"
    );
}

#[cfg(feature = "azure")]
#[test]
fn az_without_an_account_names_the_variables_to_set() {
    let line = usage_line(&clean_env(&["status", "--store", "az://container/p"], &[]));
    assert!(line.contains("AZURE_STORAGE_ACCOUNT_NAME"), "{line}");
    assert!(line.contains("AZURE_STORAGE_USE_EMULATOR"), "{line}");
}

/// A store's error answer is its status, code and message, not the client's internals cut
/// in the middle of the XML.
#[cfg(feature = "s3")]
#[test]
fn a_store_error_shows_code_and_message_without_xml() {
    let body = "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we \
        calculated does not match the signature you provided. Check your key and signing \
        method. This message is long enough that a cut after 300 characters of the client's \
        error text would land in the middle of it, as it did before.</Message></Error>";
    let server = common::Canned::answering("403 Forbidden", body);
    let out = clean_env(
        &["status", "--store", "s3://bucket/p"],
        &[
            ("AWS_ENDPOINT", server.url.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_ACCESS_KEY_ID", "k"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ],
    );
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let line = stderr(&out);
    assert!(!line.contains('<'), "markup: {line}");
    assert!(line.contains("SignatureDoesNotMatch"), "{line}");
    assert!(line.trim_end().ends_with("as it did before."), "{line}");
}

/// An account without a credential: the managed identity endpoint is asked (the configured
/// one, a canned server here) and, when it gives no token, the error says what was tried
/// instead of "permission denied" by the container; the store itself is never asked.
#[cfg(feature = "azure")]
#[test]
fn az_without_a_credential_names_what_was_tried() {
    let msi = common::Canned::answering("400 Bad Request", "");
    let blob = common::Canned::answering("200 OK", "");
    let out = clean_env(
        &["status", "--store", "az://container/p"],
        &[
            ("AZURE_STORAGE_ACCOUNT_NAME", "acct"),
            ("AZURE_ENDPOINT", blob.url.as_str()),
            ("AZURE_ALLOW_HTTP", "true"),
            ("AZURE_MSI_ENDPOINT", msi.url.as_str()),
        ],
    );
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let line = stderr(&out);
    assert!(line.contains("AZURE_STORAGE_ACCOUNT_KEY"), "{line}");
    assert!(line.contains(&msi.url), "{line}");
    assert!(
        !msi.requests().is_empty(),
        "the configured endpoint was asked"
    );
    assert_eq!(blob.requests(), Vec::<String>::new(), "the store was asked");
}
