//! The cell head: owner, epoch and data in one object.

use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value};

use super::{encode, rules, Extra, Fields, HEAD_FORMAT};
use crate::error::Error;
use crate::key::Key;
use crate::store::Version;

/// A cell's owner record as the seed's API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The owning node, or `None` once released.
    pub node: Option<String>,
    /// The ownership epoch: raised by every claim, kept by a release, never lowered.
    pub epoch: u64,
    /// The store version of this record: the guard for the next write.
    pub etag: Version,
}

/// Which format a cell head was read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeadFormat {
    /// The seed's `{"node": …, "epoch": …}`: no nonce, no data.
    Seed,
    /// fence's version 1: the data lives in a separate `cells/<cell>/data` object.
    V1,
    /// The current format.
    V2,
}

/// A payload stored as its own immutable object, `cells/<cell>/blobs/<name>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlobRef {
    /// The object's name under the cell's `blobs/` folder: one key segment, never reused.
    pub name: String,
    /// The payload's length in bytes.
    pub len: u64,
}

/// Where a cell's payload is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum CellPayload {
    /// No data written yet.
    #[default]
    Empty,
    /// Small data, inside the head.
    Inline(Bytes),
    /// Large data, in an immutable object the head points at.
    Blob(BlobRef),
}

impl CellPayload {
    /// The blob this payload lives in, if any.
    pub fn blob(&self) -> Option<&BlobRef> {
        match self {
            CellPayload::Blob(b) => Some(b),
            _ => None,
        }
    }
}

/// A decoded cell head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellHead {
    /// The owner, `None` once released.
    pub node: Option<String>,
    /// The ownership epoch.
    pub epoch: u64,
    /// The write's identity (`""` for a seed record).
    pub nonce: String,
    /// The lease generation (process) of the owner that wrote it, if known: lets a peer tell
    /// a head written by a newer process of the same node from what it observed before.
    pub generation: Option<String>,
    /// The cell's data.
    pub payload: CellPayload,
    /// Unknown fields, written back unchanged.
    pub extra: Extra,
    /// The format it was read in ([`HeadFormat::V2`] for heads this fence builds).
    pub format: HeadFormat,
}

/// Hashes everything but the unknown fields (which JSON values cannot hash): equal heads
/// still hash equal.
impl std::hash::Hash for CellHead {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.node, self.epoch, &self.nonce, &self.generation).hash(state);
        (&self.payload, self.format).hash(state);
    }
}

impl CellHead {
    /// Whether `node` owns the cell at `epoch` by this head.
    pub fn is_owned_by(&self, node: &str, epoch: u64) -> bool {
        self.node.as_deref() == Some(node) && self.epoch == epoch
    }

    /// Encodes for writing, always in the current format.
    pub fn encode(&self) -> Bytes {
        let mut known = json!({
            "v": HEAD_FORMAT,
            "node": self.node.as_deref().unwrap_or(""),
            "epoch": self.epoch,
            "nonce": self.nonce,
        });
        if let Value::Object(map) = &mut known {
            if let Some(g) = &self.generation {
                map.insert("generation".into(), Value::from(g.as_str()));
            }
            match &self.payload {
                CellPayload::Empty => {}
                // Text as text, unless JSON escaping would make it longer than base64 (a
                // payload of control characters grows six to one as a JSON string).
                CellPayload::Inline(bytes) => match std::str::from_utf8(bytes) {
                    Ok(text) if escaped_len(text) <= bytes.len().div_ceil(3) * 4 => {
                        map.insert("data".into(), Value::from(text));
                    }
                    _ => {
                        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
                        map.insert("data_b64".into(), Value::from(b64));
                    }
                },
                CellPayload::Blob(b) => {
                    map.insert("blob".into(), json!({"name": b.name, "len": b.len}));
                }
            }
        }
        match known {
            Value::Object(map) => encode(map, &self.extra),
            _ => Bytes::new(),
        }
    }

    /// Decodes the head stored at `key`: version 2, version 1 or the seed's shape.
    pub fn decode(key: &Key, bytes: &[u8]) -> Result<Self, Error> {
        let mut f = Fields::parse(key, bytes)?;
        let format = match f.u64("v")? {
            None => HeadFormat::Seed,
            Some(1) => HeadFormat::V1,
            Some(HEAD_FORMAT) => HeadFormat::V2,
            Some(v) => {
                return Err(f.corrupt(format!("cell head format v{v}; this fence reads v1 and v2")))
            }
        };
        // The seed's own shape may leave `node` out for a released cell; fence's formats always
        // write it, so a v1/v2 head without it is damaged, not released. `""` (the seed,
        // version 2) and `null` (version 1, the seed) mean released; a version-2 `null` is
        // corrupt: no writer of version 2 writes it.
        let node = rules::head_node(format, f.take("node")).map_err(|b| f.breach(b))?;
        let epoch = f.required_u64("epoch")?;
        if let Some(b) = rules::zero_epoch(format, epoch) {
            return Err(f.breach(b));
        }
        let nonce = f.string("nonce")?.unwrap_or_default();
        if format != HeadFormat::Seed && nonce.is_empty() {
            return Err(f.corrupt("owner record without a nonce"));
        }
        let (payload, generation) = match format {
            HeadFormat::V2 => (decode_payload(&mut f)?, f.string("generation")?),
            _ => (CellPayload::Empty, None),
        };
        Ok(CellHead {
            node,
            epoch,
            nonce,
            generation,
            payload,
            extra: f.rest(),
            format,
        })
    }
}

/// The length of `text` as the inside of a JSON string.
fn escaped_len(text: &str) -> usize {
    text.chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum()
}

fn decode_payload(f: &mut Fields<'_>) -> Result<CellPayload, Error> {
    let text = f.string("data")?;
    let b64 = f.string("data_b64")?;
    let blob = f.object("blob")?;
    match (text, b64, blob) {
        (None, None, None) => Ok(CellPayload::Empty),
        (Some(t), None, None) => Ok(CellPayload::Inline(Bytes::from(t))),
        (None, Some(b), None) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map(|v| CellPayload::Inline(Bytes::from(v)))
            .map_err(|_| f.corrupt("`data_b64` is not base64")),
        (None, None, Some(o)) => decode_blob(f, o),
        _ => Err(f.corrupt("more than one of `data`, `data_b64`, `blob`")),
    }
}

fn decode_blob(f: &Fields<'_>, o: Extra) -> Result<CellPayload, Error> {
    let name = o.get("name").and_then(Value::as_str).unwrap_or_default();
    // The name becomes one key segment under the cell: a hostile record must not point a
    // reader (or the collector) anywhere else.
    let segment_ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let len = o.get("len").and_then(Value::as_u64);
    match (segment_ok, len) {
        (true, Some(len)) => Ok(CellPayload::Blob(BlobRef {
            name: name.to_owned(),
            len,
        })),
        _ => Err(f.corrupt("`blob` needs a plain `name` ([A-Za-z0-9_-]) and a `len`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn key() -> Key {
        Key::new("cells/c/own.json").unwrap()
    }

    fn head(payload: CellPayload) -> CellHead {
        CellHead {
            node: Some("n1".into()),
            epoch: 7,
            nonce: "x".into(),
            generation: Some("g1".into()),
            payload,
            extra: Extra::new(),
            format: HeadFormat::V2,
        }
    }

    #[test]
    fn every_payload_shape_round_trips_as_plain_json() {
        for payload in [
            CellPayload::Empty,
            CellPayload::Inline(Bytes::from_static(b"text \n \" ok")),
            CellPayload::Inline(Bytes::from_static(b"\xff\0binary")),
            CellPayload::Blob(BlobRef {
                name: "7-abc".into(),
                len: 16 << 20,
            }),
        ] {
            let mut h = head(payload);
            h.extra.insert("zone".into(), Value::from("eu"));
            let bytes = h.encode();
            let plain: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(
                (plain["node"].as_str(), plain["epoch"].as_u64()),
                (Some("n1"), Some(7))
            );
            assert_eq!(CellHead::decode(&key(), &bytes).unwrap(), h);
        }
    }

    #[test]
    fn control_characters_go_as_base64_so_a_head_stays_small() {
        let noisy = Bytes::from(vec![1u8; 8 * 1024]);
        let bytes = head(CellPayload::Inline(noisy.clone())).encode();
        assert!(bytes.len() < 12 * 1024, "{} bytes", bytes.len());
        assert_eq!(
            CellHead::decode(&key(), &bytes).unwrap().payload,
            CellPayload::Inline(noisy)
        );
        let text = head(CellPayload::Inline(Bytes::from_static(b"plain\ntext")));
        let plain: Value = serde_json::from_slice(&text.encode()).unwrap();
        assert_eq!(plain["data"], "plain\ntext");
    }

    #[test]
    fn released_is_an_empty_node_and_old_shapes_are_read() {
        let mut h = head(CellPayload::Empty);
        h.node = None;
        let plain: Value = serde_json::from_slice(&h.encode()).unwrap();
        assert_eq!(plain["node"], "");
        let seed = CellHead::decode(&key(), br#"{"node":"","epoch":41}"#).unwrap();
        assert_eq!(
            (seed.node, seed.epoch, seed.format),
            (None, 41, HeadFormat::Seed)
        );
        let seed = CellHead::decode(&key(), br#"{"node":"n9","epoch":7,"az":"b"}"#).unwrap();
        assert_eq!(seed.node.as_deref(), Some("n9"));
        assert_eq!(seed.extra["az"], "b");
        let seed = CellHead::decode(&key(), br#"{"epoch":41}"#).unwrap();
        assert_eq!((seed.node, seed.epoch), (None, 41));
        // The seed's shape, not a version-2 head: `null` and epoch 0 are its to write.
        let seed = CellHead::decode(&key(), br#"{"node":null,"epoch":0}"#).unwrap();
        assert_eq!(
            (seed.node, seed.epoch, seed.format),
            (None, 0, HeadFormat::Seed)
        );
        let v1 = CellHead::decode(&key(), br#"{"v":1,"node":null,"epoch":3,"nonce":"q"}"#).unwrap();
        assert_eq!((v1.node, v1.epoch, v1.format), (None, 3, HeadFormat::V1));
    }

    #[test]
    fn hostile_heads_are_corrupt() {
        for bad in [
            &br#"{"v":3,"node":"n","epoch":1,"nonce":"x"}"#[..],
            br#"{"v":2,"node":"n","epoch":1}"#,
            br#"{"v":2,"node":"n","epoch":-1,"nonce":"x"}"#,
            br#"{"v":2,"node":"n","epoch":1,"nonce":"x","data":"a","data_b64":"YQ=="}"#,
            br#"{"v":2,"node":"n","epoch":1,"nonce":"x","data_b64":"!!"}"#,
            br#"{"v":2,"node":"n","epoch":1,"nonce":"x","blob":{"name":"../../nodes/a","len":1}}"#,
            br#"{"v":2,"node":"n","epoch":1,"nonce":"x","blob":{"name":"a"}}"#,
            br#"{"v":2,"epoch":1,"nonce":"x"}"#,
            br#"{"v":1,"epoch":1,"nonce":"x"}"#,
            // Issue 35: fence claimed over both (3 → 4, and 0 → 1); only `fence check` saw
            // them.
            br#"{"v":2,"node":null,"epoch":3,"nonce":"x"}"#,
            br#"{"v":2,"node":"n","epoch":0,"nonce":"x"}"#,
            // Two members of one name: a first-wins reader would read another owner.
            br#"{"v":2,"node":"","epoch":3,"nonce":"x","node":"n"}"#,
            br#"{"v":2,"node":"n","epoch":3,"nonce":"x","blob":{"name":"a","len":1,"len":2}}"#,
            br#"{"node":"n"}"#,
            br#"{"node":5,"epoch":1}"#,
            br#""just a string""#,
        ] {
            let err = CellHead::decode(&key(), bad).unwrap_err();
            assert_eq!(
                err.kind(),
                ErrorKind::Corrupt,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
