//! `fence put` / `fence get`: named values in a cell's data head, written under an epoch.
//!
//! The data head of cell `NAME` (`cells/NAME/data`) holds one JSON object mapping each key to
//! its value: a JSON string when the value is UTF-8 text, otherwise `{"base64": "…"}`:
//!
//! ```json
//! {"config": "replicas=3\n", "blob": {"base64": "AAEC/w=="}}
//! ```
//!
//! A put is one fenced read-modify-write of that object ([`fence_core::runtime::update_cell`]):
//! the store rejects it once a later claim has rewritten the head, so a deposed holder's
//! put fails however late it arrives.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use fence_core::runtime::{read_cell, update_cell};
use fence_core::{ConditionalStore, ErrorKind, Ownership, WriteAck};
use serde_json::Value;

use crate::exit::{Failure, FENCED, NOT_FOUND, STORE};

/// The key → value object of a cell's data head.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyMap(BTreeMap<String, Value>);

impl KeyMap {
    /// Parses a data head's payload; an empty payload is an empty map.
    ///
    /// ```
    /// use fence_cli::kv::KeyMap;
    /// let mut map = KeyMap::parse(b"").unwrap();
    /// map.insert("k", b"v");
    /// let again = KeyMap::parse(&map.encode()).unwrap();
    /// assert_eq!(again.value("k"), Some(b"v".to_vec()));
    /// assert!(KeyMap::parse(b"not json").is_err());
    /// assert!(KeyMap::parse(br#"{"k":"a","k":"b"}"#).is_err(), "which k?");
    /// ```
    pub fn parse(payload: &[u8]) -> Result<KeyMap, Failure> {
        if payload.is_empty() {
            return Ok(KeyMap::default());
        }
        // Two members of one name are refused: another reader could take the other value.
        fence_core::record::rules::parse_json(payload)
            .and_then(serde_json::from_value)
            .map(KeyMap)
            .map_err(|_| {
                Failure::new(
                    STORE,
                    "the cell's data is not a fence key map (a JSON object of unique keys); it was written by another program",
                )
            })
    }

    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: &str, value: &[u8]) {
        let encoded = match std::str::from_utf8(value) {
            Ok(text) => Value::String(text.to_owned()),
            Err(_) => serde_json::json!({
                "base64": base64::engine::general_purpose::STANDARD.encode(value)
            }),
        };
        self.0.insert(key.to_owned(), encoded);
    }

    /// The bytes of `key`, if present and well-formed.
    pub fn value(&self, key: &str) -> Option<Vec<u8>> {
        match self.0.get(key)? {
            Value::String(s) => Some(s.clone().into_bytes()),
            Value::Object(o) => match o.get("base64")? {
                Value::String(b) => base64::engine::general_purpose::STANDARD.decode(b).ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The payload bytes.
    pub fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(&self.0).unwrap_or_default())
    }
}

/// The bound of each store request of a put.
const PUT_REQUEST_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes `key = value` into cell `lease` under `epoch`, as node `node`.
///
/// Errors: exit 76 when `epoch` is not the cell's current epoch (superseded, released, never
/// claimed); exit 69 for store failures or a head that is not a key map.
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
    check_key(key)?;
    let own = Ownership::new(store.clone(), node);
    let bad_head: Mutex<Option<Failure>> = Mutex::new(None);
    // The closure's error aborts the write: nothing is written over a head that is not a
    // key map.
    let result = update_cell(
        &own,
        lease,
        epoch,
        PUT_REQUEST_BOUND,
        |current| match KeyMap::parse(current) {
            Ok(mut map) => {
                map.insert(key, value);
                Ok(map.encode())
            }
            Err(f) => {
                *bad_head.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
                Err(
                    fence_core::Error::new(ErrorKind::InvalidInput, "not a key map")
                        .not_committed(),
                )
            }
        },
    )
    .await;
    if let Some(f) = bad_head.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(f);
    }
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
/// Errors: exit 3 when the cell or the key does not exist; exit 69 for store failures.
pub async fn get(
    store: &Arc<dyn ConditionalStore>,
    lease: &str,
    key: &str,
) -> Result<Vec<u8>, Failure> {
    check_key(key)?;
    let own = Ownership::new(store.clone(), "fence-get");
    let data = read_cell(&own, lease)
        .await?
        .ok_or_else(|| Failure::new(NOT_FOUND, format!("lease {lease} has no data")))?;
    KeyMap::parse(&data.payload)?
        .value(key)
        .ok_or_else(|| Failure::new(NOT_FOUND, format!("no key {key:?} in lease {lease}")))
}

fn check_key(key: &str) -> Result<(), Failure> {
    if key.is_empty() || key.len() > 1024 {
        return Err(Failure::usage("KEY must be 1 to 1024 bytes"));
    }
    Ok(())
}
