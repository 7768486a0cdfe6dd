//! `fence break`: an operator releases a lease whose holder they know is dead, as
//! `consul kv delete` or `etcdctl del` would — without waiting for a takeover.
//!
//! What it writes, each by compare-and-swap on the version last read, so nothing written
//! in between is overwritten (a renewal of the lease, or a new claim of the cell, makes it
//! stop; a write of the cell at the same epoch is kept and released with it):
//!
//! 1. the node lease `run.NAME` (a `fence run`'s) as *released* (`expires_ms: 0`): a live
//!    holder's next renewal is rejected, so it fences itself and ends its command;
//! 2. the cell `NAME` as released (no owner, the same epoch and data), whoever owns it: a
//!    `fence put` of that epoch is refused from then on, and the next claim takes epoch + 1.
//!
//! The node lease of another owner (a library process, which may hold other cells) is never
//! touched. A holder whose lease record has not expired by this machine's clock looks alive:
//! breaking it needs `--force`.

use std::sync::Arc;

use fence_core::record::LeaseBody;
use fence_core::{CasGuard, CasOutcome, ConditionalStore, Ownership, PutOutcome, Version};

use crate::exit::{shown, Failure, BUSY, NOT_FOUND};
use crate::names::node_of;
use crate::take::expiry_words;

/// What `fence break` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The node lease released, with the holder's address (`None`: none to release).
    pub lease: Option<String>,
    /// The cell released: its owner and epoch (`None`: not owned).
    pub cell: Option<(String, u64)>,
}

impl Broken {
    /// One line for the operator's log.
    pub fn describe(&self, name: &str) -> String {
        let lease = match &self.lease {
            Some(addr) => format!(
                "released node lease {} (held by {addr})",
                shown(&node_of(name))
            ),
            None => "no live node lease to release".to_owned(),
        };
        let cell = match &self.cell {
            Some((owner, epoch)) => format!(
                "released the cell at epoch {epoch} (owner {}): writes of epoch {epoch} are refused, the next claim takes epoch {}",
                shown(owner),
                epoch.saturating_add(1)
            ),
            None => "the cell was not owned".to_owned(),
        };
        format!("broke lease {}: {lease}; {cell}", shown(name))
    }
}

/// A lease record read from the store.
struct Record {
    body: LeaseBody,
    version: Version,
}

impl Record {
    /// "pid:…@… (its lease runs 3.2s more)" — and whether that is in the future.
    fn judged(&self, now_ms: u64) -> (String, bool) {
        let addr = match self.body.record.addr.as_str() {
            "" => shown(&self.body.record.node),
            a => shown(a),
        };
        let (when, live) = expiry_words(self.body.record.expires_ms, now_ms);
        (format!("{addr} ({when})"), live)
    }
}

/// Breaks lease `name` (see the module docs); `now_ms` is this machine's wall clock.
///
/// Errors: exit 3 if the store knows no such lease; exit 75 if the holder looks alive and
/// `force` is not set, or if it renewed or wrote while being broken (it is alive: look
/// again); exit 69 for store failures.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use fence_core::{CasGuard, ConditionalStore, MemoryStore, Ownership};
/// let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
/// // A seed record: owned by a node that left no lease record.
/// Ownership::new(store.clone(), "node_gone").cas_owner("billing", CasGuard::Absent, 7).await.unwrap();
/// let broken = fence_cli::breaking::break_lease(&store, "billing", false, fence_core::now_ms()).await.unwrap();
/// assert_eq!(broken.cell, Some(("node_gone".to_owned(), 7)));
/// # });
/// ```
pub async fn break_lease(
    store: &Arc<dyn ConditionalStore>,
    name: &str,
    force: bool,
    now_ms: u64,
) -> Result<Broken, Failure> {
    let run_node = node_of(name);
    let own = Ownership::new(store.clone(), run_node.clone());
    let head = own.read_owner(name).await?;
    let owner = head.as_ref().and_then(|h| h.node.clone());
    let lease = read_lease(&own, &run_node).await?;
    if head.is_none() && lease.is_none() {
        return Err(Failure::new(NOT_FOUND, format!("no lease {}", shown(name))));
    }
    let foreign = match owner.as_deref() {
        Some(o) if o != run_node => read_lease(&own, o).await?,
        _ => None,
    };
    let live: Vec<String> = [&lease, &foreign]
        .into_iter()
        .flatten()
        .filter(|r| !r.body.record.is_released())
        .map(|r| r.judged(now_ms))
        .filter_map(|(words, live)| live.then_some(words))
        .collect();
    if !live.is_empty() && !force {
        return Err(Failure::new(
            BUSY,
            format!(
                "lease {} looks alive: held by {}; if you know its holder is dead, break it with --force",
                shown(name),
                live.join(", ")
            ),
        ));
    }
    let released_lease = match lease.filter(|r| !r.body.record.is_released()) {
        Some(r) => Some(release_record(&own, r, now_ms).await?),
        None => None,
    };
    let cell = match (owner, head) {
        (Some(owner), Some(h)) => Some(release_cell(store, name, owner, h.epoch).await?),
        _ => None,
    };
    Ok(Broken {
        lease: released_lease,
        cell,
    })
}

async fn read_lease(own: &Ownership, node: &str) -> Result<Option<Record>, Failure> {
    Ok(own
        .read_lease_body(node)
        .await?
        .map(|(body, version)| Record { body, version }))
}

/// Writes `record` released, guarded on its version; returns the holder's address.
async fn release_record(own: &Ownership, record: Record, now_ms: u64) -> Result<String, Failure> {
    let (words, _) = record.judged(now_ms);
    let mut body = record.body;
    body.record.expires_ms = 0;
    body.nonce = own.fresh_nonce();
    match own
        .put_lease_body(CasGuard::Match(record.version), &body)
        .await?
    {
        PutOutcome::Applied(_) => Ok(words),
        PutOutcome::Rejected => Err(changed(&body.record.node)),
    }
}

/// Releases the cell as its owner would: no owner, the same epoch and data.
async fn release_cell(
    store: &Arc<dyn ConditionalStore>,
    name: &str,
    owner: String,
    epoch: u64,
) -> Result<(String, u64), Failure> {
    let as_owner = Ownership::new(store.clone(), owner.clone());
    match as_owner.release_owner(name, epoch).await? {
        CasOutcome::Applied => Ok((owner, epoch)),
        CasOutcome::Rejected => Err(changed(name)),
    }
}

fn changed(what: &str) -> Failure {
    Failure::new(
        BUSY,
        format!(
            "{} changed while it was being broken: its holder is alive; look again (fence status)",
            shown(what)
        ),
    )
}
