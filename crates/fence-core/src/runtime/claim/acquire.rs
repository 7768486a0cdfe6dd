//! Acquisition: a claim, a resume or an adoption of a cell, driving `decide::claim`'s
//! machine.

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::super::bounded;
use super::super::head::HeadWrite;
use super::super::keeper::{Reservation, Shared};
use super::collect::collect_after_seal;
use super::{CellClaim, Known};
use crate::decide::claim::{ClaimEnd, ClaimFlow, ClaimStep};
use crate::error::{Commit, Error, ErrorKind};
use crate::ownership::check_name;
use crate::record::{CellHead, CellPayload, Extra, HeadFormat};
use crate::stats;

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

/// [`LeaseKeeper::adopt`](crate::LeaseKeeper::adopt): a resume (a read and the seal at the
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
