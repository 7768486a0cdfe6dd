//! One simulated process of a node: the real runtime ([`Fence`], [`LeaseKeeper`],
//! [`CellClaim`]) doing random work, everything it observes recorded in the [`Log`].

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fence_core::{CellClaim, Clock, ErrorKind, Fence, LeaseKeeper, LeaseStatus};
use rand::rngs::SmallRng;
use rand::Rng;

use super::trace::{Event, Log};

/// What the driver may see of a process's current lease.
pub(crate) type KeeperSlot = Arc<Mutex<Option<Arc<LeaseKeeper>>>>;

/// Everything one process needs.
pub(crate) struct Process {
    pub(crate) node: String,
    /// `node#incarnation`.
    pub(crate) process: String,
    pub(crate) fence: Fence,
    pub(crate) clock: Clock,
    pub(crate) log: Log,
    pub(crate) rng: SmallRng,
    pub(crate) cells: Vec<String>,
    pub(crate) ttl_ms: u64,
    pub(crate) slot: KeeperSlot,
    /// Payloads of this size or more go to payload objects; some writes are made this large.
    pub(crate) large: usize,
    /// The lease generation of this node's crashed previous process, when the driver hands
    /// it over (the new process then acquires as its successor, at once).
    pub(crate) predecessor: Option<String>,
}

/// Runs `f` for at most `ms` virtual milliseconds (an application's own deadline).
pub(crate) async fn within<T>(ms: u64, f: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(Duration::from_millis(ms), f)
        .await
        .ok()
}

fn lock(slot: &KeeperSlot) -> std::sync::MutexGuard<'_, Option<Arc<LeaseKeeper>>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// What happened to one write.
enum Wrote {
    Acked,
    /// The claim is over (fenced).
    Lost,
    /// No verdict (an error that may or may not have landed, or our own deadline).
    Unknown,
}

impl Process {
    /// Acquires, works until the lease is lost, acquires again — until aborted.
    pub(crate) async fn run(mut self) {
        loop {
            let acquired = within(self.ttl_ms * 4, self.acquire()).await;
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
                let _ = within(self.ttl_ms, keeper.release()).await;
            }
        }
    }

    fn ttl(&self, n: u64) -> Duration {
        Duration::from_millis(self.ttl_ms * n)
    }

    /// As the successor of a crashed predecessor (once), by waiting, or by plain retries.
    async fn acquire(&mut self) -> Result<LeaseKeeper, fence_core::Error> {
        if let Some(p) = self.predecessor.take() {
            return self.fence.acquire_succeeding(&p).await;
        }
        if self.rng.gen_bool(0.5) {
            return self.fence.acquire_wait(self.ttl(3)).await;
        }
        loop {
            match self.fence.acquire().await {
                Err(e) if e.kind() == ErrorKind::Busy => {
                    let poll = Duration::from_millis(self.ttl_ms / 10);
                    self.clock.sleep(poll).await;
                }
                other => return other,
            }
        }
    }

    /// Claims, writes and releases at random while the lease is held. Returns `true` when it
    /// chose to give the lease up (a graceful restart), `false` when the lease was lost.
    async fn work(&mut self, keeper: &LeaseKeeper) -> bool {
        let gen = keeper.generation();
        let mut claims: BTreeMap<String, CellClaim> = BTreeMap::new();
        // Cells another live node held when we tried: polled until we get them, as a
        // fleet member waiting for a dead node's cells would.
        let mut wanted: BTreeSet<String> = BTreeSet::new();
        let mut seq = 0u64;
        loop {
            let pace = if wanted.is_empty() { 3 } else { 10 };
            let nap = self.rng.gen_range(10..self.ttl_ms / pace);
            self.clock.sleep(Duration::from_millis(nap)).await;
            let mono = self.clock.mono_ms();
            if !keeper.is_held() {
                // The keeper's published status, not the judged-now one: an application that
                // keeps asking `is_held()` acts again as soon as the keeper installs a renewal.
                let status = keeper.watch().borrow().clone();
                if status != LeaseStatus::Held {
                    let (node, g, status) = (self.node.clone(), gen.clone(), status.to_string());
                    self.log.push(|t| Event::LeaseLost {
                        t,
                        node,
                        gen: g,
                        status,
                    });
                    // A deposed owner's late writes: the core must refuse or the store reject.
                    for claim in claims.values() {
                        seq += 1;
                        self.write(claim, &gen, seq).await;
                    }
                    return false;
                }
                continue;
            }
            self.believe(keeper, &gen, mono, &claims);
            // Every process competes for every cell it does not hold.
            wanted.extend(
                self.cells
                    .iter()
                    .filter(|c| !claims.contains_key(*c))
                    .cloned(),
            );
            let batch: Vec<String> = std::mem::take(&mut wanted).into_iter().collect();
            let got = within(self.ttl_ms, keeper.claim_many(batch.clone(), 2)).await;
            for (cell, result) in got.unwrap_or_default() {
                match self.claimed(cell.clone(), result, &gen) {
                    Ok(c) => {
                        claims.insert(cell, c);
                    }
                    Err(true) => {
                        wanted.insert(cell);
                    }
                    Err(false) => {}
                }
            }
            let cell = self.cells[self.rng.gen_range(0..self.cells.len())].clone();
            let roll = self.rng.gen_range(0..100);
            if roll < 2 {
                self.read(&cell).await;
            }
            match claims.remove(&cell) {
                Some(_) if roll >= 99 => return true,
                Some(c) if roll >= 94 => {
                    let _ = within(self.ttl_ms, c.release()).await;
                }
                Some(c) if roll >= 92 => {
                    let _ = within(self.ttl_ms, c.collect_garbage()).await;
                    claims.insert(cell, c);
                }
                Some(c) if roll >= 86 => {
                    // A child handed the epoch (`fence put`) writes beside the claim.
                    seq += 2;
                    let (a, _) = tokio::join!(
                        self.write(&c, &gen, seq - 1),
                        self.co_write(&c, &gen, seq, mono)
                    );
                    if !matches!(a, Wrote::Lost) {
                        claims.insert(cell, c);
                    }
                }
                Some(c) if roll >= 80 => {
                    seq += 2;
                    let (a, b) =
                        tokio::join!(self.write(&c, &gen, seq - 1), self.write(&c, &gen, seq));
                    if !matches!((a, b), (Wrote::Lost, _) | (_, Wrote::Lost)) {
                        claims.insert(cell, c);
                    }
                }
                Some(c) => {
                    seq += 1;
                    if !matches!(self.write(&c, &gen, seq).await, Wrote::Lost) {
                        claims.insert(cell, c);
                    }
                }
                None => match self.claim(keeper, &cell, &gen).await {
                    Ok(c) => {
                        claims.insert(cell, c);
                    }
                    Err(busy) => {
                        if busy {
                            wanted.insert(cell);
                        }
                    }
                },
            }
        }
    }

    /// Records that the process believes it holds each of its claims now.
    fn believe(
        &self,
        keeper: &LeaseKeeper,
        gen: &str,
        mono: u64,
        claims: &BTreeMap<String, CellClaim>,
    ) {
        let (node, g) = (self.node.clone(), gen.to_owned());
        self.log.push(|t| Event::Held {
            t,
            node,
            gen: g,
            mono,
        });
        if !keeper.is_held() {
            return;
        }
        for (cell, claim) in claims {
            let (cell, node, gen, epoch) = (
                cell.clone(),
                self.node.clone(),
                gen.to_owned(),
                claim.epoch(),
            );
            let process = self.process.clone();
            self.log.push(|t| Event::Believes {
                t,
                cell,
                epoch,
                node,
                gen,
                process,
            });
        }
    }

    /// Claims `cell`; `Err(true)` when another node has it (worth waiting for).
    async fn claim(&self, keeper: &LeaseKeeper, cell: &str, gen: &str) -> Result<CellClaim, bool> {
        match within(self.ttl_ms, keeper.claim(cell)).await {
            Some(result) => self.claimed(cell.to_owned(), result, gen),
            None => Err(false),
        }
    }

    /// Records a claim that returned; `Err(true)` when another node has the cell.
    fn claimed(
        &self,
        cell: String,
        result: Result<CellClaim, fence_core::Error>,
        gen: &str,
    ) -> Result<CellClaim, bool> {
        let claim = match result {
            Ok(c) => c,
            Err(e) => return Err(e.kind() == ErrorKind::Busy),
        };
        let (epoch, node, gen) = (claim.epoch(), self.node.clone(), gen.to_owned());
        self.log.push(|t| Event::Claimed {
            t,
            cell,
            epoch,
            node,
            gen,
        });
        Ok(claim)
    }

    fn payload(&self, gen: &str, seq: u64) -> Bytes {
        let text = format!("{}/{gen}/{seq}", self.node);
        // Every fifth write is large enough for a payload object.
        if seq.is_multiple_of(5) {
            return Bytes::from(format!("{text:-<width$}", width = self.large + 1));
        }
        Bytes::from(text)
    }

    /// One fenced write.
    async fn write(&self, claim: &CellClaim, gen: &str, seq: u64) -> Wrote {
        let payload = self.payload(gen, seq);
        let cell = claim.cell().to_owned();
        let (c, p, g, mono) = (
            cell.clone(),
            payload.clone(),
            gen.to_owned(),
            self.clock.mono_ms(),
        );
        self.log.push(|_| Event::Attempt {
            cell: c,
            payload: p,
            gen: g,
            mono,
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
                Wrote::Acked
            }
            Some(Err(e)) => {
                self.refused(&cell, &[payload], &e);
                if e.kind() == ErrorKind::Fenced {
                    Wrote::Lost
                } else {
                    Wrote::Unknown
                }
            }
            None => Wrote::Unknown,
        }
    }

    /// Records payloads of a write answered "not committed": they must never land.
    fn refused(&self, cell: &str, payloads: &[Bytes], e: &fence_core::Error) {
        if e.commit() != fence_core::Commit::NotCommitted {
            return;
        }
        for p in payloads {
            let (cell, payload, kind) = (cell.to_owned(), p.clone(), format!("{:?}", e.kind()));
            self.log.push(|t| Event::Refused {
                t,
                cell,
                payload,
                kind,
            });
        }
    }

    /// A keeperless write at the claim's epoch (`update_cell`, as `fence put` from a child of
    /// `fence run`), started while the lease was held at `mono`.
    async fn co_write(&self, claim: &CellClaim, gen: &str, seq: u64, mono: u64) {
        let cell = claim.cell().to_owned();
        let made = std::sync::Mutex::new(Vec::new());
        let update = |_: &Bytes| {
            let mut made = made.lock().unwrap_or_else(|p| p.into_inner());
            let payload = Bytes::from(format!("{}/{gen}/{seq}-put{}", self.node, made.len()));
            made.push(payload.clone());
            let (c, p, g) = (cell.clone(), payload.clone(), gen.to_owned());
            self.log.push(|_| Event::Attempt {
                cell: c,
                payload: p,
                gen: g,
                mono,
            });
            Ok(payload)
        };
        let own = self.fence.ownership();
        let bound = Duration::from_millis(self.ttl_ms / 3);
        let result = within(
            self.ttl_ms,
            fence_core::update_cell(own, &cell, claim.epoch(), bound, update),
        )
        .await;
        let made = made.into_inner().unwrap_or_else(|p| p.into_inner());
        match result {
            Some(Ok(ack)) => {
                let (node, gen) = (self.node.clone(), gen.to_owned());
                let payload = made.last().cloned().unwrap_or_default();
                self.log.push(|t| Event::Acked {
                    t,
                    cell,
                    epoch: ack.epoch,
                    node,
                    gen,
                    payload,
                });
            }
            Some(Err(e)) => self.refused(&cell, &made, &e),
            None => {}
        }
    }

    /// Reads a cell as any reader would; a corrupt answer is a violation.
    async fn read(&self, cell: &str) {
        let read = within(
            self.ttl_ms,
            fence_core::read_cell(self.fence.ownership(), cell),
        )
        .await;
        if let Some(Err(e)) = read {
            if e.kind() == ErrorKind::Corrupt {
                let (cell, error) = (cell.to_owned(), e.to_string());
                self.log.push(|t| Event::ReadFailed { t, cell, error });
            }
        }
    }
}
