//! Waiting for a cell: [`LeaseKeeper::claim_wait`](super::LeaseKeeper::claim_wait) and an
//! election's campaign poll the cell the way
//! [`Fence::acquire_wait`](super::Fence::acquire_wait) polls a lease.
//!
//! Each look reads the head and judges its owner's lease through the fence's
//! [`Observer`](super::Observer) — the observation rule, unchanged: a foreign owner is taken
//! over only once this process saw its lease record unchanged for a full TTL. Only a look
//! that finds the cell free (absent, released, this node's, or a dead owner's) makes a
//! [claim](super::LeaseKeeper::claim), which decides again from its own read: the look only
//! saves the claim's write while the owner lives, and tells when to look next (the moment
//! the observation can confirm a death, or the poll period, whichever is sooner).

use std::future::Future;
use std::sync::Arc;

use tracing::debug;

use super::bounded;
use super::claim::{self, CellClaim};
use super::keeper::Shared;
use crate::decide::{decide_claim, ClaimDecision, HeadView};
use crate::error::{Error, ErrorKind};
use crate::record::CellHead;

/// One wait for a cell.
pub(crate) struct Wait<'a> {
    pub(crate) shared: &'a Arc<Shared>,
    pub(crate) cell: &'a str,
    /// Monotonic deadline; `None` waits until claimed, stopped, or the lease is lost.
    pub(crate) deadline: Option<u64>,
    /// The longest pause between two looks at a live owner.
    pub(crate) period_ms: u64,
    /// Look at the head before the first claim (to report its owner); otherwise the first
    /// attempt is a plain claim — two requests for a free cell.
    pub(crate) look_first: bool,
}

/// How a wait ended without an error.
pub(crate) enum Waited {
    /// The cell is ours.
    Claimed(CellClaim),
    /// The caller's stop signal fired between two attempts.
    Stopped,
}

/// The outcome of one attempt.
enum Attempt {
    Claimed(CellClaim),
    /// A live owner (or a racer) has it; `until_mono` is when its lease could be judged
    /// dead at the earliest, if known.
    Busy {
        error: Error,
        until_mono: Option<u64>,
    },
    /// The store failed; worth another attempt after a pause.
    Failed(Error),
}

/// Whether a failed attempt is worth repeating: the store's transient failures. Everything
/// else (a lost lease, a corrupt head, bad input, refused credentials) ends the wait.
pub(crate) fn transient(e: &Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Unavailable | ErrorKind::Timeout | ErrorKind::Conflict | ErrorKind::Other
    )
}

/// The pause after the `n`th store failure in a row: the schedule `acquire_wait` uses
/// (10 ms doubling, at most four poll periods).
fn backoff_ms(failures: u32, poll_ms: u64) -> u64 {
    (10u64 << failures.min(6))
        .min(poll_ms.saturating_mul(4))
        .max(10)
}

impl Wait<'_> {
    /// Waits for the cell. `seen` is told every head a look read (`None`: no head);
    /// `stop` ends the wait between attempts (a claim in flight is finished first, so a
    /// claim that landed is returned, never dropped; none is started once it fired).
    pub(crate) async fn run(
        &self,
        seen: &mut (dyn FnMut(Option<&CellHead>) + Send),
        stop: impl Future<Output = ()>,
    ) -> Result<Waited, Error> {
        let clock = &self.shared.fence.clock;
        let poll_ms = self.shared.fence.cfg.poll_ms();
        tokio::pin!(stop);
        let mut busy: Option<Error> = None;
        let mut failed: Option<Error> = None;
        let mut failures = 0u32;
        let mut look = self.look_first;
        loop {
            // Stopped meanwhile (or before the first attempt): no new attempt starts.
            if futures::FutureExt::now_or_never(stop.as_mut()).is_some() {
                return Ok(Waited::Stopped);
            }
            if !self.shared.is_held() {
                return Err(self.lease_lost());
            }
            let now = clock.mono_ms();
            let wake = match self.attempt(look, seen).await? {
                Attempt::Claimed(c) => return Ok(Waited::Claimed(c)),
                Attempt::Busy { error, until_mono } => {
                    failures = 0;
                    busy = Some(error);
                    let poll = now.saturating_add(self.period_ms.max(1));
                    until_mono.map_or(poll, |u| u.max(now.saturating_add(1)).min(poll))
                }
                Attempt::Failed(e) => {
                    debug!(cell = self.cell, error = %e, "waiting for a cell: the store failed");
                    failures = failures.saturating_add(1);
                    failed = Some(e);
                    now.saturating_add(backoff_ms(failures, poll_ms))
                }
            };
            look = true;
            let until = match self.deadline {
                Some(d) if wake >= d => d,
                _ => wake,
            };
            tokio::select! {
                biased;
                _ = &mut stop => return Ok(Waited::Stopped),
                _ = self.shared.lost() => return Err(self.lease_lost()),
                _ = clock.sleep_until(until) => {}
            }
            if self.deadline.is_some_and(|d| until >= d) {
                return Err(self.give_up(busy, failed));
            }
        }
    }

    /// One attempt: a look (if asked) and, when the cell is free, a claim.
    async fn attempt(
        &self,
        look: bool,
        seen: &mut (dyn FnMut(Option<&CellHead>) + Send),
    ) -> Result<Attempt, Error> {
        if look {
            match self.look(seen).await {
                Ok(Some(busy)) => return Ok(busy),
                Ok(None) => {}
                Err(e) if transient(&e) => return Ok(Attempt::Failed(e)),
                Err(e) => return Err(e),
            }
        }
        match claim::claim(self.shared, self.cell).await {
            Ok(c) => Ok(Attempt::Claimed(c)),
            Err(e) if e.kind() == ErrorKind::Busy => Ok(Attempt::Busy {
                error: e,
                until_mono: None,
            }),
            Err(e) if transient(&e) => Ok(Attempt::Failed(e)),
            Err(e) => Err(e),
        }
    }

    /// Reads the head and judges its owner: `Some(Busy)` while a live foreign owner has it,
    /// `None` when a claim may take it.
    async fn look(
        &self,
        seen: &mut (dyn FnMut(Option<&CellHead>) + Send),
    ) -> Result<Option<Attempt>, Error> {
        let fence = &self.shared.fence;
        let bound = self.shared.request_bound_ms();
        let read = bounded(&fence.clock, bound, fence.ownership.read_head(self.cell)).await;
        let read = read.map_err(Error::not_committed)?;
        seen(read.as_ref().map(|(h, _)| h));
        let Some((head, version)) = read else {
            return Ok(None);
        };
        let view = HeadView {
            node: head.node.clone(),
            epoch: head.epoch,
            version,
        };
        let me = self.shared.node();
        let ClaimDecision::NeedLease { node } = decide_claim(me, Some(&view), None) else {
            return Ok(None);
        };
        let writer = head.generation.as_deref();
        let live = fence.observer.liveness(fence, &node, writer, bound).await;
        let live = live.map_err(Error::not_committed)?;
        match decide_claim(me, Some(&view), Some(live)) {
            ClaimDecision::NotOurs {
                node,
                epoch,
                until_mono,
            } => Ok(Some(Attempt::Busy {
                error: self.busy(&node, epoch),
                until_mono: Some(until_mono),
            })),
            _ => Ok(None),
        }
    }

    fn busy(&self, node: &str, epoch: u64) -> Error {
        Error::new(
            ErrorKind::Busy,
            format!(
                "cell {} is owned by live node {node:?} at epoch {epoch}",
                self.cell
            ),
        )
        .not_committed()
    }

    fn lease_lost(&self) -> Error {
        Error::fenced(format!(
            "cell {}: the lease is not held ({}); nothing claimed",
            self.cell,
            self.shared.status_now()
        ))
    }

    /// The deadline passed: `Busy` if a live owner was seen, else the store's last error.
    fn give_up(&self, busy: Option<Error>, failed: Option<Error>) -> Error {
        busy.or(failed).unwrap_or_else(|| {
            Error::new(
                ErrorKind::Timeout,
                format!("cell {} was not claimed in time", self.cell),
            )
            .not_committed()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::backoff_ms;

    #[test]
    fn backoff_doubles_up_to_four_polls() {
        assert_eq!(backoff_ms(1, 250), 20);
        assert_eq!(backoff_ms(3, 250), 80);
        assert_eq!(backoff_ms(6, 250), 640);
        assert_eq!(backoff_ms(60, 100), 400);
        assert_eq!(backoff_ms(0, 0), 10);
    }
}
