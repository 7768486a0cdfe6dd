//! `fence check`: every record under a prefix checked against the wire protocol
//! (docs/protocol.md), each violation named by key, field and rule.
//!
//! The checks are stricter than fence's own readers, which accept what they can act on
//! safely (a version-1 lease without a nonce): `check` reports everything a conforming writer
//! would not have written, so an operator can trust a bucket another implementation wrote to.
//! What fence's readers refuse (a `null` owner in a version-2 head, a live lease without
//! `ttl_ms`, two members of one name, …) they refuse through the same functions of
//! [`fence_core::record::rules`], in the same words. Seed and version-1 records are readable
//! and are reported as notes, not violations.
//!
//! The `--json` shape (fields are only ever added):
//!
//! ```json
//! {"store": "file:///tmp/f", "prefix": null, "checked": 3,
//!  "violations": [{"key": "nodes/a.json", "field": "nonce", "rule": "bad-nonce",
//!                  "detail": "a version-1 lease needs a non-empty nonce"}],
//!  "notes": [{"key": "cells/old/own.json", "field": null, "rule": "legacy-format",
//!             "detail": "the seed's shape: read, migrated by the next claim"}]}
//! ```
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use fence_core::{CasGuard, ConditionalStore, Key, MemoryStore};
//! use fence_cli::check::{check, Rule};
//! let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
//! let key = Key::new("cells/c/own.json").unwrap();
//! store.put(&key, br#"{"v":2,"node":"n","epoch":1}"#.to_vec().into(), CasGuard::Absent).await.unwrap();
//! let report = check(&store, None).await.unwrap();
//! assert_eq!(report.violations[0].rule, Rule::BadNonce);
//! # });
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use fence_core::decide::observe::MAX_RECORD_TTL_MS;
use fence_core::record::{rules, HeadFormat};
use fence_core::{ConditionalStore, ErrorKind, Key};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::exit::{describe, shown, Failure};

mod assignment;

/// The rules of docs/protocol.md §13: fence-core's, which its readers apply too (a record
/// `check` calls corrupt is one fence refuses, in the same words).
pub use fence_core::record::rules::Rule;

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The store key (under the prefix).
    pub key: String,
    /// The field, when the finding is about one.
    pub field: Option<String>,
    /// The rule.
    pub rule: Rule,
    /// What was found, in words.
    pub detail: String,
}

/// What `fence check` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The store's URL (set by the caller).
    pub store: String,
    /// The key prefix checked under.
    pub prefix: Option<String>,
    /// Records checked.
    pub checked: usize,
    /// Violations of the protocol.
    pub violations: Vec<Finding>,
    /// Readable legacy records and keys outside the protocol.
    pub notes: Vec<Finding>,
}

impl Report {
    fn breach(&mut self, key: &str, b: rules::Breach) {
        self.add(key, b.field, b.rule, b.detail);
    }

    fn add(&mut self, key: &str, field: Option<&str>, rule: Rule, detail: impl Into<String>) {
        let f = Finding {
            key: key.to_owned(),
            field: field.map(str::to_owned),
            rule,
            detail: detail.into(),
        };
        if rule == Rule::LegacyFormat {
            self.notes.push(f);
        } else {
            self.violations.push(f);
        }
    }
}

/// Checks every record under `prefix` (the keys fence would use with that prefix).
///
/// Errors: exit 2 for an invalid prefix, 69 when the store cannot be listed or read.
pub async fn check(
    store: &Arc<dyn ConditionalStore>,
    prefix: Option<&str>,
) -> Result<Report, Failure> {
    let prefix = prefix
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty());
    let root = prefix
        .map(Key::new)
        .transpose()
        .map_err(|e| Failure::usage(format!("--prefix: {e}")))?;
    let keys = store
        .list(root.as_ref())
        .await
        .map_err(|e| Failure::from(e).prefixed("cannot list the store"))?;
    let strip = prefix.map_or(0, |p| p.len() + 1);
    let rel: BTreeSet<String> = keys
        .iter()
        .map(|k| k.as_str()[strip..].to_owned())
        .collect();
    let mut report = Report {
        prefix: prefix.map(str::to_owned),
        ..Report::default()
    };
    let ctx = Ctx {
        store,
        prefix,
        keys: &rel,
    };
    for key in &rel {
        ctx.check_key(&mut report, key).await?;
    }
    Ok(report)
}

struct Ctx<'a> {
    store: &'a Arc<dyn ConditionalStore>,
    prefix: Option<&'a str>,
    keys: &'a BTreeSet<String>,
}

/// What a relative key is.
enum Shape<'k> {
    Lease(&'k str),
    /// A fleet node's assignment record.
    Assignment(&'k str),
    Head(&'k str),
    Blob,
    LogRecord,
    DataV1,
    Unknown,
    Outside,
}

fn shape(key: &str) -> Shape<'_> {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["nodes", file] => match file.strip_suffix(".json") {
            Some(node) if valid_name(node) => Shape::Lease(node),
            _ => Shape::Unknown,
        },
        ["cells", cell, "own.json"] if valid_name(cell) => Shape::Head(cell),
        ["cells", cell, "data"] if valid_name(cell) => Shape::DataV1,
        ["cells", cell, "blobs", name] if valid_name(cell) && valid_blob_name(name) => Shape::Blob,
        ["cells", cell, "log", name] if valid_name(cell) && valid_log_name(name) => {
            Shape::LogRecord
        }
        ["fleet", "nodes", hh, file] if assignment::valid_spread(hh) => {
            match file.strip_suffix(".json") {
                Some(node) if valid_name(node) => Shape::Assignment(node),
                _ => Shape::Unknown,
            }
        }
        ["nodes" | "cells" | "fleet", ..] => Shape::Unknown,
        _ => Shape::Outside,
    }
}

/// A node or cell name: one key segment of 1–200 bytes (docs/protocol.md §2).
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 200
        && n != "."
        && n != ".."
        && !n.chars().any(|c| c == '/' || c == '\\' || c.is_control())
}

fn valid_blob_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 128
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn valid_tag(t: &str) -> bool {
    !t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_alphanumeric())
}

fn valid_log_name(n: &str) -> bool {
    let mut parts = n.splitn(3, '-');
    let seq = parts.next().unwrap_or_default();
    let epoch = parts.next().unwrap_or_default();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    seq.len() == 20 && digits(seq) && digits(epoch) && parts.next().is_none_or(valid_tag)
}

impl Ctx<'_> {
    fn key(&self, rel: &str) -> Result<Key, Failure> {
        let full = match self.prefix {
            Some(p) => format!("{p}/{rel}"),
            None => rel.to_owned(),
        };
        Key::new(full).map_err(Failure::from)
    }

    /// `rel`'s bytes (`None`: gone since the listing). A record the store will not return
    /// (`Corrupt`: over its record limit, say) is `Some(Err(why))`; any other failure of the
    /// store ends the check.
    async fn body(&self, rel: &str) -> Result<Option<Result<Bytes, String>>, Failure> {
        let key = self.key(rel)?;
        match self.store.get(&key).await {
            Ok(got) => Ok(got.map(|s| Ok(s.body))),
            Err(e) if e.kind() == ErrorKind::Corrupt => Ok(Some(Err(describe(&e)))),
            Err(e) => Err(Failure::from(e).prefixed(&format!("cannot read {}", shown(rel)))),
        }
    }

    /// A record's bytes to check: `None` when it is gone, or unreadable (named in `report`).
    async fn record(&self, report: &mut Report, rel: &str) -> Result<Option<Bytes>, Failure> {
        Ok(match self.body(rel).await? {
            Some(Ok(body)) => Some(body),
            Some(Err(why)) => {
                report.add(rel, None, Rule::Unparseable, why);
                None
            }
            None => None,
        })
    }

    async fn check_key(&self, report: &mut Report, key: &str) -> Result<(), Failure> {
        match shape(key) {
            Shape::Lease(node) => {
                report.checked += 1;
                if let Some(body) = self.record(report, key).await? {
                    check_lease(report, key, node, &body);
                }
            }
            Shape::Assignment(node) => {
                report.checked += 1;
                if let Some(body) = self.record(report, key).await? {
                    assignment::check_assignment(report, key, node, &body);
                }
            }
            Shape::Head(cell) => {
                report.checked += 1;
                if let Some(body) = self.record(report, key).await? {
                    self.check_head(report, key, cell, &body).await?;
                }
            }
            Shape::DataV1 => {
                report.checked += 1;
                if let Some(body) = self.record(report, key).await? {
                    check_data_v1(report, key, &body);
                }
            }
            // Immutable bytes: their names were checked by `shape`, their contents are the
            // user's.
            Shape::Blob | Shape::LogRecord => report.checked += 1,
            Shape::Unknown => report.add(
                key,
                None,
                Rule::BadName,
                "a key under nodes/, cells/ or fleet/ of no shape the protocol defines",
            ),
            Shape::Outside => {}
        }
        Ok(())
    }
}

/// Field checks of one JSON object, each finding added to the report.
struct Fields<'a> {
    report: &'a mut Report,
    key: &'a str,
    map: Map<String, Value>,
}

impl<'a> Fields<'a> {
    fn parse(report: &'a mut Report, key: &'a str, bytes: &[u8]) -> Option<Self> {
        match rules::parse_object(bytes) {
            Ok(map) => Some(Fields { report, key, map }),
            Err(breach) => {
                report.breach(key, breach);
                None
            }
        }
    }

    /// Reports `breach` of a shared rule, if any.
    fn breach(&mut self, breach: Option<rules::Breach>) {
        if let Some(b) = breach {
            self.report.breach(self.key, b);
        }
    }

    fn add(&mut self, field: &str, rule: Rule, detail: impl Into<String>) {
        self.report.add(self.key, Some(field), rule, detail);
    }

    fn has(&self, field: &str) -> bool {
        self.map.get(field).is_some_and(|v| !v.is_null())
    }

    /// An unsigned integer; `None` when absent (or `null` and `nullable`), or wrong.
    fn u64(&mut self, field: &str, required: bool, nullable: bool) -> Option<u64> {
        match self.map.get(field).cloned() {
            None if required => self.add(field, Rule::MissingField, "required"),
            None => {}
            Some(Value::Null) if nullable && !required => {}
            Some(Value::Null) => self.add(field, Rule::WrongType, "null where a number is needed"),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) => return Some(v),
                None => self.add(
                    field,
                    Rule::BadInteger,
                    format!("{n} is not an unsigned 64-bit integer literal"),
                ),
            },
            Some(_) => self.add(field, Rule::WrongType, "not a number"),
        }
        None
    }

    /// A string; `None` when absent (or `null` and `nullable`), or wrong.
    fn string(&mut self, field: &str, required: bool, nullable: bool) -> Option<String> {
        match self.map.get(field).cloned() {
            None if required => self.add(field, Rule::MissingField, "required"),
            None => {}
            Some(Value::Null) if nullable => {}
            Some(Value::Null) => self.add(field, Rule::WrongType, "null where a string is needed"),
            Some(Value::String(s)) => return Some(s),
            Some(_) => self.add(field, Rule::WrongType, "not a string"),
        }
        None
    }

    /// The record's `v`: `Ok(None)` when absent, `Err(())` when unusable (reported).
    fn version(&mut self, known: &[u64]) -> Result<Option<u64>, ()> {
        if !self.map.contains_key("v") {
            return Ok(None);
        }
        match self.u64("v", true, false) {
            Some(v) if known.contains(&v) => Ok(Some(v)),
            Some(v) => {
                let detail = format!("v{v}; this protocol defines {known:?}");
                self.add("v", Rule::UnknownVersion, detail);
                Err(())
            }
            None => Err(()),
        }
    }
}

fn check_lease(report: &mut Report, key: &str, node: &str, body: &[u8]) {
    let Some(mut f) = Fields::parse(report, key, body) else {
        return;
    };
    let Ok(v) = f.version(&[1]) else { return };
    let strict = v.is_some();
    if let Some(n) = f.string("node", true, false) {
        if n != node {
            f.add(
                "node",
                Rule::BadIdentity,
                format!("names {} under the key of {}", shown(&n), shown(node)),
            );
        }
    }
    let expires_ms = f.u64("expires_ms", true, false);
    f.string("addr", strict, !strict);
    if let Some(p) = f.u64("peer_protocol", strict, !strict) {
        if p > u64::from(u32::MAX) {
            f.add("peer_protocol", Rule::BadInteger, "does not fit 32 bits");
        }
    }
    let generation = f.string("generation", strict, !strict);
    let ttl_ms = f.u64("ttl_ms", false, !strict);
    if let Some(expires_ms) = expires_ms {
        // A `ttl_ms` of the wrong type was named above.
        if ttl_ms.is_some() || !f.map.contains_key("ttl_ms") {
            f.breach(rules::lease_ttl(strict, expires_ms, ttl_ms));
        }
    }
    if let Some(t) = ttl_ms.filter(|t| *t > MAX_RECORD_TTL_MS) {
        let detail =
            format!("{t} ms is longer than a century ({MAX_RECORD_TTL_MS} ms): readers ignore it");
        f.add("ttl_ms", Rule::BadInteger, detail);
    }
    if !strict {
        f.string("nonce", false, true);
        f.report.add(
            key,
            None,
            Rule::LegacyFormat,
            "the seed's lease shape (no `v`)",
        );
        return;
    }
    if generation.as_deref() == Some("") {
        f.add(
            "generation",
            Rule::BadIdentity,
            "a version-1 lease needs a non-empty generation",
        );
    }
    check_nonce(&mut f, true, "lease");
}

impl Ctx<'_> {
    async fn check_head(
        &self,
        report: &mut Report,
        key: &str,
        cell: &str,
        body: &[u8],
    ) -> Result<(), Failure> {
        let Some(mut f) = Fields::parse(report, key, body) else {
            return Ok(());
        };
        let Ok(v) = f.version(&[1, 2]) else {
            return Ok(());
        };
        match v {
            None => f.report.add(
                key,
                None,
                Rule::LegacyFormat,
                "the seed's head shape (no `v`)",
            ),
            Some(1) => f.report.add(
                key,
                None,
                Rule::LegacyFormat,
                "a fence v1 head (data in cells/<cell>/data)",
            ),
            _ => {}
        }
        let format = match v {
            None => HeadFormat::Seed,
            Some(1) => HeadFormat::V1,
            _ => HeadFormat::V2,
        };
        check_owner(&mut f, format);
        if let Some(epoch) = f.u64("epoch", true, false) {
            f.breach(rules::zero_epoch(format, epoch));
            if epoch == u64::MAX {
                f.add(
                    "epoch",
                    Rule::EpochNotRaisable,
                    format!("epoch {epoch} cannot be written by a claim"),
                );
            }
        }
        check_nonce(&mut f, v.is_some(), "head");
        if v == Some(2) {
            f.string("generation", false, false);
            if let Some(blob) = check_payload(&mut f) {
                self.check_blob(f.report, key, cell, &blob).await?;
            }
            self.check_log(f.report, key, cell, body).await?;
        }
        Ok(())
    }

    async fn check_blob(
        &self,
        report: &mut Report,
        key: &str,
        cell: &str,
        (name, len): &(String, u64),
    ) -> Result<(), Failure> {
        match self.body(&format!("cells/{cell}/blobs/{name}")).await? {
            Some(Err(why)) => report.add(key, Some("blob"), Rule::MissingPayload, why),
            None => report.add(
                key,
                Some("blob"),
                Rule::MissingPayload,
                format!("payload object {} is not in the store", shown(name)),
            ),
            Some(Ok(b)) if b.len() as u64 != *len => report.add(
                key,
                Some("blob"),
                Rule::MissingPayload,
                format!(
                    "payload object holds {} bytes, the head says {len}",
                    b.len()
                ),
            ),
            Some(Ok(_)) => {}
        }
        Ok(())
    }

    /// A cell with log records must hold a log head naming records that exist.
    async fn check_log(
        &self,
        report: &mut Report,
        key: &str,
        cell: &str,
        body: &[u8],
    ) -> Result<(), Failure> {
        let logs = format!("cells/{cell}/log/");
        if !self.keys.iter().any(|k| k.starts_with(&logs)) {
            return Ok(());
        }
        let Ok(fence_key) = self.key(key) else {
            return Ok(());
        };
        let Ok(head) = fence_core::CellHead::decode(&fence_key, body) else {
            return Ok(());
        };
        let own = fence_core::Ownership::new(self.store.clone(), "fence-check");
        let own = match self.prefix {
            Some(p) => own.with_prefix(p).map_err(Failure::from)?,
            None => own,
        };
        let payload = match own.load_payload(cell, &head.payload).await {
            Ok(payload) => payload.unwrap_or_default(),
            // A payload object of another length than the head says: `check_blob` named it.
            Err(e) if e.kind() == ErrorKind::Corrupt => return Ok(()),
            Err(e) => return Err(Failure::from(e).prefixed(&format!("cannot read {}", shown(key)))),
        };
        for problem in log_problems(&payload, |name| {
            self.keys.contains(&format!("{logs}{name}"))
        }) {
            report.add(key, Some("data"), Rule::BadLog, problem);
        }
        Ok(())
    }
}

/// A versioned record's nonce: present, a string, not empty (docs/protocol.md §4).
fn check_nonce(f: &mut Fields<'_>, required: bool, what: &str) {
    match f.map.get("nonce") {
        None | Some(Value::Null) if required => f.add(
            "nonce",
            Rule::BadNonce,
            format!("a versioned {what} needs a nonce"),
        ),
        Some(Value::String(n)) if required && n.is_empty() => f.add(
            "nonce",
            Rule::BadNonce,
            format!("a versioned {what} needs a non-empty nonce"),
        ),
        None | Some(Value::Null | Value::String(_)) => {}
        Some(_) => f.add("nonce", Rule::WrongType, "not a string"),
    }
}

fn check_owner(f: &mut Fields<'_>, format: HeadFormat) {
    // Version 2 writes "" for no owner; version 1 wrote null; the seed may leave it out.
    let node = rules::head_node(format, f.map.get("node").cloned());
    let node = node.map_err(|b| f.breach(Some(b))).ok().flatten();
    if let Some(n) = node {
        if !valid_name(&n) {
            f.add(
                "node",
                Rule::BadIdentity,
                format!("{} is not a valid node id", shown(&n)),
            );
        }
    }
}

/// Checks a version-2 head's payload fields; the `blob` to look for, if any.
fn check_payload(f: &mut Fields<'_>) -> Option<(String, u64)> {
    let given: Vec<&str> = ["data", "data_b64", "blob"]
        .into_iter()
        .filter(|n| f.has(n))
        .collect();
    if given.len() > 1 {
        f.add(
            given[1],
            Rule::BadPayload,
            format!("more than one of {given:?}"),
        );
        return None;
    }
    f.string("data", false, false);
    if let Some(b64) = f.string("data_b64", false, false) {
        if base64::engine::general_purpose::STANDARD
            .decode(b64)
            .is_err()
        {
            f.add(
                "data_b64",
                Rule::BadPayload,
                "not base64 (RFC 4648, padded)",
            );
        }
    }
    match f.map.get("blob").cloned() {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => {
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| valid_blob_name(n));
            match (name, o.get("len").and_then(Value::as_u64)) {
                (Some(n), Some(len)) => Some((n.to_owned(), len)),
                _ => {
                    f.add(
                        "blob",
                        Rule::BadPayload,
                        "needs a `name` of 1-128 [A-Za-z0-9_-] and an integer `len`",
                    );
                    None
                }
            }
        }
        Some(_) => {
            f.add("blob", Rule::WrongType, "not an object");
            None
        }
    }
}

/// What is wrong with a log head (docs/protocol.md §8); `exists(name)` says whether a record
/// object is in the store.
pub fn log_problems(payload: &[u8], exists: impl Fn(&str) -> bool) -> Vec<String> {
    if payload.is_empty() {
        return Vec::new();
    }
    let map = match rules::parse_object(payload) {
        Ok(map) => map,
        Err(b) if b.rule == Rule::DuplicateMember => return vec![format!("a log head with {b}")],
        Err(_) => return vec!["the cell has log records but its data is not a log head".into()],
    };
    let next = map.get("next").and_then(Value::as_u64);
    let runs = map.get("runs").and_then(Value::as_array);
    let (Some(next), Some(runs)) = (next, runs) else {
        return vec!["a log head needs an integer `next` and an array `runs`".into()];
    };
    let mut parsed = Vec::new();
    for r in runs {
        let a = r.as_array().map(Vec::as_slice).unwrap_or_default();
        let tag = a.get(2).map(|t| t.as_str().filter(|t| valid_tag(t)));
        match (
            a.first().and_then(Value::as_u64),
            a.get(1).and_then(Value::as_u64),
            tag,
            a.len(),
        ) {
            (Some(s), Some(e), None, 2) => parsed.push((s, e, None)),
            (Some(s), Some(e), Some(Some(t)), 3) => parsed.push((s, e, Some(t.to_owned()))),
            _ => return vec![format!("run {r} is not [seq, epoch] or [seq, epoch, tag]")],
        }
    }
    let mut problems = Vec::new();
    let ordered = parsed
        .windows(2)
        .all(|w| w[0].0 <= w[1].0 && (w[0].1 < w[1].1 || (w[0].1 == w[1].1 && w[0].2 != w[1].2)));
    let covered = next == 0 || parsed.first().is_some_and(|r| r.0 == 0);
    if !ordered || !covered || parsed.last().is_some_and(|r| r.0 > next) || next == u64::MAX {
        problems.push("runs out of order, not starting at 0, or past `next`".into());
        return problems;
    }
    // A head may claim any `next` below 2^64: stop at the first few missing records, so the
    // work is bounded by the records that exist (what `exists` can say yes to) plus these.
    for seq in 0..next {
        // Runs ascend in `first_seq`: a record's run is the last one starting at or before it.
        let at = parsed.partition_point(|r| r.0 <= seq);
        let Some(run) = at.checked_sub(1).and_then(|i| parsed.get(i)) else {
            break;
        };
        let name = match &run.2 {
            None => format!("{seq:020}-{}", run.1),
            Some(t) => format!("{seq:020}-{}-{t}", run.1),
        };
        if exists(&name) {
            continue;
        }
        if problems.len() == MISSING_NAMED {
            problems.push(format!(
                "more committed records below {next} are missing (the first {MISSING_NAMED} are named)"
            ));
            break;
        }
        problems.push(format!("committed record {name} is missing"));
    }
    problems
}

/// Missing log records a check names one by one before it says there are more.
const MISSING_NAMED: usize = 10;

fn check_data_v1(report: &mut Report, key: &str, body: &[u8]) {
    let Some(split) = body.iter().position(|&b| b == b'\n') else {
        report.add(
            key,
            None,
            Rule::Unparseable,
            "a v1 data head without a header line",
        );
        return;
    };
    let Some(mut f) = Fields::parse(report, key, &body[..split]) else {
        return;
    };
    match f.u64("v", true, false) {
        Some(1) => {}
        Some(v) => f.add(
            "v",
            Rule::UnknownVersion,
            format!("v{v}; a data head is v1"),
        ),
        None => return,
    }
    f.u64("epoch", true, false);
    f.string("node", false, true);
    f.string("nonce", false, true);
    f.report.add(
        key,
        None,
        Rule::LegacyFormat,
        "a fence v1 data head (read, migrated by the next claim)",
    );
}

/// The report as text: one line per finding, then a summary.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let line = |out: &mut String, what: &str, f: &Finding| {
        let field = f.field.as_deref().map(shown).unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{what} {} {field} {}: {}\n",
            shown(&f.key),
            f.rule.name(),
            shown(&f.detail)
        ));
    };
    for f in &r.violations {
        line(&mut out, "VIOLATION", f);
    }
    for f in &r.notes {
        line(&mut out, "note", f);
    }
    out.push_str(&format!(
        "{} record(s) checked: {} violation(s), {} note(s)\n",
        r.checked,
        r.violations.len(),
        r.notes.len()
    ));
    out
}

/// The exit code of a report: 0 clean, 1 with violations.
pub fn exit_code(r: &Report) -> u8 {
    if r.violations.is_empty() {
        crate::exit::OK
    } else {
        crate::exit::CHECK_FAILED
    }
}
