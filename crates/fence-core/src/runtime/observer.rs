//! What this node has seen of other nodes' leases: one read shared by every cell of a node
//! within a short age, and the observation clock that decides takeovers.
//!
//! A first sighting can outlive the process: [`Observer::export`] gives it in host-clock
//! terms ([`HostSighting`]), and [`Observer::import`] lets a later process of the same host
//! continue the watch, so a run that never stays a TTL (a cron job) still takes over a
//! dead holder on its next run (see docs/design.md, "The observation rule").

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{bounded, Fence};
use crate::clock::{Clock, HostInstant};
use crate::decide::{Liveness, Observation, ObservedLease};
use crate::error::Error;
use crate::record::NodeLeaseRecord;
use crate::store::Version;

/// The most nodes whose leases one fence remembers; the least recently read is forgotten
/// first (forgetting only restarts its observation clock: slower, never unsafe).
const MAX_NODES: usize = 4_096;

/// Observations of foreign leases, per node.
#[derive(Debug, Default)]
pub struct Observer {
    seen: Mutex<HashMap<String, Observation>>,
    /// One read of a node's lease at a time: claims that need the same verdict wait for the
    /// read in flight instead of sending their own.
    reading: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Observer {
    /// Remembers nothing yet.
    pub fn new() -> Self {
        Observer::default()
    }

    fn seen(&self) -> MutexGuard<'_, HashMap<String, Observation>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last observation of `node`'s lease, if any.
    pub fn last(&self, node: &str) -> Option<Observation> {
        self.seen().get(node).cloned()
    }

    pub(crate) fn remember(&self, node: &str, observation: Observation) {
        let mut seen = self.seen();
        Self::make_room(&mut seen, node);
        seen.insert(node.to_owned(), observation);
    }

    pub(crate) fn forget(&self, node: &str) {
        self.seen().remove(node);
    }

    fn make_room(seen: &mut HashMap<String, Observation>, node: &str) {
        if seen.len() >= MAX_NODES && !seen.contains_key(node) {
            let oldest = seen
                .iter()
                .min_by_key(|(_, o)| o.read_mono)
                .map(|(n, _)| n.clone());
            if let Some(n) = oldest {
                seen.remove(&n);
            }
        }
    }

    /// The first sighting of `node`'s current lease state, on the host clock (rounded so it
    /// is never earlier than it was), for a later process of this host; `None` if nothing is
    /// remembered or `clock` has no host clock ([`Clock::host_instant_of`]). Only the first
    /// sighting is carried: the later process must still send its own confirming read a
    /// full hold after it.
    pub fn export(&self, clock: &Clock, node: &str) -> Option<HostSighting> {
        let seen = self.last(node)?;
        Some(HostSighting {
            state: seen.lease.as_ref().map(|l| SightedState {
                version: l.version.clone(),
                nonce: l.nonce.clone(),
            }),
            first_seen: clock.host_instant_of(seen.first_seen_mono)?,
        })
    }

    /// Continues the watch of `node`'s lease that another process of this host began: its
    /// first sighting counts as ours if the state is the one we remember (or we remember
    /// nothing yet), and only ever moves the first sighting *earlier* for the same state.
    /// It is placed on `clock` never earlier than it was ([`Clock::mono_of_host`]); a
    /// sighting of another boot, from the future or before `clock` can place it is ignored.
    /// Nothing of the record is taken from it: until our own read returns the same state,
    /// the node counts as live (released or stale only by a record we read). Returns whether
    /// it was taken.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// use fence_core::{Clock, runtime::Observer};
    /// let clock = Clock::host();
    /// let theirs = Observer::new();
    /// // (a process that read "peer"'s lease would have an observation to export)
    /// assert!(theirs.export(&clock, "peer").is_none());
    /// # });
    /// ```
    pub fn import(&self, clock: &Clock, node: &str, sighting: &HostSighting) -> bool {
        let Some(first_seen) = clock.mono_of_host(&sighting.first_seen) else {
            return false;
        };
        let mut seen = self.seen();
        match seen.get_mut(node) {
            Some(o) if sighting.matches(o.lease.as_ref()) && first_seen < o.first_seen_mono => {
                o.first_seen_mono = first_seen;
                true
            }
            Some(_) => false,
            None => {
                Self::make_room(&mut seen, node);
                let observation = Observation {
                    lease: sighting.state.as_ref().map(|s| s.placeholder(node)),
                    first_seen_mono: first_seen,
                    read_mono: first_seen,
                };
                seen.insert(node.to_owned(), observation);
                true
            }
        }
    }

    /// Nodes remembered.
    pub fn len(&self) -> usize {
        self.seen().len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads `node`'s lease (bounded by `timeout_ms`) and folds it into the observation.
    pub async fn observe(
        &self,
        fence: &Fence,
        node: &str,
        timeout_ms: u64,
    ) -> Result<Observation, Error> {
        let sent = fence.clock.mono_ms();
        let read = bounded(
            &fence.clock,
            timeout_ms,
            fence.ownership.read_node_lease(node),
        )
        .await?;
        // The clock starts when the read *returned* (the record landed before that); a
        // confirmation counts from when it was sent (a renewal may land while it travels).
        let returned = fence.clock.mono_ms();
        let lease = read.map(|l| ObservedLease {
            record: l.record,
            version: l.etag,
            nonce: l.nonce,
            ttl_ms: l.ttl_ms,
        });
        let mut seen = self.seen();
        let next = Observation::update_with(seen.get(node), lease, sent, returned, fence.flaws);
        Self::make_room(&mut seen, node);
        seen.insert(node.to_owned(), next.clone());
        Ok(next)
    }

    /// Our verdict on `node`'s lease now: from an observation read at most
    /// [`poll_ms`](crate::decide::LeaseConfig::poll_ms) ago that already settles it, else
    /// after one more read (a live verdict whose full TTL has passed needs a confirming
    /// read). A
    /// head written by a process generation other than the one observed (`writer`) is never
    /// judged from memory: a newer process of the node may have acquired meanwhile.
    pub async fn liveness(
        &self,
        fence: &Fence,
        node: &str,
        writer: Option<&str>,
        timeout_ms: u64,
    ) -> Result<Liveness, Error> {
        if let Some(verdict) = self.settled(fence, node, writer) {
            return Ok(verdict);
        }
        let gate = self.gate(node);
        let turn = gate.lock().await;
        // Whoever read while we waited may have settled it.
        let verdict = match self.settled(fence, node, writer) {
            Some(v) => Ok(v),
            None => self
                .observe(fence, node, timeout_ms)
                .await
                .map(|o| o.judge(fence.now(), &fence.cfg)),
        };
        drop(turn);
        self.release_gate(node, gate);
        verdict
    }

    /// The verdict from memory, if an observation read at most `poll_ms` ago settles it now
    /// ([`Observation::from_memory`]).
    fn settled(&self, fence: &Fence, node: &str, writer: Option<&str>) -> Option<Liveness> {
        self.last(node)?
            .from_memory(fence.now(), &fence.cfg, writer)
    }

    fn gate(&self, node: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        reading.entry(node.to_owned()).or_default().clone()
    }

    fn release_gate(&self, node: &str, gate: Arc<tokio::sync::Mutex<()>>) {
        let mut reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        // Ours and the map's are the last two references: nobody else waits.
        if Arc::strong_count(&gate) <= 2 {
            reading.remove(node);
        }
    }
}

/// A first sighting of a node's lease state, on the host clock: what one process of a host
/// hands to a later one ([`Observer::export`], [`Observer::import`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSighting {
    /// The lease record's state: `None` when there was no record.
    pub state: Option<SightedState>,
    /// When a read first returned that state (never earlier than it did).
    pub first_seen: HostInstant,
}

/// A lease record's identity: its version and write nonce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SightedState {
    /// The store's version of the record.
    pub version: Version,
    /// The record's write nonce (`""` for a seed record).
    pub nonce: String,
}

impl HostSighting {
    fn matches(&self, lease: Option<&ObservedLease>) -> bool {
        match (&self.state, lease) {
            (None, None) => true,
            (Some(s), Some(l)) => s.version == l.version && s.nonce == l.nonce,
            _ => false,
        }
    }
}

impl SightedState {
    /// A record of this identity that judges as live until a read of ours replaces it:
    /// never released, never stale, written by no generation a head names.
    fn placeholder(&self, node: &str) -> ObservedLease {
        ObservedLease {
            record: NodeLeaseRecord {
                node: node.to_owned(),
                expires_ms: u64::MAX,
                addr: String::new(),
                peer_protocol: 1,
                generation: String::new(),
            },
            version: self.version.clone(),
            nonce: self.nonce.clone(),
            ttl_ms: None,
        }
    }
}
