//! `Election`: leader election for one resource (`fence_core::Election`).

use std::sync::Arc;
use std::time::Duration;

use fence_core::{
    Election as CoreElection, ElectionEvent as CoreEvent, Error, StepDown, Term as CoreTerm,
};
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration};
use pyo3::prelude::*;
use tokio::sync::Mutex;

use crate::data::payload;
use crate::lease::{cell_data, CellData, Fence, WriteAck};
use crate::process::{future_into_py, hold, runtime, Held, Local};
use crate::repr::{repr, v};
use crate::wait::{closed, interruptible, opt_seconds, run, run_async};

/// One term of leadership: the epoch is its fencing token. Writes through it are refused by
/// the store once a later term exists.
#[pyclass(module = "fence", frozen)]
pub(crate) struct Term {
    term: Local<CoreTerm>,
    epoch: u64,
    node: String,
    resource: String,
}

#[pymethods]
impl Term {
    /// The term's epoch: pass it to anything that can refuse a lower one.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The leading node.
    #[getter]
    fn node(&self) -> &str {
        &self.node
    }

    /// The resource (cell) led.
    #[getter]
    fn resource(&self) -> &str {
        &self.resource
    }

    /// Whether the term still stands now (false in a forked child).
    fn is_held(&self) -> bool {
        self.term.here().is_some_and(CoreTerm::is_held)
    }

    /// Seconds of authority left unless a renewal lands (0 once the term ended, and in a
    /// forked child).
    #[getter]
    fn remaining(&self) -> f64 {
        self.term
            .here()
            .map_or(0.0, |t| t.remaining().as_secs_f64())
    }

    /// A fenced write of the resource's cell under this term.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<WriteAck> {
        let data = payload(data)?;
        run(py, self.term.get()?.claim().write(data)).map(WriteAck::from)
    }

    /// ``write`` as a coroutine.
    fn write_async<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = payload(data)?;
        let term = self.term.get()?.clone();
        run_async(py, async move {
            term.claim().write(data).await.map(WriteAck::from)
        })
    }

    /// Reads the resource's cell.
    fn read(&self, py: Python<'_>) -> PyResult<Option<CellData>> {
        let d = run(py, self.term.get()?.claim().read())?;
        Ok(cell_data(py, d))
    }

    /// Waits until the term ends and says why: ``"lease_lost"``, ``"deposed"``,
    /// ``"resigned"`` or ``"unhealthy"``.
    fn lost(&self, py: Python<'_>) -> PyResult<&'static str> {
        let term = self.term.get()?.clone();
        interruptible(py, async move { step_down(&term.lost().await) })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "Term",
            &[
                ("resource", v(py, &self.resource)),
                ("node", v(py, &self.node)),
                ("epoch", v(py, self.epoch)),
            ],
        )
    }
}

fn step_down(s: &StepDown) -> &'static str {
    match s {
        StepDown::LeaseLost { .. } => "lease_lost",
        StepDown::Deposed { .. } => "deposed",
        StepDown::Unhealthy => "unhealthy",
        _ => "resigned",
    }
}

/// One event of an election. ``kind`` says which, and which attributes are set:
///
/// - ``"started"``: this node leads: ``term``, ``epoch``;
/// - ``"stopped"``: the term at ``epoch`` ended: ``reason`` (``"lease_lost"``,
///   ``"deposed"``, ``"resigned"``, ``"unhealthy"``), ``node`` (a deposer, when known);
/// - ``"new_leader"``: the store names ``node`` at ``epoch`` (both ``None``: nobody);
/// - ``"safe_time_low"``: renewals fall behind: ``epoch``, ``remaining`` seconds.
#[pyclass(module = "fence", frozen, get_all)]
pub(crate) struct ElectionEvent {
    kind: &'static str,
    term: Option<Py<Term>>,
    epoch: Option<u64>,
    reason: Option<&'static str>,
    node: Option<String>,
    remaining: Option<f64>,
}

impl ElectionEvent {
    fn of(py: Python<'_>, e: CoreEvent) -> PyResult<Self> {
        let mut out = ElectionEvent {
            kind: "new_leader",
            term: None,
            epoch: None,
            reason: None,
            node: None,
            remaining: None,
        };
        match e {
            CoreEvent::Started(term) => {
                out.kind = "started";
                out.epoch = Some(term.epoch());
                let term = Term {
                    epoch: term.epoch(),
                    node: term.node().to_owned(),
                    resource: term.resource().to_owned(),
                    term: Local::new(term),
                };
                out.term = Some(Py::new(py, term)?);
            }
            CoreEvent::Stopped { epoch, reason } => {
                out.kind = "stopped";
                out.epoch = Some(epoch);
                out.reason = Some(step_down(&reason));
                if let StepDown::Deposed { by, .. } = reason {
                    out.node = by;
                }
            }
            CoreEvent::NewLeader(leader) => {
                out.node = leader.as_ref().map(|l| l.node.clone());
                out.epoch = leader.map(|l| l.epoch);
            }
            CoreEvent::SafeTimeLow {
                epoch, remaining, ..
            } => {
                out.kind = "safe_time_low";
                out.epoch = Some(epoch);
                out.remaining = Some(remaining.as_secs_f64());
            }
            _ => out.kind = "other",
        }
        Ok(out)
    }
}

#[pymethods]
impl ElectionEvent {
    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "ElectionEvent",
            &[
                ("kind", v(py, self.kind)),
                ("node", v(py, self.node.as_deref())),
                ("epoch", v(py, self.epoch)),
            ],
        )
    }
}

/// Leader election for one ``resource``: the node leads while it holds its node lease and a
/// claim of the resource's cell. Iterate it (``for event in election`` or ``async for``)
/// for its ``ElectionEvent``s; ``stop()`` resigns and releases, so a peer leads at once.
///
/// >>> import fence, tempfile
/// >>> f = fence.Fence("file://" + tempfile.mkdtemp(), "node-a", ttl=2.0)
/// >>> election = fence.Election(f, "scheduler")
/// >>> event = next(e for e in election if e.kind == "started")
/// >>> event.term.write(b"plan").epoch == event.epoch
/// True
/// >>> [e.kind for e in election.stop() if e.kind == "stopped"]
/// ['stopped']
#[pyclass(module = "fence", frozen)]
pub(crate) struct Election {
    election: Local<Arc<ElectionSlot>>,
}

/// A running election, or nothing once stopped.
pub(crate) type ElectionSlot = Mutex<Option<CoreElection>>;

/// Stops the election in `slot`, if it still runs (at interpreter exit).
pub(crate) async fn stop_slot(slot: &ElectionSlot) {
    let taken = slot.lock().await.take();
    if let Some(e) = taken {
        let _ = e.stop().await;
    }
}

#[pymethods]
impl Election {
    /// Starts campaigning for ``resource`` as ``fence``'s node. ``retry_period``: how often
    /// a follower looks (seconds; default the fence's poll period); ``check_period``: how
    /// often the leader checks the head (default TTL/3); ``recampaign``: campaign again after
    /// a term ends (default).
    #[new]
    #[pyo3(signature = (fence, resource, *, retry_period = None, check_period = None, recampaign = true))]
    fn new(
        py: Python<'_>,
        fence: &Fence,
        resource: String,
        retry_period: Option<f64>,
        check_period: Option<f64>,
        recampaign: bool,
    ) -> PyResult<Self> {
        crate::names::check(&resource)?;
        let mut b =
            CoreElection::builder(fence.fence.get()?.clone(), resource).recampaign(recampaign);
        if let Some(d) = opt_seconds(retry_period)? {
            b = b.retry_period(d.max(Duration::from_millis(1)));
        }
        if let Some(d) = opt_seconds(check_period)? {
            b = b.check_period(d.max(Duration::from_millis(1)));
        }
        let _inside = runtime(py).enter();
        let election = b.start().map_err(crate::errors::to_py)?;
        let slot = Arc::new(Mutex::new(Some(election)));
        hold(py, Held::Election(Arc::downgrade(&slot)));
        Ok(Election {
            election: Local::new(slot),
        })
    }

    /// The next event, waiting up to ``timeout`` seconds (``None``: forever); ``None`` when
    /// none came in time or the election has ended.
    #[pyo3(signature = (timeout = None))]
    fn next_event(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<ElectionEvent>> {
        let limit = opt_seconds(timeout)?;
        let election = self.election.get()?.clone();
        let got = interruptible(py, async move { next(&election, limit).await })?;
        got.map(|e| ElectionEvent::of(py, e)).transpose()
    }

    /// Resigns (if leading) and releases the cell and the node lease, so a peer leads at once.
    /// Returns the events nobody read: the ``"stopped"`` of a term whose ``"started"`` was
    /// read is there unless it was read, so no step-down is lost by leaving the event loop
    /// first. Raises the error that ended the election, if one did.
    fn stop(&self, py: Python<'_>) -> PyResult<Vec<ElectionEvent>> {
        let unread = run(py, stop(self.election.get()?.clone()))?;
        unread
            .into_iter()
            .map(|e| ElectionEvent::of(py, e))
            .collect()
    }

    /// ``stop`` as a coroutine.
    fn stop_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let election = self.election.get()?.clone();
        future_into_py(py, async move {
            let unread = stop(election).await.map_err(crate::errors::to_py)?;
            Python::attach(|py| {
                let events = unread.into_iter().map(|e| ElectionEvent::of(py, e));
                events.collect::<PyResult<Vec<ElectionEvent>>>()
            })
        })
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<ElectionEvent> {
        self.next_event(py, None)?
            .ok_or_else(|| PyStopIteration::new_err(()))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let election = self.election.get()?.clone();
        future_into_py(py, async move {
            let event = next(&election, None)
                .await
                .ok_or_else(|| PyStopAsyncIteration::new_err(()))?;
            Python::attach(|py| ElectionEvent::of(py, event))
        })
    }
}

async fn next(
    election: &Mutex<Option<CoreElection>>,
    limit: Option<Duration>,
) -> Option<CoreEvent> {
    let mut guard = election.lock().await;
    let e = guard.as_mut()?;
    match limit {
        Some(l) => tokio::time::timeout(l, e.next_event()).await.ok().flatten(),
        None => e.next_event().await,
    }
}

async fn stop(election: Arc<Mutex<Option<CoreElection>>>) -> Result<Vec<CoreEvent>, Error> {
    let taken = election.lock().await.take();
    match taken {
        Some(e) => {
            let end = e.stop().await;
            end.result.map(|()| end.unread)
        }
        None => Err(closed("election")),
    }
}

/// Registers the classes.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Election>()?;
    m.add_class::<Term>()?;
    m.add_class::<ElectionEvent>()?;
    Ok(())
}
