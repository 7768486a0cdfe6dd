//! The shell of every write of a cell head — claims, fenced writes, releases,
//! `update_cell`: it performs the steps of [`crate::decide::write::HeadWrite`], which settles
//! the write by evidence only (see [`crate::decide::cell`]).

use std::time::Duration;

use super::bounded;
use crate::clock::Clock;
use crate::decide::write::{self, PutAnswer, ReadAnswer, Unsettled, WriteStep};
use crate::error::{Commit, Error, ErrorKind};
use crate::flaws::Flaws;
use crate::ownership::Ownership;
use crate::record::CellHead;
use crate::store::{CasGuard, PutOutcome};

pub(crate) use crate::decide::write::Settled;

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
    // A head at the same epoch that is not ours was written by another process without a new
    // claim: a release (an administrator's break) or another owner named at this epoch.
    let now = if found == epoch {
        format!("cell {cell}: epoch {epoch} was released by another process (or given another owner at that epoch)")
    } else {
        format!("cell {cell}: epoch {epoch} superseded (now {found})")
    };
    let e = Error::new(ErrorKind::Fenced, format!("{now}{what}"));
    if maybe_landed {
        e
    } else {
        e.not_committed()
    }
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
        let core = write::HeadWrite::new(
            self.body.nonce.clone(),
            self.guard.clone(),
            self.owner,
            self.epoch,
        )
        .with_flaws(self.flaws);
        self.drive(core, bound).await
    }

    /// Performs the steps of `core`, a settlement of this write, until it settles.
    pub(crate) async fn drive(
        &self,
        mut core: write::HeadWrite,
        bound: impl Fn() -> u64,
    ) -> Result<Settled, Error> {
        let mut last: Option<Error> = None;
        // The head a rejection carried (a store with `current_on_reject`): the read it saves.
        let mut seen = None;
        core = core.resending_first(self.own.store().capabilities().current_on_reject);
        let mut step = core.start();
        loop {
            step = match step {
                WriteStep::Send => {
                    let guard = self.guard.clone();
                    let put = self.own.put_head_with_current(self.cell, self.body, guard);
                    seen = None;
                    let answer = match bounded(self.clock, bound(), put).await {
                        Ok((PutOutcome::Applied(v), _)) => PutAnswer::Applied(v),
                        Ok((PutOutcome::Rejected, current)) => {
                            seen = current;
                            PutAnswer::Rejected
                        }
                        Err(e) => {
                            let answer = match e.commit() {
                                Commit::NotCommitted => PutAnswer::NotCommitted {
                                    retryable: e.is_retryable(),
                                },
                                Commit::Ambiguous => PutAnswer::Ambiguous,
                            };
                            last = Some(e);
                            answer
                        }
                    };
                    tracing::debug!(
                        cell = self.cell,
                        epoch = self.epoch,
                        ?answer,
                        "head write answered"
                    );
                    core.on_put(answer)
                }
                WriteStep::Pause(ms) => {
                    self.clock.sleep(Duration::from_millis(ms)).await;
                    core.resume()
                }
                WriteStep::Read => {
                    let answer = match seen.take() {
                        Some(head) => ReadAnswer::Head(head),
                        None => {
                            let read = self.own.read_head(self.cell);
                            match bounded(self.clock, bound(), read).await {
                                Ok(h) => ReadAnswer::Head(h),
                                Err(e) => {
                                    last = Some(e);
                                    ReadAnswer::Failed
                                }
                            }
                        }
                    };
                    tracing::debug!(cell = self.cell, epoch = self.epoch, read = ?answer, "head read back");
                    core.on_read(answer)
                }
                WriteStep::Done(settled) => return Ok(settled),
                WriteStep::Failed(why) => return Err(self.failed(why, last)),
            };
        }
    }

    /// The error of a write that settled on no verdict to build on.
    fn failed(&self, why: Unsettled, last: Option<Error>) -> Error {
        let last =
            last.unwrap_or_else(|| Error::new(ErrorKind::Unavailable, "the store gave no verdict"));
        match why {
            Unsettled::NoVerdict { ambiguous } => self.unsettled(last, ambiguous),
            Unsettled::ReadFailed => last.not_committed(),
            Unsettled::GuardStillHolds => Error::new(
                ErrorKind::Unavailable,
                format!(
                    "cell {}: the store rejected a write whose guard still holds (not linearizable?)",
                    self.cell
                ),
            )
            .not_committed(),
            Unsettled::MovedAfterAmbiguity => {
                let e = Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "cell {}: another write at epoch {} came first; ours may have landed under it and is never re-applied",
                        self.cell, self.epoch
                    ),
                );
                self.unsettled(e, true)
            }
        }
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
