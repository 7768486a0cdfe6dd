//! The fleet's assignment records, `fleet/nodes/<hh>/<node>.json` (docs/protocol.md §14):
//! their shape, the names they hold, and the node they belong to.

use serde_json::Value;

use super::{valid_name, Fields, Report, Rule};
use crate::exit::shown;

/// `<hh>`: two lowercase hex digits.
pub(super) fn valid_spread(hh: &str) -> bool {
    hh.len() == 2 && hh.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks the assignment record of `node` at `key`.
pub(super) fn check_assignment(report: &mut Report, key: &str, node: &str, body: &[u8]) {
    let Some(mut f) = Fields::parse(report, key, body) else {
        return;
    };
    if !f.map.contains_key("v") {
        f.add("v", Rule::MissingField, "required");
    }
    let Ok(_) = f.version(&[1]) else { return };
    if let Some(n) = f.string("node", true, false) {
        if n != node {
            let detail = format!("names {} under the key of {}", shown(&n), shown(node));
            f.add("node", Rule::BadIdentity, detail);
        }
    }
    f.string("generation", false, false);
    f.u64("term", false, false);
    if let Some(l) = f.string("leader", false, false) {
        name(&mut f, "leader", &Value::String(l), true);
    }
    if !matches!(f.map.get("leaving"), None | Some(Value::Bool(_))) {
        f.add("leaving", Rule::WrongType, "not a boolean");
    }
    let fields = f.map.clone();
    if let Some(cells) = fields.get("cells") {
        names(&mut f, "cells", cells);
    }
    for map in ["heirs", "moves"] {
        if let Some(v) = fields.get(map) {
            cell_to_node(&mut f, map, v);
        }
    }
    if let Some(w) = fields.get("watch") {
        objects(&mut f, "watch", w, watched);
    }
    if let Some(n) = fields.get("notices") {
        objects(&mut f, "notices", n, notice);
    }
}

/// A node or cell name (`""` allowed when `optional`).
fn name(f: &mut Fields<'_>, field: &str, v: &Value, optional: bool) {
    match v {
        Value::String(s) if s.is_empty() && optional => {}
        Value::String(s) if valid_name(s) => {}
        Value::String(s) => f.add(
            field,
            Rule::BadName,
            format!("{} is not a valid name", shown(s)),
        ),
        _ => f.add(field, Rule::WrongType, "not a string"),
    }
}

fn names(f: &mut Fields<'_>, field: &str, v: &Value) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| name(f, field, i, false)),
        _ => f.add(field, Rule::WrongType, "not an array"),
    }
}

/// An object from cell names to node ids.
fn cell_to_node(f: &mut Fields<'_>, field: &str, v: &Value) {
    let Value::Object(map) = v else {
        return f.add(field, Rule::WrongType, "not an object");
    };
    for (cell, node) in map {
        name(f, field, &Value::String(cell.clone()), false);
        name(f, field, node, false);
    }
}

/// An array of objects, each checked by `each`.
fn objects(
    f: &mut Fields<'_>,
    field: &str,
    v: &Value,
    each: fn(&mut Fields<'_>, &str, &serde_json::Map<String, Value>),
) {
    let Value::Array(items) = v else {
        return f.add(field, Rule::WrongType, "not an array");
    };
    for item in items {
        match item {
            Value::Object(o) => each(f, field, o),
            _ => f.add(field, Rule::WrongType, "an item that is not an object"),
        }
    }
}

/// `{"node": <name>, "heirs": {cell: node}}`.
fn watched(f: &mut Fields<'_>, field: &str, o: &serde_json::Map<String, Value>) {
    match o.get("node") {
        Some(n) => name(f, field, n, false),
        None => f.add(field, Rule::MissingField, "a watched node without `node`"),
    }
    if let Some(h) = o.get("heirs") {
        cell_to_node(f, field, h);
    }
}

/// `{"at": <u64>, "kind": <string>, "cell"?: <name>, "node"?: <name>}`; a kind this version
/// does not know is kept and ignored by readers.
fn notice(f: &mut Fields<'_>, field: &str, o: &serde_json::Map<String, Value>) {
    match o.get("at") {
        Some(Value::Number(n)) if n.as_u64().is_some() => {}
        Some(Value::Number(n)) => f.add(field, Rule::BadInteger, format!("`at` {n}")),
        Some(_) => f.add(field, Rule::WrongType, "`at` is not a number"),
        None => f.add(field, Rule::MissingField, "a notice without `at`"),
    }
    match o.get("kind") {
        Some(Value::String(_)) => {}
        Some(_) => f.add(field, Rule::WrongType, "`kind` is not a string"),
        None => f.add(field, Rule::MissingField, "a notice without `kind`"),
    }
    for n in ["cell", "node"] {
        if let Some(v) = o.get(n) {
            name(f, field, v, true);
        }
    }
}
