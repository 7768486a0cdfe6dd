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
//!   notice lifetime, and keep at most
//!   [`MAX_NOTICES`](crate::decide::record::MAX_NOTICES).
//!
//! Nothing here is a safety proof: a record may be stale or wrong, and every action taken on
//! it goes through the core's claims, whose epochs and observation rule are the fence.

use fence_core::runtime::Fence;
use fence_core::{CasGuard, Error, ErrorKind, Key, PutOutcome, Version};

use crate::assign::stable_hash;
pub(crate) use crate::decide::record::{Assignment, Notice, NoticeKind, Watched};

/// Compare-and-swap attempts of one edit before it gives up (another writer kept winning).
const EDIT_ATTEMPTS: usize = 4;

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
