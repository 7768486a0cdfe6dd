//! `fence status`: node leases (`nodes/*.json`) and cells (`cells/*/own.json`) as the store
//! shows them now.
//!
//! The `--json` shape (stable; fields are only ever added):
//!
//! ```json
//! {
//!   "store": "file:///tmp/f",
//!   "now_ms": 1767225600000,
//!   "leases": [{"node": "run.backup", "expires_ms": 1767225601000,
//!               "expires_in_ms": 1000, "live": true, "released": false, "addr": "pid:42@host",
//!               "generation": "…", "version": "…"}],
//!   "cells": [{"name": "backup", "holder": "run.backup", "holder_addr": "pid:42@host",
//!              "epoch": 3, "live": true, "expires_in_ms": 1000, "version": "…",
//!              "data": {"epoch": 3, "node": "run.backup", "version": "…",
//!                       "keys": ["state"]}}],
//!   "bad": [{"key": "cells/old/own.json", "error": "corrupt record at …"}]
//! }
//! ```
//!
//! `holder` is `null` for a released cell; `holder_addr` is the address its holder's node
//! lease advertises (`null` without a lease record); `live` says whether the holder's node
//! lease is unexpired by this machine's clock; `data` is `null` before the first claim and
//! `keys` is `null` when the data is not a fence key map. `bad` lists the records that could not be read
//! (corrupt, a directory or a symlink where a record belongs, unreadable), each with its
//! `key` and `error`; every other record is still listed, and `fence status` exits 69.

use std::collections::BTreeSet;
use std::sync::Arc;

use fence_core::{ConditionalStore, Error, Key, Ownership};
use serde::Serialize;

use crate::exit::{describe, shown, Failure, NOT_FOUND};
use crate::kv::KeyMap;
use crate::terminal::escape;

/// Everything `fence status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The store's URL.
    pub store: String,
    /// This machine's wall clock when the status was read (ms since the Unix epoch).
    pub now_ms: u64,
    /// Node leases, by node.
    pub leases: Vec<LeaseRow>,
    /// Cells, by name.
    pub cells: Vec<CellRow>,
    /// Records that could not be read.
    pub bad: Vec<BadRecord>,
}

/// A record that could not be read.
#[derive(Debug, Clone, Serialize)]
pub struct BadRecord {
    /// Its key.
    pub key: String,
    /// Why, in one line.
    pub error: String,
}

/// One node lease.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseRow {
    /// The node id.
    pub node: String,
    /// Expiry by the holder's wall clock.
    pub expires_ms: u64,
    /// `expires_ms - now_ms` (negative: expired).
    pub expires_in_ms: i64,
    /// Whether it is unexpired.
    pub live: bool,
    /// Whether its holder released it (`expires_ms` 0).
    pub released: bool,
    /// The advertised address.
    pub addr: String,
    /// The holder process's generation.
    pub generation: String,
    /// The record's store version.
    pub version: String,
}

/// One cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellRow {
    /// The cell (lease) name.
    pub name: String,
    /// The owning node, `None` when released.
    pub holder: Option<String>,
    /// The address the holder's node lease advertises (`pid:PID@HOST` for `fence run`), if
    /// it has a lease record.
    pub holder_addr: Option<String>,
    /// The current epoch.
    pub epoch: u64,
    /// Whether the holder's node lease is unexpired.
    pub live: bool,
    /// The holder's lease expiry relative to now, if it has a lease record.
    pub expires_in_ms: Option<i64>,
    /// The owner record's store version.
    pub version: String,
    /// The data head, if any.
    pub data: Option<DataRow>,
}

/// A cell's data head.
#[derive(Debug, Clone, Serialize)]
pub struct DataRow {
    /// The epoch it was written under.
    pub epoch: u64,
    /// Its writer.
    pub node: String,
    /// Its store version.
    pub version: String,
    /// The keys of its key map, `None` if it is not one.
    pub keys: Option<Vec<String>>,
}

/// Reads the status of every cell (or only `only`) and the node leases involved. A record
/// that cannot be read is listed in [`Status::bad`] and the rest is read on.
///
/// Errors: exit 3 when `only` names no lease; exit 69 when the store cannot be listed.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use fence_core::{CasGuard, ConditionalStore, MemoryStore, Ownership};
/// let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
/// Ownership::new(store.clone(), "n1").cas_owner("jobs", CasGuard::Absent, 1).await.unwrap();
/// let status = fence_cli::status::read(&store, "memory://", None).await.unwrap();
/// assert_eq!(status.cells[0].holder.as_deref(), Some("n1"));
/// assert_eq!(status.cells[0].epoch, 1);
/// assert!(status.bad.is_empty());
/// let missing = fence_cli::status::read(&store, "memory://", Some("other")).await;
/// assert_eq!(missing.unwrap_err().code, 3);
/// # });
/// ```
pub async fn read(
    store: &Arc<dyn ConditionalStore>,
    url: &str,
    only: Option<&str>,
) -> Result<Status, Failure> {
    let own = Ownership::new(store.clone(), "fence-status");
    let mut status = Status {
        store: url.to_owned(),
        now_ms: fence_core::now_ms(),
        leases: Vec::new(),
        cells: Vec::new(),
        bad: Vec::new(),
    };
    let cells = match only {
        Some(name) => vec![name.to_owned()],
        None => cell_names(store).await?,
    };
    let nodes = match only {
        Some(_) => BTreeSet::new(),
        None => node_names(store).await?,
    };
    for node in &nodes {
        read_lease(&own, node, &mut status).await;
    }
    for name in &cells {
        let (rows, bad) = (status.cells.len(), status.bad.len());
        read_cell(&own, name, &mut status).await;
        if status.cells.len() == rows && status.bad.len() == bad {
            owner_missing(store, name, only.is_some(), &mut status).await?;
        }
    }
    Ok(status)
}

/// A cell without an owner record: absent (exit 3 for `status NAME`) when nothing else is
/// stored under its name, else a bad record (its owner record was removed, or is something a
/// listing skips).
async fn owner_missing(
    store: &Arc<dyn ConditionalStore>,
    name: &str,
    named: bool,
    status: &mut Status,
) -> Result<(), Failure> {
    let prefix = Key::new(format!("cells/{name}"))?;
    if named && store.list(Some(&prefix)).await?.is_empty() {
        return Err(Failure::new(
            NOT_FOUND,
            format!("no lease {} in {}", shown(name), status.store),
        ));
    }
    status.bad.push(BadRecord {
        key: format!("cells/{name}/own.json"),
        error: "missing, although the cell has other keys".into(),
    });
    Ok(())
}

/// Node names of `nodes/<node>.json`.
async fn node_names(store: &Arc<dyn ConditionalStore>) -> Result<BTreeSet<String>, Failure> {
    Ok(keys_under(store, "nodes")
        .await?
        .iter()
        .filter_map(|rest| rest.strip_suffix(".json"))
        .filter(|name| !name.is_empty() && !name.contains('/'))
        .map(str::to_owned)
        .collect())
}

/// Cell names: every `cells/<name>/…` key counts, so a cell whose owner record is broken (or
/// a directory, or a symlink, which a listing skips) still shows up through its other keys.
async fn cell_names(store: &Arc<dyn ConditionalStore>) -> Result<Vec<String>, Failure> {
    let names: BTreeSet<String> = keys_under(store, "cells")
        .await?
        .iter()
        .filter_map(|rest| rest.split_once('/').map(|(name, _)| name.to_owned()))
        .filter(|name| !name.is_empty())
        .collect();
    Ok(names.into_iter().collect())
}

/// The rest of every key under `dir/`.
async fn keys_under(store: &Arc<dyn ConditionalStore>, dir: &str) -> Result<Vec<String>, Failure> {
    let prefix = Key::new(dir)?;
    let keys = store
        .list(Some(&prefix))
        .await
        .map_err(|e| Failure::from(e).prefixed(&format!("cannot list {dir}/ of the store")))?;
    Ok(keys
        .iter()
        .filter_map(|k| k.as_str().strip_prefix(dir)?.strip_prefix('/'))
        .map(str::to_owned)
        .collect())
}

fn mark_bad(status: &mut Status, key: String, e: &Error) {
    status.bad.push(BadRecord {
        key,
        error: describe(e),
    });
}

async fn read_lease(own: &Ownership, node: &str, status: &mut Status) {
    match own.read_node_lease(node).await {
        Ok(Some(lease)) => {
            let expires_in_ms = ms_until(lease.record.expires_ms, status.now_ms);
            status.leases.push(LeaseRow {
                node: node.to_owned(),
                expires_ms: lease.record.expires_ms,
                expires_in_ms,
                live: expires_in_ms > 0,
                released: lease.record.expires_ms == 0,
                addr: lease.record.addr,
                generation: lease.record.generation,
                version: lease.etag.as_str().to_owned(),
            });
        }
        Ok(None) => {}
        Err(e) => mark_bad(status, format!("nodes/{node}.json"), &e),
    }
}

async fn read_cell(own: &Ownership, name: &str, status: &mut Status) {
    let owner = match own.read_owner(name).await {
        Ok(Some(owner)) => owner,
        Ok(None) => return,
        Err(e) => return mark_bad(status, format!("cells/{name}/own.json"), &e),
    };
    if let Some(holder) = owner.node.as_deref() {
        if !status.leases.iter().any(|l| l.node == holder) {
            read_lease(own, holder, status).await;
        }
    }
    let data = match fence_core::read_cell(own, name).await {
        Ok(data) => data.map(|d| DataRow {
            epoch: d.epoch,
            node: d.owner.unwrap_or_default(),
            version: owner.etag.as_str().to_owned(),
            keys: KeyMap::parse(&d.payload)
                .ok()
                .map(|m| m.keys().map(str::to_owned).collect()),
        }),
        Err(e) => {
            mark_bad(status, format!("cells/{name}/own.json"), &e);
            None
        }
    };
    let lease = owner
        .node
        .as_deref()
        .and_then(|n| status.leases.iter().find(|l| l.node == n));
    let row = CellRow {
        name: name.to_owned(),
        live: lease.is_some_and(|l| l.live),
        expires_in_ms: lease.map(|l| l.expires_in_ms),
        holder_addr: lease.map(|l| l.addr.clone()),
        holder: owner.node,
        epoch: owner.epoch,
        version: owner.etag.as_str().to_owned(),
        data,
    };
    status.cells.push(row);
}

/// Which rows the table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rows {
    /// Everything but released cells and released node leases (they only pile up: a released
    /// cell keeps its epoch, and its record is never deleted).
    #[default]
    Current,
    /// Every record (`fence status --all`).
    All,
}

/// The status as a readable table: one row per cell with its holder's node lease folded in
/// (node, address, expiry), so a `fence run` lock (cell `NAME`, node lease `run.NAME`) is one
/// row; then the node leases that hold none of the cells shown (library nodes between claims).
/// With [`Rows::Current`], released rows are counted in a last line, not shown. Every field
/// is escaped for the terminal ([`crate::terminal`]).
pub fn table(status: &Status, rows: Rows) -> String {
    let cells: Vec<&CellRow> = status
        .cells
        .iter()
        .filter(|c| rows == Rows::All || c.holder.is_some())
        .collect();
    let holders: BTreeSet<&str> = cells.iter().filter_map(|c| c.holder.as_deref()).collect();
    let leases: Vec<&LeaseRow> = status
        .leases
        .iter()
        .filter(|l| !holders.contains(l.node.as_str()))
        .filter(|l| rows == Rows::All || !l.released)
        .collect();
    let mut out = format!("store {}\n\n", escape(&status.store));
    out += "CELLS (`fence run --lease NAME` holds cell NAME with node lease run.NAME: one row)\n";
    out += &columns(
        &["NAME", "EPOCH", "HOLDER", "ADDRESS", "EXPIRES IN", "KEYS"],
        cells.iter().map(|c| cell_fields(status, c)).collect(),
    );
    if !leases.is_empty() {
        out += "\nNODE LEASES HOLDING NONE OF THE CELLS ABOVE\n";
        out += &columns(
            &["NODE", "ADDRESS", "EXPIRES IN"],
            leases.iter().map(|l| lease_fields(l)).collect(),
        );
    }
    out += &bad_section(status);
    out += &hidden_line(status, cells.len(), rows);
    out
}

fn cell_fields(status: &Status, c: &CellRow) -> Vec<String> {
    let lease = c
        .holder
        .as_deref()
        .and_then(|h| status.leases.iter().find(|l| l.node == h));
    let keys = c
        .data
        .as_ref()
        .and_then(|d| d.keys.as_ref())
        .map_or("-".to_owned(), |k| k.len().to_string());
    let exp = match (&c.holder, lease) {
        (None, _) => "-".into(),
        (Some(_), Some(l)) if l.released => "lease released".into(),
        (Some(_), _) => expires(c.expires_in_ms),
    };
    vec![
        c.name.clone(),
        c.epoch.to_string(),
        c.holder.clone().unwrap_or_else(|| "(released)".into()),
        or_dash(c.holder_addr.as_deref().unwrap_or_default()),
        exp,
        keys,
    ]
}

fn lease_fields(l: &LeaseRow) -> Vec<String> {
    let exp = if l.released {
        "released".into()
    } else {
        expires(Some(l.expires_in_ms))
    };
    vec![l.node.clone(), or_dash(&l.addr), exp]
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.to_owned()
    }
}

fn bad_section(status: &Status) -> String {
    if status.bad.is_empty() {
        return String::new();
    }
    let mut out = "\nBAD RECORDS (not readable; everything else is listed above)\n".to_owned();
    out += &columns(
        &["KEY", "ERROR"],
        status
            .bad
            .iter()
            .map(|b| vec![b.key.clone(), b.error.clone()])
            .collect(),
    );
    out
}

/// "N released cell(s) and M released node lease(s) not shown (fence status --all)".
fn hidden_line(status: &Status, shown_cells: usize, rows: Rows) -> String {
    if rows == Rows::All {
        return String::new();
    }
    let hidden_cells = status.cells.len() - shown_cells;
    let holds_a_cell = |l: &LeaseRow| {
        status
            .cells
            .iter()
            .any(|c| c.holder.as_ref() == Some(&l.node))
    };
    let hidden_leases = status
        .leases
        .iter()
        .filter(|l| l.released && !holds_a_cell(l))
        .count();
    if hidden_cells + hidden_leases == 0 {
        return String::new();
    }
    format!(
        "\n{hidden_cells} released cell(s) and {hidden_leases} released node lease(s) not shown \
         (fence status --all)\n"
    )
}

/// Left-aligned columns (numbers too), each as wide as its widest escaped field; `(none)`
/// for no rows.
fn columns(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| r.iter().map(|f| escape(f).into_owned()).collect())
        .collect();
    if rows.is_empty() {
        return "  (none)\n".into();
    }
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([header[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |fields: Vec<&str>| {
        let padded: Vec<String> = fields
            .iter()
            .zip(&widths)
            .map(|(f, w)| format!("{f:<w$}"))
            .collect();
        format!("  {}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for r in &rows {
        out += &line(r.iter().map(String::as_str).collect());
    }
    out
}

fn expires(ms: Option<i64>) -> String {
    match ms {
        None => "no lease".into(),
        Some(ms) if ms > 0 => format!("{:.1}s", ms as f64 / 1000.0),
        Some(ms) => format!("expired {:.1}s ago", ms.unsigned_abs() as f64 / 1000.0),
    }
}

/// `expires_ms - now_ms` without overflow, whatever a record from the store says.
///
/// ```
/// use fence_cli::status::ms_until;
/// assert_eq!(ms_until(1_500, 1_000), 500);
/// assert_eq!(ms_until(0, 1_000), -1_000);
/// assert_eq!(ms_until(u64::MAX, 0), i64::MAX);
/// ```
pub fn ms_until(expires_ms: u64, now_ms: u64) -> i64 {
    let diff = i128::from(expires_ms) - i128::from(now_ms);
    diff.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}
