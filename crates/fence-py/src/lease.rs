//! `Fence`, `Lease`, `Claim`: the core's runtime (node lease, cell claims, fenced writes).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::runtime::{read_cell, update_cell, CellData as CoreData};
use fence_core::{CellClaim, Error, ErrorKind, LeaseKeeper, Version, WriteAck as CoreAck};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyString};
use tokio::sync::RwLock;

use crate::store::Store;
use crate::wait::{run, run_async, seconds, sliced, wait_async, wait_blocking};

/// A payload from Python: ``bytes``, ``bytearray`` or ``str`` (written as UTF-8).
pub(crate) fn payload(data: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(s) = data.cast::<PyString>() {
        return Ok(Bytes::copy_from_slice(s.to_str()?.as_bytes()));
    }
    let b: PyBackedBytes = data.extract()?;
    Ok(Bytes::copy_from_slice(&b))
}

/// A version from Python (``None``: the cell holds no data yet).
fn version(v: Option<&str>) -> PyResult<Option<Version>> {
    v.map(Version::new)
        .transpose()
        .map_err(crate::errors::to_py)
}

/// A fenced write's acknowledgement: the head is stored at ``version``, written under
/// ``epoch`` while this node owned the cell.
#[pyclass(module = "fence", frozen, get_all)]
#[derive(Clone)]
pub(crate) struct WriteAck {
    /// The epoch the write was made under.
    epoch: u64,
    /// The cell head's new version (pass it to ``write_if``).
    version: String,
}

impl From<CoreAck> for WriteAck {
    fn from(a: CoreAck) -> Self {
        WriteAck {
            epoch: a.epoch,
            version: a.version.as_str().to_owned(),
        }
    }
}

#[pymethods]
impl WriteAck {
    fn __repr__(&self) -> String {
        format!("WriteAck(epoch={}, version={:?})", self.epoch, self.version)
    }
}

/// A cell's data as a reader sees it: always the current epoch's.
#[pyclass(module = "fence", frozen, get_all)]
pub(crate) struct CellData {
    /// The cell's current epoch.
    epoch: u64,
    /// The current owner, ``None`` once released.
    owner: Option<String>,
    /// The payload.
    data: Py<PyBytes>,
    /// The head version it was read from (for ``write_if``).
    version: String,
    /// True only for a fence-v1 cell whose separate data predates its owner record's epoch.
    stale: bool,
}

/// Converts a read to Python objects.
pub(crate) fn cell_data(py: Python<'_>, d: Option<CoreData>) -> Option<CellData> {
    d.map(|d| CellData {
        epoch: d.epoch,
        owner: d.owner,
        data: PyBytes::new(py, &d.payload).unbind(),
        version: d.version.as_str().to_owned(),
        stale: d.stale,
    })
}

#[pymethods]
impl CellData {
    fn __repr__(&self) -> String {
        format!(
            "CellData(epoch={}, owner={:?}, version={:?})",
            self.epoch, self.owner, self.version
        )
    }
}

/// Reads a cell, converted under the GIL after the store call.
struct Read(Option<CoreData>);

impl<'py> IntoPyObject<'py> for Read {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        cell_data(py, self.0).into_pyobject(py).map(Bound::into_any)
    }
}

/// One node of a fleet: a node id over a store, with the lease TTL.
///
/// >>> import fence, tempfile
/// >>> f = fence.Fence(fence.Store("file://" + tempfile.mkdtemp()), "worker-1", ttl=5.0)
/// >>> with f.acquire(timeout=10) as lease:
/// ...     with lease.claim("orders", timeout=10) as cell:
/// ...         ack = cell.write(b"state v1")
/// ...         (ack.epoch, cell.read().data)
/// (1, b'state v1')
#[pyclass(module = "fence", frozen)]
pub(crate) struct Fence {
    pub(crate) fence: fence_core::Fence,
}

#[pymethods]
impl Fence {
    /// A fence for node ``node`` over ``store`` (a ``Store`` or a URL). ``ttl``: the node
    /// lease's TTL in seconds; ``prefix``: a key prefix for every record; ``addr``: where
    /// peers reach this node (shown by ``fence status``).
    #[new]
    #[pyo3(signature = (store, node, *, ttl = 10.0, prefix = None, addr = None))]
    fn new(
        store: &Bound<'_, PyAny>,
        node: &str,
        ttl: f64,
        prefix: Option<String>,
        addr: Option<String>,
    ) -> PyResult<Self> {
        let ttl = seconds(Some(ttl))?.unwrap_or(Duration::from_secs(10));
        let store = match store.cast::<Store>() {
            Ok(s) => s.get().clone(),
            Err(_) => {
                let url: String = store.extract()?;
                Store::open(&url, Some(ttl))?
            }
        };
        let mut b = fence_core::Fence::builder(store.store.clone(), node).ttl(ttl);
        if let Some(p) = prefix {
            b = b.prefix(p);
        }
        if let Some(a) = addr {
            b = b.addr(a);
        }
        let fence = b.build().map_err(crate::errors::to_py)?;
        Ok(Fence { fence })
    }

    /// The node id.
    #[getter]
    fn node(&self) -> String {
        self.fence.ownership().node().to_owned()
    }

    /// Acquires the node lease, waiting up to ``timeout`` seconds (``None``: forever; ``0``:
    /// try once) while another live process holds it: it is taken over once released, or
    /// seen unchanged for a full TTL. Raises ``BusyError`` at the deadline. Renewed in the
    /// background until released. Ctrl-C during the wait raises ``KeyboardInterrupt`` and
    /// holds nothing.
    #[pyo3(signature = (timeout = 0.0))]
    fn acquire(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Lease> {
        let timeout = seconds(timeout)?;
        let fence = self.fence.clone();
        wait_blocking(py, move |cancel| acquire(fence, timeout, cancel))
    }

    /// ``acquire`` as a coroutine; cancelling it holds nothing.
    #[pyo3(signature = (timeout = 0.0))]
    fn acquire_async<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = seconds(timeout)?;
        let fence = self.fence.clone();
        wait_async(py, move |cancel| acquire(fence, timeout, cancel))
    }

    /// Acquires as the successor of this node's earlier process, whose lease generation was
    /// ``generation`` and which the caller KNOWS has ended: its record is taken over at once.
    fn acquire_succeeding(&self, py: Python<'_>, generation: &str) -> PyResult<Lease> {
        let keeper = run(py, self.fence.acquire_succeeding(generation))?;
        Ok(Lease::new(keeper))
    }

    /// Reads ``cell``'s data (``None``: never written), without claiming it.
    fn read(&self, py: Python<'_>, cell: &str) -> PyResult<Option<CellData>> {
        let d = run(py, read_cell(self.fence.ownership(), cell))?;
        Ok(cell_data(py, d))
    }

    /// ``read`` as a coroutine.
    fn read_async<'py>(&self, py: Python<'py>, cell: String) -> PyResult<Bound<'py, PyAny>> {
        let own = self.fence.ownership().clone();
        run_async(py, async move { read_cell(&own, &cell).await.map(Read) })
    }

    /// A fenced write of ``cell`` under ``epoch`` without a claim (what ``fence put`` does
    /// for a command run by ``fence run``): it lands only while the cell's head names an
    /// owner at exactly ``epoch``; raises ``FencedError`` (not committed) once a later claim
    /// rewrote the head. ``timeout`` bounds each request.
    #[pyo3(signature = (cell, epoch, data, *, timeout = 10.0))]
    fn put(
        &self,
        py: Python<'_>,
        cell: &str,
        epoch: u64,
        data: &Bound<'_, PyAny>,
        timeout: f64,
    ) -> PyResult<WriteAck> {
        let data = payload(data)?;
        let bound = seconds(Some(timeout))?.unwrap_or_default();
        let own = self.fence.ownership();
        let ack = run(
            py,
            update_cell(own, cell, epoch, bound, |_| Ok(data.clone())),
        )?;
        Ok(ack.into())
    }

    fn __repr__(&self) -> String {
        format!("Fence(node={:?})", self.fence.ownership().node())
    }
}

async fn acquire(
    fence: fence_core::Fence,
    timeout: Option<Duration>,
    cancel: crate::wait::Cancel,
) -> Result<Lease, Error> {
    let keeper = sliced(
        timeout,
        cancel,
        |limit| fence.acquire_wait(limit),
        |k: LeaseKeeper| k.release(),
    )
    .await?;
    Ok(Lease::new(keeper))
}

/// A held node lease, renewed in the background. A context manager (also ``async with``):
/// leaving it releases the lease, so peers may take over at once.
#[pyclass(module = "fence", frozen)]
pub(crate) struct Lease {
    keeper: Arc<RwLock<Option<LeaseKeeper>>>,
    node: String,
    generation: String,
}

impl Lease {
    pub(crate) fn new(keeper: LeaseKeeper) -> Self {
        Lease {
            node: keeper.node().to_owned(),
            generation: keeper.generation(),
            keeper: Arc::new(RwLock::new(Some(keeper))),
        }
    }
}

fn released() -> Error {
    Error::fenced("the lease was released; nothing written").not_committed()
}

async fn claim(
    keeper: Arc<RwLock<Option<LeaseKeeper>>>,
    cell: String,
    timeout: Option<Duration>,
    cancel: crate::wait::Cancel,
) -> Result<Claim, Error> {
    let held = keeper.read().await;
    let keeper = held.as_ref().ok_or_else(released)?;
    let claim = sliced(
        timeout,
        cancel,
        |limit| keeper.claim_wait(&cell, limit),
        |c: CellClaim| async move {
            let _ = c.release().await;
        },
    )
    .await?;
    Ok(Claim::new(claim))
}

async fn release(keeper: Arc<RwLock<Option<LeaseKeeper>>>) -> Result<bool, Error> {
    if let Some(k) = keeper.write().await.take() {
        k.release().await;
    }
    Ok(false)
}

#[pymethods]
impl Lease {
    /// The node id.
    #[getter]
    fn node(&self) -> &str {
        &self.node
    }

    /// This process's lease generation: persist it to restart with ``acquire_succeeding``.
    #[getter]
    fn generation(&self) -> &str {
        &self.generation
    }

    /// Whether this process may act as the holder now (judged on the monotonic and the wall
    /// clock at call time).
    fn is_held(&self) -> bool {
        self.keeper
            .try_read()
            .is_ok_and(|k| k.as_ref().is_some_and(LeaseKeeper::is_held))
    }

    /// The authority left now, in seconds (0 once lost or released).
    #[getter]
    fn remaining(&self) -> f64 {
        self.keeper.try_read().map_or(0.0, |k| {
            k.as_ref().map_or(0.0, |k| k.remaining().as_secs_f64())
        })
    }

    /// Claims ``cell`` at a new epoch, waiting up to ``timeout`` seconds (``None``: forever;
    /// ``0``: try once) while a live node owns it. Raises ``BusyError`` at the deadline,
    /// ``FencedError`` once this lease is lost. Ctrl-C during the wait raises
    /// ``KeyboardInterrupt`` and leaves the cell unclaimed.
    #[pyo3(signature = (cell, timeout = 0.0))]
    fn claim(&self, py: Python<'_>, cell: String, timeout: Option<f64>) -> PyResult<Claim> {
        let timeout = seconds(timeout)?;
        let keeper = self.keeper.clone();
        wait_blocking(py, move |cancel| claim(keeper, cell, timeout, cancel))
    }

    /// ``claim`` as a coroutine; cancelling it leaves the cell unclaimed.
    #[pyo3(signature = (cell, timeout = 0.0))]
    fn claim_async<'py>(
        &self,
        py: Python<'py>,
        cell: String,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = seconds(timeout)?;
        let keeper = self.keeper.clone();
        wait_async(py, move |cancel| claim(keeper, cell, timeout, cancel))
    }

    /// Stops renewing and writes a released record, so peers may take over at once.
    /// Release claims first: a claim's release is refused once the lease is gone.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        run(py, release(self.keeper.clone())).map(drop)
    }

    /// ``release`` as a coroutine.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        run_async(py, release(self.keeper.clone()))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }

    fn __aenter__<'py>(slf: Py<Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pyo3_async_runtimes::tokio::future_into_py(py, async move { Ok(slf) })
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _t: Option<Bound<'py, PyAny>>,
        _v: Option<Bound<'py, PyAny>>,
        _tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.release_async(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "Lease(node={:?}, generation={:?}, held={})",
            self.node,
            self.generation,
            self.is_held()
        )
    }
}

/// A claimed cell: its epoch and fenced writes of its data. A context manager (also
/// ``async with``): leaving it releases the cell (same epoch, nobody named), so the next
/// claim takes epoch + 1 at once.
#[pyclass(module = "fence", frozen)]
pub(crate) struct Claim {
    pub(crate) claim: Arc<CellClaim>,
}

impl Claim {
    pub(crate) fn new(claim: CellClaim) -> Self {
        Claim {
            claim: Arc::new(claim),
        }
    }
}

/// Releases at the end of a ``with`` block: a claim already ended (lost, superseded,
/// released) has nothing to release.
async fn release_claim(claim: Arc<CellClaim>) -> Result<bool, Error> {
    if !claim.is_held() {
        return Ok(false);
    }
    match claim.release_shared().await {
        Err(e) if e.kind() == ErrorKind::Fenced && !e.is_ambiguous() => Ok(false),
        other => other.map(|()| false),
    }
}

#[pymethods]
impl Claim {
    /// The cell.
    #[getter]
    fn cell(&self) -> &str {
        self.claim.cell()
    }

    /// The epoch of this claim: the fencing token.
    #[getter]
    fn epoch(&self) -> u64 {
        self.claim.epoch()
    }

    /// Whether the lease is held and no write found the claim superseded.
    fn is_held(&self) -> bool {
        self.claim.is_held()
    }

    /// A fenced write of the cell's data: one compare-and-swap of the cell head, guarded on
    /// a version that named this node at this epoch. Raises ``FencedError`` once a later
    /// claim exists (the store refuses it); an error whose ``commit`` is ``"ambiguous"``
    /// may have landed and is never re-sent.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<WriteAck> {
        let data = payload(data)?;
        run(py, self.claim.write(data)).map(WriteAck::from)
    }

    /// ``write`` as a coroutine.
    fn write_async<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = payload(data)?;
        let claim = self.claim.clone();
        run_async(
            py,
            async move { claim.write(data).await.map(WriteAck::from) },
        )
    }

    /// A ``write`` that lands only over the head ``version`` (a ``CellData.version`` or
    /// ``WriteAck.version``; ``None``: only while the cell holds no data). A head that moved
    /// raises ``ConflictError`` with ``commit == "not_committed"``: read again and rebuild.
    fn write_if(
        &self,
        py: Python<'_>,
        version: Option<&str>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<WriteAck> {
        let data = payload(data)?;
        let expected = crate::lease::version(version)?;
        run(py, self.claim.write_if(expected.as_ref(), data)).map(WriteAck::from)
    }

    /// ``write_if`` as a coroutine.
    fn write_if_async<'py>(
        &self,
        py: Python<'py>,
        version: Option<&str>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = payload(data)?;
        let expected = crate::lease::version(version)?;
        let claim = self.claim.clone();
        run_async(py, async move {
            claim
                .write_if(expected.as_ref(), data)
                .await
                .map(WriteAck::from)
        })
    }

    /// Reads the cell's data (``None``: no data yet).
    fn read(&self, py: Python<'_>) -> PyResult<Option<CellData>> {
        let d = run(py, self.claim.read())?;
        Ok(cell_data(py, d))
    }

    /// ``read`` as a coroutine.
    fn read_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let claim = self.claim.clone();
        run_async(py, async move { claim.read().await.map(Read) })
    }

    /// Releases the cell: nobody named, same epoch, data kept. Raises ``FencedError`` once
    /// the lease is gone.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        run(py, self.claim.release_shared())
    }

    /// ``release`` as a coroutine.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let claim = self.claim.clone();
        run_async(py, async move { claim.release_shared().await })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        run(py, release_claim(self.claim.clone()))
    }

    fn __aenter__<'py>(slf: Py<Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pyo3_async_runtimes::tokio::future_into_py(py, async move { Ok(slf) })
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _t: Option<Bound<'py, PyAny>>,
        _v: Option<Bound<'py, PyAny>>,
        _tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        run_async(py, release_claim(self.claim.clone()))
    }

    fn __repr__(&self) -> String {
        format!(
            "Claim(cell={:?}, epoch={}, held={})",
            self.claim.cell(),
            self.claim.epoch(),
            self.claim.is_held()
        )
    }
}
