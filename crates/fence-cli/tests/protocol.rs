//! The wire protocol (docs/protocol.md) against what fence writes and what `fence check`
//! says: every record written by representative flows of fence-core, fence-fleet and the CLI
//! validates against docs/schema/, the final bucket passes `fence check`, and `fence check`
//! (and the schemas, where they can say it) flag a record with each kind of violation.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fence_cli::check::{check, Rule};
use fence_core::{
    CasGuard, ConditionalStore, DeleteOutcome, Election, ElectionEvent, Error, Fence, Key,
    MemoryStore, Ownership, PutOutcome, Stored, Version,
};
use serde_json::Value;

/// A store that remembers every body it was asked to put.
#[derive(Debug)]
struct Recording {
    inner: MemoryStore,
    puts: Mutex<Vec<(String, Bytes)>>,
}

#[async_trait]
impl ConditionalStore for Recording {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let record = (key.as_str().to_owned(), body.clone());
        self.puts.lock().unwrap().push(record);
        self.inner.put(key, body, guard).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.inner.delete(key, version).await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.inner.delete_immutable(key).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.inner.list(prefix).await
    }
    fn capabilities(&self) -> fence_core::Capabilities {
        self.inner.capabilities()
    }
}

fn schema(name: &str) -> jsonschema::Validator {
    let path = format!("{}/../../docs/schema/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

struct Schemas {
    lease: jsonschema::Validator,
    head: jsonschema::Validator,
    log: jsonschema::Validator,
    keymap: jsonschema::Validator,
    assignment: jsonschema::Validator,
}

impl Schemas {
    fn load() -> Self {
        Schemas {
            lease: schema("node-lease.schema.json"),
            head: schema("cell-head.schema.json"),
            log: schema("log-head.schema.json"),
            keymap: schema("key-map.schema.json"),
            assignment: schema("fleet-assignment.schema.json"),
        }
    }

    /// Validates one written record; returns what it was, for the tally.
    fn validate(&self, key: &str, body: &[u8]) -> &'static str {
        let parts: Vec<&str> = key.split('/').collect();
        match parts.as_slice() {
            ["nodes", _] => {
                let v = json(key, body);
                assert_valid(&self.lease, key, &v);
                assert_eq!(v["v"], 1, "{key}: fence writes lease v1");
                "lease"
            }
            ["cells", cell, "own.json"] => {
                let v = json(key, body);
                assert_valid(&self.head, key, &v);
                assert_eq!(v["v"], 2, "{key}: fence writes head v2");
                let app = match cell {
                    c if c.starts_with("log") => Some(&self.log),
                    c if c.starts_with("kv") => Some(&self.keymap),
                    _ => None,
                };
                if let (Some(schema), Some(data)) = (app, v["data"].as_str()) {
                    assert_valid(schema, key, &json(key, data.as_bytes()));
                }
                "head"
            }
            ["fleet", "nodes", _, _] => {
                assert_valid(&self.assignment, key, &json(key, body));
                "assignment"
            }
            ["cells", _, "blobs", _] => "blob",
            ["cells", _, "log", _] => "log record",
            _ => panic!("{key}: fence wrote a key the protocol does not define"),
        }
    }
}

fn json(key: &str, body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{key}: not JSON: {e}"))
}

fn assert_valid(v: &jsonschema::Validator, key: &str, value: &Value) {
    let errors: Vec<String> = v.iter_errors(value).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{key}: {value} violates its schema: {errors:?}"
    );
}

async fn core_flows(store: Arc<dyn ConditionalStore>) {
    let fence = Fence::builder(store.clone(), "n1")
        .ttl(Duration::from_secs(2))
        .inline_max(64)
        .build()
        .unwrap();
    let lease = fence.acquire().await.unwrap();
    let cell = lease.claim("plain").await.unwrap();
    cell.write("text").await.unwrap();
    cell.write(vec![0u8, 1, 2, 255]).await.unwrap();
    cell.write(vec![7u8; 1000]).await.unwrap(); // a payload object
    let seen = cell.read().await.unwrap().unwrap();
    cell.write_if(Some(&seen.version), "again").await.unwrap();
    cell.release().await.unwrap();
    let again = lease.claim("plain").await.unwrap();
    let other = Fence::builder(store.clone(), "n2").build().unwrap();
    let other_lease = other.acquire().await.unwrap();
    again
        .hand_off("n2", Some(&other_lease.generation()))
        .await
        .unwrap();
    let resumed = other_lease.adopt("plain").await.unwrap();
    resumed.write("resumed").await.unwrap();
    resumed.release().await.unwrap();
    other_lease.release().await;
    // The seed's API, and a write without a claim (fence put).
    let seed = Ownership::new(store.clone(), "seed-node");
    seed.cas_owner("seed", CasGuard::Absent, 1).await.unwrap();
    seed.release_owner("seed", 1).await.unwrap();
    let record = fence_core::NodeLeaseRecord {
        node: "seed-node".into(),
        expires_ms: 5,
        addr: "a".into(),
        peer_protocol: 1,
        generation: "g".into(),
    };
    seed.cas_node_lease(CasGuard::Absent, &record)
        .await
        .unwrap();
    let kv = lease.claim("kv").await.unwrap();
    fence_cli::kv::put(&store, "n1", "kv", kv.epoch(), "k", b"v")
        .await
        .unwrap();
    fence_cli::kv::put(&store, "n1", "kv", kv.epoch(), "bin", &[0, 255])
        .await
        .unwrap();
    lease.release().await;
}

async fn fleet_flows(store: Arc<dyn ConditionalStore>) {
    let fence = |n: &str| {
        // Not shorter: these flows unwrap every write, and a lease lost to a stalled
        // scheduler on a loaded machine would fail them for no fault of the records.
        Fence::builder(store.clone(), n)
            .ttl(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let cells = (0..4).map(|i| format!("log-{i}"));
    let (a, mut events) = fence_fleet::Fleet::builder(fence("fa"), cells.clone())
        .start()
        .await
        .unwrap();
    let mut started = Vec::new();
    while started.len() < 4 {
        if let Some(fence_fleet::FleetEvent::Started { shard, .. }) = events.recv().await {
            started.push(shard);
        }
    }
    for shard in &started {
        let log = fence_fleet::log::AppendLog::new(&fence("fa"), shard.claim().clone());
        log.append("one").await.unwrap();
        log.append("two").await.unwrap();
    }
    let (b, _events_b) = fence_fleet::Fleet::builder(fence("fb"), cells)
        .start()
        .await
        .unwrap();
    a.drain(Duration::from_secs(5)).await;
    b.drain(Duration::from_secs(5)).await;
    // Leader election: a term, a write through it, a resignation.
    let mut election = Election::builder(fence("leader"), "leader-cell")
        .start()
        .unwrap();
    while let Some(event) = election.next_event().await {
        if let ElectionEvent::Started(term) = event {
            term.claim().write("plan").await.unwrap();
            break;
        }
    }
    election.stop().await.result.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_fence_writes_validates_against_the_schemas() {
    let store = Arc::new(Recording {
        inner: MemoryStore::new(),
        puts: Mutex::new(Vec::new()),
    });
    let dyn_store: Arc<dyn ConditionalStore> = store.clone();
    core_flows(dyn_store.clone()).await;
    fleet_flows(dyn_store.clone()).await;
    let schemas = Schemas::load();
    let puts = store.puts.lock().unwrap().clone();
    let mut seen = std::collections::BTreeMap::new();
    for (key, body) in &puts {
        *seen.entry(schemas.validate(key, body)).or_insert(0) += 1;
    }
    for kind in ["lease", "head", "blob", "log record", "assignment"] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} written: {seen:?}"
        );
    }
    println!("validated {} writes: {seen:?}", puts.len());
    let report = check(&dyn_store, None).await.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(report.checked > 10);
}

/// What the operator commands leave in a store (semaphore slots, a break of a live holder
/// and of a seed cell, a script section): every record is of a kind the protocol defines,
/// validates against its schema, and the bucket passes `fence check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_slots_breaks_and_script_sections_validate_and_pass_fence_check() {
    let store = common::Store::new();
    let fs: Arc<dyn ConditionalStore> =
        Arc::new(fence_fs::FsStore::open(store.dir.path()).unwrap());
    // The seed's head, owned by a node that left no lease record.
    let seed = Key::new("cells/seed/own.json").unwrap();
    let body = Bytes::from_static(br#"{"node":"node_gone","epoch":7}"#);
    fs.put(&seed, body, CasGuard::Absent).await.unwrap();
    operator_flows(&store);
    let schemas = Schemas::load();
    let mut seen = std::collections::BTreeMap::new();
    let keys = fs.list(None).await.unwrap();
    for key in &keys {
        let body = fs.get(key).await.unwrap().unwrap().body;
        *seen
            .entry(schemas.validate(key.as_str(), &body))
            .or_insert(0) += 1;
    }
    let names: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
    for key in [
        "nodes/run.jobs#0.json",
        "cells/jobs#1/own.json",
        "cells/seed/own.json",
        "nodes/run.s.json",
    ] {
        assert!(names.contains(&key), "no {key} in {names:?}");
    }
    let report = check(&fs, None).await.unwrap();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.checked, keys.len(), "{seen:?}");
}

/// The CLI flows of [`records_of_slots_breaks_and_script_sections_validate_and_pass_fence_check`].
fn operator_flows(store: &common::Store) {
    // The runs' sightings and the test's own files stay out of the store.
    let runtime = tempfile::tempdir().unwrap();
    let ok = |out: std::process::Output| {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
    };
    // Two slots held at once: a run inside a run of the same semaphore takes slot 1.
    let inner = format!(
        "\"$FENCE_BIN\" run --store {} --lease jobs --limit 2 -- fence put k --value v",
        store.url
    );
    let mut outer = common::fence(&common::run_args(
        store,
        "jobs",
        &["--limit", "2", "--", "sh", "-c", &inner],
    ));
    let path = format!(
        "{}:{}",
        std::path::Path::new(common::fence_bin())
            .parent()
            .unwrap()
            .display(),
        std::env::var("PATH").unwrap_or_default()
    );
    ok(outer
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env("FENCE_BIN", common::fence_bin())
        .env("PATH", &path)
        .output()
        .unwrap());
    // A break of a live holder (--force) and of a seed cell whose owner left no lease.
    let ready = runtime.path().join("ready");
    let hold = format!("echo 1 > {}; exec sleep 600", ready.display());
    let mut holder = common::fence(&common::run_args(store, "b", &["--", "sh", "-c", &hold]))
        .spawn()
        .unwrap();
    common::wait_for_file(&ready, Duration::from_secs(20));
    ok(common::output(&[
        "break", "--store", &store.url, "--lease", "b", "--force",
    ]));
    common::wait_bounded(&mut holder, Duration::from_secs(20), "the broken holder");
    ok(common::output(&[
        "break", "--store", &store.url, "--lease", "seed",
    ]));
    // A script section.
    let section = "eval \"$(fence acquire --lease s)\" && fence put k --value v && fence release";
    ok(std::process::Command::new("sh")
        .args(["-c", section])
        .env("PATH", &path)
        .env("FENCE_STORE", &store.url)
        .env_remove("FENCE_LEASE")
        .env_remove("FENCE_EPOCH")
        .env_remove("FENCE_HOLDER")
        .output()
        .unwrap());
}
/// A fleet node's assignment record.
const ASSIGNMENT: &str = "fleet/nodes/0a/a.json";

/// `(key, body, rule, field)`: one record per kind of violation.
fn bad_records() -> Vec<(&'static str, &'static str, Rule, Option<&'static str>)> {
    vec![
        ("nodes/a.json", "not json", Rule::Unparseable, None),
        ("nodes/a.json", "[1]", Rule::Unparseable, None),
        (
            "nodes/a.json",
            r#"{"v":1,"node":"a","expires_ms":"1","addr":"","peer_protocol":1,"generation":"g","nonce":"x"}"#,
            Rule::WrongType,
            Some("expires_ms"),
        ),
        (
            "nodes/a.json",
            r#"{"v":1,"node":"a","addr":"","peer_protocol":1,"generation":"g","nonce":"x"}"#,
            Rule::MissingField,
            Some("expires_ms"),
        ),
        (
            "nodes/a.json",
            r#"{"v":2,"node":"a","expires_ms":1}"#,
            Rule::UnknownVersion,
            Some("v"),
        ),
        (
            "nodes/a.json",
            r#"{"v":1,"node":"a","expires_ms":-1,"addr":"","peer_protocol":1,"generation":"g","nonce":"x"}"#,
            Rule::BadInteger,
            Some("expires_ms"),
        ),
        (
            "nodes/a.json",
            r#"{"v":1,"node":"a","expires_ms":1.0,"addr":"","peer_protocol":1,"generation":"g","nonce":"x"}"#,
            Rule::BadInteger,
            Some("expires_ms"),
        ),
        (
            "nodes/a.json",
            r#"{"v":1,"node":"a","expires_ms":1,"addr":"","peer_protocol":1,"generation":"g","nonce":""}"#,
            Rule::BadNonce,
            Some("nonce"),
        ),
        (
            "nodes/a.json",
            r#"{"v":1,"node":"a","expires_ms":1,"addr":"","peer_protocol":1,"generation":"g"}"#,
            Rule::BadNonce,
            Some("nonce"),
        ),
        (
            "nodes/a.json",
            r#"{"v":1,"node":"b","expires_ms":1,"addr":"","peer_protocol":1,"generation":"g","nonce":"x"}"#,
            Rule::BadIdentity,
            Some("node"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":3,"node":"n","epoch":1,"nonce":"x"}"#,
            Rule::UnknownVersion,
            Some("v"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"n","epoch":18446744073709551615,"nonce":"x"}"#,
            Rule::EpochNotRaisable,
            Some("epoch"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"n","epoch":0,"nonce":"x"}"#,
            Rule::EpochNotRaisable,
            Some("epoch"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"n","epoch":1}"#,
            Rule::BadNonce,
            Some("nonce"),
        ),
        // Issue 35: a first-wins reader reads owner "", a last-wins reader owner "n".
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"","epoch":1,"nonce":"x","node":"n"}"#,
            Rule::DuplicateMember,
            None,
        ),
        // Issue 35: a live lease without its holder's TTL (a peer with a shorter TTL took
        // it over early), or with one longer than a century.
        (
            "nodes/a.json",
            r#"{"v":1,"node":"a","expires_ms":1,"addr":"","peer_protocol":1,"generation":"g","nonce":"x"}"#,
            Rule::MissingField,
            Some("ttl_ms"),
        ),
        (
            "nodes/a.json",
            r#"{"v":1,"node":"a","expires_ms":1,"addr":"","peer_protocol":1,"generation":"g","nonce":"x","ttl_ms":3153600000001}"#,
            Rule::BadInteger,
            Some("ttl_ms"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"epoch":1,"nonce":"x"}"#,
            Rule::MissingField,
            Some("node"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":null,"epoch":1,"nonce":"x"}"#,
            Rule::WrongType,
            Some("node"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"n","epoch":1,"nonce":"x","data":"a","data_b64":"YQ=="}"#,
            Rule::BadPayload,
            Some("data_b64"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"n","epoch":1,"nonce":"x","data_b64":"!!"}"#,
            Rule::BadPayload,
            Some("data_b64"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"n","epoch":1,"nonce":"x","blob":{"name":"../x","len":1}}"#,
            Rule::BadPayload,
            Some("blob"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"n","epoch":1,"nonce":"x","blob":{"name":"gone","len":1}}"#,
            Rule::MissingPayload,
            Some("blob"),
        ),
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"a/b","epoch":1,"nonce":"x"}"#,
            Rule::BadIdentity,
            Some("node"),
        ),
        ("cells/c/whatever", "x", Rule::BadName, None),
        (ASSIGNMENT, r#"{"node":"a"}"#, Rule::MissingField, Some("v")),
        (
            ASSIGNMENT,
            r#"{"v":2,"node":"a"}"#,
            Rule::UnknownVersion,
            Some("v"),
        ),
        (
            ASSIGNMENT,
            r#"{"v":1,"node":"b"}"#,
            Rule::BadIdentity,
            Some("node"),
        ),
        (
            ASSIGNMENT,
            r#"{"v":1,"node":"a","cells":["x/y"]}"#,
            Rule::BadName,
            Some("cells"),
        ),
        (
            ASSIGNMENT,
            r#"{"v":1,"node":"a","heirs":{"c":""}}"#,
            Rule::BadName,
            Some("heirs"),
        ),
        (
            ASSIGNMENT,
            r#"{"v":1,"node":"a","leaving":"yes"}"#,
            Rule::WrongType,
            Some("leaving"),
        ),
        (
            ASSIGNMENT,
            r#"{"v":1,"node":"a","term":-1}"#,
            Rule::BadInteger,
            Some("term"),
        ),
        (
            ASSIGNMENT,
            r#"{"v":1,"node":"a","watch":[{"heirs":{}}]}"#,
            Rule::MissingField,
            Some("watch"),
        ),
        (
            ASSIGNMENT,
            r#"{"v":1,"node":"a","notices":[{"kind":"inherit"}]}"#,
            Rule::MissingField,
            Some("notices"),
        ),
        (
            "fleet/nodes/zz/a.json",
            r#"{"v":1,"node":"a"}"#,
            Rule::BadName,
            None,
        ),
        ("fleet/roster.json", "{}", Rule::BadName, None),
    ]
}

/// The rules a JSON Schema can express (the others need the key, the store or the integer's
/// spelling).
fn schema_can_say(rule: Rule, key: &str) -> bool {
    let key_bound =
        rule == Rule::BadIdentity && (key.starts_with("nodes/") || key.starts_with("fleet/"));
    !key_bound
        && !matches!(
            rule,
            Rule::MissingPayload | Rule::BadName | Rule::Unparseable | Rule::DuplicateMember
        )
}

#[tokio::test]
async fn check_flags_a_record_with_each_kind_of_violation_and_the_schemas_agree() {
    let schemas = Schemas::load();
    for (key, body, rule, field) in bad_records() {
        let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
        let k = Key::new(key).unwrap();
        store
            .put(&k, Bytes::from(body), CasGuard::Absent)
            .await
            .unwrap();
        let report = check(&store, None).await.unwrap();
        let found: Vec<_> = report
            .violations
            .iter()
            .map(|v| (v.rule, v.field.as_deref()))
            .collect();
        assert!(
            found.contains(&(rule, field)),
            "{key} {body}: want {rule:?} at {field:?}, got {found:?}"
        );
        assert_eq!(fence_cli::check::exit_code(&report), 1);
        let validator = if key.starts_with("nodes/") {
            &schemas.lease
        } else if key.starts_with("fleet/") {
            &schemas.assignment
        } else {
            &schemas.head
        };
        // `1.0` is an integer to JSON Schema: only the spelling tells, so only check says it.
        let float_spelled = body.contains("1.0");
        if schema_can_say(rule, key) && !float_spelled {
            let value: Value = serde_json::from_str(body).unwrap();
            assert!(
                !validator.is_valid(&value),
                "the schema accepts {body} ({rule:?})"
            );
        }
    }
}

#[tokio::test]
async fn legacy_records_are_notes_and_a_log_missing_a_record_is_flagged() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let put = |k: &str, b: &str| {
        let store = store.clone();
        let (k, b) = (Key::new(k).unwrap(), Bytes::from(b.to_owned()));
        async move { store.put(&k, b, CasGuard::Absent).await.unwrap() }
    };
    put("nodes/s.json", r#"{"node":"s","expires_ms":7}"#).await;
    put("cells/seed/own.json", r#"{"node":"n9","epoch":41}"#).await;
    put(
        "cells/old/own.json",
        r#"{"v":1,"node":null,"epoch":3,"nonce":"q"}"#,
    )
    .await;
    put(
        "cells/old/data",
        "{\"v\":1,\"epoch\":3,\"node\":\"n\",\"nonce\":\"x\"}\npayload",
    )
    .await;
    let head = r#"{"v":2,"node":"n","epoch":2,"nonce":"x","data":"{\"next\":2,\"runs\":[[0,2]]}"}"#;
    put("cells/log/own.json", head).await;
    put("cells/log/log/00000000000000000000-2", "r0").await;
    let report = check(&store, None).await.unwrap();
    let rules: Vec<_> = report
        .violations
        .iter()
        .map(|v| (v.key.as_str(), v.rule))
        .collect();
    assert_eq!(rules, vec![("cells/log/own.json", Rule::BadLog)]);
    assert_eq!(report.notes.len(), 4, "{:?}", report.notes);
    assert!(report.notes.iter().all(|n| n.rule == Rule::LegacyFormat));
}

/// A hostile log head (`next` near the end of the sequence) is a finding, not a hang: the
/// check looks at a bounded number of record names whatever `next` says.
#[test]
fn a_log_head_with_a_huge_next_is_checked_in_bounded_work() {
    let looked = std::cell::Cell::new(0u64);
    let payload = br#"{"next":18446744073709551614,"runs":[[0,1]]}"#;
    let problems = fence_cli::check::log_problems(payload, |_| {
        looked.set(looked.get() + 1);
        assert!(looked.get() <= 1_000, "looked up {} names", looked.get());
        false
    });
    assert!(!problems.is_empty());
    assert!(problems.len() <= 20, "{} findings", problems.len());
}

/// A head whose payload object is of the wrong length, in a cell with log records, is named
/// as a violation and the check goes on; it is not reported as a store failure.
#[tokio::test]
async fn a_wrong_length_payload_object_in_a_log_cell_is_a_finding_not_a_failure() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    for (k, b) in [
        (
            "cells/c/own.json",
            r#"{"v":2,"node":"n","epoch":1,"nonce":"x","blob":{"name":"b1","len":5}}"#,
        ),
        ("cells/c/blobs/b1", "abc"),
        ("cells/c/log/00000000000000000000-1", "r0"),
        (
            "nodes/z.json",
            r#"{"v":1,"node":"y","expires_ms":1,"addr":"","peer_protocol":1,"generation":"g","nonce":"x"}"#,
        ),
    ] {
        let k = Key::new(k).unwrap();
        store
            .put(&k, Bytes::from(b), CasGuard::Absent)
            .await
            .unwrap();
    }
    let report = check(&store, None).await.expect("a report, not a failure");
    let found: Vec<_> = report
        .violations
        .iter()
        .map(|v| (v.key.as_str(), v.rule))
        .collect();
    assert!(
        found.contains(&("cells/c/own.json", Rule::MissingPayload)),
        "{found:?}"
    );
    assert!(
        found.contains(&("nodes/z.json", Rule::BadIdentity)),
        "{found:?}"
    );
}

/// A store that answers `Corrupt` for one key, as every adapter does for a record above its
/// record limit.
#[derive(Debug)]
struct OneOversized(MemoryStore, Key);

#[async_trait]
impl ConditionalStore for OneOversized {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        if key == &self.1 {
            return Err(Error::corrupt(key, "record above the record limit"));
        }
        self.0.get(key).await
    }
    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        self.0.put(key, body, guard).await
    }
    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        self.0.delete(key, version).await
    }
    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        self.0.delete_immutable(key).await
    }
    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        self.0.list(prefix).await
    }
    fn capabilities(&self) -> fence_core::Capabilities {
        self.0.capabilities()
    }
}

/// A record the store will not return (over its record limit) is named, and the check goes
/// on to the other records.
#[tokio::test]
async fn a_record_over_the_stores_limit_is_a_finding_and_the_check_goes_on() {
    let big = Key::new("nodes/big.json").unwrap();
    let inner = MemoryStore::new();
    for (k, b) in [
        ("nodes/big.json", "{}"),
        (
            "nodes/z.json",
            r#"{"v":1,"node":"y","expires_ms":1,"addr":"","peer_protocol":1,"generation":"g","nonce":"x"}"#,
        ),
    ] {
        let k = Key::new(k).unwrap();
        inner
            .put(&k, Bytes::from(b), CasGuard::Absent)
            .await
            .unwrap();
    }
    let store: Arc<dyn ConditionalStore> = Arc::new(OneOversized(inner, big));
    let report = check(&store, None).await.expect("a report, not a failure");
    let found: Vec<_> = report
        .violations
        .iter()
        .map(|v| (v.key.as_str(), v.rule))
        .collect();
    assert!(
        found.contains(&("nodes/big.json", Rule::Unparseable)),
        "{found:?}"
    );
    assert!(
        found.contains(&("nodes/z.json", Rule::BadIdentity)),
        "{found:?}"
    );
}
