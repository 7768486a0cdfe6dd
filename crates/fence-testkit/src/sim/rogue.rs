//! Rogue processes: what a broken decision core would do, driven by the simulation, so the
//! tests can check that the properties catch it. The runtime has no sabotage hooks, so a
//! rogue talks to the store through [`Ownership`] (and raw owner-record writes) directly.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use fence_core::decide::{decide_claim, ClaimDecision, LeaseConfig, OwnerView};
use fence_core::record::OwnerBody;
use fence_core::runtime::update_cell;
use fence_core::{
    CasGuard, Clock, LeaseCasOutcome, NodeLeaseRecord, Ownership, PutOutcome, Version,
};
use rand::rngs::SmallRng;
use rand::Rng;

use super::node::within;
use super::trace::{Event, Log};

/// A deliberately broken core, run as one extra node named `rogue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sabotage {
    /// Claims a cell owned by someone else **without raising the epoch** (an owner record at
    /// the current epoch, written raw with `Match`: `Ownership::put_owner` would refuse it),
    /// then writes data at that epoch with `update_cell`. Property (a) must catch it.
    SkipEpochBump,
    /// Renews its lease with `Match(its version)` and anchors its authority when the answer
    /// *arrives*, never asking whether the answer came after its authority had ended; keeps
    /// claiming and writing as long as its last renewal applied. The driver stalls its path
    /// for longer than a TTL. Property (d) must catch it.
    NoFenceAfterExpiry,
}

/// The rogue node's id.
pub const ROGUE: &str = "rogue";
const ROGUE_GEN: &str = "rogue-gen";

pub(crate) struct Rogue {
    pub(crate) own: Ownership,
    pub(crate) clock: Clock,
    pub(crate) log: Log,
    pub(crate) rng: SmallRng,
    pub(crate) cells: Vec<String>,
    pub(crate) cfg: LeaseConfig,
    pub(crate) claims: BTreeMap<String, u64>,
    pub(crate) seq: u64,
}

impl Rogue {
    pub(crate) async fn run(self, sabotage: Sabotage) {
        match sabotage {
            Sabotage::SkipEpochBump => self.skip_epoch_bump().await,
            Sabotage::NoFenceAfterExpiry => self.no_fence_after_expiry().await,
        }
    }

    fn ttl(&self) -> u64 {
        self.cfg.ttl_ms
    }

    fn pick_cell(&mut self) -> String {
        self.cells[self.rng.gen_range(0..self.cells.len())].clone()
    }

    async fn nap(&mut self, max: u64) {
        let ms = self.rng.gen_range(10..max.max(11));
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    fn claimed(&self, cell: &str, epoch: u64) {
        let cell = cell.to_owned();
        self.log.push(|t| Event::Claimed {
            t,
            cell,
            epoch,
            node: ROGUE.into(),
            gen: ROGUE_GEN.into(),
        });
    }

    /// A fenced write at `epoch` through `update_cell`; `false` once fenced.
    async fn write(&mut self, cell: &str, epoch: u64) -> bool {
        self.seq += 1;
        let payload = Bytes::from(format!("{ROGUE}/{ROGUE_GEN}/{}", self.seq));
        let (c, p) = (cell.to_owned(), payload.clone());
        self.log.push(|_| Event::Attempt {
            cell: c,
            payload: p,
        });
        let write = update_cell(&self.own, cell, epoch, |_| payload.clone());
        match within(self.ttl(), write).await {
            Some(Ok(ack)) => {
                let cell = cell.to_owned();
                self.log.push(|t| Event::Acked {
                    t,
                    cell,
                    epoch: ack.epoch,
                    node: ROGUE.into(),
                    gen: ROGUE_GEN.into(),
                    payload,
                });
                true
            }
            Some(Err(_)) => false,
            None => true,
        }
    }

    async fn skip_epoch_bump(mut self) {
        loop {
            self.nap(self.ttl() / 3).await;
            let cell = self.pick_cell();
            if let Some(&epoch) = self.claims.get(&cell) {
                if !self.write(&cell, epoch).await {
                    self.claims.remove(&cell);
                }
                continue;
            }
            if let Some(epoch) = self.steal_at_same_epoch(&cell).await {
                self.claimed(&cell, epoch);
                self.claims.insert(cell, epoch);
            }
        }
    }

    /// Overwrites another node's owner record with ours at the **same** epoch.
    async fn steal_at_same_epoch(&self, cell: &str) -> Option<u64> {
        let (body, version) = within(self.ttl(), self.own.read_owner_body(cell))
            .await?
            .ok()??;
        if body.node.is_none() || body.node.as_deref() == Some(ROGUE) {
            return None;
        }
        let stolen = OwnerBody {
            node: Some(ROGUE.into()),
            epoch: body.epoch,
            nonce: self.own.fresh_nonce(),
            extra: body.extra,
        };
        let key = self.own.owner_key(cell).ok()?;
        let put = self
            .own
            .store()
            .put(&key, stolen.encode(), CasGuard::Match(version));
        match within(self.ttl(), put).await? {
            Ok(PutOutcome::Applied(_)) => Some(body.epoch),
            _ => None,
        }
    }

    async fn no_fence_after_expiry(mut self) {
        let mut lease: Option<Version> = None;
        let mut renew_at = 0;
        loop {
            self.nap(self.ttl() / 4).await;
            if lease.is_none() || self.clock.mono_ms() >= renew_at {
                if let Some(applied) = self.renew(lease.clone()).await {
                    lease = applied;
                    // The flaw: authority anchored when the answer arrived, however late.
                    renew_at = self.clock.mono_ms() + self.ttl() / 3;
                }
                continue;
            }
            let mono = self.clock.mono_ms();
            self.log.push(|t| Event::Held {
                t,
                node: ROGUE.into(),
                gen: ROGUE_GEN.into(),
                mono,
            });
            self.act_as_owner().await;
        }
    }

    /// One lease write: `Some(Some(v))` applied, `Some(None)` rejected, `None` no verdict.
    async fn renew(&self, held: Option<Version>) -> Option<Option<Version>> {
        let guard = match held {
            Some(v) => CasGuard::Match(v),
            None => match within(self.ttl(), self.own.read_node_lease(ROGUE))
                .await?
                .ok()?
            {
                Some(l) => CasGuard::Match(l.etag),
                None => CasGuard::Absent,
            },
        };
        let record = NodeLeaseRecord {
            node: ROGUE.into(),
            expires_ms: self.clock.wall_ms() + self.ttl(),
            addr: String::new(),
            peer_protocol: 1,
            generation: ROGUE_GEN.into(),
        };
        // No attempt bound either: it waits for the answer however long it takes.
        match within(self.ttl() * 20, self.own.cas_node_lease(guard, &record)).await? {
            Ok(LeaseCasOutcome::Applied { etag }) => Some(Some(etag)),
            Ok(LeaseCasOutcome::Rejected) => Some(None),
            Err(_) => None,
        }
    }

    async fn act_as_owner(&mut self) {
        let cell = self.pick_cell();
        if let Some(&epoch) = self.claims.get(&cell) {
            if !self.write(&cell, epoch).await {
                self.claims.remove(&cell);
            }
            return;
        }
        if let Some(epoch) = self.claim(&cell).await {
            self.claimed(&cell, epoch);
            self.claims.insert(cell, epoch);
        }
    }

    /// A claim by the ordinary rule (epoch + 1, takeover of expired owners).
    async fn claim(&self, cell: &str) -> Option<u64> {
        let owner = within(self.ttl(), self.own.read_owner_body(cell))
            .await?
            .ok()?
            .map(|(b, v)| OwnerView {
                node: b.node,
                epoch: b.epoch,
                version: v,
            });
        let foreign = owner.as_ref().and_then(|o| o.node.clone());
        let expires = match foreign.filter(|n| n != ROGUE) {
            Some(n) => within(self.ttl(), self.own.read_node_lease(&n))
                .await?
                .ok()?
                .map(|l| l.record.expires_ms),
            None => None,
        };
        let wall = self.clock.wall_ms();
        let ClaimDecision::Claim { guard, epoch, .. } =
            decide_claim(ROGUE, owner.as_ref(), expires, wall, &self.cfg)
        else {
            return None;
        };
        let nonce = self.own.fresh_nonce();
        let put = self.own.put_owner(cell, guard, Some(ROGUE), epoch, &nonce);
        match within(self.ttl(), put).await? {
            Ok(PutOutcome::Applied(_)) => Some(epoch),
            _ => None,
        }
    }
}
