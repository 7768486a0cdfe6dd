//! Acquiring and keeping this node's lease: the shell around [`LeaseCore`].

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::{bounded, claim, Fence};
use crate::decide::register::Register;
use crate::decide::{
    Holder, LeaseCore, LeaseEffect, LeaseEvent, LeaseStatus, ObservedLease, ReadResult, WriteResult,
};
use crate::error::{Commit, Error, ErrorKind};
use crate::record::{Extra, LeaseBody, NodeLeaseRecord};
use crate::stats;
use crate::store::{CasGuard, PutOutcome};

/// A cell reserved for a claim in progress; dropped unkept, it frees the cell again.
pub(crate) struct Reservation<'a> {
    shared: &'a Shared,
    cell: Box<str>,
    kept: bool,
}

impl Reservation<'_> {
    /// The claim landed at `epoch`: the cell stays registered until the claim is dropped.
    pub(crate) fn keep(mut self, epoch: u64) {
        lock(&self.shared.claimed).keep(&self.cell, epoch);
        self.kept = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.shared.unregister(&self.cell, 0);
        }
    }
}

/// State shared by the keeper task, the handle and the cell claims.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) fence: Fence,
    core: Mutex<LeaseCore>,
    status: watch::Sender<LeaseStatus>,
    /// Unknown fields of the lease record, kept across our rewrites.
    extra: Mutex<Extra>,
    /// The last store failure, reported when an acquisition gives up.
    last_error: Mutex<Option<Error>>,
    /// Cells with a live [`CellClaim`](super::CellClaim) of this lease, and their epochs.
    claimed: Mutex<Register>,
    /// Woken whenever one of this lease's claims ends (one for all, to keep claims small).
    claim_ended: tokio::sync::Notify,
    /// Payload collections of this lease's claims still running in the background.
    collections: Collections,
}

/// How many payload collections of a lease's claims run (runtime/claim/collect.rs), and a signal
/// when one ends: the lease's release waits for them, so a short-lived process (a `fence
/// run` of a quick command) does not cut its claim's collection off at exit.
#[derive(Debug)]
struct Collections {
    running: std::sync::atomic::AtomicUsize,
    ended: tokio::sync::Notify,
    /// Collections that list and delete at once: a fleet that claims thousands of cells
    /// together does not send thousands of listings together.
    turns: Arc<tokio::sync::Semaphore>,
}

/// Payload collections of one lease that run at once; the others wait their turn.
const COLLECTIONS_AT_ONCE: usize = 4;

impl Default for Collections {
    fn default() -> Self {
        Collections {
            running: Default::default(),
            ended: Default::default(),
            turns: Arc::new(tokio::sync::Semaphore::new(COLLECTIONS_AT_ONCE)),
        }
    }
}

/// A payload collection running for one of a lease's claims; dropped when it ends, however
/// it ends.
pub(crate) struct Collecting(Arc<Shared>);

impl Collecting {
    /// Waits for this collection's turn ([`COLLECTIONS_AT_ONCE`] of a lease run at once).
    pub(crate) async fn turn(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let turns = self.0.collections.turns.clone();
        turns.acquire_owned().await.ok()
    }
}

impl Drop for Collecting {
    fn drop(&mut self) {
        let c = &self.0.collections;
        c.running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        c.ended.notify_waiters();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn new(fence: &Fence, predecessor: Option<&str>) -> Arc<Self> {
        let holder = Holder {
            node: fence.ownership.node().to_owned(),
            addr: fence.addr.clone(),
            peer_protocol: 1,
            generation: format!("{:016x}", fence.entropy.next_u64()),
        };
        let own = fence.ownership.node();
        let mut core = LeaseCore::new(holder, fence.cfg.clone())
            .with_flaws(fence.flaws)
            .seeing(fence.observer.last(own));
        if let Some(p) = predecessor {
            core = core.succeeding(p);
        }
        Arc::new(Shared {
            fence: fence.clone(),
            core: Mutex::new(core),
            status: watch::channel(LeaseStatus::Acquiring).0,
            extra: Mutex::new(Extra::new()),
            last_error: Mutex::new(None),
            claimed: Mutex::new(Register::default()),
            claim_ended: tokio::sync::Notify::new(),
            collections: Collections::default(),
        })
    }

    /// Reserves `cell` for a claim about to be made (epoch 0 until it lands); `Err(epoch)`
    /// if this lease already has a claim of it, or one in progress (0). Taken before any I/O,
    /// so two overlapping claims of one cell never both write.
    pub(crate) fn reserve(&self, cell: &str) -> Result<Reservation<'_>, u64> {
        lock(&self.claimed).reserve(cell)?;
        Ok(Reservation {
            shared: self,
            cell: cell.into(),
            kept: false,
        })
    }

    pub(crate) fn unregister(&self, cell: &str, epoch: u64) {
        lock(&self.claimed).leave(cell, epoch);
    }

    /// The claim of `cell` at `epoch` is about to send its hand-off: whether it left the
    /// register ([`Register::hand_off_begins`]).
    pub(crate) fn hand_off_begins(&self, cell: &str, epoch: u64) -> bool {
        lock(&self.claimed).hand_off_begins(cell, epoch, self.fence.flaws)
    }

    pub(crate) fn claim_ended(&self) {
        self.claim_ended.notify_waiters();
    }

    /// A future that completes at the next end of a claim (create it before checking).
    pub(crate) fn claim_ended_signal(&self) -> tokio::sync::futures::Notified<'_> {
        self.claim_ended.notified()
    }

    /// A payload collection of one of this lease's claims begins: it ends when the returned
    /// guard is dropped.
    pub(crate) fn collection_begins(self: &Arc<Self>) -> Collecting {
        let c = &self.collections;
        c.running.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Collecting(self.clone())
    }

    /// Waits until no payload collection of this lease's claims runs, at most `ms` (each
    /// collection stops at a deadline of its own as well).
    async fn collections_end(&self, ms: u64) {
        let c = &self.collections;
        let all_ended = async {
            loop {
                let ended = c.ended.notified();
                if c.running.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                    return;
                }
                ended.await;
            }
        };
        let _ = self.fence.clock.timeout(ms, all_ended).await;
    }

    /// Waits until the keeper publishes that the lease is no longer held.
    pub(crate) async fn lost(&self) -> LeaseStatus {
        let mut rx = self.status.subscribe();
        loop {
            let s = rx.borrow_and_update().clone();
            if !matches!(s, LeaseStatus::Held | LeaseStatus::Acquiring) {
                return s;
            }
            if rx.changed().await.is_err() {
                return self.status_now();
            }
        }
    }

    pub(crate) fn core(&self) -> MutexGuard<'_, LeaseCore> {
        lock(&self.core)
    }

    pub(crate) fn is_held(&self) -> bool {
        let now = self.fence.now();
        self.core().is_held(now)
    }

    pub(crate) fn status_now(&self) -> LeaseStatus {
        let now = self.fence.now();
        self.core().status_at(now)
    }

    /// Remaining authority in ms (0 when not held).
    pub(crate) fn remaining_ms(&self) -> u64 {
        let now = self.fence.now();
        self.core().remaining_ms(now)
    }

    /// The bound of one claim or data request: the attempt timeout for the remaining
    /// authority, at least the configured minimum (so a just-expired lease still gets an
    /// answer to report).
    pub(crate) fn request_bound_ms(&self) -> u64 {
        let cfg = &self.fence.cfg;
        cfg.attempt_timeout(self.remaining_ms())
            .max(cfg.attempt_min_ms)
    }

    pub(crate) fn node(&self) -> &str {
        self.fence.ownership.node()
    }

    pub(crate) fn generation(&self) -> String {
        self.core().holder().generation.clone()
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
                    } => {
                        let renewal = guard != CasGuard::Absent && self.core().is_live();
                        let result = self.write_lease(guard, record, nonce, timeout_ms).await;
                        if renewal && matches!(result, WriteResult::Applied(_)) {
                            stats::lease_renewed();
                        }
                        queue.push(LeaseEvent::Written(result))
                    }
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
                stats::lease_fenced(*reason);
                warn!(node = self.node(), %reason, "lease fenced: stop writing")
            }
            s => {
                match s {
                    LeaseStatus::Held => stats::lease_acquired(),
                    LeaseStatus::Released => stats::lease_released(),
                    _ => {}
                }
                info!(node = self.node(), status = %s, "lease status")
            }
        }
        self.status.send_replace(status);
    }

    fn failed(&self, e: Error) {
        debug!(node = self.node(), error = %e, "lease request failed");
        *lock(&self.last_error) = Some(e);
    }

    async fn write_lease(
        &self,
        guard: CasGuard,
        record: NodeLeaseRecord,
        nonce: String,
        timeout_ms: u64,
    ) -> WriteResult {
        let body = LeaseBody {
            record,
            nonce,
            ttl_ms: Some(self.fence.cfg.ttl_ms),
            extra: lock(&self.extra).clone(),
        };
        let put = self.fence.ownership.put_lease_body(guard, &body);
        match bounded(&self.fence.clock, timeout_ms, put).await {
            Ok(PutOutcome::Applied(v)) => WriteResult::Applied(v),
            Ok(PutOutcome::Rejected) => WriteResult::Rejected,
            Err(e) => {
                let commit = e.commit();
                self.failed(e);
                match commit {
                    Commit::NotCommitted => WriteResult::NotCommitted,
                    Commit::Ambiguous => WriteResult::Ambiguous,
                }
            }
        }
    }

    async fn read_lease(&self, timeout_ms: u64) -> ReadResult {
        let read = self.fence.ownership.read_lease_body(self.node());
        match bounded(&self.fence.clock, timeout_ms, read).await {
            Ok(Some((body, version))) => {
                *lock(&self.extra) = body.extra;
                ReadResult::Found(ObservedLease {
                    record: body.record,
                    version,
                    nonce: body.nonce,
                    ttl_ms: body.ttl_ms,
                })
            }
            Ok(None) => ReadResult::Absent,
            Err(e) => {
                self.failed(e);
                ReadResult::Failed
            }
        }
    }

    /// Leaves what this acquisition saw of the record under our key to the next one.
    fn keep_observation(&self) {
        let seen = self.core().last_seen().cloned();
        let observer = &self.fence.observer;
        match seen {
            Some(o) => observer.remember(self.node(), o),
            None => observer.forget(self.node()),
        }
    }

    /// The error an acquisition that ended in `status` reports.
    fn acquire_error(&self, status: &LeaseStatus) -> Error {
        let node = self.node();
        match status {
            LeaseStatus::Busy {
                generation,
                expires_ms,
            } => Error::new(
                ErrorKind::Busy,
                format!(
                    "lease of {node} is held by another process (generation {generation}, expires at {expires_ms} wall ms by its clock)"
                ),
            )
            .not_committed(),
            LeaseStatus::Unavailable => lock(&self.last_error).take().unwrap_or_else(|| {
                Error::new(ErrorKind::Unavailable, format!("lease of {node}: the store failed"))
            }),
            other => Error::fenced(format!("lease of {node} not acquired: {other}")),
        }
    }
}

impl Fence {
    /// Acquires this node's lease once: one request when the lease key is free. Errors:
    /// [`ErrorKind::Busy`] if another process's record under this node id is not yet judged
    /// dead by observation (or a racer won) — this fence remembers what it saw, so calling
    /// again a TTL later takes over a record that stayed unchanged; the store's own error kind
    /// if the store failed. On success a background task renews it.
    pub async fn acquire(&self) -> Result<LeaseKeeper, Error> {
        self.acquire_until(None, None).await
    }

    /// Acquires as the successor of this node's previous process, whose lease generation was
    /// `predecessor` and which the caller **knows** is no longer running (it persisted its
    /// generation, and its process is gone): a lease record of that generation is taken over
    /// at once instead of after a TTL of observation. A record of any other generation is
    /// judged as [`acquire`](Self::acquire) does. If the predecessor is in fact still
    /// running, two processes act as the node until its next renewal fails; the cells'
    /// epochs still reject its late writes once they are claimed anew.
    pub async fn acquire_succeeding(&self, predecessor: &str) -> Result<LeaseKeeper, Error> {
        self.acquire_until(None, Some(predecessor)).await
    }

    /// Acquires, waiting up to `timeout` for a live holder to go: it is polled every
    /// [`LeaseConfig::poll_ms`](crate::decide::LeaseConfig::poll_ms) and taken over once
    /// released, or seen unchanged for a full TTL. Store failures are retried with backoff
    /// until the timeout. Errors: [`ErrorKind::Busy`] if a live holder was still there at the
    /// timeout, else the last store error.
    pub async fn acquire_wait(&self, timeout: std::time::Duration) -> Result<LeaseKeeper, Error> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline = self.clock.mono_ms().saturating_add(timeout_ms);
        self.acquire_until(Some(deadline), None).await
    }

    async fn acquire_until(
        &self,
        deadline: Option<u64>,
        predecessor: Option<&str>,
    ) -> Result<LeaseKeeper, Error> {
        let shared = Shared::new(self, predecessor);
        let mut event = LeaseEvent::Acquire {
            wait: deadline.is_some(),
        };
        loop {
            let wake = shared.drive(event).await;
            let status = shared.core().status();
            match status {
                LeaseStatus::Held => return Ok(LeaseKeeper::spawn(shared, wake)),
                LeaseStatus::Acquiring => {}
                other => {
                    shared.keep_observation();
                    return Err(shared.acquire_error(&other));
                }
            }
            let now = self.clock.mono_ms();
            let at = wake.unwrap_or(now.saturating_add(self.cfg.poll_ms()));
            match deadline {
                Some(d) if at >= d => {
                    self.clock.sleep_until(d).await;
                    return Err(give_up(&shared).await);
                }
                _ => self.clock.sleep_until(at).await,
            }
            event = LeaseEvent::Tick;
        }
    }
}

/// Stops a waiting acquisition at its deadline and says why it did not get the lease.
async fn give_up(shared: &Shared) -> Error {
    shared.keep_observation();
    let seen = shared.core().observed().and_then(|o| o.lease.clone());
    shared.drive(LeaseEvent::Release).await;
    match seen {
        Some(l) => shared.acquire_error(&LeaseStatus::Busy {
            generation: l.record.generation,
            expires_ms: l.record.expires_ms,
        }),
        None => lock(&shared.last_error).take().unwrap_or_else(|| {
            Error::new(ErrorKind::Timeout, "the lease was not acquired in time").not_committed()
        }),
    }
}

#[derive(Debug)]
enum Command {
    Release,
}

/// A held node lease, renewed in the background until released, fenced or dropped.
///
/// # Dropping it
///
/// `Drop` cannot wait, so dropping a keeper only *asks*: it closes the keeper's command
/// channel, and the background task, the next time the runtime polls it, stops renewing and
/// sends one write of a released record (`expires_ms: 0`). Exactly what happens then:
///
/// - the runtime keeps running (a long-lived multi-thread runtime): the released record is
///   written within one request; peers may take over the node's cells at once;
/// - the runtime stops polling first — `main` returns under `#[tokio::main]` (either
///   flavour: the runtime is dropped and its tasks are cancelled at their next await), the
///   runtime is shut down, or the process exits — **nothing is written**: the record stays
///   as the last renewal left it, no renewal follows, and peers take the node's cells over
///   only after observing it unchanged for a full TTL (a restart under the same node id can
///   take it over at once with [`Fence::acquire_succeeding`]);
/// - the release write fails or times out: the same as above.
///
/// In every case this process's authority ends at most one TTL after its last renewal was
/// sent, so nothing unsafe follows — only a slower hand-over. Cells are never released by
/// dropping (neither the keeper nor a [`CellClaim`](super::CellClaim)): the store names this
/// node as their owner until they are released, handed off or taken over. To leave
/// promptly, release the cells and then await [`LeaseKeeper::release`].
#[derive(Debug)]
pub struct LeaseKeeper {
    pub(crate) shared: Arc<Shared>,
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

    /// Whether this process may act as the lease holder *now*: judged at call time against
    /// the anchor of the last applied write, on both the monotonic and the wall clock — a
    /// TTL passed on either ends it (a machine resumed from suspend knows at once).
    pub fn is_held(&self) -> bool {
        self.shared.is_held()
    }

    /// The authority left now, the lesser of what the monotonic and the wall clock leave:
    /// zero when not held. A supervisor can end what it runs early enough that it is gone
    /// before this runs out.
    pub fn remaining(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.shared.remaining_ms())
    }

    /// The current status, judged now: it agrees with [`is_held`](Self::is_held) (a lease
    /// whose authority ran out reads as fenced at once).
    pub fn status(&self) -> LeaseStatus {
        self.shared.status_now()
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
        self.shared.generation()
    }

    /// The fence this lease belongs to.
    pub fn fence(&self) -> &Fence {
        &self.shared.fence
    }

    /// Claims `cell` at a new epoch (see [`crate::decide::decide_claim`]): two requests
    /// (read the head, write it); three for a cell taken over from a dead node whose lease
    /// this fence has watched but not read in the last
    /// [`poll_ms`](crate::decide::LeaseConfig::poll_ms) — a node never observed before is
    /// first answered `Busy` (its observation starts) and taken over a TTL later. The
    /// claim's write of the cell head at the new epoch is the seal: from then on every write
    /// of an earlier epoch is rejected by the store. A new epoch is taken also when the store
    /// already names this node (a predecessor process's cell); see
    /// [`adopt`](Self::adopt) to resume one without.
    ///
    /// Errors: [`ErrorKind::Fenced`] if the lease is not held; [`ErrorKind::InvalidInput`]
    /// if this lease already has a live claim of the cell (use that one; claiming again
    /// would fence it); [`ErrorKind::Busy`] if a live foreign owner has the cell or a racer
    /// won; [`ErrorKind::Corrupt`] if the head is.
    pub async fn claim(&self, cell: &str) -> Result<claim::CellClaim, Error> {
        claim::claim(&self.shared, cell).await
    }

    /// Claims `cell`, waiting up to `timeout` for it to come free: the cell's counterpart of
    /// [`Fence::acquire_wait`]. A first [`claim`](Self::claim) (two requests for a free
    /// cell); while a live node owns the cell, its head and its owner's lease are looked at
    /// every [`poll_ms`](crate::decide::LeaseConfig::poll_ms) — or sooner, at the instant
    /// the owner's lease could be judged dead — and the cell is claimed as soon as it is
    /// released or its owner is judged dead by the observation rule (its lease record seen
    /// unchanged for a full TTL by this process; a node never watched before costs that
    /// TTL, as with `claim`). Store failures are retried with backoff until the deadline.
    ///
    /// Errors: [`ErrorKind::Busy`] (not committed) if a live owner still had the cell at the
    /// deadline — answered at the deadline, an attempt already under way finishing first
    /// (each of its requests bounded as `claim`'s are); else the store's last error if every
    /// attempt failed; [`ErrorKind::Fenced`] as soon as this lease is not held — nothing is
    /// claimed after it is lost; at once, the errors `claim` gives for bad input, a cell this
    /// lease already claims, a corrupt head or refused credentials.
    ///
    /// ```
    /// # fn block(f: impl std::future::Future<Output = ()>) {
    /// #     tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true)
    /// #         .build().unwrap().block_on(f)
    /// # }
    /// # block(async {
    /// use std::{sync::Arc, time::Duration};
    /// use fence_core::{ErrorKind, Fence, MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// let a = Fence::builder(store.clone(), "a").build().unwrap().acquire().await.unwrap();
    /// let b = Fence::builder(store, "b").build().unwrap().acquire().await.unwrap();
    /// let held = a.claim("jobs").await.unwrap();
    /// // a is alive and renewing: b waits a second, then hears Busy.
    /// let err = b.claim_wait("jobs", Duration::from_secs(1)).await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Busy);
    /// // Once a releases, b gets it at the next look.
    /// let (released, claimed) = tokio::join!(held.release(), b.claim_wait("jobs", Duration::from_secs(5)));
    /// released.unwrap();
    /// assert_eq!(claimed.unwrap().epoch(), 2);
    /// # });
    /// ```
    ///
    /// Cancelling it is as safe as cancelling `claim`: a claim whose write may have landed
    /// leaves the cell named by this node at a new epoch, with no [`CellClaim`](claim::CellClaim);
    /// peers take it once this lease ends, and this lease may claim it again.
    pub async fn claim_wait(
        &self,
        cell: &str,
        timeout: std::time::Duration,
    ) -> Result<claim::CellClaim, Error> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let wait = super::wait::Wait {
            shared: &self.shared,
            cell,
            deadline: Some(self.shared.fence.clock.mono_ms().saturating_add(timeout_ms)),
            period_ms: self.shared.fence.cfg.poll_ms(),
            look_first: false,
        };
        match wait.run(&mut |_| {}, std::future::pending()).await? {
            super::wait::Waited::Claimed(c) => Ok(c),
            // `pending()` never fires: there is no stop signal to end the wait.
            super::wait::Waited::Stopped => Err(Error::new(ErrorKind::Other, "wait stopped")),
        }
    }

    /// Claims each of `cells` (see [`claim`](Self::claim)) with at most `concurrency` claims
    /// in flight; the results come back in the order of `cells`. Reads of a foreign owner's
    /// lease are shared by all its cells (one read in flight per node), so taking over `n`
    /// cells of one dead node this fence has watched costs `2n + 1` requests.
    pub async fn claim_many<I, S>(
        &self,
        cells: I,
        concurrency: usize,
    ) -> Vec<(String, Result<claim::CellClaim, Error>)>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let results = self.claim_or_resume_many(cells, concurrency, &[]).await;
        results
            .into_iter()
            .map(|(cell, r)| (cell, r.map(|(c, _)| c)))
            .collect()
    }

    /// [`claim`](Self::claim), except that a head naming this node, written by one of the
    /// `resumable` lease generations, is resumed at its current epoch from the same read, as
    /// [`adopt`](Self::adopt) would: `(claim, true)`. For the generations whose writes the
    /// caller knows have all settled — this process's own, or a predecessor known gone (see
    /// docs/design.md, "Restart and resume"), or a receiver's named by a
    /// [hand-off](claim::CellClaim::hand_off). Two requests either way: a claim is a read and
    /// a CAS at epoch + 1, a resume a read and a CAS at the same epoch (see
    /// [`adopt`](Self::adopt)).
    pub async fn claim_or_resume(
        &self,
        cell: &str,
        resumable: &[String],
    ) -> Result<(claim::CellClaim, bool), Error> {
        claim::claim_or_resume(&self.shared, cell, resumable).await
    }

    /// [`claim_or_resume`](Self::claim_or_resume) for each of `cells`, at most `concurrency`
    /// at once; the results come back in the order of `cells`.
    pub async fn claim_or_resume_many<I, S>(
        &self,
        cells: I,
        concurrency: usize,
        resumable: &[String],
    ) -> Vec<(String, Result<(claim::CellClaim, bool), Error>)>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        use futures::StreamExt;
        futures::stream::iter(cells.into_iter().map(Into::into))
            .map(|cell: String| async move {
                let result = claim::claim_or_resume(&self.shared, &cell, resumable).await;
                (cell, result)
            })
            .buffered(concurrency.max(1))
            .collect()
            .await
    }

    /// Resumes `cell` at its current epoch, without a new one, if the store names this node
    /// as its owner: two requests — a read, and a compare-and-swap of the head at the same
    /// epoch that names this lease generation (the *seal*: a peer's takeover racing the
    /// resume is refused, or the resume is, never neither). For a process that restarted under the same node id (or
    /// whose lease lapsed while nobody took over) and wants its cells back without a
    /// failover. Correct only when no other process of this node can still write under that
    /// epoch — this process wrote it, or the one that did is gone and its requests have
    /// settled; otherwise its late writes and ours would interleave at one epoch (the store
    /// still keeps every write consistent, and every later claim fences both). Errors:
    /// [`ErrorKind::Fenced`] if the lease is not held or the cell is not this node's.
    pub async fn adopt(&self, cell: &str) -> Result<claim::CellClaim, Error> {
        claim::adopt(&self.shared, cell).await
    }

    /// Stops renewing and writes a released lease record (`expires_ms: 0`), so peers may take
    /// over at once. Returns when done, and once the payload collections its claims began
    /// have ended (each stops at a deadline of 4 × the longest attempt timeout, 10 s by
    /// default).
    pub async fn release(mut self) {
        let _ = self.commands.send(Command::Release).await;
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let budget = claim::collection_budget_ms(&self.shared.fence.cfg);
        self.shared.collections_end(budget).await;
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
