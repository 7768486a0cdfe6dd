//! `Fleet`: many cells over many nodes (fence-fleet), its events as an iterator.

use std::sync::Arc;
use std::time::Duration;

use fence_core::Error;
use fence_fleet::{Events, Fleet as CoreFleet, FleetEvent as CoreEvent, StopReason};
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration};
use pyo3::prelude::*;
use tokio::sync::Mutex;

use crate::data::payload;
use crate::lease::{cell_data, Claim, Fence, WriteAck};
use crate::process::{future_into_py, hold, Held, Local};
use crate::repr::{repr, v};
use crate::wait::{
    closed, interruptible, opt_seconds, run, run_async, seconds, sliced, wait_blocking,
};

/// A cell this node holds through the fleet. Stop acting on it once ``is_held()`` is
/// false (its writes are refused from then on).
#[pyclass(module = "fence", frozen)]
pub(crate) struct Shard {
    shard: Local<fence_fleet::Shard>,
    cell: String,
    epoch: u64,
}

#[pymethods]
impl Shard {
    /// The cell.
    #[getter]
    fn cell(&self) -> &str {
        &self.cell
    }

    /// The epoch it is held at.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether this node may act on the cell now (false in a forked child).
    fn is_held(&self) -> bool {
        self.shard.here().is_some_and(fence_fleet::Shard::is_held)
    }

    /// The claim underneath (``write_if``, ``release``).
    #[getter]
    fn claim(&self) -> PyResult<Claim> {
        Ok(Claim::of(self.shard.get()?.claim().clone()))
    }

    /// A fenced write of the cell's data; refused once the shard is stopped.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<WriteAck> {
        let data = payload(data)?;
        run(py, self.shard.get()?.write(data)).map(WriteAck::from)
    }

    /// ``write`` as a coroutine.
    fn write_async<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = payload(data)?;
        let shard = self.shard.get()?.clone();
        run_async(
            py,
            async move { shard.write(data).await.map(WriteAck::from) },
        )
    }

    /// Reads the cell's data.
    fn read(&self, py: Python<'_>) -> PyResult<Option<crate::lease::CellData>> {
        let d = run(py, self.shard.get()?.read())?;
        Ok(cell_data(py, d))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "Shard",
            &[("cell", v(py, &self.cell)), ("epoch", v(py, self.epoch))],
        )
    }
}

/// One event of a fleet. ``kind`` says which, and which attributes are set:
///
/// - ``"started"``: ``shard`` (a ``Shard``), ``resumed``, ``cell``, ``epoch``;
/// - ``"stopped"``: ``cell``, ``epoch``, ``reason`` (``"lease_lost"``, ``"superseded"``,
///   ``"released"``, ``"handed_off"``, ``"closed"``), ``to`` (a hand-off's receiver);
/// - ``"new_owner"``: ``cell``, ``owner`` (``None``: released), ``epoch``;
/// - ``"lease_acquired"``: ``generation`` (persist it to restart with ``predecessor``).
#[pyclass(module = "fence", frozen, get_all)]
pub(crate) struct FleetEvent {
    kind: &'static str,
    cell: Option<String>,
    epoch: Option<u64>,
    shard: Option<Py<Shard>>,
    resumed: Option<bool>,
    reason: Option<&'static str>,
    to: Option<String>,
    owner: Option<String>,
    generation: Option<String>,
}

impl FleetEvent {
    fn empty(kind: &'static str) -> Self {
        FleetEvent {
            kind,
            cell: None,
            epoch: None,
            shard: None,
            resumed: None,
            reason: None,
            to: None,
            owner: None,
            generation: None,
        }
    }

    fn of(py: Python<'_>, e: CoreEvent) -> PyResult<Self> {
        Ok(match e {
            CoreEvent::Started { shard, resumed } => FleetEvent {
                cell: Some(shard.cell().to_owned()),
                epoch: Some(shard.epoch()),
                resumed: Some(resumed),
                shard: Some(Py::new(
                    py,
                    Shard {
                        cell: shard.cell().to_owned(),
                        epoch: shard.epoch(),
                        shard: Local::new(shard),
                    },
                )?),
                ..FleetEvent::empty("started")
            },
            CoreEvent::Stopped {
                cell,
                epoch,
                reason,
            } => {
                let (reason, to) = stop_reason(reason);
                FleetEvent {
                    cell: Some(cell),
                    epoch: Some(epoch),
                    reason: Some(reason),
                    to,
                    ..FleetEvent::empty("stopped")
                }
            }
            CoreEvent::NewOwner { cell, owner, epoch } => FleetEvent {
                cell: Some(cell),
                owner,
                epoch: Some(epoch),
                ..FleetEvent::empty("new_owner")
            },
            CoreEvent::LeaseAcquired { generation } => FleetEvent {
                generation: Some(generation),
                ..FleetEvent::empty("lease_acquired")
            },
        })
    }
}

fn stop_reason(r: StopReason) -> (&'static str, Option<String>) {
    match r {
        StopReason::LeaseLost => ("lease_lost", None),
        StopReason::Superseded { .. } => ("superseded", None),
        StopReason::Released => ("released", None),
        StopReason::HandedOff { to, .. } => ("handed_off", Some(to)),
        _ => ("closed", None),
    }
}

#[pymethods]
impl FleetEvent {
    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "FleetEvent",
            &[
                ("kind", v(py, self.kind)),
                ("cell", v(py, self.cell.as_deref())),
                ("epoch", v(py, self.epoch)),
            ],
        )
    }
}

/// What a drain did, and the events nobody read.
#[pyclass(module = "fence", frozen)]
pub(crate) struct Drained {
    /// Cells handed to another live node.
    #[pyo3(get)]
    handed_off: Vec<String>,
    /// Cells released.
    #[pyo3(get)]
    released: Vec<String>,
    /// Cells left to be taken over after the usual observation.
    #[pyo3(get)]
    left: Vec<String>,
    /// Whether a read after the release showed the released node lease.
    #[pyo3(get)]
    lease_released: bool,
    unread: Vec<Py<FleetEvent>>,
}

#[pymethods]
impl Drained {
    /// The events no reader had taken when the fleet stopped: the ``"stopped"`` of every
    /// cell whose ``"started"`` was read is there unless it was read.
    #[getter]
    fn unread(&self, py: Python<'_>) -> Vec<Py<FleetEvent>> {
        self.unread.iter().map(|e| e.clone_ref(py)).collect()
    }
}

/// Many cells over many nodes, with no coordinator: this node keeps its fair share of
/// ``cells``, taking over dead nodes' cells and handing cells to joining nodes. Iterate it
/// (``for event in fleet`` or ``async for``) for its ``FleetEvent``s.
///
/// >>> import fence, tempfile
/// >>> f = fence.Fence("file://" + tempfile.mkdtemp(), "node-a", ttl=2.0)
/// >>> fleet = fence.Fleet(f, ["shard-0", "shard-1"], timeout=10)
/// >>> sorted(fleet.wait_held(2, timeout=10))
/// ['shard-0', 'shard-1']
/// >>> fleet.drain(5.0).lease_released
/// True
#[pyclass(module = "fence", frozen)]
pub(crate) struct Fleet {
    fleet: Local<Arc<FleetSlot>>,
    events: Local<Arc<Mutex<Events>>>,
}

/// A running fleet member, or nothing once drained.
pub(crate) type FleetSlot = Mutex<Option<CoreFleet>>;

/// Drains the fleet member in `slot` at once, if it still runs (at interpreter exit): its
/// cells and its node lease are released.
pub(crate) async fn drain_slot(slot: &FleetSlot) {
    let taken = slot.lock().await.take();
    if let Some(f) = taken {
        f.drain(Duration::ZERO).await;
    }
}

async fn start(
    fence: fence_core::Fence,
    cells: Vec<String>,
    predecessor: Option<String>,
    timeout: Option<Duration>,
    cancel: crate::wait::Cancel,
) -> Result<(CoreFleet, Events), Error> {
    sliced(
        timeout,
        cancel,
        |limit| {
            let mut b = CoreFleet::builder(fence.clone(), cells.clone()).acquire_timeout(limit);
            if let Some(p) = &predecessor {
                b = b.predecessor(p.clone());
            }
            b.start()
        },
        |(fleet, _events): (CoreFleet, Events)| async move {
            fleet.drain(Duration::ZERO).await;
        },
    )
    .await
}

#[pymethods]
impl Fleet {
    /// Joins the fleet over ``cells`` as ``fence``'s node: waits up to ``timeout`` seconds
    /// (``None``: forever) for the node lease. ``predecessor``: the lease generation of this
    /// node's earlier process, which the caller KNOWS has ended (its cells are resumed at
    /// their epochs). Ctrl-C during the wait raises ``KeyboardInterrupt`` and joins nothing.
    #[new]
    #[pyo3(signature = (fence, cells, *, predecessor = None, timeout = None))]
    fn new(
        py: Python<'_>,
        fence: &Fence,
        cells: Vec<String>,
        predecessor: Option<String>,
        timeout: Option<f64>,
    ) -> PyResult<Self> {
        for cell in &cells {
            crate::names::check(cell)?;
        }
        let timeout = opt_seconds(timeout)?;
        let f = fence.fence.get()?.clone();
        let (fleet, events) = wait_blocking(py, move |cancel| {
            start(f, cells, predecessor, timeout, cancel)
        })?;
        let slot = Arc::new(Mutex::new(Some(fleet)));
        hold(py, Held::Fleet(Arc::downgrade(&slot)));
        Ok(Fleet {
            fleet: Local::new(slot),
            events: Local::new(Arc::new(Mutex::new(events))),
        })
    }

    /// The cells this node holds now, sorted.
    fn held(&self) -> Vec<String> {
        // A hand-off or drain under way holds the handle: the fleet is changing, show nothing.
        // A forked child holds nothing.
        let guard = self.fleet.here().and_then(|f| f.try_lock().ok());
        let held = guard.as_ref().and_then(|g| g.as_ref()).map(|f| f.held());
        let mut cells: Vec<String> = held
            .unwrap_or_default()
            .iter()
            .map(|s| s.cell().to_owned())
            .collect();
        cells.sort();
        cells
    }

    /// Hands ``cell`` to live node ``to``; returns the receiver's epoch.
    fn hand_off(&self, py: Python<'_>, cell: String, to: String) -> PyResult<u64> {
        let fleet = self.fleet.get()?.clone();
        run(py, async move {
            let guard = fleet.lock().await;
            let f = guard.as_ref().ok_or_else(|| closed("fleet"))?;
            f.hand_off(&cell, &to).await
        })
    }

    /// Leaves the fleet within ``within`` seconds: hands off or releases every held cell,
    /// then releases the node lease.
    fn drain(&self, py: Python<'_>, within: f64) -> PyResult<Drained> {
        let within = seconds(Some(within))?.unwrap_or_default();
        let fleet = self.fleet.get()?.clone();
        let d = run(py, async move {
            let taken = fleet.lock().await.take();
            Ok::<_, Error>(match taken {
                Some(f) => Some(f.drain(within).await),
                None => None,
            })
        })?
        .unwrap_or_default();
        let unread = d.unread.into_iter().map(|e| FleetEvent::of(py, e));
        Ok(Drained {
            handed_off: d.handed_off.into_iter().collect(),
            released: d.released.into_iter().collect(),
            left: d.left.into_iter().collect(),
            lease_released: d.lease_released,
            unread: unread
                .map(|e| Py::new(py, e?))
                .collect::<PyResult<Vec<Py<FleetEvent>>>>()?,
        })
    }

    /// The next event, waiting up to ``timeout`` seconds (``None``: forever); ``None`` when
    /// none came in time or the fleet has stopped.
    #[pyo3(signature = (timeout = None))]
    fn next_event(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<FleetEvent>> {
        let limit = opt_seconds(timeout)?;
        let events = self.events.get()?.clone();
        let got = interruptible(py, async move {
            let mut rx = events.lock().await;
            match limit {
                Some(l) => tokio::time::timeout(l, rx.recv()).await.ok().flatten(),
                None => rx.recv().await,
            }
        })?;
        got.map(|e| FleetEvent::of(py, e)).transpose()
    }

    /// Waits until this node holds at least ``n`` cells (or ``timeout`` seconds pass),
    /// reading events meanwhile; returns the held cells.
    #[pyo3(signature = (n, timeout = None))]
    fn wait_held(&self, py: Python<'_>, n: usize, timeout: Option<f64>) -> PyResult<Vec<String>> {
        let limit = opt_seconds(timeout)?;
        let clock = fence_core::Clock::system();
        let end = limit.map(|l| clock.mono_ms().saturating_add(l.as_millis() as u64));
        loop {
            let held = self.held();
            let left = end.map(|e| e.saturating_sub(clock.mono_ms()));
            if held.len() >= n || left == Some(0) {
                return Ok(held);
            }
            let wait = left.map_or(0.2, |ms| (ms as f64 / 1e3).min(0.2));
            self.next_event(py, Some(wait))?;
        }
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<FleetEvent> {
        self.next_event(py, None)?
            .ok_or_else(|| PyStopIteration::new_err(()))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let events = self.events.get()?.clone();
        future_into_py(py, async move {
            let got = events.lock().await.recv().await;
            let event = got.ok_or_else(|| PyStopAsyncIteration::new_err(()))?;
            Python::attach(|py| FleetEvent::of(py, event))
        })
    }
}

/// Registers the classes.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Fleet>()?;
    m.add_class::<Shard>()?;
    m.add_class::<FleetEvent>()?;
    m.add_class::<Drained>()?;
    Ok(())
}
