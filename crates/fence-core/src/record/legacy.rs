//! fence's version-1 data head, `cells/<cell>/data`: read when a version-1 cell is claimed
//! (its payload moves into the version-2 head) or shown.
//!
//! One JSON header line, `\n`, then the payload bytes:
//!
//! ```text
//! {"v":1,"epoch":7,"node":"n1","nonce":"9c4d…"}
//! <payload>
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{json, Value};

use super::{encode, Extra, Fields};
use crate::error::Error;
use crate::key::Key;

/// A decoded version-1 data head.
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

impl DataBody {
    /// Encodes as version 1 (to build version-1 buckets in tests and migrations).
    pub fn encode(&self) -> Bytes {
        let known = json!({"v": 1, "epoch": self.epoch, "node": self.node, "nonce": self.nonce});
        let header = match known {
            Value::Object(map) => encode(map, &self.extra),
            _ => Bytes::new(),
        };
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
        let mut f = Fields::parse(key, &bytes[..split])?;
        if f.u64("v")? != Some(1) {
            return Err(f.corrupt("data head is not format v1"));
        }
        let epoch = f.required_u64("epoch")?;
        let node = f.string("node")?.unwrap_or_default();
        let nonce = f.string("nonce")?.unwrap_or_default();
        Ok(DataBody {
            epoch,
            node,
            nonce,
            extra: f.rest(),
            payload: bytes.slice(split + 1..),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_binary_safe_and_headerless_bodies_are_corrupt() {
        let key = Key::new("cells/c/data").unwrap();
        let body = DataBody {
            epoch: 3,
            node: "n".into(),
            nonce: "x".into(),
            extra: Extra::new(),
            payload: Bytes::from_static(b"\n\0\xffpayload\n"),
        };
        assert_eq!(DataBody::decode(&key, &body.encode()).unwrap(), body);
        let err = DataBody::decode(&key, &Bytes::from_static(b"{\"v\":1}")).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt);
    }
}
