//! Nothing a store or a server says reaches the operator's terminal raw: node names,
//! addresses, keys and server error messages are escaped in the `status` table, in `--json`
//! string values and in error lines.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;

use common::{output, Store};
use fence_core::{CasGuard, ConditionalStore, NodeLeaseRecord, Ownership};
use serde_json::Value;

const TITLE: &str = "\u{1b}]0;x\u{7}";
const CLIPBOARD: &str = "pid:1@h\u{1b}]52;c;ZXZpbA==\u{7}\u{9b}2J\u{202e}\u{85}";

/// Whether `bytes` holds anything a terminal would act on: C0 but newline, DEL, C1 (as UTF-8
/// code points), a bidi override.
fn raw_controls(bytes: &[u8]) -> Vec<char> {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|&c| c != '\n' && fence_cli::terminal::is_unsafe(c))
        .collect()
}

/// Cell `title` held by a node named [`TITLE`] (no lease record: a node name with controls is
/// no valid key), cell `clip` by node `clip` whose lease advertises [`CLIPBOARD`].
async fn hostile_records(store: &Store) {
    let fs: Arc<dyn ConditionalStore> =
        Arc::new(fence_fs::FsStore::open(store.dir.path()).unwrap());
    Ownership::new(fs.clone(), TITLE)
        .cas_owner("title", CasGuard::Absent, 1)
        .await
        .unwrap();
    let clip = Ownership::new(fs, "clip");
    let record = NodeLeaseRecord {
        node: "clip".into(),
        expires_ms: u64::MAX / 2,
        addr: CLIPBOARD.into(),
        peer_protocol: 1,
        generation: "g".into(),
    };
    clip.cas_node_lease(CasGuard::Absent, &record)
        .await
        .unwrap();
    clip.cas_owner("clip", CasGuard::Absent, 1).await.unwrap();
}

#[tokio::test]
async fn a_hostile_node_and_address_print_escaped_in_status_and_json() {
    let store = Store::new();
    hostile_records(&store).await;

    let table = output(&["status", "--store", &store.url]);
    assert_eq!(raw_controls(&table.stdout), Vec::<char>::new(), "table");
    assert_eq!(
        raw_controls(&table.stderr),
        Vec::<char>::new(),
        "table's stderr"
    );
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains(r"\u001b]0;x\u0007"), "{text}");
    assert!(text.contains(r"\u009b2J\u202e"), "{text}");

    let json = output(&["status", "--store", &store.url, "--json"]);
    assert_eq!(raw_controls(&json.stdout), Vec::<char>::new(), "json");
    let value: Value = serde_json::from_slice(&json.stdout).expect("still JSON");
    let holder = |name: &str| {
        value["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["holder"].clone())
    };
    assert_eq!(holder("title"), Some(Value::from(TITLE)), "the same string");
    let addr = value["leases"][0]["addr"].as_str().unwrap();
    assert_eq!(addr, CLIPBOARD, "the same string");
}

#[cfg(feature = "s3")]
#[test]
fn a_servers_error_message_prints_escaped() {
    let body = "<Error><Code>AccessDenied</Code><Message>no \u{1b}]52;c;ZXZpbA==\u{7} \u{9b}2J \
                \u{202e}x</Message></Error>";
    let server = common::Canned::answering("403 Forbidden", body);
    let out = common::fence(&["status", "--store", "s3://bucket/p"])
        .env("AWS_ENDPOINT", &server.url)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "k")
        .env("AWS_SECRET_ACCESS_KEY", "s")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    assert!(!server.requests().is_empty(), "the server was asked");
    assert_eq!(raw_controls(&out.stderr), Vec::<char>::new());
    let line = String::from_utf8_lossy(&out.stderr);
    assert!(line.contains(r"\u001b]52"), "{line}");
}

/// `fence get` to a terminal escapes the value (line breaks kept); to a pipe it is unchanged.
#[test]
fn get_escapes_a_value_for_a_terminal_and_not_for_a_pipe() {
    use std::io::Read;
    let store = Store::new();
    let value = "line 1\n\u{1b}]0;x\u{7}\u{9b}2J";
    let claim = output(&common::run_args(
        &store,
        "v",
        &["--", common::fence_bin(), "put", "k", "--value", value],
    ));
    assert_eq!(claim.status.code(), Some(0), "{claim:?}");
    let get = ["get", "--store", store.url.as_str(), "--lease", "v", "k"];
    assert_eq!(
        output(&get).stdout,
        value.as_bytes(),
        "a pipe gets the bytes"
    );

    let pty = nix::pty::openpty(None, None).unwrap();
    let mut child = common::fence(&get)
        .stdout(std::process::Stdio::from(pty.slave))
        .spawn()
        .unwrap();
    assert!(child.wait().unwrap().success());
    let mut shown = Vec::new();
    let mut master = std::fs::File::from(pty.master);
    let mut buf = [0u8; 4096];
    // The terminal's end reads until the other end is closed (EIO on Linux).
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        shown.extend_from_slice(&buf[..n]);
    }
    // The terminal turns each line break into CR LF (its ONLCR mode).
    let shown = String::from_utf8_lossy(&shown).replace("\r\n", "\n");
    assert_eq!(
        raw_controls(shown.as_bytes()),
        Vec::<char>::new(),
        "{shown:?}"
    );
    assert!(shown.contains(r"\u001b]0;x"), "{shown:?}");
}
