//! The campaign task: acquire the node lease, wait for the cell, lead until the term ends,
//! and again if asked; release on stop.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::{ElectionEvent, HealthCheck, Leader, Outbox, Settings, StepDown, Term};
use crate::error::{Error, ErrorKind};
use crate::record::CellHead;
use crate::runtime::claim::CellClaim;
use crate::runtime::wait::{transient, Wait, Waited};
use crate::runtime::{bounded, Fence, LeaseKeeper};

/// The campaign of one node for one resource.
pub(super) struct Campaign {
    fence: Fence,
    resource: String,
    settings: Settings,
    outbox: Arc<Outbox>,
    stop: watch::Receiver<bool>,
    health: Option<HealthCheck>,
}

/// How serving under one lease ended.
enum Served {
    /// The lease was lost and the campaign goes on under a new one.
    LeaseLost,
    /// The campaign is over.
    Done(Result<(), Error>),
}

/// What woke a leader.
enum Wake {
    Stop,
    Ended,
    /// A check of the head: `Some` if it no longer names this term.
    Checked(Option<Option<CellHead>>),
    Timer,
}

/// Resolves once the election is stopped (or its handle is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The leader a cell head names.
pub(super) fn leader_of(head: Option<&CellHead>) -> Option<Leader> {
    let head = head?;
    let node = head.node.clone()?;
    Some(Leader {
        node,
        epoch: head.epoch,
    })
}

impl Campaign {
    pub(super) fn new(
        fence: Fence,
        resource: String,
        settings: Settings,
        outbox: Arc<Outbox>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Campaign {
            fence,
            resource,
            settings,
            outbox,
            stop,
            health: None,
        }
    }

    pub(super) fn with_health(mut self, health: Option<HealthCheck>) -> Self {
        self.health = health;
        self
    }

    fn healthy(&self) -> bool {
        self.health.as_ref().is_none_or(HealthCheck::healthy)
    }

    /// Waits until the process is healthy, looking every retry period; `false` if stopped.
    async fn until_healthy(&self) -> bool {
        let period = Duration::from_millis(self.settings.retry_ms);
        while !self.healthy() {
            tokio::select! {
                biased;
                _ = stopped(self.stop.clone()) => return false,
                _ = self.fence.clock().sleep(period) => {}
            }
        }
        true
    }

    /// Runs the campaign to its end; the events end with it.
    pub(super) async fn run(self) -> Result<(), Error> {
        let result = self.leases().await;
        if let Err(e) = &result {
            warn!(node = self.node(), resource = %self.resource, error = %e, "election failed");
        }
        self.outbox.close();
        result
    }

    fn node(&self) -> &str {
        self.fence.ownership().node()
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow() || self.stop.has_changed().is_err()
    }

    /// One node lease after another, for as long as the campaign goes on.
    async fn leases(&self) -> Result<(), Error> {
        let mut predecessor = None;
        loop {
            let Some(keeper) = self.acquire(predecessor.take()).await? else {
                return Ok(());
            };
            match self.serve(&keeper).await {
                Served::LeaseLost => {
                    // Its keeper ended (its last request settled) before a successor is made.
                    predecessor = Some(keeper.generation());
                    keeper.release().await;
                }
                Served::Done(result) => {
                    keeper.release().await;
                    return result;
                }
            }
        }
    }

    /// The node lease: taken over at once from `predecessor` — this process's own earlier
    /// lease, whose keeper has ended — else waited for by observation. `None` if stopped.
    async fn acquire(&self, predecessor: Option<String>) -> Result<Option<LeaseKeeper>, Error> {
        if let Some(p) = predecessor {
            tokio::select! {
                biased;
                _ = stopped(self.stop.clone()) => return Ok(None),
                r = self.fence.acquire_succeeding(&p) => match r {
                    Ok(keeper) => return Ok(Some(keeper)),
                    Err(e) => debug!(node = self.node(), error = %e, "lease not taken back at once"),
                },
            }
        }
        // In rounds, so an error the store keeps giving ends the election instead of
        // being retried silently for ever; observations carry over between rounds.
        let round = Duration::from_millis(self.fence.config().ttl_ms.saturating_mul(4));
        loop {
            let r = tokio::select! {
                biased;
                _ = stopped(self.stop.clone()) => return Ok(None),
                r = self.fence.acquire_wait(round) => r,
            };
            match r {
                Ok(keeper) => return Ok(Some(keeper)),
                Err(e) if e.kind() == ErrorKind::Busy || transient(&e) => {
                    warn!(node = self.node(), error = %e, "node lease not acquired yet")
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Terms under one lease: follow, lead, and follow again if asked.
    async fn serve(&self, keeper: &LeaseKeeper) -> Served {
        loop {
            if !self.until_healthy().await {
                return Served::Done(Ok(()));
            }
            let claim = match self.follow(keeper).await {
                Ok(Some(claim)) => claim,
                Ok(None) => return Served::Done(Ok(())),
                Err(_) if !keeper.is_held() && self.settings.recampaign => {
                    return Served::LeaseLost
                }
                Err(e) if !keeper.is_held() => {
                    debug!(node = self.node(), error = %e, "lease lost while following");
                    return Served::Done(Ok(()));
                }
                Err(e) => return Served::Done(Err(e)),
            };
            let why = self.lead(keeper, claim).await;
            if self.stopping() || !self.settings.recampaign {
                return Served::Done(Ok(()));
            }
            if matches!(why, StepDown::LeaseLost { .. }) {
                return Served::LeaseLost;
            }
        }
    }

    /// Waits for the cell, reporting whom the store names meanwhile. `None` if stopped.
    async fn follow(&self, keeper: &LeaseKeeper) -> Result<Option<CellClaim>, Error> {
        let wait = Wait {
            shared: &keeper.shared,
            cell: &self.resource,
            deadline: None,
            period_ms: self.settings.retry_ms,
            look_first: true,
        };
        let outbox = self.outbox.clone();
        let mut seen = move |head: Option<&CellHead>| outbox.saw(leader_of(head));
        match wait.run(&mut seen, stopped(self.stop.clone())).await? {
            Waited::Claimed(claim) => Ok(Some(claim)),
            Waited::Stopped => Ok(None),
        }
    }

    /// One term: reported, held until it ends, reported ended.
    async fn lead(&self, keeper: &LeaseKeeper, claim: CellClaim) -> StepDown {
        let term = Term::new(claim, keeper.shared.clone());
        let epoch = term.epoch();
        info!(node = self.node(), resource = %self.resource, epoch, "leading");
        *self.outbox.term() = Some(term.clone());
        self.outbox.push(ElectionEvent::Started(term.clone()));
        self.outbox.saw(Some(Leader {
            node: self.node().to_owned(),
            epoch,
        }));
        let (why, next) = self.hold(&term).await;
        *self.outbox.term() = None;
        info!(node = self.node(), resource = %self.resource, epoch, reason = ?why, "stepped down");
        self.outbox.push(ElectionEvent::Stopped {
            epoch,
            reason: why.clone(),
        });
        if let Some(next) = next {
            self.outbox.saw(next);
        }
        why
    }

    /// Holds the term until it ends: warns while the safe time runs low, checks the head
    /// every check period (never delaying the step-down: a check in flight is dropped when
    /// the term ends), resigns on stop. Returns why it ended and, if known, whom the store
    /// names now.
    async fn hold(&self, term: &Term) -> (StepDown, Option<Option<Leader>>) {
        let clock = self.fence.clock();
        let mut next_check = clock.mono_ms().saturating_add(self.settings.check_ms);
        let mut warned = false;
        loop {
            warned = self.warn_if_low(term, warned);
            let left = term.remaining_ms().saturating_sub(self.settings.warning_ms);
            let warn_at = clock.mono_ms().saturating_add(left);
            let checked = async {
                clock.sleep_until(next_check).await;
                self.check(term).await
            };
            let woke = tokio::select! {
                biased;
                _ = stopped(self.stop.clone()) => Wake::Stop,
                _ = term.lost() => Wake::Ended,
                found = checked => Wake::Checked(found),
                _ = clock.sleep_until(warn_at), if !warned => Wake::Timer,
            };
            match woke {
                Wake::Stop => return self.resign(term, StepDown::Resigned).await,
                Wake::Ended => return term.concluded().await,
                Wake::Checked(Some(head)) => return self.deposed(term, head).await,
                Wake::Checked(None) if !self.healthy() => {
                    return self.resign(term, StepDown::Unhealthy).await
                }
                Wake::Checked(None) => {
                    next_check = clock.mono_ms().saturating_add(self.settings.check_ms);
                }
                Wake::Timer => {}
            }
        }
    }

    /// Reports [`ElectionEvent::SafeTimeLow`] when the remaining authority first drops to the
    /// warning; re-armed once a renewal restored it. Returns whether a warning stands.
    fn warn_if_low(&self, term: &Term, warned: bool) -> bool {
        let remaining = term.remaining();
        if remaining.as_millis() > u128::from(self.settings.warning_ms) {
            return false;
        }
        if !warned && term.is_held() {
            warn!(node = self.node(), resource = %self.resource, epoch = term.epoch(),
                  remaining_ms = remaining.as_millis() as u64, "leader's safe time runs low");
            self.outbox.push(ElectionEvent::SafeTimeLow {
                epoch: term.epoch(),
                remaining,
                safe_until: term.safe_until(),
            });
        }
        true
    }

    /// Reads the head: `Some(head)` if it no longer names this term (`None` inside: no
    /// head at all); `None` while it does, or if the read failed (tried again next period).
    async fn check(&self, term: &Term) -> Option<Option<CellHead>> {
        let shared = &term.term.lease;
        let read = bounded(
            self.fence.clock(),
            shared.request_bound_ms(),
            self.fence.ownership().read_head(&self.resource),
        );
        match read.await {
            Ok(Some((h, _))) if h.is_owned_by(self.node(), term.epoch()) => None,
            Ok(found) => Some(found.map(|(h, _)| h)),
            Err(e) => {
                debug!(node = self.node(), error = %e, "leader's check of the head failed");
                None
            }
        }
    }

    /// The check found `head` in the store: the term is over, and the claim is closed (no
    /// write of it in flight) before that is reported.
    async fn deposed(
        &self,
        term: &Term,
        head: Option<CellHead>,
    ) -> (StepDown, Option<Option<Leader>>) {
        let leader = leader_of(head.as_ref());
        let why = term.end(StepDown::Deposed {
            epoch: head.as_ref().map_or(0, |h| h.epoch),
            by: leader.as_ref().map(|l| l.node.clone()),
        });
        term.claim().close().await;
        (why, Some(leader))
    }

    /// Ends the term on purpose (`why`) and releases the cell; if the release fails, the
    /// claim is closed instead (nothing more is sent through it), so the term's holders
    /// learn of the end at once either way.
    async fn resign(&self, term: &Term, why: StepDown) -> (StepDown, Option<Option<Leader>>) {
        let why = term.end(why);
        match term.claim().release_shared().await {
            Ok(()) => (why, Some(None)),
            Err(e) => {
                debug!(node = self.node(), error = %e, "cell not released on stop");
                term.claim().close().await;
                (why, None)
            }
        }
    }
}
