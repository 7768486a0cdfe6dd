//! One simulated process of a node: the real runtime ([`Fence`], [`LeaseKeeper`],
//! [`CellClaim`]) doing random work, everything it observes recorded in the [`Log`].

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fence_core::ownership::INLINE_MAX_DEFAULT;
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
    /// it over (the new process then acquires as its successor, at once) — or of this
    /// process's own lost lease, when it recovers from the loss (case 2 of docs/design.md,
    /// "Restart and resume").
    pub(crate) predecessor: Option<String>,
    /// An earlier lease generation of this process whose claims it closed: its cells are
    /// resumed at their epochs under the next lease.
    pub(crate) vouched: Option<String>,
    /// The other nodes' ids (hand-offs go to one of them).
    pub(crate) peers: Vec<String>,
}

/// How a stretch of work under one lease ended.
enum Ended {
    /// The process chose to give the lease up (a graceful restart).
    Graceful,
    /// The lease was lost; these claims were still open.
    Lost(BTreeMap<String, CellClaim>),
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
            let gen = keeper.generation();
            let ended = self.work(&keeper).await;
            lock(&self.slot).take();
            match ended {
                Ended::Graceful => {
                    if let Ok(keeper) = Arc::try_unwrap(keeper) {
                        let _ = within(self.ttl_ms, keeper.release()).await;
                    }
                }
                Ended::Lost(claims) => self.recover(gen, claims).await,
            }
        }
    }

    /// After losing its lease: half the time the process closes every claim it had, takes
    /// its lease back as the successor of its own generation and resumes those cells at
    /// their epochs (case 2 of "Restart and resume"); otherwise it just starts over.
    async fn recover(&mut self, gen: String, claims: BTreeMap<String, CellClaim>) {
        if claims.is_empty() || !self.rng.gen_bool(0.5) {
            return;
        }
        for claim in claims.values() {
            if within(self.ttl_ms, claim.close()).await.is_none() {
                // A close that does not return leaves a write that may still be
                // acknowledged: nothing of that lease is vouched for.
                return;
            }
        }
        self.predecessor = Some(gen.clone());
        self.vouched = Some(gen);
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

    /// Claims (or resumes), writes, hands off and releases at random while the lease is
    /// held, until it chooses to give the lease up or loses it.
    async fn work(&mut self, keeper: &LeaseKeeper) -> Ended {
        let gen = keeper.generation();
        // Heads of this lease (a hand-off to us, our own closed claim) and of our closed
        // earlier lease are resumed; anything else is claimed.
        let vouched: Vec<String> = std::iter::once(gen.clone())
            .chain(self.vouched.take())
            .collect();
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
                    return Ended::Lost(claims);
                }
                continue;
            }
            self.believe(&gen, mono, &claims);
            // Every process competes for every cell it does not hold.
            wanted.extend(
                self.cells
                    .iter()
                    .filter(|c| !claims.contains_key(*c))
                    .cloned(),
            );
            let batch: Vec<String> = std::mem::take(&mut wanted).into_iter().collect();
            let since = self.log.now();
            let got = within(
                self.ttl_ms,
                keeper.claim_or_resume_many(batch.clone(), 2, &vouched),
            )
            .await;
            for (cell, result) in got.unwrap_or_default() {
                match self.claimed(cell.clone(), result, &gen, &vouched, since) {
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
                Some(_) if roll >= 99 => return Ended::Graceful,
                Some(c) if roll >= 96 => {
                    if let Some(c) = self.hand_off(keeper, c, &gen, &vouched).await {
                        claims.insert(cell, c);
                    }
                }
                Some(c) if roll >= 93 => {
                    let _ = within(self.ttl_ms, c.release()).await;
                }
                Some(c) if roll >= 88 => {
                    // Payload collection, beside a child writing at the claim's epoch into a
                    // payload object of that epoch: collection must leave it alone.
                    seq += 1;
                    let nap = Duration::from_millis(self.rng.gen_range(0..40));
                    let collect = async {
                        self.clock.sleep(nap).await;
                        within(self.ttl_ms, c.collect_garbage()).await
                    };
                    tokio::join!(self.co_write(&c, &gen, seq, mono, true), collect);
                    claims.insert(cell, c);
                }
                Some(c) if roll >= 78 => {
                    // A child handed the epoch (`fence put`) writes beside the claim.
                    seq += 2;
                    let large = seq.is_multiple_of(5);
                    let (a, _) = tokio::join!(
                        self.write(&c, &gen, seq - 1),
                        self.co_write(&c, &gen, seq, mono, large)
                    );
                    if !matches!(a, Wrote::Lost) {
                        claims.insert(cell, c);
                    }
                }
                Some(c) if roll >= 68 => {
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
                None => match self.claim(keeper, &cell, &gen, &vouched).await {
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

    /// Records that the process holds its lease now, and believes it holds each of its
    /// claims that says so.
    fn believe(&self, gen: &str, mono: u64, claims: &BTreeMap<String, CellClaim>) {
        let (node, g) = (self.node.clone(), gen.to_owned());
        self.log.push(|t| Event::Held {
            t,
            node,
            gen: g,
            mono,
        });
        for claim in claims.values() {
            self.believes(gen, claim);
        }
    }

    /// Records that the process believes it holds `claim`'s cell, if the claim says it may
    /// act now (`CellClaim::is_held`: its lease held, the claim not ended).
    fn believes(&self, gen: &str, claim: &CellClaim) {
        if !claim.is_held() {
            return;
        }
        let (cell, node, gen, epoch) = (
            claim.cell().to_owned(),
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

    /// Asks `claim` every TTL/20 whether it may act, recording each yes, until dropped: a
    /// claim whose hand-off is on its way must say no from the moment it is sent.
    async fn watch(&self, gen: &str, claim: &CellClaim) {
        loop {
            self.believes(gen, claim);
            self.clock
                .sleep(Duration::from_millis((self.ttl_ms / 20).max(1)))
                .await;
        }
    }

    /// Claims or resumes `cell`; `Err(true)` when another node has it (worth waiting for).
    async fn claim(
        &self,
        keeper: &LeaseKeeper,
        cell: &str,
        gen: &str,
        vouched: &[String],
    ) -> Result<CellClaim, bool> {
        let since = self.log.now();
        match within(self.ttl_ms, keeper.claim_or_resume(cell, vouched)).await {
            Some(result) => self.claimed(cell.to_owned(), result, gen, vouched, since),
            None => Err(false),
        }
    }

    /// Records a claim or resume that returned; `Err(true)` when another node has the cell.
    fn claimed(
        &self,
        cell: String,
        result: Result<(CellClaim, bool), fence_core::Error>,
        gen: &str,
        vouched: &[String],
        since: u64,
    ) -> Result<CellClaim, bool> {
        let (claim, resumed) = match result {
            Ok(c) => c,
            Err(e) => return Err(e.kind() == ErrorKind::Busy),
        };
        let (epoch, node, gen) = (claim.epoch(), self.node.clone(), gen.to_owned());
        if resumed {
            let vouched = vouched.to_vec();
            self.log.push(|t| Event::Resumed {
                t,
                since,
                cell,
                epoch,
                node,
                gen,
                vouched,
            });
        } else {
            self.log.push(|t| Event::Claimed {
                t,
                cell,
                epoch,
                node,
                gen,
            });
        }
        Ok(claim)
    }

    /// Hands `claim`'s cell to a peer, naming the generation its lease record shows (the
    /// peer resumes it if that is still its lease, claims it otherwise). Now and then the
    /// process also tries to resume the same cell while the hand-off is in flight, as a
    /// confused application would: at most one of the two may win. Returns the claim the
    /// racing resume got, if any.
    async fn hand_off(
        &mut self,
        keeper: &LeaseKeeper,
        claim: CellClaim,
        gen: &str,
        vouched: &[String],
    ) -> Option<CellClaim> {
        let to = self
            .peers
            .get(self.rng.gen_range(0..self.peers.len().max(1)))?
            .clone();
        let racing = self.rng.gen_bool(0.6);
        let nap = Duration::from_millis(self.rng.gen_range(0..10));
        let lease = within(self.ttl_ms, self.fence.ownership().read_node_lease(&to)).await;
        let to_gen = match lease {
            Some(Ok(Some(l))) => Some(l.record.generation),
            _ => None,
        };
        let cell = claim.cell().to_owned();
        let race = async {
            if !racing {
                return None;
            }
            self.clock.sleep(nap).await;
            Some(self.claim(keeper, &cell, gen, vouched).await)
        };
        // The sender's own view of its claim while the hand-off travels, and after it.
        let handing = async {
            tokio::select! {
                biased; // a seed drives the whole run: no random choice of branch
                _ = within(self.ttl_ms, claim.hand_off(&to, to_gen.as_deref())) => {}
                () = self.watch(gen, &claim) => {}
            }
            self.believes(gen, &claim);
        };
        let (_, raced) = tokio::join!(handing, race);
        raced.and_then(Result::ok)
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
            by_claim: true,
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
    /// `fence run`), started while the lease was held at `mono`; `large`: big enough for a
    /// payload object at `update_cell`'s inline bound.
    async fn co_write(&self, claim: &CellClaim, gen: &str, seq: u64, mono: u64, large: bool) {
        let cell = claim.cell().to_owned();
        let made = std::sync::Mutex::new(Vec::new());
        let width = if large { INLINE_MAX_DEFAULT + 1 } else { 0 };
        let update = |_: &Bytes| {
            let mut made = made.lock().unwrap_or_else(|p| p.into_inner());
            let text = format!("{}/{gen}/{seq}-put{}", self.node, made.len());
            let payload = Bytes::from(format!("{text:-<width$}"));
            made.push(payload.clone());
            let (c, p, g) = (cell.clone(), payload.clone(), gen.to_owned());
            self.log.push(|_| Event::Attempt {
                cell: c,
                payload: p,
                gen: g,
                mono,
                by_claim: false,
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
