//! The assignment record, as data: what it holds, its encoding, and how notices are posted
//! to it. No I/O (the shell's `assignment` module reads and writes it by compare-and-swap).
//! The format is specified in docs/protocol.md §14.

use std::collections::BTreeMap;

use fence_core::{Error, Key};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The record format this fleet writes and reads.
pub const FORMAT: u64 = 1;
/// Notices kept in one record at most (the newest).
pub const MAX_NOTICES: usize = 256;

/// What a notice tells its reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoticeKind {
    /// `node` died (its lease is released or tombstoned): take `cell`, whose heir you are.
    Inherit,
    /// `node` handed `cell` to you: resume it.
    Handed,
    /// `node` is the target of `cell`, which you hold or the store names as yours: hand it
    /// over if it is not yours by the placement.
    Ask,
    /// `node`'s renewal is long overdue and you are an heir of its cells: read your record
    /// often until it renews or is confirmed dead.
    Suspect,
    /// For the leader: `node` started (or restarted) and wants a share.
    Joined,
    /// For the leader: `node` is draining.
    Leaving,
    /// For the leader: `node` died or left.
    Gone,
    /// A kind a later version wrote: kept, ignored.
    #[serde(other)]
    Unknown,
}

/// One notice.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Notice {
    /// Wall-clock ms of the writer when written (ages it out).
    pub at: u64,
    /// What it tells.
    pub kind: NoticeKind,
    /// The cell it is about (`""`: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cell: String,
    /// The node it is about (`""`: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node: String,
}

/// A node this node watches, and the heir of each of that node's cells.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Watched {
    /// The node watched.
    pub node: String,
    /// The heir of each of its cells.
    #[serde(default)]
    pub heirs: BTreeMap<String, String>,
}

/// One node's assignment record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// The record's format ([`FORMAT`]).
    #[serde(rename = "v")]
    pub format: u64,
    /// The node the record is of.
    pub node: String,
    /// The node's lease generation, written by the node (senders of a hand-off name it).
    #[serde(default)]
    pub generation: String,
    /// Written by the node: it drains (senders of a hand-off skip it).
    #[serde(default)]
    pub leaving: bool,
    /// The leader's term (the epoch of its leadership claim) when it last wrote here; 0:
    /// never assigned.
    #[serde(default)]
    pub term: u64,
    /// The leader that wrote the placement.
    #[serde(default)]
    pub leader: String,
    /// The cells placed on this node.
    #[serde(default)]
    pub cells: Vec<String>,
    /// The heir of each of this node's cells (where a drain hands them).
    #[serde(default)]
    pub heirs: BTreeMap<String, String>,
    /// Cells placed elsewhere since: hand each to the node named.
    #[serde(default)]
    pub moves: BTreeMap<String, String>,
    /// The node this node watches, and the heirs of that node's cells.
    #[serde(default)]
    pub watch: Vec<Watched>,
    /// Notices from peers, oldest first.
    #[serde(default)]
    pub notices: Vec<Notice>,
    /// Fields a later version wrote: kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Assignment {
    /// An empty record of `node`.
    pub fn empty(node: &str) -> Self {
        Assignment {
            format: FORMAT,
            node: node.to_owned(),
            ..Assignment::default()
        }
    }

    /// The record's bytes (JSON).
    pub fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }

    /// Decodes the record of `node` stored at `key`: anything malformed, of another format,
    /// of another node, or naming an invalid node or cell is [`ErrorKind::Corrupt`](fence_core::ErrorKind::Corrupt).
    pub fn decode(key: &Key, node: &str, bytes: &[u8]) -> Result<Self, Error> {
        // Two members of one name are corrupt (serde keeps the last, other readers the first).
        let a: Assignment = fence_core::record::rules::parse_json(bytes)
            .and_then(serde_json::from_value)
            .map_err(|e| Error::corrupt(key, format!("assignment record: {e}")))?;
        if a.format != FORMAT {
            let msg = format!(
                "assignment format v{}; this fleet reads v{FORMAT}",
                a.format
            );
            return Err(Error::corrupt(key, msg));
        }
        if a.node != node {
            return Err(Error::corrupt(key, "assignment record of another node"));
        }
        a.check_names()
            .map_err(|e| Error::corrupt(key, format!("assignment record: {e}")))?;
        Ok(a)
    }

    fn check_names(&self) -> Result<(), Error> {
        let node = |n: &str| fence_core::ownership::check_name("node", n);
        let cell = |c: &str| fence_core::ownership::check_name("cell", c);
        let optional = |n: &str, f: &dyn Fn(&str) -> Result<(), Error>| {
            if n.is_empty() {
                Ok(())
            } else {
                f(n)
            }
        };
        optional(&self.leader, &node)?;
        self.cells.iter().try_for_each(|c| cell(c))?;
        for map in [&self.heirs, &self.moves] {
            map.iter()
                .try_for_each(|(c, n)| cell(c).and_then(|_| node(n)))?;
        }
        for w in &self.watch {
            node(&w.node)?;
            w.heirs
                .iter()
                .try_for_each(|(c, n)| cell(c).and_then(|_| node(n)))?;
        }
        for n in &self.notices {
            optional(&n.cell, &cell)?;
            optional(&n.node, &node)?;
        }
        Ok(())
    }

    /// Adds `notices`, dropping those written before `oldest` (wall ms) and all but the
    /// newest [`MAX_NOTICES`].
    pub fn post(&mut self, notices: &[Notice], oldest: u64) {
        self.notices.retain(|n| n.at >= oldest);
        for n in notices {
            if !self.notices.contains(n) {
                self.notices.push(n.clone());
            }
        }
        if self.notices.len() > MAX_NOTICES {
            self.notices.sort_by_key(|n| n.at);
            let drop = self.notices.len() - MAX_NOTICES;
            self.notices.drain(..drop);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fence_core::ErrorKind;

    fn k() -> Key {
        Key::new("fleet/nodes/00/n.json").unwrap()
    }

    #[test]
    fn a_record_round_trips_and_keeps_fields_it_does_not_know() {
        let mut a = Assignment::empty("n");
        a.cells = vec!["c1".into()];
        a.heirs.insert("c1".into(), "m".into());
        a.extra.insert("zone".into(), Value::from("eu"));
        a.post(
            &[Notice {
                at: 5,
                kind: NoticeKind::Inherit,
                cell: "c9".into(),
                node: "x".into(),
            }],
            0,
        );
        let back = Assignment::decode(&k(), "n", &a.encode()).unwrap();
        assert_eq!(back, a);
        let later = br#"{"v":1,"node":"n","notices":[{"at":1,"kind":"teleport"}]}"#;
        let read = Assignment::decode(&k(), "n", later).unwrap();
        assert_eq!(read.notices[0].kind, NoticeKind::Unknown);
    }

    #[test]
    fn malformed_foreign_and_hostile_records_are_corrupt() {
        let good = Assignment::empty("n").encode();
        for cut in [0, 1, good.len() / 2, good.len() - 1] {
            let e = Assignment::decode(&k(), "n", &good[..cut]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Corrupt);
        }
        for bad in [
            &br#"{"v":2,"node":"n"}"#[..],
            br#"{"v":1,"node":"other"}"#,
            br#"{"v":1,"node":"n","cells":["../x"]}"#,
            br#"{"v":1,"node":"n","heirs":{"c":"a/b"}}"#,
            br#"{"v":1,"node":"n","watch":[{"node":""}]}"#,
            br#"{"v":1,"node":"n","notices":[{"at":-1,"kind":"handed"}]}"#,
            br#"{"v":1,"node":"n","term":1e99}"#,
            br#"[1]"#,
            // Two members of one name, where serde keeps the last: a known field, an unknown
            // (flattened) one, a key of a map.
            br#"{"v":1,"node":"n","cells":["a"],"cells":["b"]}"#,
            br#"{"v":1,"node":"n","zone":"a","zone":"b"}"#,
            br#"{"v":1,"node":"n","heirs":{"c":"a","c":"b"}}"#,
        ] {
            let e = Assignment::decode(&k(), "n", bad).unwrap_err();
            assert_eq!(
                e.kind(),
                ErrorKind::Corrupt,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn notices_age_out_and_are_bounded() {
        let mut a = Assignment::empty("n");
        let at = |t| Notice {
            at: t,
            kind: NoticeKind::Handed,
            cell: format!("c{t}"),
            node: String::new(),
        };
        let many: Vec<Notice> = (0..1_000).map(at).collect();
        a.post(&many, 0);
        assert_eq!(a.notices.len(), MAX_NOTICES);
        assert_eq!(a.notices[0].at, 1_000 - MAX_NOTICES as u64);
        a.post(&[at(2_000)], 1_500);
        assert_eq!(a.notices, vec![at(2_000)]);
    }
}
