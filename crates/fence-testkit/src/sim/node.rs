//! One simulated process of a node: the real runtime ([`Fence`], [`LeaseKeeper`],
//! [`CellClaim`]) doing random work, everything it observes recorded in the [`Log`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fence_core::decide::LeaseStatus;
use fence_core::{CellClaim, Clock, ErrorKind, Fence, LeaseKeeper};
use rand::rngs::SmallRng;
use rand::Rng;

use super::trace::{Event, Log};

/// What the driver may see of a process's current lease.
pub(crate) type KeeperSlot = Arc<Mutex<Option<Arc<LeaseKeeper>>>>;

/// Everything one process needs.
pub(crate) struct Process {
    pub(crate) node: String,
    pub(crate) fence: Fence,
    pub(crate) clock: Clock,
    pub(crate) log: Log,
    pub(crate) rng: SmallRng,
    pub(crate) cells: Vec<String>,
    pub(crate) ttl_ms: u64,
    pub(crate) slot: KeeperSlot,
}

/// Runs `f` for at most `ms` virtual milliseconds (an application's own deadline: some store
/// calls of the runtime have none, and a hung request must not stop the node forever).
pub(crate) async fn within<T>(ms: u64, f: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(Duration::from_millis(ms), f)
        .await
        .ok()
}

fn lock(slot: &KeeperSlot) -> std::sync::MutexGuard<'_, Option<Arc<LeaseKeeper>>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

impl Process {
    /// Acquires, works until the lease is lost, acquires again — until aborted.
    pub(crate) async fn run(mut self) {
        loop {
            let acquired = within(self.ttl_ms * 4, self.fence.acquire_wait(self.ttl(3))).await;
            let Some(Ok(keeper)) = acquired else {
                let pause = self.rng.gen_range(20..self.ttl_ms / 2);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                continue;
            };
            let keeper = Arc::new(keeper);
            *lock(&self.slot) = Some(keeper.clone());
            let graceful = self.work(&keeper).await;
            lock(&self.slot).take();
            if let (true, Ok(keeper)) = (graceful, Arc::try_unwrap(keeper)) {
                // Let a keeper woken at this same instant take its tick first: the runtime's
                // keeper picks between a tick and a release at random when both are ready.
                tokio::task::yield_now().await;
                let _ = within(self.ttl_ms, keeper.release()).await;
            }
        }
    }

    fn ttl(&self, n: u64) -> Duration {
        Duration::from_millis(self.ttl_ms * n)
    }

    /// Claims, writes and releases at random while the lease is held. Returns `true` when it
    /// chose to give the lease up (a graceful restart), `false` when the lease was lost.
    async fn work(&mut self, keeper: &LeaseKeeper) -> bool {
        let gen = keeper.generation();
        let mut claims: BTreeMap<String, CellClaim> = BTreeMap::new();
        let mut seq = 0u64;
        loop {
            let nap = self.rng.gen_range(10..self.ttl_ms / 3);
            tokio::time::sleep(Duration::from_millis(nap)).await;
            let mono = self.clock.mono_ms();
            if !keeper.is_held() {
                if keeper.status() != LeaseStatus::Held {
                    return false;
                }
                continue;
            }
            let (node, g) = (self.node.clone(), gen.clone());
            self.log.push(|t| Event::Held {
                t,
                node,
                gen: g,
                mono,
            });
            let cell = self.cells[self.rng.gen_range(0..self.cells.len())].clone();
            let roll = self.rng.gen_range(0..100);
            match claims.remove(&cell) {
                Some(_) if roll >= 99 => return true,
                Some(c) if roll >= 94 => {
                    let _ = within(self.ttl_ms, c.release()).await;
                }
                Some(c) => {
                    seq += 1;
                    if self.write(&c, &gen, seq).await {
                        claims.insert(cell, c);
                    }
                }
                None => {
                    if let Some(c) = self.claim(keeper, &cell, &gen).await {
                        claims.insert(cell, c);
                    }
                }
            }
        }
    }

    async fn claim(&self, keeper: &LeaseKeeper, cell: &str, gen: &str) -> Option<CellClaim> {
        let claim = within(self.ttl_ms, keeper.claim(cell)).await?.ok()?;
        let (epoch, node, gen) = (claim.epoch(), self.node.clone(), gen.to_owned());
        let cell = cell.to_owned();
        self.log.push(|t| Event::Claimed {
            t,
            cell,
            epoch,
            node,
            gen,
        });
        Some(claim)
    }

    /// One fenced write; `false` when the claim is over (fenced).
    async fn write(&self, claim: &CellClaim, gen: &str, seq: u64) -> bool {
        let payload = Bytes::from(format!("{}/{gen}/{seq}", self.node));
        let cell = claim.cell().to_owned();
        let (c, p) = (cell.clone(), payload.clone());
        self.log.push(|_| Event::Attempt {
            cell: c,
            payload: p,
        });
        match within(self.ttl_ms, claim.write(payload.clone())).await {
            Some(Ok(ack)) => {
                let (node, gen) = (self.node.clone(), gen.to_owned());
                self.log.push(|t| Event::Acked {
                    t,
                    cell,
                    epoch: ack.epoch,
                    node,
                    gen,
                    payload,
                });
                true
            }
            Some(Err(e)) => e.kind() != ErrorKind::Fenced,
            None => true,
        }
    }
}
