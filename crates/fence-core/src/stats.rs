//! fence's metrics, through the [`metrics`] facade: nothing is recorded unless the
//! application installs a recorder (for Prometheus, `metrics-exporter-prometheus`, which
//! `fence run --metrics ADDR` serves).
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | `fence_lease_acquired_total` | counter | | leases acquired |
//! | `fence_lease_renewed_total` | counter | | renewals applied |
//! | `fence_lease_fenced_total` | counter | `reason`: `rejected`, `landed_after_expiry`, `expired`, `superseded`, `attempts_exhausted` | leases lost |
//! | `fence_lease_released_total` | counter | | leases given up on purpose |
//! | `fence_claims_total` | counter | `kind`: `new`, `reclaim`, `takeover` | claims that landed |
//! | `fence_takeovers_total` | counter | | claims taken from another node |
//! | `fence_writes_acknowledged_total` | counter | | fenced writes acknowledged |
//! | `fence_writes_fenced_total` | counter | | fenced writes refused: the epoch was superseded |
//! | `fence_store_request_seconds` | histogram | `op`: `get`, `put`, `delete`, `list`; `outcome`: `applied`, `rejected`, `ok`, `ambiguous`, `not_committed` | every store request a [`Fence`](crate::Fence) makes |

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::clock::Stopwatch;
use crate::decide::FenceReason;
use crate::error::{Commit, Error};
use crate::key::Key;
use crate::store::{
    Capabilities, CasGuard, ConditionalStore, Current, DeleteOutcome, PutOutcome, Stored, Version,
};

pub(crate) fn lease_acquired() {
    metrics::counter!("fence_lease_acquired_total").increment(1);
}

pub(crate) fn lease_renewed() {
    metrics::counter!("fence_lease_renewed_total").increment(1);
}

pub(crate) fn lease_released() {
    metrics::counter!("fence_lease_released_total").increment(1);
}

pub(crate) fn lease_fenced(reason: FenceReason) {
    let reason = match reason {
        FenceReason::Rejected => "rejected",
        FenceReason::LandedAfterExpiry => "landed_after_expiry",
        FenceReason::Expired => "expired",
        FenceReason::Superseded => "superseded",
        FenceReason::AttemptsExhausted => "attempts_exhausted",
    };
    metrics::counter!("fence_lease_fenced_total", "reason" => reason).increment(1);
}

/// What kind of claim landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClaimKind {
    New,
    Reclaim,
    Takeover,
}

pub(crate) fn claimed(kind: ClaimKind) {
    let label = match kind {
        ClaimKind::New => "new",
        ClaimKind::Reclaim => "reclaim",
        ClaimKind::Takeover => "takeover",
    };
    metrics::counter!("fence_claims_total", "kind" => label).increment(1);
    if kind == ClaimKind::Takeover {
        metrics::counter!("fence_takeovers_total").increment(1);
    }
}

pub(crate) fn write_acknowledged() {
    metrics::counter!("fence_writes_acknowledged_total").increment(1);
}

pub(crate) fn write_fenced() {
    metrics::counter!("fence_writes_fenced_total").increment(1);
}

fn outcome_of_error(e: &Error) -> &'static str {
    match e.commit() {
        Commit::Ambiguous => "ambiguous",
        Commit::NotCommitted => "not_committed",
    }
}

fn observe(op: &'static str, outcome: &'static str, watch: Stopwatch) {
    metrics::histogram!("fence_store_request_seconds", "op" => op, "outcome" => outcome)
        .record(watch.elapsed().as_secs_f64());
}

fn put_outcome(r: Result<&PutOutcome, &Error>) -> &'static str {
    match r {
        Ok(PutOutcome::Applied(_)) => "applied",
        Ok(PutOutcome::Rejected) => "rejected",
        Err(e) => outcome_of_error(e),
    }
}

/// A store that records the latency and outcome of every request in
/// `fence_store_request_seconds`. [`Fence`](crate::Fence) wraps its store in one.
pub(crate) struct Metered {
    inner: Arc<dyn ConditionalStore>,
}

impl Metered {
    pub(crate) fn new(inner: Arc<dyn ConditionalStore>) -> Self {
        Metered { inner }
    }
}

impl fmt::Debug for Metered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The wrapper is invisible: callers see the store they configured.
        self.inner.fmt(f)
    }
}

#[async_trait]
impl ConditionalStore for Metered {
    async fn get(&self, key: &Key) -> Result<Option<Stored>, Error> {
        let watch = Stopwatch::start();
        let r = self.inner.get(key).await;
        observe(
            "get",
            r.as_ref().map_or_else(outcome_of_error, |_| "ok"),
            watch,
        );
        r
    }

    async fn put(&self, key: &Key, body: Bytes, guard: CasGuard) -> Result<PutOutcome, Error> {
        let watch = Stopwatch::start();
        let r = self.inner.put(key, body, guard).await;
        observe("put", put_outcome(r.as_ref()), watch);
        r
    }

    async fn put_with_current(
        &self,
        key: &Key,
        body: Bytes,
        guard: CasGuard,
    ) -> Result<(PutOutcome, Current), Error> {
        let watch = Stopwatch::start();
        let r = self.inner.put_with_current(key, body, guard).await;
        observe("put", put_outcome(r.as_ref().map(|(o, _)| o)), watch);
        r
    }

    async fn delete(&self, key: &Key, version: &Version) -> Result<DeleteOutcome, Error> {
        let watch = Stopwatch::start();
        let r = self.inner.delete(key, version).await;
        let outcome = match &r {
            Ok(DeleteOutcome::Deleted) => "applied",
            Ok(DeleteOutcome::Rejected) => "rejected",
            Err(e) => outcome_of_error(e),
        };
        observe("delete", outcome, watch);
        r
    }

    async fn delete_immutable(&self, key: &Key) -> Result<(), Error> {
        let watch = Stopwatch::start();
        let r = self.inner.delete_immutable(key).await;
        observe(
            "delete",
            r.as_ref().map_or_else(outcome_of_error, |_| "applied"),
            watch,
        );
        r
    }

    async fn list(&self, prefix: Option<&Key>) -> Result<Vec<Key>, Error> {
        let watch = Stopwatch::start();
        let r = self.inner.list(prefix).await;
        observe(
            "list",
            r.as_ref().map_or_else(outcome_of_error, |_| "ok"),
            watch,
        );
        r
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
