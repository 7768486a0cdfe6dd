//! The protocol of every write of a cell head — claims, fenced writes, releases,
//! `update_cell` — settled by evidence only (see [`crate::decide::cell`]).
//!
//! The same body (one nonce) is sent on every attempt under the same guard, so at most one
//! attempt can land and a read-back recognises whichever did. After an ambiguous answer the
//! write is only ever re-sent unchanged; it is never rebuilt on a newer head, because a head
//! that moved on does not prove ours never landed underneath it.

use std::time::Duration;

use super::bounded;
use crate::clock::Clock;
use crate::decide::{readback, Evidence};
use crate::error::{Commit, Error, ErrorKind};
use crate::flaws::{sabotaged, Flaws};
use crate::ownership::Ownership;
use crate::record::CellHead;
use crate::store::{CasGuard, PutOutcome, Version};

/// Sends per write, re-sends of the same request included.
const MAX_SENDS: usize = 4;

/// The error of a head write that found the cell no longer `(owner, epoch)`'s:
/// [`ErrorKind::Fenced`], not committed — unless an attempt may have landed before the cell
/// moved on (then it is ambiguous: the write was not acknowledged, and may still be what the
/// next owner's claim carried forward).
pub(crate) fn superseded(cell: &str, epoch: u64, found: u64, maybe_landed: bool) -> Error {
    let what = if maybe_landed {
        "; this write may have landed before that and was not acknowledged"
    } else {
        "; nothing written"
    };
    let e = Error::new(
        ErrorKind::Fenced,
        format!("cell {cell}: epoch {epoch} superseded (now {found}){what}"),
    );
    if maybe_landed {
        e
    } else {
        e.not_committed()
    }
}

/// How a head write ended.
#[derive(Debug)]
pub(crate) enum Settled {
    /// The write is in the store at this version.
    Landed(Version),
    /// Proven not landed; the head moved to `head` at `version`, still `(owner, epoch)` (a
    /// co-writer at the same epoch): rebuild on it and write again.
    Moved { head: CellHead, version: Version },
    /// The cell is no longer `(owner, epoch)`'s: a later epoch, another owner, a release.
    Fenced {
        /// The epoch found (0 when the head is gone).
        epoch: u64,
        /// Whether our write may have landed before it was superseded.
        maybe_landed: bool,
    },
}

/// One write of a cell head.
pub(crate) struct HeadWrite<'a> {
    pub(crate) own: &'a Ownership,
    pub(crate) cell: &'a str,
    /// Whose ownership at `epoch` a read-back must show.
    pub(crate) owner: &'a str,
    pub(crate) epoch: u64,
    pub(crate) body: &'a CellHead,
    pub(crate) guard: CasGuard,
    pub(crate) flaws: Flaws,
    pub(crate) clock: &'a Clock,
}

impl HeadWrite<'_> {
    /// Sends the write until the evidence settles it; `bound` gives each request's timeout.
    pub(crate) async fn settle(&self, bound: impl Fn() -> u64) -> Result<Settled, Error> {
        let nonces = [self.body.nonce.clone()];
        let mut uncertain = false;
        let mut last: Option<Error> = None;
        for send in 0..MAX_SENDS {
            let put = self.own.put_head(self.cell, self.body, self.guard.clone());
            match bounded(self.clock, bound(), put).await {
                Ok(PutOutcome::Applied(v)) => return Ok(Settled::Landed(v)),
                Ok(PutOutcome::Rejected) => {}
                Err(e) if e.commit() == Commit::NotCommitted => {
                    if !e.is_retryable() || send + 1 == MAX_SENDS {
                        return Err(self.unsettled(e, uncertain));
                    }
                    self.clock.sleep(Duration::from_millis(5 << send)).await;
                    last = Some(e);
                    continue;
                }
                Err(e) => {
                    if sabotaged!(self.flaws, AckWithoutOwnerRead) {
                        return Ok(Settled::Landed(Version::new("unconfirmed")?));
                    }
                    uncertain = true;
                    last = Some(e);
                }
            }
            let head = match bounded(self.clock, bound(), self.own.read_head(self.cell)).await {
                Ok(h) => h,
                // Re-sending the same request is safe either way; a plain rejection with
                // nothing uncertain is not re-sent.
                Err(e) if uncertain => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e.not_committed()),
            };
            let seen = head.as_ref().map(|(h, v)| (h, v));
            match readback(seen, &nonces, &self.guard, self.owner, self.epoch) {
                Evidence::Landed(v) => return Ok(Settled::Landed(v)),
                Evidence::Unchanged if uncertain => continue,
                Evidence::Unchanged => {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "cell {}: the store rejected a write whose guard still holds (not linearizable?)",
                            self.cell
                        ),
                    )
                    .not_committed())
                }
                Evidence::MovedOn(version)
                    if !uncertain || sabotaged!(self.flaws, ReapplyAfterAmbiguity) =>
                {
                    let head = head.map(|(h, _)| h).ok_or_else(|| self.gone())?;
                    return Ok(Settled::Moved { head, version });
                }
                Evidence::MovedOn(_) => {
                    let e = Error::new(
                        ErrorKind::Conflict,
                        format!(
                            "cell {}: another write at epoch {} came first; ours may have landed under it and is never re-applied",
                            self.cell, self.epoch
                        ),
                    );
                    return Err(self.unsettled(e, true));
                }
                Evidence::Superseded { epoch } => {
                    return Ok(Settled::Fenced {
                        epoch,
                        maybe_landed: uncertain,
                    })
                }
            }
        }
        let e =
            last.unwrap_or_else(|| Error::new(ErrorKind::Unavailable, "the store gave no verdict"));
        Err(self.unsettled(e, uncertain))
    }

    fn gone(&self) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            format!("cell {}: head vanished", self.cell),
        )
    }

    /// The error of a write that got no verdict: ambiguous if any attempt may have landed.
    fn unsettled(&self, e: Error, uncertain: bool) -> Error {
        let commit = if uncertain {
            Commit::Ambiguous
        } else {
            e.commit()
        };
        let kind = e.kind();
        let msg = match commit {
            Commit::Ambiguous => format!(
                "cell {} at epoch {}: the write may have landed; no evidence settled it",
                self.cell, self.epoch
            ),
            Commit::NotCommitted => {
                format!(
                    "cell {} at epoch {}: the write was not made",
                    self.cell, self.epoch
                )
            }
        };
        Error::new(kind, msg).with_commit(commit).with_source(e)
    }
}
