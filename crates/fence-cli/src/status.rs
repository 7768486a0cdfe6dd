//! `fence status`: node leases (`nodes/*.json`) and cells (`cells/*/own.json`) as the store
//! shows them now.
//!
//! The `--json` shape (stable; fields are only ever added):
//!
//! ```json
//! {
//!   "store": "file:///tmp/f",
//!   "now_ms": 1767225600000,
//!   "leases": [{"node": "run-h-42-1a2b3c4d", "expires_ms": 1767225601000,
//!               "expires_in_ms": 1000, "live": true, "released": false, "addr": "pid:42",
//!               "generation": "…", "version": "…"}],
//!   "cells": [{"name": "backup", "holder": "run-h-42-1a2b3c4d", "epoch": 3,
//!              "live": true, "expires_in_ms": 1000, "version": "…",
//!              "data": {"epoch": 3, "node": "run-h-42-1a2b3c4d", "version": "…",
//!                       "keys": ["state"]}}]
//! }
//! ```
//!
//! `holder` is `null` for a released cell; `live` says whether the holder's node lease is
//! unexpired by this machine's clock; `data` is `null` before the first claim and `keys` is
//! `null` when the data is not a fence key map.

use std::sync::Arc;

use fence_core::{ConditionalStore, Key, Ownership};
use serde::Serialize;

use crate::exit::Failure;
use crate::kv::KeyMap;

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

/// Reads the status of every cell (or only `only`) and the node leases involved.
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
/// # });
/// ```
pub async fn read(
    store: &Arc<dyn ConditionalStore>,
    url: &str,
    only: Option<&str>,
) -> Result<Status, Failure> {
    let own = Ownership::new(store.clone(), "fence-status");
    let now_ms = fence_core::now_ms();
    let mut leases = Vec::new();
    for node in names(store, "nodes", |rest| rest.strip_suffix(".json")).await? {
        if let Some(row) = lease_row(&own, &node, now_ms).await? {
            leases.push(row);
        }
    }
    let mut cells = Vec::new();
    for name in names(store, "cells", |rest| rest.strip_suffix("/own.json")).await? {
        if only.is_some_and(|o| o != name) {
            continue;
        }
        if let Some(row) = cell_row(&own, &name, &leases).await? {
            cells.push(row);
        }
    }
    if only.is_some() {
        leases.retain(|l| cells.iter().any(|c| c.holder.as_deref() == Some(&l.node)));
    }
    Ok(Status {
        store: url.to_owned(),
        now_ms,
        leases,
        cells,
    })
}

/// The names under `dir/` that `pick` accepts (from the rest of the key after `dir/`).
async fn names(
    store: &Arc<dyn ConditionalStore>,
    dir: &str,
    pick: impl Fn(&str) -> Option<&str>,
) -> Result<Vec<String>, Failure> {
    let prefix = Key::new(dir)?;
    let keys = store.list(Some(&prefix)).await?;
    Ok(keys
        .iter()
        .filter_map(|k| k.as_str().strip_prefix(dir)?.strip_prefix('/'))
        .filter_map(pick)
        .filter(|name| !name.is_empty() && !name.contains('/'))
        .map(str::to_owned)
        .collect())
}

async fn lease_row(own: &Ownership, node: &str, now_ms: u64) -> Result<Option<LeaseRow>, Failure> {
    let Some(lease) = own.read_node_lease(node).await? else {
        return Ok(None);
    };
    let expires_in_ms = lease.record.expires_ms as i64 - now_ms as i64;
    Ok(Some(LeaseRow {
        node: node.to_owned(),
        expires_ms: lease.record.expires_ms,
        expires_in_ms,
        live: expires_in_ms > 0,
        released: lease.record.expires_ms == 0,
        addr: lease.record.addr,
        generation: lease.record.generation,
        version: lease.etag.as_str().to_owned(),
    }))
}

async fn cell_row(
    own: &Ownership,
    name: &str,
    leases: &[LeaseRow],
) -> Result<Option<CellRow>, Failure> {
    let Some(owner) = own.read_owner(name).await? else {
        return Ok(None);
    };
    let lease = owner
        .node
        .as_deref()
        .and_then(|n| leases.iter().find(|l| l.node == n));
    let data = fence_core::read_cell(own, name).await?.map(|d| DataRow {
        epoch: d.epoch,
        node: d.owner.unwrap_or_default(),
        version: owner.etag.as_str().to_owned(),
        keys: KeyMap::parse(&d.payload)
            .ok()
            .map(|m| m.keys().map(str::to_owned).collect()),
    });
    Ok(Some(CellRow {
        name: name.to_owned(),
        live: lease.is_some_and(|l| l.live),
        expires_in_ms: lease.map(|l| l.expires_in_ms),
        holder: owner.node,
        epoch: owner.epoch,
        version: owner.etag.as_str().to_owned(),
        data,
    }))
}

/// The status as a readable table.
pub fn table(status: &Status) -> String {
    let mut out = format!("store {}\n\nNODE LEASES\n", status.store);
    out += &format!("  {:<36} {:<16} VERSION\n", "NODE", "EXPIRES IN");
    for l in &status.leases {
        out += &format!(
            "  {:<36} {:<16} {}\n",
            l.node,
            if l.released {
                "released".into()
            } else {
                expires(Some(l.expires_in_ms))
            },
            l.version
        );
    }
    out += "\nCELLS\n";
    out += &format!(
        "  {:<20} {:<36} {:>6} {:<16} {:<8} VERSION\n",
        "NAME", "HOLDER", "EPOCH", "EXPIRES IN", "KEYS"
    );
    for c in &status.cells {
        let holder = c.holder.as_deref().unwrap_or("(released)");
        let keys = c
            .data
            .as_ref()
            .and_then(|d| d.keys.as_ref())
            .map_or("-".to_owned(), |k| k.len().to_string());
        let released = c
            .holder
            .as_deref()
            .is_some_and(|h| status.leases.iter().any(|l| l.node == h && l.released));
        let exp = match (&c.holder, released) {
            (None, _) => "-".into(),
            (Some(_), true) => "lease released".into(),
            (Some(_), false) => expires(c.expires_in_ms),
        };
        out += &format!(
            "  {:<20} {:<36} {:>6} {:<16} {:<8} {}\n",
            c.name, holder, c.epoch, exp, keys, c.version
        );
    }
    out
}

fn expires(ms: Option<i64>) -> String {
    match ms {
        None => "no lease".into(),
        Some(ms) if ms > 0 => format!("{:.1}s", ms as f64 / 1000.0),
        Some(ms) => format!("expired {:.1}s ago", -ms as f64 / 1000.0),
    }
}
