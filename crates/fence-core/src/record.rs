//! Lease, owner and data records and their JSON wire format.
//!
//! # Wire format (version 1)
//!
//! Node lease, at `nodes/<node>.json`:
//! ```json
//! {"v":1,"node":"n1","expires_ms":1764469200000,"addr":"10.0.0.1:7000",
//!  "peer_protocol":1,"generation":"gen-1","nonce":"5f0c…"}
//! ```
//! Cell owner, at `cells/<cell>/own.json` (`node` is `null` once released):
//! ```json
//! {"v":1,"node":"n1","epoch":7,"nonce":"a3e1…"}
//! ```
//! Cell data head, at `cells/<cell>/data`: one JSON header line, `\n`, then the payload bytes:
//! ```text
//! {"v":1,"epoch":7,"node":"n1","nonce":"9c4d…"}
//! <payload>
//! ```
//!
//! Every write carries a fresh random `nonce`, so no two bodies are ever byte-equal (S3 ETags
//! are content hashes and would repeat) and a read-back can recognise our own write. Fields
//! this version does not know are kept and written back unchanged on the next rewrite. A
//! record that does not parse, has `v` other than 1, or misses a field is
//! [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt), naming the key; it is never overwritten
//! by the library.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::clock::Entropy;
use crate::error::Error;
use crate::key::Key;
use crate::store::Version;

/// The current wire format version.
pub const FORMAT_VERSION: u32 = 1;

/// Fields of a record this version of fence does not know; written back unchanged.
pub type Extra = Map<String, Value>;

/// A node's lease: who, until when (the writer's wall clock), and how to reach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLeaseRecord {
    /// The node id.
    pub node: String,
    /// Wall-clock expiry (ms since the Unix epoch) by the writer's clock.
    pub expires_ms: u64,
    /// Where peers reach the node.
    pub addr: String,
    /// The node's peer protocol version.
    pub peer_protocol: u32,
    /// The writing process's generation (changes on every process start).
    pub generation: String,
}

/// A cell's owner record as read from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The owning node, or `None` once released.
    pub node: Option<String>,
    /// The ownership epoch: raised by every claim, kept by a release, never lowered.
    pub epoch: u64,
    /// The store version of this record: the guard for the next write.
    pub etag: Version,
}

/// A lease record as read from the store, with its version and write identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLease {
    /// The record.
    pub record: NodeLeaseRecord,
    /// The store version: the guard for the next renewal.
    pub etag: Version,
    /// The nonce of the write that produced this record.
    pub nonce: String,
}

/// A fresh 128-bit nonce, hex.
pub fn fresh_nonce(entropy: &Entropy) -> String {
    format!("{:016x}{:016x}", entropy.next_u64(), entropy.next_u64())
}

#[derive(Serialize, Deserialize)]
struct LeaseWire {
    v: u32,
    #[serde(flatten)]
    record: NodeLeaseRecord,
    nonce: String,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Serialize, Deserialize)]
struct OwnerWire {
    v: u32,
    node: Option<String>,
    epoch: u64,
    nonce: String,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Serialize, Deserialize)]
struct DataWire {
    v: u32,
    epoch: u64,
    node: String,
    nonce: String,
    #[serde(flatten)]
    extra: Extra,
}

/// A decoded lease body.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseBody {
    /// The record.
    pub record: NodeLeaseRecord,
    /// The write's nonce.
    pub nonce: String,
    /// Unknown fields.
    pub extra: Extra,
}

/// A decoded owner body.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnerBody {
    /// The owner, `None` once released.
    pub node: Option<String>,
    /// The epoch.
    pub epoch: u64,
    /// The write's nonce.
    pub nonce: String,
    /// Unknown fields.
    pub extra: Extra,
}

/// A decoded data head.
#[derive(Clone, Debug, PartialEq)]
pub struct DataBody {
    /// The epoch the data was written under.
    pub epoch: u64,
    /// The writer.
    pub node: String,
    /// The write's nonce.
    pub nonce: String,
    /// Unknown header fields.
    pub extra: Extra,
    /// The payload.
    pub payload: Bytes,
}

fn to_bytes<T: Serialize>(wire: &T) -> Bytes {
    // Serialising these plain structs into a Vec cannot fail (string keys, no floats).
    Bytes::from(serde_json::to_vec(wire).unwrap_or_default())
}

fn check_version(key: &Key, v: u32) -> Result<(), Error> {
    if v == FORMAT_VERSION {
        Ok(())
    } else {
        Err(Error::corrupt(
            key,
            format!("record format v{v}; this fence reads v{FORMAT_VERSION}"),
        ))
    }
}

fn parse<'a, T: Deserialize<'a>>(key: &Key, bytes: &'a [u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::corrupt(key, format!("undecodable record ({} bytes)", bytes.len())).with_source(e)
    })
}

impl LeaseBody {
    /// Encodes for writing.
    pub fn encode(&self) -> Bytes {
        to_bytes(&LeaseWire {
            v: FORMAT_VERSION,
            record: self.record.clone(),
            nonce: self.nonce.clone(),
            extra: self.extra.clone(),
        })
    }

    /// Decodes the body stored at `key`.
    pub fn decode(key: &Key, bytes: &[u8]) -> Result<Self, Error> {
        let wire: LeaseWire = parse(key, bytes)?;
        check_version(key, wire.v)?;
        if wire.record.node.is_empty() || wire.nonce.is_empty() {
            return Err(Error::corrupt(
                key,
                "lease record with an empty node or nonce",
            ));
        }
        Ok(LeaseBody {
            record: wire.record,
            nonce: wire.nonce,
            extra: wire.extra,
        })
    }
}

impl OwnerBody {
    /// Encodes for writing.
    pub fn encode(&self) -> Bytes {
        to_bytes(&OwnerWire {
            v: FORMAT_VERSION,
            node: self.node.clone(),
            epoch: self.epoch,
            nonce: self.nonce.clone(),
            extra: self.extra.clone(),
        })
    }

    /// Decodes the body stored at `key`.
    pub fn decode(key: &Key, bytes: &[u8]) -> Result<Self, Error> {
        let wire: OwnerWire = parse(key, bytes)?;
        check_version(key, wire.v)?;
        if wire.nonce.is_empty() || wire.node.as_deref() == Some("") {
            return Err(Error::corrupt(
                key,
                "owner record with an empty node or nonce",
            ));
        }
        Ok(OwnerBody {
            node: wire.node,
            epoch: wire.epoch,
            nonce: wire.nonce,
            extra: wire.extra,
        })
    }
}

impl DataBody {
    /// Encodes for writing: a header line, `\n`, the payload.
    pub fn encode(&self) -> Bytes {
        let header = to_bytes(&DataWire {
            v: FORMAT_VERSION,
            epoch: self.epoch,
            node: self.node.clone(),
            nonce: self.nonce.clone(),
            extra: self.extra.clone(),
        });
        let mut out = BytesMut::with_capacity(header.len() + 1 + self.payload.len());
        out.put_slice(&header);
        out.put_u8(b'\n');
        out.put_slice(&self.payload);
        out.freeze()
    }

    /// Decodes the body stored at `key`.
    pub fn decode(key: &Key, bytes: &Bytes) -> Result<Self, Error> {
        let Some(split) = bytes.iter().position(|&b| b == b'\n') else {
            return Err(Error::corrupt(key, "data record without a header line"));
        };
        let wire: DataWire = parse(key, &bytes[..split])?;
        check_version(key, wire.v)?;
        Ok(DataBody {
            epoch: wire.epoch,
            node: wire.node,
            nonce: wire.nonce,
            extra: wire.extra,
            payload: bytes.slice(split + 1..),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::new("nodes/n1.json").unwrap()
    }

    fn lease() -> LeaseBody {
        LeaseBody {
            record: NodeLeaseRecord {
                node: "n1".into(),
                expires_ms: 5,
                addr: "a".into(),
                peer_protocol: 1,
                generation: "g".into(),
            },
            nonce: "n".into(),
            extra: Extra::new(),
        }
    }

    #[test]
    fn lease_round_trips_and_keeps_unknown_fields() {
        let mut body = lease();
        body.extra.insert("zone".into(), Value::from("eu-1"));
        let back = LeaseBody::decode(&key(), &body.encode()).unwrap();
        assert_eq!(back, body);
    }

    #[test]
    fn truncated_and_foreign_records_are_corrupt() {
        let bytes = lease().encode();
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            let err = LeaseBody::decode(&key(), &bytes[..cut]).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
            assert_eq!(err.key(), Some(&key()));
        }
        let v2 = br#"{"v":2,"node":"n","epoch":1,"nonce":"x"}"#;
        assert_eq!(
            OwnerBody::decode(&key(), v2).unwrap_err().kind(),
            crate::ErrorKind::Corrupt
        );
        let no_header = Bytes::from_static(b"{\"v\":1}");
        assert_eq!(
            DataBody::decode(&key(), &no_header).unwrap_err().kind(),
            crate::ErrorKind::Corrupt
        );
    }

    #[test]
    fn data_payload_is_binary_safe() {
        let body = DataBody {
            epoch: 3,
            node: "n".into(),
            nonce: "x".into(),
            extra: Extra::new(),
            payload: Bytes::from_static(b"\n\0\xffpayload\n"),
        };
        assert_eq!(DataBody::decode(&key(), &body.encode()).unwrap(), body);
    }
}
