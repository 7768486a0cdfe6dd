//! Reading a cell, and writing one without a keeper: a script or child process handed the
//! epoch (as `fence run` does through `FENCE_EPOCH`).

use std::time::Duration;

use bytes::Bytes;

use super::bounded;
use super::claim::WriteAck;
use super::head::{self, HeadWrite, Settled};
use crate::clock::{Clock, Entropy};
use crate::decide::collect::{unused_payload, Fate};
use crate::error::{Error, ErrorKind};
use crate::flaws::Flaws;
use crate::ownership::{Ownership, INLINE_MAX_DEFAULT};
use crate::record::{CellHead, CellPayload, HeadFormat};
use crate::store::{CasGuard, Version};

/// A cell's data as a reader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellData {
    /// The cell's current epoch (its head's).
    pub epoch: u64,
    /// The current owner, `None` if released.
    pub owner: Option<String>,
    /// The payload.
    pub payload: Bytes,
    /// `true` only for a version-1 cell whose data was written under an earlier epoch than
    /// the owner record's (its last claim has not sealed it): not current data.
    pub stale: bool,
    /// The version of the cell head this was read from: a claim's
    /// [`write_if`](super::CellClaim::write_if) lands only over exactly this head.
    pub version: Version,
}

/// Reads `cell`'s data: `None` if the cell has no head or no data yet.
///
/// The data lives in the head itself (or in a payload object the head points at), so it is
/// always the current epoch's; a version-1 cell's separate data head is shown with
/// [`CellData::stale`] when its epoch is not the owner record's.
pub async fn read_cell(ownership: &Ownership, cell: &str) -> Result<Option<CellData>, Error> {
    // A payload object can be collected between reading the head and reading the object,
    // when a newer write replaced it: read the head again. Only a head that did not move while
    // its object was missing is corrupt; a cell that keeps changing is retried a while.
    let mut last: Option<Version> = None;
    for _ in 0..64 {
        let Some((head, version)) = ownership.read_head(cell).await? else {
            return Ok(None);
        };
        if last.as_ref() == Some(&version) {
            let key = ownership.owner_key(cell)?;
            return Err(Error::corrupt(
                &key,
                "the head points at a payload object that does not exist",
            ));
        }
        last = Some(version.clone());
        if head.format == HeadFormat::V1 {
            return read_legacy(ownership, cell, head, version).await;
        }
        if head.payload == Default::default() {
            return Ok(None);
        }
        if let Some(payload) = ownership.load_payload(cell, &head.payload).await? {
            return Ok(Some(CellData {
                epoch: head.epoch,
                owner: head.node,
                payload,
                stale: false,
                version,
            }));
        }
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!("cell {cell}: its payload object was replaced on every read; try again"),
    )
    .not_committed())
}

async fn read_legacy(
    ownership: &Ownership,
    cell: &str,
    head: CellHead,
    version: Version,
) -> Result<Option<CellData>, Error> {
    Ok(ownership
        .read_legacy_data(cell)
        .await?
        .map(|(data, _)| CellData {
            epoch: head.epoch,
            owner: head.node.clone(),
            stale: data.epoch != head.epoch,
            payload: data.payload,
            version,
        }))
}

/// A fenced read-modify-write of `cell`'s data by a process that holds no keeper, at
/// `epoch`, each store request bounded by `timeout`.
///
/// Reads the head and refuses with [`ErrorKind::Fenced`] unless it names an owner at exactly
/// `epoch` (a released cell, an earlier or a later epoch: nothing is written, so nothing ever
/// carries an epoch the owner record does not); runs `update` on the current payload (its
/// error aborts, writing nothing); writes the result at `epoch` for that owner, guarded on the
/// head's version. The store applies it only if the head is still that version, so a claim at
/// a later epoch makes it fail. `update` runs again only when the store proved the previous
/// attempt did not land.
///
/// Co-writers at the same epoch (many `fence put`s of one holder at once) each move the head
/// under the others: a write that finds the head moved by one of them is made again on the
/// new head, after a short random pause, until it lands or `timeout` has passed since the
/// call began; then [`ErrorKind::Timeout`], not committed (nothing was written). A later
/// epoch, a release or another owner ends it at once with [`ErrorKind::Fenced`].
///
/// ```
/// # fn block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// # block(async {
/// use std::{sync::Arc, time::Duration};
/// use fence_core::{runtime::update_cell, CasGuard, ErrorKind, MemoryStore, Ownership};
/// let own = Ownership::new(Arc::new(MemoryStore::new()), "n1");
/// own.cas_owner("jobs", CasGuard::Absent, 1).await.unwrap();
/// let t = Duration::from_secs(5);
/// let ack = update_cell(&own, "jobs", 1, t, |_| Ok("v1".into())).await.unwrap();
/// assert_eq!(ack.epoch, 1);
/// let err = update_cell(&own, "jobs", 2, t, |_| Ok("ahead".into())).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Fenced);
/// # });
/// ```
pub async fn update_cell(
    ownership: &Ownership,
    cell: &str,
    epoch: u64,
    timeout: Duration,
    update: impl Fn(&Bytes) -> Result<Bytes, Error>,
) -> Result<WriteAck, Error> {
    let bound = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let clock = Clock::system();
    // Reads and payload objects commit nothing the head does not point at: their failures
    // leave the update not made.
    let read_head = || async {
        bounded(&clock, bound, ownership.read_head(cell))
            .await
            .map_err(Error::not_committed)
    };
    let mut current = read_head().await?;
    let mut contention = Contention::new(ownership, &clock, bound);
    loop {
        contention.pause(cell, epoch).await?;
        let (head, version) = owned_at(ownership, cell, epoch, current.take())?;
        let loaded = bounded(&clock, bound, current_payload(ownership, cell, &head)).await;
        let Some(payload) = loaded.map_err(Error::not_committed)? else {
            // A newer write replaced (and collected) the payload object: read the head again.
            current = read_head().await?;
            continue;
        };
        let next = update(&payload)?;
        let stored = ownership.store_payload(cell, epoch, next, INLINE_MAX_DEFAULT);
        let stored = bounded(&clock, bound, stored)
            .await
            .map_err(Error::not_committed)?;
        let owner = head.node.clone().unwrap_or_default();
        let body = CellHead {
            node: head.node.clone(),
            epoch,
            nonce: ownership.fresh_nonce(),
            generation: head.generation.clone(),
            payload: stored,
            extra: head.extra.clone(),
            format: HeadFormat::V2,
        };
        let write = HeadWrite {
            own: ownership,
            cell,
            owner: &owner,
            epoch,
            body: &body,
            guard: CasGuard::Match(version),
            flaws: Flaws::default(),
            clock: &clock,
        };
        let settled = write.settle(|| bound).await;
        let fate = match &settled {
            Ok(settled) => Fate::of_settled(settled),
            Err(e) => Fate::of_failure(e.is_ambiguous()),
        };
        let freed = (fate, &body.payload, &head.payload);
        drop_unused(ownership, cell, freed, (&clock, bound)).await;
        let settled = settled?;
        match settled {
            Settled::Landed(version) => return Ok(WriteAck { epoch, version }),
            Settled::Moved { head, version } => current = Some((head, version)),
            Settled::Fenced {
                epoch: found,
                maybe_landed,
            } => return Err(head::superseded(cell, epoch, found, maybe_landed)),
        }
    }
}

/// The retries of one [`update_cell`] against co-writers at its epoch: each after a random
/// pause of up to 2^n ms (at most 64 ms), so that many writers of one head take turns,
/// until `bound_ms` has passed since the first attempt. The pauses are drawn from the
/// ownership's own (injected) randomness, so a seeded simulation replays them.
struct Contention<'a> {
    ownership: &'a Ownership,
    clock: &'a Clock,
    entropy: Option<Entropy>,
    started: u64,
    bound_ms: u64,
    attempts: u32,
}

impl<'a> Contention<'a> {
    fn new(ownership: &'a Ownership, clock: &'a Clock, bound_ms: u64) -> Self {
        Contention {
            ownership,
            clock,
            entropy: None,
            started: clock.mono_ms(),
            bound_ms,
            attempts: 0,
        }
    }

    /// A pause in `0..=most` ms; the first one seeds this update's randomness from the
    /// ownership's (a nonce is 32 hex digits of it).
    fn jitter(&mut self, most: u64) -> u64 {
        let ownership = self.ownership;
        let entropy = self.entropy.get_or_insert_with(|| {
            let nonce = ownership.fresh_nonce();
            let seed = nonce
                .get(..16)
                .and_then(|h| u64::from_str_radix(h, 16).ok());
            Entropy::seeded(seed.unwrap_or(0))
        });
        entropy.below(most + 1)
    }

    /// Before each attempt: nothing before the first; before a later one, a pause, or
    /// [`ErrorKind::Timeout`] (nothing written) once the time is up.
    async fn pause(&mut self, cell: &str, epoch: u64) -> Result<(), Error> {
        self.attempts += 1;
        if self.attempts == 1 {
            return Ok(());
        }
        let spent = self.clock.mono_ms().saturating_sub(self.started);
        if spent >= self.bound_ms {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "cell {cell}: other writes at epoch {epoch} landed first on each of {} attempts in {spent} ms; nothing written",
                    self.attempts - 1
                ),
            )
            .not_committed());
        }
        let most = 1u64 << self.attempts.min(7).saturating_sub(1);
        let ms = self.jitter(most.min(64));
        self.clock.sleep(Duration::from_millis(ms)).await;
        Ok(())
    }
}

/// Deletes the payload object a write of `written` over `replaced` left to nobody, by its
/// `fate` ([`unused_payload`]: never the object of a write whose fate is unknown), within
/// `bound`; a failure leaves it for the next claim's collection.
async fn drop_unused(
    ownership: &Ownership,
    cell: &str,
    (fate, written, replaced): (Fate, &CellPayload, &CellPayload),
    (clock, bound): (&Clock, u64),
) {
    let Some(blob) = unused_payload(fate, written, replaced) else {
        return;
    };
    if let Err(e) = bounded(clock, bound, ownership.delete_blob(cell, blob)).await {
        tracing::debug!(cell, blob = blob.name, error = %e, "payload object left for collection");
    }
}

/// The head if it names an owner at exactly `epoch`.
fn owned_at(
    ownership: &Ownership,
    cell: &str,
    epoch: u64,
    read: Option<(CellHead, Version)>,
) -> Result<(CellHead, Version), Error> {
    match read {
        Some((h, v)) if h.node.is_some() && h.epoch == epoch => Ok((h, v)),
        Some((h, _)) if h.node.is_none() && h.epoch == epoch => Err(Error::fenced(format!(
            "cell {cell} was released at epoch {epoch}: nothing written"
        ))),
        Some((h, _)) => Err(superseded(cell, epoch, h.epoch)),
        None => {
            let key = ownership.owner_key(cell)?;
            Err(Error::fenced(format!("cell {cell} has no owner: nothing written")).with_key(&key))
        }
    }
}

/// The payload `head` holds; `None` if its payload object is gone (replaced meanwhile).
async fn current_payload(
    ownership: &Ownership,
    cell: &str,
    head: &CellHead,
) -> Result<Option<Bytes>, Error> {
    if head.format == HeadFormat::V1 {
        let legacy = ownership.read_legacy_data(cell).await?;
        return Ok(Some(legacy.map(|(d, _)| d.payload).unwrap_or_default()));
    }
    ownership.load_payload(cell, &head.payload).await
}

fn superseded(cell: &str, epoch: u64, found: u64) -> Error {
    if found < epoch {
        Error::fenced(format!(
            "cell {cell} is at epoch {found}: epoch {epoch} was never claimed; nothing written"
        ))
    } else {
        Error::fenced(format!(
            "cell {cell}: epoch {epoch} superseded (now {found})"
        ))
    }
}
