//! The fleet's leader, as I/O: the one node holding the leadership cell ([`LEADER_CELL`])
//! performs the effects of its [`LeaderCore`](crate::decide::LeaderCore) — listing the
//! assignment records, reading records and leases, and writing each member's part under
//! its term. What to read and write is the core's.

use std::sync::Arc;

use fence_core::decide::ObservedLease;
use fence_core::runtime::{CellClaim, Fence};
use fence_core::Error;
use futures::StreamExt;
use tracing::debug;

use crate::assignment::{self, Assignment};
use crate::decide::{LeadEffect, LeadInput, Part};
use crate::fleet::MemberFilter;

/// The cell whose holder leads the fleet. Not a name a fleet's cells may use.
pub const LEADER_CELL: &str = "fence-fleet.leader";

/// Requests in flight at once for the leader's reads and writes of records and leases.
const IN_FLIGHT: usize = 32;

/// What the leader's effects need: the store, the membership filter, the bound of one
/// request, and the leadership's claim (a deposed leader writes nothing more).
pub(crate) struct LeaderIo<'a> {
    pub(crate) fence: &'a Fence,
    pub(crate) filter: Option<&'a MemberFilter>,
    pub(crate) bound_ms: u64,
    pub(crate) claim: Option<&'a Arc<CellClaim>>,
}

impl LeaderIo<'_> {
    fn me(&self) -> &str {
        self.fence.ownership().node()
    }

    fn member(&self, node: &str) -> bool {
        node == self.me() || self.filter.is_none_or(|f| f(node))
    }

    /// Performs `effect`; its answer.
    pub(crate) async fn perform(&self, effect: LeadEffect) -> LeadInput {
        match effect {
            LeadEffect::List => LeadInput::Listed(self.list().await.ok()),
            LeadEffect::ReadRecords(nodes) => LeadInput::Records(self.records(nodes).await),
            LeadEffect::ReadLeases(nodes) => self.leases(nodes).await,
            LeadEffect::Publish { term, parts } => {
                LeadInput::Published(self.publish(term, parts).await)
            }
        }
    }

    /// The ids of the assignment records, filtered: one listing.
    async fn list(&self) -> Result<Vec<String>, Error> {
        let folder = assignment::folder(self.fence)?;
        let store = self.fence.ownership().store();
        let listed = self
            .fence
            .clock()
            .timeout(self.bound_ms, store.list(Some(&folder)));
        let keys = listed.await.ok_or_else(|| {
            Error::new(fence_core::ErrorKind::Timeout, "listing assignment records").not_committed()
        })??;
        let mut ids: Vec<String> = keys
            .iter()
            .filter_map(assignment::node_of)
            .filter(|n| fence_core::ownership::check_name("node", n).is_ok())
            .filter(|n| self.member(n))
            .map(str::to_owned)
            .collect();
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    async fn records(&self, nodes: Vec<String>) -> Vec<(String, Option<Assignment>)> {
        let (fence, bound) = (self.fence, self.bound_ms);
        futures::stream::iter(nodes)
            .map(|n| async move {
                let a = assignment::read(fence, &n, bound).await;
                (n, a.ok().flatten().map(|(a, _)| a))
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await
    }

    /// Reads each lease (a node the filter refuses counts as a failed read).
    async fn leases(&self, nodes: Vec<String>) -> LeadInput {
        let (fence, bound) = (self.fence, self.bound_ms);
        let sent_mono = fence.clock().mono_ms();
        let reads = futures::stream::iter(nodes)
            .map(|n| async move {
                if !self.member(&n) {
                    return (n, None);
                }
                let read = fence.ownership().read_node_lease(&n);
                let r = fence.clock().timeout(bound, read).await;
                let lease = match r {
                    Some(Ok(lease)) => Some(lease.map(|l| ObservedLease {
                        record: l.record,
                        version: l.etag,
                        nonce: l.nonce,
                        ttl_ms: l.ttl_ms,
                    })),
                    _ => None,
                };
                (n, lease)
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        LeadInput::Leases { sent_mono, reads }
    }

    /// Writes every part under `term`, keeping what others wrote; whether each landed.
    async fn publish(&self, term: u64, parts: Vec<(String, Part)>) -> Vec<(String, bool)> {
        let held = |c: Option<&&Arc<CellClaim>>| c.is_some_and(|c| c.is_held());
        if !held(self.claim.as_ref()) {
            return parts.into_iter().map(|(n, _)| (n, false)).collect();
        }
        let (fence, me, bound, claim) = (self.fence, self.me(), self.bound_ms, self.claim);
        futures::stream::iter(parts)
            .map(|(n, part)| async move {
                let write = |a: &mut Assignment| {
                    // A deposed leader writes nothing more (as far as it can tell: a write of
                    // one that was paused right here may land, and is a stale hint until
                    // the next leader's audit rewrites it).
                    if !held(claim.as_ref()) {
                        return false;
                    }
                    let before = (a.term, a.leader.clone(), Part::of(a));
                    a.term = term;
                    a.leader = me.to_owned();
                    a.cells = part.cells.clone();
                    a.heirs = part.heirs.clone();
                    a.moves = part.moves.clone();
                    a.watch = part.watch.clone();
                    before != (a.term, a.leader.clone(), Part::of(a))
                };
                let r = assignment::edit(fence, &n, bound, true, write).await;
                if let Err(e) = &r {
                    debug!(node = n, error = %e, "leader: record not written; retried");
                }
                (n, r.is_ok())
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await
    }
}
