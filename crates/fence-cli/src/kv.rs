//! `fence put` / `fence get`: named values in a cell's data head, written under an epoch.
//!
//! The format and its reads and writes are fence-core's [`fence_core::keymap`] (the
//! Python package uses the same code): here they get the command's exit codes.

use std::sync::Arc;
use std::time::Duration;

use fence_core::{keymap, ConditionalStore, ErrorKind, Ownership, WriteAck};

pub use fence_core::keymap::KeyMap;

use crate::exit::{Failure, FENCED, NOT_FOUND, STORE};

/// The bound of each store request of a put.
const PUT_REQUEST_BOUND: Duration = Duration::from_secs(10);

/// Writes `key = value` into cell `lease` under `epoch`, as node `node`.
///
/// Errors: exit 76 when `epoch` is not the cell's current epoch (superseded, released, never
/// claimed); exit 69 for store failures or a head that is not a key map; exit 2 for a bad key.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use fence_core::{CasGuard, ConditionalStore, MemoryStore, Ownership};
/// let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
/// Ownership::new(store.clone(), "holder").cas_owner("jobs", CasGuard::Absent, 1).await.unwrap();
/// fence_cli::kv::put(&store, "holder", "jobs", 1, "k", b"v").await.unwrap();
/// assert_eq!(fence_cli::kv::get(&store, "jobs", "k").await.unwrap(), b"v");
/// assert_eq!(fence_cli::kv::put(&store, "holder", "jobs", 0, "k", b"x").await.unwrap_err().code, 76);
/// # });
/// ```
pub async fn put(
    store: &Arc<dyn ConditionalStore>,
    node: &str,
    lease: &str,
    epoch: u64,
    key: &str,
    value: &[u8],
) -> Result<WriteAck, Failure> {
    let own = Ownership::new(store.clone(), node);
    let result = keymap::put(&own, lease, epoch, key, value, PUT_REQUEST_BOUND).await;
    result.map_err(|e| match e.kind() {
        // "Refused" (76) only when the store proved the put did not land: a fenced answer
        // after an attempt whose answer was lost may have landed first (exit 69, like any
        // put whose outcome is unknown).
        ErrorKind::Fenced if !e.is_ambiguous() => Failure::new(
            FENCED,
            format!("refused: epoch {epoch} is no longer current for lease {lease} ({e})"),
        ),
        ErrorKind::Fenced => Failure::new(
            STORE,
            format!("unknown outcome: the put may have landed before epoch {epoch} of lease {lease} ended; read it back with `fence get` ({e})"),
        ),
        _ => e.into(),
    })
}

/// Reads `key` from cell `lease`'s data head.
///
/// Errors: exit 3 when the cell or the key does not exist; exit 69 for store failures or data
/// that is not a key map.
pub async fn get(
    store: &Arc<dyn ConditionalStore>,
    lease: &str,
    key: &str,
) -> Result<Vec<u8>, Failure> {
    let own = Ownership::new(store.clone(), "fence-get");
    keymap::get(&own, lease, key)
        .await?
        .ok_or_else(|| Failure::new(NOT_FOUND, format!("no key {key:?} in lease {lease}")))
}
