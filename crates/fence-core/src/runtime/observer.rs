//! What this node has seen of other nodes' leases: one read shared by every cell of a node
//! within a short age, and the observation clock that decides takeovers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{bounded, Fence};
use crate::decide::{Liveness, Observation, ObservedLease};
use crate::error::Error;

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

    /// The verdict from memory, if an observation read at most `poll_ms` ago settles it now.
    fn settled(&self, fence: &Fence, node: &str, writer: Option<&str>) -> Option<Liveness> {
        let now = fence.now();
        let o = self.last(node)?;
        let same_writer = match (writer, &o.lease) {
            (Some(w), Some(l)) => l.record.generation == w,
            _ => true,
        };
        if !same_writer || now.mono_ms.saturating_sub(o.read_mono) > fence.cfg.poll_ms() {
            return None;
        }
        match o.judge(now, &fence.cfg) {
            // A full TTL has passed: only a read sent from now on can confirm it.
            Liveness::Live { until_mono } if until_mono <= now.mono_ms => None,
            verdict => Some(verdict),
        }
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
