//! Each node's assignment record: what the fleet's leader placed on it, whom it watches,
//! and notices from its peers. One small object per node, at
//! `fleet/nodes/<hh>/<node>.json` (`hh`: two hex digits of a stable hash of the id, so the
//! records of a large fleet spread over 256 key prefixes). The node reads its own record once
//! per interval; everyone else writes it only by compare-and-swap, keeping what they do not
//! change:
//!
//! - the **node** writes `generation` (its lease generation, so senders of a hand-off can
//!   name it) and `leaving` (set when it drains; drainers skip leaving receivers);
//! - the **leader** writes `term`, `leader`, `cells`, `heirs`, `moves` and `watch`;
//! - **peers** append `notices` (a dead node's cells to inherit, a cell handed over, a cell
//!   asked for; joins, leaves and deaths for the leader). Writers drop notices older than the
//!   notice lifetime, and keep at most [`MAX_NOTICES`].
//!
//! Nothing here is a safety proof: a record may be stale or wrong, and every action taken on
//! it goes through the core's claims, whose epochs and observation rule are the fence.

use std::collections::BTreeMap;

use fence_core::runtime::Fence;
use fence_core::{CasGuard, Error, ErrorKind, Key, PutOutcome, Version};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::assign::stable_hash;

/// The record format this fleet writes and reads.
pub(crate) const FORMAT: u64 = 1;
/// Notices kept in one record at most (the newest).
pub(crate) const MAX_NOTICES: usize = 256;
/// Compare-and-swap attempts of one edit before it gives up (another writer kept winning).
const EDIT_ATTEMPTS: usize = 4;

/// What a notice tells its reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NoticeKind {
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
pub(crate) struct Notice {
    /// Wall-clock ms of the writer when written (ages it out).
    pub(crate) at: u64,
    pub(crate) kind: NoticeKind,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) cell: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) node: String,
}

/// A node this node watches, and the heir of each of that node's cells.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Watched {
    pub(crate) node: String,
    #[serde(default)]
    pub(crate) heirs: BTreeMap<String, String>,
}

/// One node's assignment record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Assignment {
    #[serde(rename = "v")]
    pub(crate) format: u64,
    pub(crate) node: String,
    #[serde(default)]
    pub(crate) generation: String,
    #[serde(default)]
    pub(crate) leaving: bool,
    /// The leader's term (the epoch of its leadership claim) when it last wrote here; 0:
    /// never assigned.
    #[serde(default)]
    pub(crate) term: u64,
    #[serde(default)]
    pub(crate) leader: String,
    /// The cells placed on this node.
    #[serde(default)]
    pub(crate) cells: Vec<String>,
    /// The heir of each of this node's cells (where a drain hands them).
    #[serde(default)]
    pub(crate) heirs: BTreeMap<String, String>,
    /// Cells placed elsewhere since: hand each to the node named.
    #[serde(default)]
    pub(crate) moves: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) watch: Vec<Watched>,
    #[serde(default)]
    pub(crate) notices: Vec<Notice>,
    /// Fields a later version wrote: kept as they are.
    #[serde(flatten)]
    pub(crate) extra: Map<String, Value>,
}

impl Assignment {
    pub(crate) fn empty(node: &str) -> Self {
        Assignment {
            format: FORMAT,
            node: node.to_owned(),
            ..Assignment::default()
        }
    }

    pub(crate) fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }

    /// Decodes the record of `node` stored at `key`: anything malformed, of another format,
    /// of another node, or naming an invalid node or cell is [`ErrorKind::Corrupt`].
    pub(crate) fn decode(key: &Key, node: &str, bytes: &[u8]) -> Result<Self, Error> {
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
    pub(crate) fn post(&mut self, notices: &[Notice], oldest: u64) {
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

/// `fleet/nodes`: the folder of every assignment record (listed by the leader).
pub(crate) fn folder(fence: &Fence) -> Result<Key, Error> {
    let nodes = fence.ownership().nodes_prefix()?;
    let base = nodes.as_str().strip_suffix("nodes").unwrap_or("");
    Key::new(format!("{base}fleet/nodes"))
}

/// The key of `node`'s assignment record.
pub(crate) fn key(fence: &Fence, node: &str) -> Result<Key, Error> {
    fence_core::ownership::check_name("node", node)?;
    let hh = stable_hash(node.as_bytes()) >> 56;
    folder(fence)?.join(&format!("{hh:02x}/{node}.json"))
}

/// The node whose record `key` is (for keys listed under [`folder`]).
pub(crate) fn node_of(key: &Key) -> Option<&str> {
    let name = key.as_str().rsplit('/').next()?;
    let node = name.strip_suffix(".json")?;
    (!node.is_empty()).then_some(node)
}

/// Reads `node`'s record (`None`: there is none), bounded by `bound_ms`.
pub(crate) async fn read(
    fence: &Fence,
    node: &str,
    bound_ms: u64,
) -> Result<Option<(Assignment, Version)>, Error> {
    let key = key(fence, node)?;
    let get = fence.ownership().store().get(&key);
    let stored = match fence.clock().timeout(bound_ms, get).await {
        Some(r) => r?,
        None => return Err(no_answer(&key, bound_ms)),
    };
    let Some(stored) = stored else {
        return Ok(None);
    };
    let a = Assignment::decode(&key, node, &stored.body)?;
    Ok(Some((a, stored.version)))
}

fn no_answer(key: &Key, bound_ms: u64) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("{key}: no answer within {bound_ms} ms"),
    )
}

/// Changes `node`'s record by compare-and-swap: `change` edits the record read (an empty one
/// if there is none) and says whether it changed anything; nothing is written if not.
/// Retried when another writer came first. Returns the record as written (or as read, when
/// unchanged). A corrupt record is replaced by the edit of an empty one only when
/// `replace_corrupt` (the leader's and the node's own writes), so a peer's notice never
/// erases what it cannot read.
pub(crate) async fn edit(
    fence: &Fence,
    node: &str,
    bound_ms: u64,
    replace_corrupt: bool,
    change: impl Fn(&mut Assignment) -> bool,
) -> Result<Assignment, Error> {
    let key = key(fence, node)?;
    let store = fence.ownership().store();
    let mut last = None;
    for _ in 0..EDIT_ATTEMPTS {
        let stored = match fence.clock().timeout(bound_ms, store.get(&key)).await {
            Some(r) => r?,
            None => return Err(no_answer(&key, bound_ms)),
        };
        let (mut a, guard) = match stored {
            None => (Assignment::empty(node), CasGuard::Absent),
            Some(s) => match Assignment::decode(&key, node, &s.body) {
                Ok(a) => (a, CasGuard::Match(s.version)),
                Err(_) if replace_corrupt => (Assignment::empty(node), CasGuard::Match(s.version)),
                Err(e) => return Err(e),
            },
        };
        if !change(&mut a) {
            return Ok(a);
        }
        let put = store.put(&key, a.encode(), guard);
        match fence.clock().timeout(bound_ms, put).await {
            Some(Ok(PutOutcome::Applied(_))) => return Ok(a),
            Some(Ok(PutOutcome::Rejected)) => last = None,
            Some(Err(e)) => last = Some(e),
            None => last = Some(no_answer(&key, bound_ms)),
        }
    }
    Err(last.unwrap_or_else(|| {
        Error::new(
            ErrorKind::Conflict,
            format!("{key}: other writers kept changing it"),
        )
        .not_committed()
    }))
}

/// Posts `notices` to `node`'s record (one edit), dropping notices older than `oldest`.
pub(crate) async fn notify(
    fence: &Fence,
    node: &str,
    notices: Vec<Notice>,
    oldest: u64,
    bound_ms: u64,
) -> Result<(), Error> {
    let post = |a: &mut Assignment| {
        let before = a.notices.clone();
        a.post(&notices, oldest);
        a.notices != before
    };
    edit(fence, node, bound_ms, false, post).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

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
