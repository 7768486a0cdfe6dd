//! Claims and the fenced writes of a claimed cell.

use std::sync::Arc;

use bytes::Bytes;
use tracing::{info, warn};

use super::head::{superseded, HeadWrite};
use super::keeper::{Reservation, Shared};
use super::{bounded, cell, CellData};
use std::time::Duration;

use crate::decide::claim::{ClaimEnd, ClaimFlow, ClaimStep};
use crate::decide::claimed::{Base, CellEnd, CellStep, CellWrite, Change, Refusal, Standing};
use crate::decide::collect::{unused_payload, victims, Fate};
use crate::decide::Flaws;
use crate::error::{Commit, Error, ErrorKind};
use crate::flaws::sabotaged;
use crate::ownership::{check_name, Ownership};
use crate::record::{CellHead, CellPayload, Extra, HeadFormat};
use crate::stats;
use crate::store::Version;

/// A fenced write's acknowledgement: the head is stored at `version`, and the store applied
/// it under a guard on a version that named us at `epoch` — so we owned the cell at the
/// instant the write landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteAck {
    /// The epoch the write was made under.
    pub epoch: u64,
    /// The head's new version.
    pub version: Version,
}

/// What a claim knows of its cell's head: the guard of its next write. Kept small (a held
/// claim costs about 240 B): the head's unknown fields, rarely any, live behind a box.
#[derive(Debug)]
struct Known {
    version: Version,
    payload: CellPayload,
    extra: Option<Box<Extra>>,
}

impl Known {
    fn of(head: CellHead, version: Version) -> Self {
        let extra = (!head.extra.is_empty()).then(|| Box::new(head.extra));
        Known {
            version,
            payload: head.payload,
            extra,
        }
    }
}

impl From<Known> for Base {
    fn from(k: Known) -> Base {
        Base {
            version: k.version,
            payload: k.payload,
            extra: k.extra.map(|e| *e).unwrap_or_default(),
        }
    }
}

impl From<Base> for Known {
    fn from(b: Base) -> Known {
        let extra = (!b.extra.is_empty()).then(|| Box::new(b.extra));
        Known {
            version: b.version,
            payload: b.payload,
            extra,
        }
    }
}

pub use crate::decide::claimed::ClaimStatus;

/// A claimed cell: its epoch, and fenced writes of its head.
///
/// Writes through one claim are serialised (it is `&self`, so they may be issued
/// concurrently): each is settled by evidence before the next is sent, so none is ever
/// applied twice or over a later one. Dropping it ends the claim locally (the store still
/// names this node until it is released or taken over).
#[derive(Debug)]
pub struct CellClaim {
    shared: Arc<Shared>,
    cell: Box<str>,
    epoch: u64,
    /// `None` after a write that got no verdict: the next write reads the head first.
    known: tokio::sync::Mutex<Option<Known>>,
    /// Whether (and how) the claim ended: set once a write found it superseded, it was
    /// closed, or a release or hand-off was about to be sent.
    standing: std::sync::Mutex<Standing>,
    /// Whether this claim still stands in the lease's register of claimed cells (an ended
    /// claim leaves it at once, so the cell can be claimed or adopted again).
    registered: std::sync::atomic::AtomicBool,
}

/// A [`CellClaim::write_if`] whose head moved: the store proved it did not land.
fn moved_on(cell: &str) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!(
            "cell {cell}: the head moved past the version this write was made for; nothing written"
        ),
    )
    .not_committed()
}

fn kept_moving(cell: &str) -> Error {
    Error::new(
        ErrorKind::Busy,
        format!("cell {cell}: the head kept moving"),
    )
    .not_committed()
}

pub(crate) async fn claim(shared: &Arc<Shared>, cell: &str) -> Result<CellClaim, Error> {
    claim_or_resume(shared, cell, &[]).await.map(|(c, _)| c)
}

/// A claim, or — when the head names this node and was written by one of the `resumable`
/// lease generations — the cell resumed at its current epoch from the same read.
pub(crate) async fn claim_or_resume(
    shared: &Arc<Shared>,
    cell: &str,
    resumable: &[String],
) -> Result<(CellClaim, bool), Error> {
    check_name("cell", cell)?;
    if !shared.is_held() {
        return Err(Error::fenced("cannot claim a cell without a held lease"));
    }
    let slot = shared.reserve(cell).map_err(|e| already_claimed(cell, e))?;
    let flow = flow(shared, cell).resuming(resumable);
    run_flow(shared, slot, cell, flow).await
}

/// The claim machine of this lease for `cell`, with the fence's sabotage switch.
fn flow(shared: &Arc<Shared>, cell: &str) -> ClaimFlow {
    let fence = &shared.fence;
    let _ = cell;
    #[cfg(feature = "sabotage")]
    let last_written = fence.last_written(cell);
    #[cfg(not(feature = "sabotage"))]
    let last_written = None;
    let flow = ClaimFlow::new(
        shared.node(),
        &shared.generation(),
        fence.ownership.fresh_nonce(),
    );
    flow.with_flaws(fence.flaws, fence.cfg.ttl_ms, last_written)
}

/// Performs the steps of `flow` until it ends.
async fn run_flow(
    shared: &Arc<Shared>,
    slot: Reservation<'_>,
    cell: &str,
    mut flow: ClaimFlow,
) -> Result<(CellClaim, bool), Error> {
    let fence = &shared.fence;
    let own = &fence.ownership;
    let bound = || shared.request_bound_ms();
    let mut step = flow.start();
    loop {
        let next = match step {
            ClaimStep::ReadHead => {
                let read = bounded(&fence.clock, bound(), own.read_head(cell));
                read.await
                    .map_err(Error::not_committed)
                    .map(|h| flow.on_head(h))
            }
            ClaimStep::Sleep(ms) => {
                fence.clock.sleep(Duration::from_millis(ms)).await;
                Ok(flow.resume())
            }
            ClaimStep::JudgeOwner { node, writer } => {
                let seen = fence
                    .observer
                    .liveness(fence, &node, writer.as_deref(), bound());
                seen.await
                    .map_err(Error::not_committed)
                    .map(|l| flow.on_liveness(l))
            }
            ClaimStep::Carry { head, epoch } => carried(shared, cell, epoch, head)
                .await
                .map_err(Error::not_committed)
                .map(|(payload, extra)| flow.on_carried(payload, extra)),
            ClaimStep::Seal { body, write } => {
                let shell = HeadWrite {
                    own,
                    cell,
                    owner: shared.node(),
                    epoch: body.epoch,
                    body: &body,
                    guard: write.guard().clone(),
                    flaws: fence.flaws,
                    clock: &fence.clock,
                };
                shell.drive(write, bound).await.map(|s| flow.on_sealed(s))
            }
            ClaimStep::Done(end) => return claim_ended(shared, slot, cell, end),
        };
        step = match next {
            Ok(next) => next,
            Err(e) => flow
                .on_failed(shared.is_held(), e.is_ambiguous())
                .ok_or(e)?,
        };
    }
}

/// The claim, or the error, a finished claim machine stands for.
fn claim_ended(
    shared: &Arc<Shared>,
    slot: Reservation<'_>,
    cell: &str,
    end: ClaimEnd,
) -> Result<(CellClaim, bool), Error> {
    let me = shared.node();
    match end {
        ClaimEnd::Claimed {
            epoch,
            body,
            version,
            resumed,
            takeover_from,
        } => {
            if resumed {
                info!(node = me, cell, epoch, "cell resumed at its current epoch");
            } else {
                info!(node = me, cell, epoch, from = ?takeover_from, "cell claimed");
                stats::claimed(match (&takeover_from, epoch) {
                    (Some(_), _) => stats::ClaimKind::Takeover,
                    (None, 1) => stats::ClaimKind::New,
                    (None, _) => stats::ClaimKind::Reclaim,
                });
            }
            if !resumed {
                // The seal ended every earlier epoch: what their writers left is nobody's.
                let keep = body.payload.blob().map(|b| b.name.clone());
                collect_after_seal(shared, cell, epoch, keep);
            }
            let known = Some(Known::of(body, version));
            Ok((CellClaim::new(shared, slot, cell, epoch, known), resumed))
        }
        ClaimEnd::Busy {
            node,
            epoch,
            until_mono,
        } => {
            let wait = until_mono.saturating_sub(shared.fence.clock.mono_ms());
            Err(Error::new(
                ErrorKind::Busy,
                format!("cell {cell} is owned by live node {node} at epoch {epoch} (judged dead in {wait} ms at the earliest if its lease stays unchanged)"),
            )
            .not_committed())
        }
        ClaimEnd::LostRace { maybe_landed } => Err(lost_race(
            cell,
            if maybe_landed {
                Commit::Ambiguous
            } else {
                Commit::NotCommitted
            },
        )),
        ClaimEnd::EpochExhausted { epoch } => {
            let key = shared.fence.ownership.owner_key(cell)?;
            Err(Error::corrupt(&key, format!("epoch {epoch} cannot be raised")))
        }
        ClaimEnd::NotAdoptable { found: Some((owner, epoch)) } => Err(Error::fenced(format!(
            "cell {cell} is not this node's to adopt (owner {owner:?} at epoch {epoch}; an older format needs a claim)"
        ))),
        ClaimEnd::NotAdoptable { found: None } => {
            Err(Error::fenced(format!("cell {cell} has no head to adopt")))
        }
        ClaimEnd::LeaseLost { maybe_landed } => Err(lease_lost(cell, maybe_landed)),
    }
}

/// The error of a claim whose lease was lost while it ran.
fn lease_lost(cell: &str, maybe_landed: bool) -> Error {
    let what = if maybe_landed {
        "its seal may have landed: the cell then names this node until it is taken over"
    } else {
        "nothing written"
    };
    let commit = if maybe_landed {
        Commit::Ambiguous
    } else {
        Commit::NotCommitted
    };
    Error::new(
        ErrorKind::Fenced,
        format!("cell {cell}: the lease was lost while the cell was being claimed; {what}"),
    )
    .with_commit(commit)
}

/// Deletes of payload objects one collection keeps in flight.
const DELETES_IN_FLIGHT: usize = 8;

/// A collection's deadline, in longest attempt timeouts: it stops there (the next claim goes
/// on), and a lease's release waits for it no longer.
pub(crate) const COLLECTION_BUDGET_ATTEMPTS: u64 = 4;

/// The deadline of one payload collection under `cfg`.
pub(crate) fn collection_budget_ms(cfg: &crate::decide::LeaseConfig) -> u64 {
    cfg.attempt_max_ms
        .saturating_mul(COLLECTION_BUDGET_ATTEMPTS)
}

/// After a claim sealed `epoch` (a new one: a resume seals nothing new): collects, in the
/// background, the payload objects of earlier epochs other than `keep` (the one its head
/// names) — the objects of writers killed before their head write, or before deleting what
/// they replaced ([`victims`]). The claim does not wait for it; its lease's release does.
fn collect_after_seal(shared: &Arc<Shared>, cell: &str, epoch: u64, keep: Option<String>) {
    let running = shared.collection_begins();
    let fence = &shared.fence;
    let (own, clock, flaws) = (fence.ownership.clone(), fence.clock.clone(), fence.flaws);
    let (bound, budget) = (fence.cfg.attempt_max_ms, collection_budget_ms(&fence.cfg));
    let cell = cell.to_owned();
    tokio::spawn(async move {
        let _turn = running.turn().await;
        let collector = Collector {
            own: &own,
            clock: &clock,
            cell: &cell,
            bound,
        };
        let work = collector.collect(epoch, keep.as_deref(), flaws);
        match bounded(&clock, budget, work).await {
            Ok(0) => {}
            Ok(n) => info!(
                cell,
                epoch,
                deleted = n,
                "payload objects of earlier epochs collected"
            ),
            Err(e) => {
                tracing::debug!(cell, epoch, error = %e, "payload collection stopped; a later claim goes on")
            }
        }
        drop(running);
    });
}

/// The requests of one payload collection of `cell`, each bounded by `bound` ms.
struct Collector<'a> {
    own: &'a Ownership,
    clock: &'a crate::Clock,
    cell: &'a str,
    bound: u64,
}

impl Collector<'_> {
    /// One collection by a claim at `epoch` whose head names `keep`: one listing, then the
    /// deletes [`victims`] chooses.
    async fn collect(&self, epoch: u64, keep: Option<&str>, flaws: Flaws) -> Result<usize, Error> {
        let listed = self.list().await?;
        self.delete(&listed, epoch, keep, flaws).await
    }

    /// The names of the cell's payload objects (only objects right under `blobs/`).
    async fn list(&self) -> Result<Vec<String>, Error> {
        let prefix = self.own.blobs_prefix(self.cell)?;
        let list = self.own.store().list(Some(&prefix));
        let listed = bounded(self.clock, self.bound, list).await?;
        let folder = format!("{}/", prefix.as_str());
        let names = listed
            .iter()
            .filter_map(|k| k.as_str().strip_prefix(folder.as_str()))
            .filter(|name| !name.contains('/'));
        Ok(names.map(str::to_owned).collect())
    }

    /// Deletes the objects of `listed` that [`victims`] chooses for a claim at `epoch` whose
    /// head names `keep`, a few in flight at a time. Counts the deletes; the first failure,
    /// if any, is the answer.
    async fn delete(
        &self,
        listed: &[String],
        epoch: u64,
        keep: Option<&str>,
        flaws: Flaws,
    ) -> Result<usize, Error> {
        let chosen = victims(listed.iter().map(String::as_str), epoch, keep, flaws);
        let (mut deleted, mut failed) = (0, None);
        for batch in chosen.chunks(DELETES_IN_FLIGHT) {
            let deletes = batch.iter().map(|name| self.delete_one(name));
            for result in futures::future::join_all(deletes).await {
                match result {
                    Ok(()) => deleted += 1,
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
        }
        failed.map_or(Ok(deleted), Err)
    }

    async fn delete_one(&self, name: &str) -> Result<(), Error> {
        let key = self.own.blob_key(self.cell, name)?;
        bounded(
            self.clock,
            self.bound,
            self.own.store().delete_immutable(&key),
        )
        .await
    }
}

fn already_claimed(cell: &str, epoch: u64) -> Error {
    let at = if epoch == 0 {
        "has a claim of it in progress".to_owned()
    } else {
        format!("already holds it at epoch {epoch}: use that claim (claiming again would fence it)")
    };
    Error::new(
        ErrorKind::InvalidInput,
        format!("cell {cell}: this lease {at}"),
    )
    .not_committed()
}

/// [`LeaseKeeper::adopt`](super::LeaseKeeper::adopt): a resume (a read and the seal at the
/// head's epoch) of a head that names this node.
pub(crate) async fn adopt(shared: &Arc<Shared>, cell: &str) -> Result<CellClaim, Error> {
    check_name("cell", cell)?;
    if !shared.is_held() {
        return Err(Error::fenced("cannot adopt a cell without a held lease"));
    }
    let slot = shared.reserve(cell).map_err(|e| already_claimed(cell, e))?;
    let flow = flow(shared, cell).adopting();
    run_flow(shared, slot, cell, flow).await.map(|(c, _)| c)
}

fn lost_race(cell: &str, commit: Commit) -> Error {
    Error::new(
        ErrorKind::Busy,
        format!("cell {cell}: another claim won the race"),
    )
    .with_commit(commit)
}

/// The payload and unknown fields a claim carries forward from head `h`: its own, or — for
/// a version-1 cell — its separate data head moved into it (its fields too, the head's
/// winning a clash).
async fn carried(
    shared: &Shared,
    cell: &str,
    epoch: u64,
    h: CellHead,
) -> Result<(CellPayload, Extra), Error> {
    if h.format != HeadFormat::V1 {
        return Ok((h.payload, h.extra));
    }
    let fence = &shared.fence;
    let own = &fence.ownership;
    let bound = shared.request_bound_ms();
    let legacy = bounded(&fence.clock, bound, own.read_legacy_data(cell))
        .await
        .map_err(Error::not_committed)?;
    let Some((data, _)) = legacy else {
        return Ok((CellPayload::Empty, h.extra));
    };
    let mut extra = data.extra;
    extra.extend(h.extra);
    let store = own.store_payload(cell, epoch, data.payload, fence.inline_max);
    Ok((bounded(&fence.clock, bound, store).await?, extra))
}

impl Drop for CellClaim {
    fn drop(&mut self) {
        self.leave_register();
    }
}

/// Takes a claim out of its lease's register when dropped: when its hand-off returns, or is
/// given up by its caller.
struct LeaveRegister<'a>(&'a CellClaim);

impl Drop for LeaveRegister<'_> {
    fn drop(&mut self) {
        self.0.leave_register();
    }
}

impl CellClaim {
    fn new(
        shared: &Arc<Shared>,
        slot: Reservation<'_>,
        cell: &str,
        epoch: u64,
        known: Option<Known>,
    ) -> Self {
        slot.keep(epoch);
        CellClaim {
            shared: shared.clone(),
            cell: cell.into(),
            epoch,
            known: tokio::sync::Mutex::new(known),
            standing: std::sync::Mutex::new(Standing::default()),
            registered: std::sync::atomic::AtomicBool::new(true),
        }
    }

    fn leave_register(&self) {
        use std::sync::atomic::Ordering;
        if self.registered.swap(false, Ordering::SeqCst) {
            self.shared.unregister(&self.cell, self.epoch);
        }
    }

    fn standing(&self) -> std::sync::MutexGuard<'_, Standing> {
        self.standing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the claim as `how` ([`Standing::end`]) and takes it out of the lease's register.
    fn end(&self, how: ClaimStatus) {
        self.standing().end(how);
        self.leave_register();
        self.shared.claim_ended();
    }

    /// Stops the claim acting without leaving the lease's register: a release or a hand-off
    /// is about to be sent ([`Standing::stop_acting`]).
    fn stop_acting(&self) {
        self.standing().stop_acting();
        self.shared.claim_ended();
    }

    fn ended(&self) -> Option<ClaimStatus> {
        self.standing().ended()
    }

    /// The cell.
    pub fn cell(&self) -> &str {
        &self.cell
    }

    /// The epoch this claim holds.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The fence of the lease this claim belongs to (its store and node): what a fenced
    /// read-modify-write at this claim's epoch goes through
    /// ([`keymap::put`](crate::keymap::put), [`update_cell`](super::update_cell)).
    pub fn fence(&self) -> &super::Fence {
        &self.shared.fence
    }

    /// The bound of one request made for this claim now: the attempt timeout for the
    /// lease's remaining authority (half of it, within the fence's attempt timeouts), as
    /// every write of the claim is bounded. A request made with less authority left gets
    /// less time, so none outlives the lease by much.
    pub fn request_bound(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.shared.request_bound_ms())
    }

    /// Whether this claim may act now: the node lease is held (judged now, on both the
    /// monotonic and the wall clock) and no write has found the cell superseded. A local check; the store is the
    /// real fence — a claim superseded since its last write reads as held until its next
    /// write or the lease's loss says otherwise.
    pub fn is_held(&self) -> bool {
        self.status() == ClaimStatus::Held
    }

    /// This claim's state, as far as this process knows.
    pub fn status(&self) -> ClaimStatus {
        let standing = *self.standing();
        standing.status(self.shared.is_held())
    }

    /// Waits until the claim is over as far as this process can tell — the lease is lost
    /// (fenced, expired, released) or a write found the cell superseded — and says how.
    /// Cancellation-safe.
    pub async fn lost(&self) -> ClaimStatus {
        loop {
            let ended = self.shared.claim_ended_signal();
            let status = self.status();
            if status != ClaimStatus::Held {
                return status;
            }
            tokio::select! {
                _ = ended => {}
                _ = self.shared.lost() => {}
            }
        }
    }

    /// A fenced write of the cell's data.
    ///
    /// One compare-and-swap of the cell head (plus, for a payload above the inline bound, one
    /// create of a payload object first), guarded on the head version this claim last wrote
    /// or saw at `(self, epoch)`. Applied means we owned the cell at the instant it landed:
    /// the write is acknowledged. A claim at a later epoch rewrote the head, so from then on
    /// this claim's writes are rejected **by the store** ([`ErrorKind::Fenced`]), whatever
    /// this process believes about its lease. An error whose
    /// [`commit`](Error::commit) is ambiguous means the write may have landed; it is never
    /// re-sent on a newer head.
    pub async fn write(&self, payload: impl Into<Bytes>) -> Result<WriteAck, Error> {
        self.write_checked(payload.into(), None).await
    }

    /// A [`write`](Self::write) that lands only over the head version `expected` (a
    /// [`CellData::version`] this claim [read](Self::read)), or with `None` only while the
    /// cell holds no data (`read` answered `None`): a read-modify-write that never builds on
    /// a head it did not see. A head that moved — another write through this claim,
    /// or an ambiguous earlier one landing late — answers [`ErrorKind::Conflict`] with
    /// [`Commit::NotCommitted`]: the store proved the write did
    /// not land; read again and rebuild. Same costs as `write`, plus one read when the claim
    /// does not know the head `expected` names.
    ///
    /// ```
    /// # fn block(f: impl std::future::Future<Output = ()>) {
    /// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
    /// # }
    /// # block(async {
    /// use std::sync::Arc;
    /// use fence_core::{ErrorKind, Fence, MemoryStore};
    /// let fence = Fence::builder(Arc::new(MemoryStore::new()), "n1").build().unwrap();
    /// let lease = fence.acquire().await.unwrap();
    /// let cell = lease.claim("counter").await.unwrap();
    /// cell.write("1").await.unwrap();
    /// let seen = cell.read().await.unwrap().unwrap();
    /// cell.write("2").await.unwrap(); // the head moves on
    /// let err = cell.write_if(Some(&seen.version), "stale + 1").await.unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Conflict);
    /// assert!(!err.is_ambiguous());
    /// # });
    /// ```
    pub async fn write_if(
        &self,
        expected: Option<&Version>,
        payload: impl Into<Bytes>,
    ) -> Result<WriteAck, Error> {
        self.write_checked(payload.into(), Some(expected)).await
    }

    async fn write_checked(
        &self,
        payload: Bytes,
        exact: Option<Option<&Version>>,
    ) -> Result<WriteAck, Error> {
        self.refuse_unless_acting("write")?;
        let fence = &self.shared.fence;
        let stored =
            fence
                .ownership
                .store_payload(&self.cell, self.epoch, payload, fence.inline_max);
        // A payload object no head points at commits nothing: its failure leaves the write
        // not made.
        let stored = bounded(&fence.clock, self.shared.request_bound_ms(), stored)
            .await
            .map_err(Error::not_committed)?;
        if sabotaged!(fence.flaws, ReapplyAfterAmbiguity) {
            // Not serialised: the state is copied out and the lock let go at once.
            let known = self.known.lock().await.take();
            let mut slot = known;
            let result = self.write_on(&mut slot, stored, exact).await;
            *self.known.lock().await = slot;
            return result;
        }
        let mut known = self.known.lock().await;
        // The claim may have ended (closed, handed off, released), or the lease run out,
        // while this write waited for the one before it.
        if let Err(e) = self.refuse_unless_acting("write") {
            self.collect_freed(Fate::NotLanded, &stored, &CellPayload::Empty);
            return Err(e);
        }
        self.write_on(&mut known, stored, exact).await
    }

    async fn write_on(
        &self,
        slot: &mut Option<Known>,
        payload: CellPayload,
        exact: Option<Option<&Version>>,
    ) -> Result<WriteAck, Error> {
        let change = Change::Data {
            payload: payload.clone(),
            exact: exact.map(|e| e.cloned()),
        };
        let end = match self.change(slot, change).await {
            Ok(end) => end,
            Err(e) => {
                let fate = Fate::of_failure(e.is_ambiguous());
                self.collect_freed(fate, &payload, &CellPayload::Empty);
                return Err(e);
            }
        };
        let replaced = match &end {
            CellEnd::Written { replaced, .. } => replaced.clone(),
            _ => CellPayload::Empty,
        };
        self.collect_freed(Fate::of_end(&end), &payload, &replaced);
        match end {
            CellEnd::Written { base, .. } => {
                stats::write_acknowledged();
                #[cfg(feature = "sabotage")]
                if sabotaged!(self.shared.fence.flaws, RollbackAcknowledged) {
                    self.shared.fence.wrote(&self.cell, &payload);
                }
                let version = base.version.clone();
                *slot = Some(Known::from(base));
                Ok(WriteAck {
                    epoch: self.epoch,
                    version,
                })
            }
            CellEnd::Conflict { base } => {
                *slot = Some(Known::from(base));
                Err(moved_on(&self.cell))
            }
            CellEnd::Superseded {
                epoch,
                maybe_landed,
            } => {
                warn!(node = self.shared.node(), cell = %self.cell, epoch = self.epoch, found = epoch,
                      "write refused: the epoch was superseded");
                stats::write_fenced();
                Err(self.superseded_by(epoch, maybe_landed))
            }
            CellEnd::KeptMoving => Err(kept_moving(&self.cell)),
        }
    }

    /// Performs the steps of one change of this claim's head, from what the claim knows of
    /// it (taken: if the change is cancelled or gets no verdict, the next one reads the head
    /// instead of trusting a guard the store may have moved past).
    async fn change(&self, slot: &mut Option<Known>, change: Change) -> Result<CellEnd, Error> {
        let fence = &self.shared.fence;
        let own = &fence.ownership;
        let bound = || self.shared.request_bound_ms();
        let known = slot.take().map(Base::from);
        let me = self.shared.node();
        let nonce = own.fresh_nonce();
        let mut core = CellWrite::new(
            me,
            self.epoch,
            &self.shared.generation(),
            nonce,
            change,
            known,
        )
        .with_flaws(fence.flaws);
        let mut step = core.start();
        loop {
            step = match step {
                CellStep::ReadBase => {
                    let read = bounded(&fence.clock, bound(), own.read_head(&self.cell));
                    core.on_read(read.await.map_err(Error::not_committed)?)
                }
                CellStep::Seal { body, write } => {
                    let shell = HeadWrite {
                        own,
                        cell: &self.cell,
                        owner: me,
                        epoch: self.epoch,
                        body: &body,
                        guard: write.guard().clone(),
                        flaws: fence.flaws,
                        clock: &fence.clock,
                    };
                    let settled = shell.drive(write, bound).await?;
                    core.on_settled(body, settled)
                }
                CellStep::Done(end) => return Ok(end),
            };
        }
    }

    /// Ends this claim as superseded by `epoch` and says so.
    fn superseded_by(&self, epoch: u64, maybe_landed: bool) -> Error {
        self.end(ClaimStatus::Superseded { epoch });
        superseded(&self.cell, self.epoch, epoch, maybe_landed)
    }

    /// Refuses once the claim has ended in any way (closed included): nothing more is sent
    /// through it. Checked again after taking the write lock, so nothing queued behind a
    /// `close`, a hand-off or a release goes out either.
    fn refuse_if_over(&self) -> Result<(), Error> {
        match self.ended() {
            None => Ok(()),
            Some(how) => Err(Error::fenced(format!(
                "cell {}: the claim has ended ({how:?}); refused locally, nothing written",
                self.cell
            ))),
        }
    }

    /// [`refuse_if_over`](Self::refuse_if_over), and the lease judged now: checked again
    /// once the claim's write lock is taken, so a request queued behind a slow one is never
    /// sent after the lease's authority ran out meanwhile.
    fn refuse_unless_acting(&self, what: &str) -> Result<(), Error> {
        let standing = *self.standing();
        match standing.admit(self.shared.is_held(), self.shared.fence.flaws) {
            Ok(()) => Ok(()),
            Err(Refusal::LeaseNotHeld) => Err(Error::fenced(format!(
                "cell {}: lease not held; {what} refused locally, nothing written",
                self.cell
            ))),
            Err(Refusal::ClaimEnded) => self.refuse_if_over(),
        }
    }

    /// Stops this claim: waits until no write of it is in flight, then ends it, so from the
    /// moment this returns no write of this claim can be acknowledged any more (later writes
    /// are refused locally). The store still names this node at this epoch: the cell can be
    /// [adopted](super::LeaseKeeper::adopt) again, handed off or taken over. Nothing is sent.
    pub async fn close(&self) {
        let _quiet = self.known.lock().await;
        self.end(ClaimStatus::Closed);
    }

    /// Hands the cell to node `to`: one compare-and-swap of the head that names `to` at
    /// `epoch + 1`, recording `generation` (the receiver's lease generation, if known) as
    /// the head's writer, so that process may [adopt](super::LeaseKeeper::adopt) it at that
    /// epoch without taking another. Returns the receiver's epoch.
    ///
    /// No window in which both act: this claim stops first — the write waits for any write
    /// of this claim in flight, and the claim is [closed](Self::close) before the hand-off
    /// is sent — and the receiver can act only once the hand-off landed. If it does not land
    /// (an error that is not ambiguous), the claim stays closed and the store still names
    /// this node at this epoch: adopt it to act again. An ambiguous error may have handed
    /// it off: read the head to tell.
    ///
    /// ```
    /// # fn block(f: impl std::future::Future<Output = ()>) {
    /// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
    /// # }
    /// # block(async {
    /// use std::sync::Arc;
    /// use fence_core::{runtime::Fence, ClaimStatus, MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// let a = Fence::builder(store.clone(), "a").build().unwrap().acquire().await.unwrap();
    /// let b = Fence::builder(store, "b").build().unwrap().acquire().await.unwrap();
    /// let cell = a.claim("orders").await.unwrap();
    /// assert_eq!(cell.hand_off("b", Some(&b.generation())).await.unwrap(), 2);
    /// assert_eq!(cell.status(), ClaimStatus::HandedOff { epoch: 2 });
    /// assert_eq!(b.adopt("orders").await.unwrap().epoch(), 2);
    /// # });
    /// ```
    ///
    /// Errors: [`ErrorKind::InvalidInput`] for this node itself or a bad name;
    /// [`ErrorKind::Fenced`] if the lease is not held or the claim is over (superseded,
    /// released, handed off) — nothing is written.
    pub async fn hand_off(&self, to: &str, generation: Option<&str>) -> Result<u64, Error> {
        check_name("node", to)?;
        if to == self.shared.node() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("cell {}: a hand-off names another node", self.cell),
            )
            .not_committed());
        }
        if !self.shared.is_held() {
            return Err(Error::fenced(format!(
                "cell {}: lease not held; hand-off refused locally",
                self.cell
            )));
        }
        self.refuse_if_over()?;
        let Some(next) = crate::decide::next_epoch(self.epoch) else {
            let key = self.shared.fence.ownership.owner_key(&self.cell)?;
            return Err(Error::corrupt(&key, "epoch cannot be raised"));
        };
        let mut slot = self.known.lock().await;
        self.refuse_unless_acting("hand-off")?;
        // Stop acting first: no write of this claim is in flight (we hold its lock, and every
        // write checks the claim's end after taking it), none will be sent from here on, and
        // the claim reads as closed before the hand-off is sent — also if this future is
        // dropped. It stays in the lease's register until the hand-off settles (or is given
        // up), so this lease cannot adopt the cell while the hand-off may still be retried.
        self.stop_acting();
        let _leave = LeaveRegister(self);
        if self.shared.hand_off_begins(&self.cell, self.epoch) {
            self.registered
                .store(false, std::sync::atomic::Ordering::SeqCst);
        }
        let receiver = Change::HandOff {
            to: to.to_owned(),
            generation: generation.map(str::to_owned),
        };
        match self.rewrite(&mut slot, receiver).await {
            Ok(()) => {
                info!(node = self.shared.node(), cell = %self.cell, to, epoch = next, "cell handed off");
                self.end(ClaimStatus::HandedOff { epoch: next });
                Ok(next)
            }
            Err(e) => {
                self.end(ClaimStatus::Closed);
                Err(e)
            }
        }
    }

    /// Deletes, in the background, the payload object a finished write of `written` (which
    /// replaced `replaced`, if it landed) leaves to nobody ([`unused_payload`]: never the
    /// object of a write whose fate is unknown). Bounded like every request of a claim (a
    /// store that never answers leaves no task behind).
    fn collect_freed(&self, fate: Fate, written: &CellPayload, replaced: &CellPayload) {
        let Some(blob) = unused_payload(fate, written, replaced).cloned() else {
            return;
        };
        let fence = &self.shared.fence;
        let own = fence.ownership.clone();
        let clock = fence.clock.clone();
        let bound = fence.cfg.attempt_max_ms;
        let cell = self.cell.to_string();
        tokio::spawn(async move {
            let delete = own.delete_blob(&cell, &blob);
            if let Err(e) = bounded(&clock, bound, delete).await {
                tracing::debug!(cell, blob = blob.name, error = %e, "payload object left for collection");
            }
        });
    }

    /// Deletes payload objects of this cell that no head can refer to any more: those of
    /// earlier epochs (no writer of an earlier epoch can land a head after this claim's
    /// seal) other than the one the head points at now, at most
    /// [`MAX_VICTIMS`](crate::decide::collect::MAX_VICTIMS). Every claim at a new epoch
    /// runs the same collection in the background once it is sealed; this one is for a claim
    /// held long after objects were left (a resumed claim, a claim whose own collection was
    /// cut short). Returns how many were deleted. Uses one listing (for inspection, as the
    /// store contract allows: what is deleted is decided by epochs and the head, never by the
    /// listing alone).
    pub async fn collect_garbage(&self) -> Result<usize, Error> {
        let fence = &self.shared.fence;
        let own = &fence.ownership;
        // Serialised with this claim's writes, so none of ours is in flight meanwhile; every
        // request is bounded, so `close()` and later writes never wait behind a hung one.
        let _writes = self.known.lock().await;
        self.refuse_unless_acting("collection")?;
        let collector = Collector {
            own,
            clock: &fence.clock,
            cell: &self.cell,
            bound: self.shared.request_bound_ms(),
        };
        let listed = collector.list().await?;
        let read = bounded(&fence.clock, collector.bound, own.read_head(&self.cell));
        let Some((head, _)) = read.await? else {
            return Ok(0);
        };
        let keep = head.payload.blob().map(|b| b.name.as_str());
        collector
            .delete(&listed, self.epoch, keep, fence.flaws)
            .await
    }

    /// Reads the cell's data, bounded by the fence's longest attempt timeout (default
    /// 2.5 s; [`ErrorKind::Timeout`] when no answer came).
    pub async fn read(&self) -> Result<Option<CellData>, Error> {
        let fence = &self.shared.fence;
        let read = cell::read_cell(&fence.ownership, &self.cell);
        bounded(&fence.clock, fence.cfg.attempt_max_ms, read).await
    }

    /// Releases the cell: an unowned head that keeps the epoch and the data. One request.
    /// Refused ([`ErrorKind::Fenced`], nothing written) once the lease is no longer held:
    /// release cells before the lease.
    pub async fn release(self) -> Result<(), Error> {
        self.release_shared().await
    }

    /// [`release`](Self::release) through a shared reference, for a claim kept in an `Arc`.
    ///
    /// Like a hand-off, the claim stops acting before the release is sent: it waits for any
    /// write of it in flight, then reads as [`ClaimStatus::Closed`] — `is_held()` is false,
    /// `lost()` returns, later writes are refused locally — from the instant the release may
    /// land (another node may own the cell from then on, also while this process is
    /// suspended with the release in flight), and as [`ClaimStatus::Released`] once it
    /// landed. A release that fails leaves the claim closed; the store still names this node
    /// at this epoch unless the error is ambiguous: [adopt](super::LeaseKeeper::adopt) it to
    /// act again.
    pub async fn release_shared(&self) -> Result<(), Error> {
        if !self.shared.is_held() {
            return Err(Error::fenced(format!(
                "cell {}: lease not held; release refused locally (the cell stays named until taken over)",
                self.cell
            )));
        }
        self.refuse_if_over()?;
        let mut slot = self.known.lock().await;
        self.refuse_unless_acting("release")?;
        self.stop_acting();
        let _leave = LeaveRegister(self);
        match self.rewrite(&mut slot, Change::Release).await {
            Ok(()) => {
                info!(node = self.shared.node(), cell = %self.cell, epoch = self.epoch, "cell released");
                self.end(ClaimStatus::Released);
                Ok(())
            }
            Err(e) => {
                self.end(ClaimStatus::Closed);
                Err(e)
            }
        }
    }

    /// Rewrites the head from what this claim knows of it (a release or a hand-off),
    /// re-reading after a co-writer's move, until the write lands or the cell is found
    /// superseded.
    async fn rewrite(&self, slot: &mut Option<Known>, change: Change) -> Result<(), Error> {
        match self.change(slot, change).await? {
            CellEnd::Written { .. } => Ok(()),
            CellEnd::Superseded {
                epoch,
                maybe_landed,
            } => Err(self.superseded_by(epoch, maybe_landed)),
            CellEnd::Conflict { .. } | CellEnd::KeptMoving => Err(kept_moving(&self.cell)),
        }
    }
}
