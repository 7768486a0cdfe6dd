//! The key map: named values in a cell's data — the convention of `fence put` / `fence get`
//! and of the Python package's `put`, `get`, `delete` and `keys` (docs/protocol.md §6.2,
//! `docs/schema/key-map.schema.json`). One implementation, so that a cell has one data model
//! whichever tool writes it.
//!
//! The cell's data is one JSON object mapping each key to its value: a JSON string when the
//! value is UTF-8 text, otherwise `{"base64": "…"}`:
//!
//! ```json
//! {"config": "replicas=3\n", "blob": {"base64": "AAEC/w=="}}
//! ```
//!
//! A change ([`put`], [`delete`]) is one fenced read-modify-write of that object
//! ([`update_cell`]): the store rejects it once a later claim has rewritten the head, so a
//! deposed holder's put fails however late it arrives. Data that is not a JSON object is never
//! written over ([`ErrorKind::Corrupt`], nothing written).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde_json::Value;

use crate::error::{Error, ErrorKind};
use crate::ownership::Ownership;
use crate::runtime::{read_cell, update_cell, WriteAck};

/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// The key → value object of a cell's data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyMap(BTreeMap<String, Value>);

impl KeyMap {
    /// Parses a cell's payload; an empty payload is an empty map. Errors:
    /// [`ErrorKind::Corrupt`] (not committed) when the payload is not a JSON object — data
    /// another program wrote, which a change must not write over.
    ///
    /// ```
    /// use fence_core::keymap::KeyMap;
    /// let mut map = KeyMap::parse(b"").unwrap();
    /// map.insert("k", b"v");
    /// let again = KeyMap::parse(&map.encode()).unwrap();
    /// assert_eq!(again.value("k"), Some(b"v".to_vec()));
    /// assert!(KeyMap::parse(b"not json").is_err());
    /// assert!(KeyMap::parse(br#"{"k":"a","k":"b"}"#).is_err(), "which k?");
    /// ```
    pub fn parse(payload: &[u8]) -> Result<KeyMap, Error> {
        if payload.is_empty() {
            return Ok(KeyMap::default());
        }
        // Two members of one name are refused: another reader could take the other value.
        crate::record::rules::parse_json(payload)
            .and_then(serde_json::from_value)
            .map(KeyMap)
            .map_err(|_| {
                Error::new(
                    ErrorKind::Corrupt,
                    "the cell's data is not a fence key map (a JSON object of unique keys); it was written by another program",
                )
                .not_committed()
            })
    }

    /// The key map `payload` holds, if it holds one with at least one key in exactly the
    /// shape `fence put` writes (every value a string or `{"base64": "…"}`): what a write of
    /// raw bytes would destroy. `None` for anything else — empty data, an empty object, other
    /// JSON, other bytes.
    ///
    /// ```
    /// use fence_core::keymap::KeyMap;
    /// assert!(KeyMap::recognise(br#"{"k": "v", "b": {"base64": "AA=="}}"#).is_some());
    /// assert!(KeyMap::recognise(br#"{"count": 3}"#).is_none());
    /// assert!(KeyMap::recognise(b"{}").is_none());
    /// assert!(KeyMap::recognise(b"raw bytes").is_none());
    /// ```
    pub fn recognise(payload: &[u8]) -> Option<KeyMap> {
        let map = KeyMap::parse(payload).ok()?;
        let shaped = |v: &Value| match v {
            Value::String(_) => true,
            Value::Object(o) => o.len() == 1 && o.get("base64").is_some_and(Value::is_string),
            _ => false,
        };
        (!map.0.is_empty() && map.0.values().all(shaped)).then_some(map)
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

    /// Removes `key`; whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        self.0.remove(key).is_some()
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

/// Checks a key: 1 to [`MAX_KEY_BYTES`] bytes. Errors: [`ErrorKind::InvalidInput`], not
/// committed.
pub fn check_key(key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("a key must be 1 to {MAX_KEY_BYTES} bytes"),
        )
        .not_committed());
    }
    Ok(())
}

/// Writes `key = value` into `cell`'s key map under `epoch`, each store request bounded by
/// `bound` (see [`update_cell`], whose errors it gives: [`ErrorKind::Fenced`] when `epoch`
/// is not the cell's current epoch; [`ErrorKind::Timeout`] when co-writers of the epoch kept
/// landing first). [`ErrorKind::Corrupt`] when the data is not a key map,
/// [`ErrorKind::InvalidInput`] for a bad key: nothing written.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::{sync::Arc, time::Duration};
/// use fence_core::{keymap, CasGuard, ErrorKind, MemoryStore, Ownership};
/// let own = Ownership::new(Arc::new(MemoryStore::new()), "holder");
/// own.cas_owner("jobs", CasGuard::Absent, 1).await.unwrap();
/// let bound = Duration::from_secs(10);
/// keymap::put(&own, "jobs", 1, "k", b"v", bound).await.unwrap();
/// assert_eq!(keymap::get(&own, "jobs", "k").await.unwrap(), Some(b"v".to_vec()));
/// let stale = keymap::put(&own, "jobs", 0, "k", b"x", bound).await.unwrap_err();
/// assert_eq!(stale.kind(), ErrorKind::Fenced);
/// assert!(keymap::delete(&own, "jobs", 1, "k", bound).await.unwrap());
/// assert!(keymap::keys(&own, "jobs").await.unwrap().is_empty());
/// # });
/// ```
pub async fn put(
    own: &Ownership,
    cell: &str,
    epoch: u64,
    key: &str,
    value: &[u8],
    bound: Duration,
) -> Result<WriteAck, Error> {
    check_key(key)?;
    update_cell(own, cell, epoch, bound, |current| {
        let mut map = KeyMap::parse(current)?;
        map.insert(key, value);
        Ok(map.encode())
    })
    .await
}

/// Removes `key` from `cell`'s key map under `epoch`: `true` once the removal landed,
/// `false` when the key was not there (nothing written, after the same check of the epoch).
/// Errors as [`put`]'s.
pub async fn delete(
    own: &Ownership,
    cell: &str,
    epoch: u64,
    key: &str,
    bound: Duration,
) -> Result<bool, Error> {
    check_key(key)?;
    let absent = AtomicBool::new(false);
    let result = update_cell(own, cell, epoch, bound, |current| {
        let mut map = KeyMap::parse(current)?;
        if map.remove(key) {
            return Ok(map.encode());
        }
        absent.store(true, Ordering::Relaxed);
        // Aborts the write: there is nothing to remove.
        Err(Error::new(ErrorKind::NotFound, "no such key").not_committed())
    })
    .await;
    match result {
        Err(_) if absent.load(Ordering::Relaxed) => Ok(false),
        other => other.map(|_| true),
    }
}

/// The key map of `cell` (empty when the cell has no data). Errors: [`ErrorKind::Corrupt`]
/// when its data is not a key map; the store's.
pub async fn read(own: &Ownership, cell: &str) -> Result<KeyMap, Error> {
    match read_cell(own, cell).await? {
        Some(data) => KeyMap::parse(&data.payload),
        None => Ok(KeyMap::default()),
    }
}

/// The value of `key` in `cell`'s key map: `None` when the cell has no data or no such key.
pub async fn get(own: &Ownership, cell: &str, key: &str) -> Result<Option<Vec<u8>>, Error> {
    check_key(key)?;
    Ok(read(own, cell).await?.value(key))
}

/// The keys of `cell`'s key map, sorted.
pub async fn keys(own: &Ownership, cell: &str) -> Result<Vec<String>, Error> {
    Ok(read(own, cell).await?.keys().map(str::to_owned).collect())
}
