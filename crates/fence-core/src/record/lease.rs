//! The node-lease record.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{encode, rules, Extra, Fields, LEASE_FORMAT};
use crate::error::Error;
use crate::key::Key;
use crate::store::Version;

/// A node's lease: who, until when (the writer's wall clock), and how to reach it. The seed's
/// record, field for field.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeLeaseRecord {
    /// The node id.
    pub node: String,
    /// Wall-clock expiry (ms since the Unix epoch) by the writer's clock; `0` once released.
    pub expires_ms: u64,
    /// Where peers reach the node.
    pub addr: String,
    /// The node's peer protocol version.
    pub peer_protocol: u32,
    /// The writing process's generation (changes on every process start).
    pub generation: String,
}

impl NodeLeaseRecord {
    /// Whether the holder gave the lease up on purpose (a release writes `expires_ms: 0`):
    /// peers may take over at once.
    pub fn is_released(&self) -> bool {
        self.expires_ms == 0
    }
}

/// A lease record as read from the store, with its version and write identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLease {
    /// The record.
    pub record: NodeLeaseRecord,
    /// The store version: the guard for the next renewal.
    pub etag: Version,
    /// The nonce of the write that produced this record (`""` for a record written by the
    /// seed, which has none).
    pub nonce: String,
    /// The holder's TTL, if the record says (fence writes it; the seed does not).
    pub ttl_ms: Option<u64>,
}

/// A decoded lease body.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseBody {
    /// The record.
    pub record: NodeLeaseRecord,
    /// The write's nonce (`""` when read from a seed record).
    pub nonce: String,
    /// The holder's TTL.
    pub ttl_ms: Option<u64>,
    /// Unknown fields.
    pub extra: Extra,
}

impl LeaseBody {
    /// Encodes for writing.
    pub fn encode(&self) -> Bytes {
        let r = &self.record;
        let mut known = json!({
            "v": LEASE_FORMAT,
            "node": r.node,
            "expires_ms": r.expires_ms,
            "addr": r.addr,
            "peer_protocol": r.peer_protocol,
            "generation": r.generation,
            "nonce": self.nonce,
        });
        if let (Some(ttl), Value::Object(map)) = (self.ttl_ms, &mut known) {
            map.insert("ttl_ms".into(), Value::from(ttl));
        }
        match known {
            Value::Object(map) => encode(map, &self.extra),
            _ => Bytes::new(),
        }
    }

    /// Decodes the body stored at `key`: fence's version 1, or the seed's shape (no `v`).
    pub fn decode(key: &Key, bytes: &[u8]) -> Result<Self, Error> {
        let mut f = Fields::parse(key, bytes)?;
        let versioned = match f.u64("v")? {
            None => false,
            Some(LEASE_FORMAT) => true,
            Some(v) => return Err(f.corrupt(format!("lease format v{v}; this fence reads v1"))),
        };
        let node = f.string("node")?.unwrap_or_default();
        if node.is_empty() {
            return Err(f.corrupt("lease record without a node"));
        }
        let expires_ms = f.required_u64("expires_ms")?;
        let addr = f.string("addr")?.unwrap_or_default();
        let peer_protocol = f.u64("peer_protocol")?.unwrap_or(0);
        let peer_protocol = u32::try_from(peer_protocol)
            .map_err(|_| f.corrupt("`peer_protocol` does not fit 32 bits"))?;
        let generation = f.string("generation")?.unwrap_or_default();
        let nonce = f.string("nonce")?.unwrap_or_default();
        let ttl_ms = f.u64("ttl_ms")?;
        if let Some(b) = rules::lease_ttl(versioned, expires_ms, ttl_ms) {
            return Err(f.breach(b));
        }
        Ok(LeaseBody {
            record: NodeLeaseRecord {
                node,
                expires_ms,
                addr,
                peer_protocol,
                generation,
            },
            nonce,
            ttl_ms,
            extra: f.rest(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn key() -> Key {
        Key::new("nodes/n1.json").unwrap()
    }

    fn body() -> LeaseBody {
        LeaseBody {
            record: NodeLeaseRecord {
                node: "n1".into(),
                expires_ms: 5,
                addr: "a".into(),
                peer_protocol: 1,
                generation: "g".into(),
            },
            nonce: "n".into(),
            ttl_ms: Some(10_000),
            extra: Extra::new(),
        }
    }

    #[test]
    fn round_trips_keeps_unknown_fields_and_is_plain_json() {
        let mut b = body();
        b.extra.insert("zone".into(), Value::from("eu-1"));
        let bytes = b.encode();
        let plain: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(plain["node"], "n1");
        assert_eq!(plain["zone"], "eu-1");
        assert_eq!(LeaseBody::decode(&key(), &bytes).unwrap(), b);
    }

    #[test]
    fn the_seed_shape_is_read() {
        let seed =
            br#"{"node":"n1","expires_ms":7,"addr":"x:1","peer_protocol":1,"generation":"gen-1"}"#;
        let b = LeaseBody::decode(&key(), seed).unwrap();
        assert_eq!(
            (b.record.expires_ms, b.nonce.as_str(), b.ttl_ms),
            (7, "", None)
        );
        assert_eq!(b.record.generation, "gen-1");
    }

    #[test]
    fn a_released_lease_needs_no_ttl() {
        let released = br#"{"v":1,"node":"n","expires_ms":0,"generation":"g","nonce":"x"}"#;
        let b = LeaseBody::decode(&key(), released).unwrap();
        assert_eq!((b.record.expires_ms, b.ttl_ms), (0, None));
    }

    #[test]
    fn truncated_foreign_and_hostile_records_are_corrupt() {
        let bytes = body().encode();
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            let err = LeaseBody::decode(&key(), &bytes[..cut]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt);
            assert_eq!(err.key(), Some(&key()));
        }
        for bad in [
            &br#"{"v":2,"node":"n","expires_ms":1}"#[..],
            br#"{"node":"","expires_ms":1}"#,
            br#"{"node":"n","expires_ms":-1}"#,
            br#"{"node":"n","expires_ms":1e30}"#,
            br#"{"node":"n"}"#,
            br#"[1,2]"#,
            br#"{"node":"n","expires_ms":1,"peer_protocol":99999999999}"#,
            // Issue 35: a live version-1 lease must state its holder's TTL (a peer with a
            // shorter one took it over early).
            br#"{"v":1,"node":"n","expires_ms":5,"generation":"g","nonce":"x"}"#,
            br#"{"v":1,"node":"n","expires_ms":5,"ttl_ms":1,"expires_ms":0}"#,
        ] {
            let err = LeaseBody::decode(&key(), bad).unwrap_err();
            assert_eq!(
                err.kind(),
                ErrorKind::Corrupt,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
