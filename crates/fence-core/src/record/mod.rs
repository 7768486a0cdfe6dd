//! The records fence keeps in a store, and their JSON wire format.
//!
//! Every record is one plain JSON object — readable by `jq`, boto3, gsutil — and every write
//! carries a fresh random `nonce`, so no two bodies fence writes are ever byte-equal (S3
//! ETags are content hashes and would repeat) and a read-back can recognise a write by its
//! identity. Fields this version does not know are kept and written back unchanged.
//!
//! # Node lease, at `nodes/<node>.json`
//!
//! ```json
//! {"v":1,"node":"n1","expires_ms":1764469200000,"addr":"10.0.0.1:7000",
//!  "peer_protocol":1,"generation":"gen-1","nonce":"5f0c…","ttl_ms":10000}
//! ```
//!
//! `expires_ms` is the writer's wall clock plus its TTL; `0` marks a released lease. `ttl_ms`
//! tells peers how long they must see the record unchanged before the holder's authority has
//! surely ended (see [`crate::decide::observe`]). The seed's shape (no `v`, no `nonce`, no
//! `ttl_ms`) is read too.
//!
//! # Cell head, at `cells/<cell>/own.json`
//!
//! The owner, the ownership epoch and the cell's data in one object, so that a claim's
//! compare-and-swap is itself the seal that fences every earlier epoch's writer, and a
//! fenced write is one compare-and-swap on the object that holds the epoch:
//!
//! ```json
//! {"v":2,"node":"n1","epoch":7,"nonce":"a3e1…","data":"small text payload"}
//! {"v":2,"node":"n1","epoch":7,"nonce":"a3e1…","data_b64":"AAEC/w=="}
//! {"v":2,"node":"","epoch":7,"nonce":"a3e1…","blob":{"name":"7-9c4d…","len":16777216}}
//! ```
//!
//! `node` is `""` once released (the seed's convention). A payload up to the inline bound is
//! `data` (UTF-8 text) or `data_b64`; a larger one is an immutable object
//! `cells/<cell>/blobs/<name>` holding exactly the user's bytes, written once under a unique
//! name before the head points at it. The seed's shape `{"node":"n1","epoch":41}` and fence's
//! version 1 (`{"v":1,"node":null,…}` with the data in a separate `cells/<cell>/data`
//! object, see [`legacy`]) are read too; the next claim rewrites them as version 2.
//!
//! A record that does not parse, has an unknown `v`, misses a field or breaks a rule is
//! [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt), naming the key; the library never
//! overwrites it.

mod head;
mod lease;
pub mod legacy;
pub mod rules;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::clock::Entropy;
use crate::error::Error;
use crate::key::Key;

pub use head::{BlobRef, CellHead, CellPayload, HeadFormat, OwnerRecord};
pub use lease::{LeaseBody, NodeLease, NodeLeaseRecord};

/// The version of the cell-head format this fence writes.
pub const HEAD_FORMAT: u64 = 2;

/// The version of the node-lease format this fence writes.
pub const LEASE_FORMAT: u64 = 1;

/// Fields of a record this version of fence does not know; written back unchanged.
pub type Extra = Map<String, Value>;

/// A fresh 128-bit nonce, hex.
pub fn fresh_nonce(entropy: &Entropy) -> String {
    format!("{:016x}{:016x}", entropy.next_u64(), entropy.next_u64())
}

/// The decoded JSON object of a record, fields taken out one by one; what is left is
/// [`Extra`].
pub(crate) struct Fields<'k> {
    key: &'k Key,
    map: Extra,
}

impl<'k> Fields<'k> {
    /// The record's JSON object ([`rules::parse_object`]: two members of one name are
    /// corrupt).
    pub(crate) fn parse(key: &'k Key, bytes: &[u8]) -> Result<Self, Error> {
        match rules::parse_object(bytes) {
            Ok(map) => Ok(Fields { key, map }),
            Err(breach) => Err(breach.corrupt(key)),
        }
    }

    pub(crate) fn corrupt(&self, why: impl Into<String>) -> Error {
        Error::corrupt(self.key, why)
    }

    /// The error of the record breaking a shared rule.
    pub(crate) fn breach(&self, breach: rules::Breach) -> Error {
        breach.corrupt(self.key)
    }

    pub(crate) fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name)
    }

    pub(crate) fn u64(&mut self, name: &str) -> Result<Option<u64>, Error> {
        match self.take(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.corrupt(format!("`{name}` is not an unsigned 64-bit integer"))),
            Some(_) => Err(self.corrupt(format!("`{name}` is not a number"))),
        }
    }

    pub(crate) fn required_u64(&mut self, name: &str) -> Result<u64, Error> {
        self.u64(name)?
            .ok_or_else(|| self.corrupt(format!("missing `{name}`")))
    }

    pub(crate) fn string(&mut self, name: &str) -> Result<Option<String>, Error> {
        match self.take(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.corrupt(format!("`{name}` is not a string"))),
        }
    }

    pub(crate) fn object(&mut self, name: &str) -> Result<Option<Extra>, Error> {
        match self.take(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(_) => Err(self.corrupt(format!("`{name}` is not an object"))),
        }
    }

    pub(crate) fn rest(self) -> Extra {
        // An emptied map keeps its allocation: a record without unknown fields keeps none.
        if self.map.is_empty() {
            Extra::new()
        } else {
            self.map
        }
    }
}

/// Serialises a record: known fields first, then the kept unknown ones.
pub(crate) fn encode(known: Extra, extra: &Extra) -> Bytes {
    let mut map = known;
    for (k, v) in extra {
        map.entry(k.clone()).or_insert_with(|| v.clone());
    }
    // Serialising a map of JSON values into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(&Value::Object(map)).unwrap_or_default())
}
