//! The tokio driver of the decision core: a node-lease keeper that renews in the background,
//! cell claims with their epoch, and fenced data writes.
//!
//! ```
//! # fn block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
//! # }
//! # block(async {
//! use std::{sync::Arc, time::Duration};
//! use fence_core::{runtime::Fence, MemoryStore};
//!
//! let store = Arc::new(MemoryStore::new());
//! let fence = Fence::builder(store, "node-a").ttl(Duration::from_secs(2)).build().unwrap();
//! let lease = fence.acquire().await.unwrap();
//! assert!(lease.is_held());
//! let cell = lease.claim("orders").await.unwrap();
//! assert_eq!(cell.epoch(), 1);
//! let ack = cell.write("state v1").await.unwrap();
//! assert_eq!(ack.epoch, 1);
//! cell.release().await.unwrap();
//! lease.release().await;
//! # });
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::clock::{Clock, Entropy};
use crate::decide::{
    self, ClaimDecision, DataDecision, Holder, LeaseConfig, LeaseCore, LeaseEffect, LeaseEvent,
    LeaseStatus, Now, ObservedLease, OwnerView, ReadResult, WriteResult,
};
use crate::error::{Commit, Error, ErrorKind};
use crate::ownership::Ownership;
use crate::record::DataBody;
use crate::store::{CasGuard, ConditionalStore, PutOutcome, Version};

/// Builds a [`Fence`].
#[derive(Debug)]
pub struct FenceBuilder {
    store: Arc<dyn ConditionalStore>,
    node: String,
    addr: String,
    prefix: Option<String>,
    cfg: LeaseConfig,
    skew_margin: Option<Duration>,
    clock: Option<Clock>,
    entropy: Option<Entropy>,
}

impl FenceBuilder {
    /// Lease TTL (default 10 s). Renewal happens at TTL/3; attempt timeouts and the skew
    /// margin scale with it unless set explicitly.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        let max_attempts = self.cfg.max_attempts;
        self.cfg = LeaseConfig::with_ttl_ms(ttl.as_millis() as u64);
        self.cfg.max_attempts = max_attempts;
        self
    }

    /// Extra wall-clock time to wait past a foreign lease's expiry before a takeover.
    #[must_use]
    pub fn skew_margin(mut self, margin: Duration) -> Self {
        self.skew_margin = Some(margin);
        self
    }

    /// Bounds of one lease write or read attempt (defaults 250 ms – 2.5 s); an attempt never
    /// outlives the remaining authority whatever these say.
    #[must_use]
    pub fn attempt_timeouts(mut self, min: Duration, max: Duration) -> Self {
        self.cfg.attempt_min_ms = min.as_millis() as u64;
        self.cfg.attempt_max_ms = max.as_millis().max(min.as_millis()) as u64;
        self
    }

    /// Writes per renewal before fencing (default 4).
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.cfg.max_attempts = n.max(1);
        self
    }

    /// The address advertised in the lease record.
    #[must_use]
    pub fn addr(mut self, addr: impl Into<String>) -> Self {
        self.addr = addr.into();
        self
    }

    /// Puts every key under `prefix/`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The clock (default: the system's).
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The randomness (default: seeded from the OS).
    #[must_use]
    pub fn entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Fence, Error> {
        crate::ownership::check_name("node", &self.node)?;
        let mut cfg = self.cfg;
        if cfg.ttl_ms < 30 {
            return Err(
                Error::new(ErrorKind::InvalidInput, "lease TTL must be at least 30 ms")
                    .not_committed(),
            );
        }
        if let Some(m) = self.skew_margin {
            cfg.skew_margin_ms = m.as_millis() as u64;
        }
        let entropy = self.entropy.unwrap_or_default();
        let mut ownership =
            Ownership::new(self.store, self.node.clone()).with_entropy(entropy.clone());
        if let Some(p) = &self.prefix {
            ownership = ownership.with_prefix(p)?;
        }
        Ok(Fence {
            ownership: Arc::new(ownership),
            cfg,
            addr: self.addr,
            clock: self.clock.unwrap_or_else(Clock::system),
            entropy,
        })
    }
}

/// One node's entry point: acquires its lease and, through it, claims cells.
#[derive(Clone, Debug)]
pub struct Fence {
    ownership: Arc<Ownership>,
    cfg: LeaseConfig,
    addr: String,
    clock: Clock,
    entropy: Entropy,
}

impl Fence {
    /// A builder for node `node` over `store`.
    pub fn builder(store: Arc<dyn ConditionalStore>, node: impl Into<String>) -> FenceBuilder {
        FenceBuilder {
            store,
            node: node.into(),
            addr: String::new(),
            prefix: None,
            cfg: LeaseConfig::default(),
            skew_margin: None,
            clock: None,
            entropy: None,
        }
    }

    /// The ownership API underneath (records, keys).
    pub fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    /// The lease configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn now(&self) -> Now {
        Now {
            mono_ms: self.clock.mono_ms(),
            wall_ms: self.clock.wall_ms(),
        }
    }

    /// Acquires this node's lease once: [`ErrorKind::Busy`] if another live process holds
    /// it, [`ErrorKind::Fenced`] if a racer won. On success a background task renews it.
    pub async fn acquire(&self) -> Result<LeaseKeeper, Error> {
        let generation = format!("{:016x}", self.entropy.next_u64());
        let holder = Holder {
            node: self.ownership.node().to_owned(),
            addr: self.addr.clone(),
            peer_protocol: 1,
            generation,
        };
        let read = self.ownership.read_node_lease(&holder.node);
        // A read commits nothing: its failures are safe to retry.
        let observed = bounded(self.cfg.attempt_timeout(self.cfg.ttl_ms), read)
            .await
            .map_err(Error::not_committed)?
            .map(|l| ObservedLease {
                record: l.record,
                version: l.etag,
                nonce: l.nonce,
            });
        let shared = Arc::new(Shared {
            fence: self.clone(),
            core: Mutex::new(LeaseCore::new(holder, self.cfg.clone())),
            status: watch::channel(LeaseStatus::Acquiring).0,
        });
        let wake = shared.drive(LeaseEvent::Acquire(observed)).await;
        let status = shared.core().status();
        match status {
            LeaseStatus::Held => Ok(LeaseKeeper::spawn(shared, wake)),
            LeaseStatus::Busy { expires_ms, .. } => Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "lease of {} is held by another process until {expires_ms} (wall ms)",
                    self.ownership.node()
                ),
            )
            .not_committed()),
            other => Err(Error::fenced(format!("lease not acquired: {other:?}"))),
        }
    }

    /// Acquires, waiting up to `timeout` for a live holder's lease to expire.
    pub async fn acquire_wait(&self, timeout: Duration) -> Result<LeaseKeeper, Error> {
        let deadline = self.clock.mono_ms() + timeout.as_millis() as u64;
        loop {
            match self.acquire().await {
                Ok(k) => return Ok(k),
                Err(e)
                    if matches!(e.kind(), ErrorKind::Busy | ErrorKind::Fenced)
                        || e.is_retryable() =>
                {
                    let now = self.clock.mono_ms();
                    if now >= deadline {
                        return Err(e);
                    }
                    // Busy: the holder's lease has a while to run. Fenced: a racer just won
                    // (or our write provably failed); look again soon, with jitter.
                    let pause = if e.kind() == ErrorKind::Fenced {
                        10 + self.entropy.below(self.cfg.ttl_ms / 10 + 1)
                    } else {
                        (self.cfg.ttl_ms / 4).clamp(10, 1_000)
                    };
                    self.clock.sleep_until((now + pause).min(deadline)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// State shared by the keeper task, the handle and the cell claims.
#[derive(Debug)]
struct Shared {
    fence: Fence,
    core: Mutex<LeaseCore>,
    status: watch::Sender<LeaseStatus>,
}

impl Shared {
    fn core(&self) -> std::sync::MutexGuard<'_, LeaseCore> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_held(&self) -> bool {
        let now = self.fence.clock.mono_ms();
        self.core().is_held(now)
    }

    /// Runs a claim or data operation bounded by the attempt timeout for the remaining
    /// authority (at least the configured minimum, so a just-expired lease still gets an
    /// answer to report).
    async fn bounded<T>(&self, op: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let cfg = &self.fence.cfg;
        let timeout = cfg
            .attempt_timeout(self.remaining_ms())
            .max(cfg.attempt_min_ms);
        bounded(timeout, op).await
    }

    /// Remaining authority in ms (0 when not held).
    fn remaining_ms(&self) -> u64 {
        let now = self.fence.clock.mono_ms();
        let core = self.core();
        if !core.is_held(now) {
            return 0;
        }
        core.authority_until().map_or(0, |u| u.saturating_sub(now))
    }

    fn node(&self) -> &str {
        self.fence.ownership.node()
    }

    /// Feeds `event` and performs effects until none are left; returns the last wake-up.
    async fn drive(&self, event: LeaseEvent) -> Option<u64> {
        let mut queue = vec![event];
        let mut wake = None;
        while let Some(event) = queue.pop() {
            let effects = {
                let now = self.fence.now();
                self.core().step(now, event)
            };
            for effect in effects {
                match effect {
                    LeaseEffect::WakeAt(t) => wake = Some(t),
                    LeaseEffect::Status(s) => self.publish(s),
                    LeaseEffect::Write {
                        guard,
                        record,
                        nonce,
                        timeout_ms,
                    } => queue.push(LeaseEvent::Written(
                        self.write_lease(guard, record, nonce, timeout_ms).await,
                    )),
                    LeaseEffect::Read { timeout_ms } => {
                        queue.push(LeaseEvent::Read(self.read_lease(timeout_ms).await))
                    }
                }
            }
        }
        wake
    }

    fn publish(&self, status: LeaseStatus) {
        match &status {
            LeaseStatus::Fenced { reason } => {
                warn!(node = self.node(), ?reason, "lease fenced: stop writing")
            }
            s => info!(node = self.node(), status = ?s, "lease status"),
        }
        self.status.send_replace(status);
    }

    async fn write_lease(
        &self,
        guard: CasGuard,
        record: crate::record::NodeLeaseRecord,
        nonce: String,
        timeout_ms: u64,
    ) -> WriteResult {
        debug!(node = self.node(), ?guard, timeout_ms, "lease write");
        let put = self.fence.ownership.put_node_lease(guard, &record, &nonce);
        match bounded(timeout_ms, put).await {
            Ok(PutOutcome::Applied(v)) => WriteResult::Applied(v),
            Ok(PutOutcome::Rejected) => WriteResult::Rejected,
            Err(e) if e.commit() == Commit::NotCommitted => {
                debug!(node = self.node(), error = %e, "lease write not committed");
                WriteResult::NotCommitted
            }
            Err(e) => {
                debug!(node = self.node(), error = %e, "lease write ambiguous");
                WriteResult::Ambiguous
            }
        }
    }

    async fn read_lease(&self, timeout_ms: u64) -> ReadResult {
        let read = self.fence.ownership.read_node_lease(self.node());
        match bounded(timeout_ms, read).await {
            Ok(Some(l)) => ReadResult::Found {
                nonce: l.nonce,
                version: l.etag,
            },
            Ok(None) => ReadResult::Absent,
            Err(e) => {
                debug!(node = self.node(), error = %e, "lease read-back failed");
                ReadResult::Failed
            }
        }
    }
}

/// Runs `op` with a deadline; a deadline hit is an ambiguous [`ErrorKind::Timeout`].
async fn bounded<T>(
    timeout_ms: u64,
    op: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms.max(1)), op).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("no answer within {timeout_ms} ms"),
        )),
    }
}

#[derive(Debug)]
enum Command {
    Release,
}

/// A held node lease, renewed in the background until released, fenced or dropped.
///
/// Dropping it stops renewal and releases the lease.
#[derive(Debug)]
pub struct LeaseKeeper {
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    task: Option<JoinHandle<()>>,
}

impl LeaseKeeper {
    fn spawn(shared: Arc<Shared>, wake: Option<u64>) -> Self {
        let (commands, rx) = mpsc::channel(4);
        let task = tokio::spawn(keep(shared.clone(), rx, wake));
        LeaseKeeper {
            shared,
            commands,
            task: Some(task),
        }
    }

    /// Whether this process may act as the lease holder *now*: judged at call time on the
    /// monotonic clock against the anchor of the last applied write.
    pub fn is_held(&self) -> bool {
        self.shared.is_held()
    }

    /// The current status.
    pub fn status(&self) -> LeaseStatus {
        self.shared.status.borrow().clone()
    }

    /// A channel of status changes: Held, Fenced, Released.
    pub fn watch(&self) -> watch::Receiver<LeaseStatus> {
        self.shared.status.subscribe()
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        self.shared.node()
    }

    /// This process's generation (written in the lease record).
    pub fn generation(&self) -> String {
        self.shared.core().holder().generation.clone()
    }

    /// Claims `cell` at a new epoch (see [`decide::decide_claim`]) and seals its data head at
    /// that epoch, so writes of earlier epochs are rejected by the store from then on.
    ///
    /// Errors: [`ErrorKind::Fenced`] if the lease is not held; [`ErrorKind::Busy`] if a live
    /// foreign owner has the cell or a racer won.
    pub async fn claim(&self, cell: &str) -> Result<CellClaim, Error> {
        claim(&self.shared, cell).await
    }

    /// Stops renewing and writes a released (already expired) lease record, so peers may
    /// take over at once. Returns when done.
    pub async fn release(mut self) {
        let _ = self.commands.send(Command::Release).await;
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Waits until the lease is no longer held (fenced or released) and returns the status.
    pub async fn lost(&self) -> LeaseStatus {
        let mut rx = self.watch();
        loop {
            let s = rx.borrow_and_update().clone();
            if !matches!(s, LeaseStatus::Held | LeaseStatus::Acquiring) {
                return s;
            }
            if rx.changed().await.is_err() {
                return self.status();
            }
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        // Closing the command channel makes the keeper release; nothing to await here.
        let _ = self.commands.try_send(Command::Release);
    }
}

async fn keep(shared: Arc<Shared>, mut rx: mpsc::Receiver<Command>, mut wake: Option<u64>) {
    loop {
        if shared.core().is_finished() {
            return;
        }
        let event = match wake {
            Some(t) => tokio::select! {
                // Deterministic choice when both are ready (simulations replay seeds).
                biased;
                _ = rx.recv() => LeaseEvent::Release,
                _ = shared.fence.clock.sleep_until(t) => LeaseEvent::Tick,
            },
            None => {
                let _ = rx.recv().await;
                LeaseEvent::Release
            }
        };
        let release = event == LeaseEvent::Release;
        if let Some(t) = shared.drive(event).await {
            wake = Some(t);
        }
        if release {
            return;
        }
    }
}

/// A fenced write's acknowledgement: the data head is stored at `version` and the owner
/// record still named us at `epoch` after it landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteAck {
    /// The epoch the write was made and confirmed under.
    pub epoch: u64,
    /// The data head's new version.
    pub version: Version,
}

/// A cell's data as read from its head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellData {
    /// The epoch of the write.
    pub epoch: u64,
    /// The writer.
    pub node: String,
    /// The payload.
    pub payload: Bytes,
}

/// A claimed cell: its epoch, and fenced writes of its data head.
#[derive(Debug)]
pub struct CellClaim {
    shared: Arc<Shared>,
    cell: String,
    epoch: u64,
    head: Mutex<Option<Version>>,
}

async fn claim(shared: &Arc<Shared>, cell: &str) -> Result<CellClaim, Error> {
    if !shared.is_held() {
        return Err(Error::fenced("cannot claim a cell without a held lease"));
    }
    let own = &shared.fence.ownership;
    let owner = shared
        .bounded(own.read_owner_body(cell))
        .await?
        .map(|(b, v)| OwnerView {
            node: b.node,
            epoch: b.epoch,
            version: v,
        });
    let foreign = owner
        .as_ref()
        .and_then(|o| o.node.clone())
        .filter(|n| n != shared.node());
    let expires = match &foreign {
        Some(n) => shared
            .bounded(own.read_node_lease(n))
            .await?
            .map(|l| l.record.expires_ms),
        None => None,
    };
    let now_wall = shared.fence.clock.wall_ms();
    let decision = decide::decide_claim(
        shared.node(),
        owner.as_ref(),
        expires,
        now_wall,
        &shared.fence.cfg,
    );
    let (guard, epoch, takeover_from) = match decision {
        ClaimDecision::NotOurs { node, epoch, .. } => {
            return Err(Error::new(
                ErrorKind::Busy,
                format!("cell {cell} is owned by live node {node} at epoch {epoch}"),
            )
            .not_committed())
        }
        ClaimDecision::Claim {
            guard,
            epoch,
            takeover_from,
        } => (guard, epoch, takeover_from),
    };
    write_owner_claim(shared, cell, guard, epoch).await?;
    info!(node = shared.node(), cell, epoch, from = ?takeover_from, "cell claimed");
    let claim = CellClaim {
        shared: shared.clone(),
        cell: cell.to_owned(),
        epoch,
        head: Mutex::new(None),
    };
    claim.seal().await?;
    Ok(claim)
}

/// The owner CAS of a claim, with ambiguity resolved by reading back our nonce.
async fn write_owner_claim(
    shared: &Shared,
    cell: &str,
    guard: CasGuard,
    epoch: u64,
) -> Result<(), Error> {
    let own = &shared.fence.ownership;
    let nonce = own.fresh_nonce();
    let timeout = shared.fence.cfg.attempt_timeout(shared.remaining_ms());
    let put = own.put_owner(cell, guard, Some(shared.node()), epoch, &nonce);
    match bounded(timeout, put).await {
        Ok(PutOutcome::Applied(_)) => Ok(()),
        Ok(PutOutcome::Rejected) => Err(Error::new(
            ErrorKind::Busy,
            format!("cell {cell}: another claim won the race"),
        )
        .not_committed()),
        Err(e) if e.is_ambiguous() => match shared.bounded(own.read_owner_body(cell)).await {
            Ok(Some((body, _))) if body.nonce == nonce => Ok(()),
            Ok(_) => Err(Error::new(
                ErrorKind::Busy,
                format!("cell {cell}: the claim did not land"),
            )
            .not_committed()),
            Err(read) => Err(read.with_commit(Commit::Ambiguous)),
        },
        Err(e) => Err(e),
    }
}

impl CellClaim {
    /// The cell.
    pub fn cell(&self) -> &str {
        &self.cell
    }

    /// The epoch this claim holds.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the node lease is held now (a local check; the store is the real fence).
    pub fn is_held(&self) -> bool {
        self.shared.is_held()
    }

    fn cached_head(&self) -> Option<Version> {
        self.head.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_head(&self, v: Version) {
        *self.head.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
    }

    /// Rewrites the data head at our epoch, so every earlier epoch's guard is stale.
    async fn seal(&self) -> Result<(), Error> {
        let own = &self.shared.fence.ownership;
        let head = self.shared.bounded(own.read_data(&self.cell)).await?;
        let guard =
            match decide::decide_data_write(self.epoch, head.as_ref().map(|(b, v)| (b.epoch, v))) {
                DataDecision::Fenced { found } => return Err(superseded(&self.cell, found)),
                DataDecision::Write(g) => g,
            };
        // The payload is carried forward: whatever landed before the claim stays readable.
        let (extra, payload) = head.map(|(b, _)| (b.extra, b.payload)).unwrap_or_default();
        let body = DataBody {
            epoch: self.epoch,
            node: self.shared.node().to_owned(),
            nonce: own.fresh_nonce(),
            extra,
            payload,
        };
        self.put_head(&body, guard).await.map(|_| ())
    }

    /// A fenced write of the cell's data head.
    ///
    /// The write is a CAS chained on the head's version; a claim at a later epoch rewrites
    /// the head, so from then on this claim's writes are rejected **by the store**
    /// ([`ErrorKind::Fenced`]), whatever this process believes about its lease. After the
    /// write lands, one read confirms the owner record still names `(self, epoch)`; only then
    /// is it acknowledged. A `Fenced` error after landing means the write was not
    /// acknowledged and may survive only as the last value of the superseded epoch.
    pub async fn write(&self, payload: impl Into<Bytes>) -> Result<WriteAck, Error> {
        if !self.shared.is_held() {
            return Err(Error::fenced(format!(
                "cell {}: lease not held; write refused locally",
                self.cell
            )));
        }
        let own = &self.shared.fence.ownership;
        let body = DataBody {
            epoch: self.epoch,
            node: self.shared.node().to_owned(),
            nonce: own.fresh_nonce(),
            extra: Default::default(),
            payload: payload.into(),
        };
        let guard = match self.cached_head() {
            Some(v) => CasGuard::Match(v),
            None => self.guard_from_store(&body).await?.1,
        };
        let version = self.put_head(&body, guard).await?;
        self.acknowledge(version).await
    }

    /// Writes `body` on the head chain, first under `guard`; the same body (same nonce) on
    /// every attempt, so a read-back recognises any attempt that landed. A rejected or
    /// ambiguous attempt re-reads the head: ours → done; a later epoch → `Fenced`; else retry.
    async fn put_head(&self, body: &DataBody, mut guard: CasGuard) -> Result<Version, Error> {
        let own = &self.shared.fence.ownership;
        let mut last = None;
        for _ in 0..4 {
            let timeout = self
                .shared
                .fence
                .cfg
                .attempt_timeout(self.shared.remaining_ms().max(1));
            match bounded(timeout, own.put_data(&self.cell, guard.clone(), body)).await {
                Ok(PutOutcome::Applied(v)) => {
                    self.set_head(v.clone());
                    return Ok(v);
                }
                Ok(PutOutcome::Rejected) => {}
                Err(e) if e.commit() == Commit::NotCommitted && !e.is_retryable() => return Err(e),
                Err(e) => last = Some(e),
            }
            match self.guard_from_store(body).await? {
                (Some(v), _) => {
                    self.set_head(v.clone());
                    return Ok(v);
                }
                (None, g) => guard = g,
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::new(
                ErrorKind::Busy,
                format!("cell {}: head kept moving", self.cell),
            )
            .not_committed()
        }))
    }

    /// Reads the head: `(Some(version), _)` if it already holds `body` (an earlier attempt
    /// landed), else the guard for the next attempt — or `Fenced` if a later epoch wrote it.
    async fn guard_from_store(
        &self,
        body: &DataBody,
    ) -> Result<(Option<Version>, CasGuard), Error> {
        let head = self
            .shared
            .bounded(self.shared.fence.ownership.read_data(&self.cell))
            .await?;
        if let Some((b, v)) = &head {
            if b.nonce == body.nonce {
                return Ok((Some(v.clone()), CasGuard::Match(v.clone())));
            }
        }
        match decide::decide_data_write(self.epoch, head.as_ref().map(|(b, v)| (b.epoch, v))) {
            DataDecision::Fenced { found } => Err(superseded(&self.cell, found)),
            DataDecision::Write(g) => Ok((None, g)),
        }
    }

    async fn acknowledge(&self, version: Version) -> Result<WriteAck, Error> {
        let owner = self
            .shared
            .bounded(self.shared.fence.ownership.read_owner_body(&self.cell))
            .await
            .map_err(|e| {
                Error::new(
                    e.kind(),
                    format!("cell {}: write landed, ownership unconfirmed", self.cell),
                )
                .with_source(e)
            })?
            .map(|(b, v)| OwnerView {
                node: b.node,
                epoch: b.epoch,
                version: v,
            });
        if decide::may_acknowledge(self.shared.node(), self.epoch, owner.as_ref()) {
            Ok(WriteAck {
                epoch: self.epoch,
                version,
            })
        } else {
            let found = owner.map(|o| o.epoch).unwrap_or(0);
            warn!(node = self.shared.node(), cell = %self.cell, epoch = self.epoch, found,
                  "write landed after the epoch was superseded: not acknowledged");
            Err(superseded(&self.cell, found))
        }
    }

    /// Reads the cell's data head.
    pub async fn read(&self) -> Result<Option<CellData>, Error> {
        read_cell(&self.shared.fence.ownership, &self.cell).await
    }

    /// Releases the cell: an unowned owner record that keeps the epoch.
    pub async fn release(self) -> Result<(), Error> {
        let own = &self.shared.fence.ownership;
        match own.release_owner(&self.cell, self.epoch).await? {
            crate::ownership::CasOutcome::Applied => {
                info!(node = self.shared.node(), cell = %self.cell, epoch = self.epoch, "cell released");
                Ok(())
            }
            crate::ownership::CasOutcome::Rejected => Err(Error::fenced(format!(
                "cell {} is no longer ours at epoch {}",
                self.cell, self.epoch
            ))),
        }
    }
}

/// Reads `cell`'s data head through `ownership`.
pub async fn read_cell(ownership: &Ownership, cell: &str) -> Result<Option<CellData>, Error> {
    Ok(ownership.read_data(cell).await?.map(|(b, _)| CellData {
        epoch: b.epoch,
        node: b.node,
        payload: b.payload,
    }))
}

fn superseded(cell: &str, found: u64) -> Error {
    Error::fenced(format!("cell {cell}: epoch superseded (now {found})"))
}

/// A fenced read-modify-write of `cell`'s data head by a process that holds no keeper — a
/// script or child process handed the epoch (as `fence run` does through `FENCE_EPOCH`).
///
/// Reads the head; refuses with [`ErrorKind::Fenced`] if it carries a later epoch; writes
/// `update(current payload)` at `epoch` chained on the head's version (so a claim at a later
/// epoch, which rewrites the head, makes this write fail in the store); then confirms with
/// one read that the owner record still shows `epoch` before acknowledging.
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::sync::Arc;
/// use fence_core::{runtime::update_cell, CasGuard, ErrorKind, MemoryStore, Ownership};
/// let own = Ownership::new(Arc::new(MemoryStore::new()), "n1");
/// own.cas_owner("jobs", CasGuard::Absent, 1).await.unwrap();
/// let ack = update_cell(&own, "jobs", 1, |_| "v1".into()).await.unwrap();
/// assert_eq!(ack.epoch, 1);
/// let err = update_cell(&own, "jobs", 0, |_| "stale".into()).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Fenced);
/// # });
/// ```
pub async fn update_cell(
    ownership: &Ownership,
    cell: &str,
    epoch: u64,
    update: impl Fn(Option<&Bytes>) -> Bytes,
) -> Result<WriteAck, Error> {
    for _ in 0..8 {
        let head = ownership.read_data(cell).await?;
        let guard = match decide::decide_data_write(epoch, head.as_ref().map(|(b, v)| (b.epoch, v)))
        {
            DataDecision::Fenced { found } => return Err(superseded(cell, found)),
            DataDecision::Write(g) => g,
        };
        let body = DataBody {
            epoch,
            node: ownership.node().to_owned(),
            nonce: ownership.fresh_nonce(),
            extra: head
                .as_ref()
                .map(|(b, _)| b.extra.clone())
                .unwrap_or_default(),
            payload: update(head.as_ref().map(|(b, _)| &b.payload)),
        };
        let version = match ownership.put_data(cell, guard, &body).await {
            Ok(PutOutcome::Applied(v)) => v,
            Ok(PutOutcome::Rejected) => continue,
            Err(e) if e.is_ambiguous() => match ownership.read_data(cell).await? {
                Some((b, v)) if b.nonce == body.nonce => v,
                _ => continue,
            },
            Err(e) => return Err(e),
        };
        let owner = ownership.read_owner(cell).await?;
        return match owner {
            Some(o) if o.epoch == epoch && o.node.is_some() => Ok(WriteAck { epoch, version }),
            o => Err(superseded(cell, o.map_or(0, |o| o.epoch))),
        };
    }
    Err(Error::new(ErrorKind::Busy, format!("cell {cell}: head kept moving")).not_committed())
}
