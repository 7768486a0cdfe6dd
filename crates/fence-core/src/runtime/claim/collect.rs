//! Payload collection: what the background collection after a new epoch's seal and a
//! claim's [`collect_garbage`](CellClaim::collect_garbage) delete (`decide::collect` chooses).

use std::sync::Arc;

use tracing::info;

use super::super::bounded;
use super::super::keeper::Shared;
use super::CellClaim;
use crate::decide::collect::{unused_payload, victims, Fate};
use crate::decide::Flaws;
use crate::error::Error;
use crate::ownership::Ownership;
use crate::record::CellPayload;

/// Deletes of payload objects one collection keeps in flight.
const DELETES_IN_FLIGHT: usize = 8;

/// A collection's deadline, in longest attempt timeouts: it stops there (the next claim goes
/// on), and a lease's release waits for it no longer.
const COLLECTION_BUDGET_ATTEMPTS: u64 = 4;

/// The deadline of one payload collection under `cfg`.
pub(crate) fn collection_budget_ms(cfg: &crate::decide::LeaseConfig) -> u64 {
    cfg.attempt_max_ms
        .saturating_mul(COLLECTION_BUDGET_ATTEMPTS)
}

/// After a claim sealed `epoch` (a new one: a resume seals nothing new): collects, in the
/// background, the payload objects of earlier epochs other than `keep` (the one its head
/// names) — the objects of writers killed before their head write, or before deleting what
/// they replaced ([`victims`]). The claim does not wait for it; its lease's release does.
pub(super) fn collect_after_seal(
    shared: &Arc<Shared>,
    cell: &str,
    epoch: u64,
    keep: Option<String>,
) {
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

impl CellClaim {
    /// Deletes, in the background, the payload object a finished write of `written` (which
    /// replaced `replaced`, if it landed) leaves to nobody ([`unused_payload`]: never the
    /// object of a write whose fate is unknown). Bounded like every request of a claim (a
    /// store that never answers leaves no task behind).
    pub(super) fn collect_freed(&self, fate: Fate, written: &CellPayload, replaced: &CellPayload) {
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
}
