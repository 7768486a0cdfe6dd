//! `Fence`, `Lease`: the core's runtime (the node lease; its claims are in claim.rs).

use std::sync::Arc;
use std::time::Duration;

use fence_core::keymap;
use fence_core::runtime::{read_cell, CellData as CoreData};
use fence_core::{CellClaim, Error, LeaseKeeper, LeaseStatus, Version, WriteAck as CoreAck};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::RwLock;

pub(crate) use crate::claim::Claim;
use crate::data::{payload, write_at};
use crate::names::check;
use crate::process::{future_into_py, hold, holding, Held, Local};
use crate::repr::{repr, v};
use crate::store::Store;
use crate::wait::{interruptible, run, run_async, seconds, sliced, wait_async, wait_blocking};

/// A version from Python (``None``: the cell holds no data yet).
pub(crate) fn version(v: Option<&str>) -> PyResult<Option<Version>> {
    v.map(Version::new)
        .transpose()
        .map_err(crate::errors::to_py)
}

/// How long a lock-style call waits: `blocking=False` tries once (a timeout may not be given
/// with it, as for `threading.Lock`); `timeout=None` waits for ever, `0` tries once.
pub(crate) fn wait_limit(blocking: bool, timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match (blocking, timeout) {
        (true, t) => seconds(t),
        (false, None) => Ok(Some(Duration::ZERO)),
        (false, Some(_)) => Err(crate::errors::invalid_input(
            "a timeout cannot be given with blocking=False (it tries once)",
        )),
    }
}

/// Checks the arguments of a lock-style wait (``blocking``, ``timeout``) as ``acquire``
/// does; raises ``InvalidInputError``.
#[pyfunction]
#[pyo3(signature = (blocking = true, timeout = None))]
pub(crate) fn check_wait(blocking: bool, timeout: Option<f64>) -> PyResult<()> {
    wait_limit(blocking, timeout).map(drop)
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
    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "WriteAck",
            &[
                ("epoch", v(py, self.epoch)),
                ("version", v(py, &self.version)),
            ],
        )
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
    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "CellData",
            &[
                ("epoch", v(py, self.epoch)),
                ("owner", v(py, self.owner.as_deref())),
                ("version", v(py, &self.version)),
            ],
        )
    }
}

/// Reads a cell, converted under the GIL after the store call.
pub(crate) struct Read(pub(crate) Option<CoreData>);

impl<'py> IntoPyObject<'py> for Read {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        cell_data(py, self.0).into_pyobject(py).map(Bound::into_any)
    }
}

/// A key-map value, converted to ``bytes`` under the GIL.
pub(crate) struct Value(pub(crate) Option<Vec<u8>>);

impl<'py> IntoPyObject<'py> for Value {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.0 {
            Some(b) => PyBytes::new(py, &b).into_any(),
            None => py.None().into_bound(py),
        })
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
    pub(crate) fence: Local<fence_core::Fence>,
    node: String,
    url: String,
    /// Store, prefix and node: a node lease this process may hold once.
    hold_key: String,
}

impl Fence {
    fn new_lease(&self, py: Python<'_>, keeper: LeaseKeeper) -> Lease {
        Lease::held(py, keeper, self.hold_key.clone())
    }

    /// `AlreadyHeldError` while this process holds this node lease (through any `Fence`).
    fn refuse_if_held(&self, py: Python<'_>) -> PyResult<()> {
        let Some(slot) = holding(py, &self.hold_key) else {
            return Ok(());
        };
        let generation = slot
            .try_read()
            .ok()
            .and_then(|k| k.as_ref().map(LeaseKeeper::generation))
            .unwrap_or_default();
        Err(crate::errors::already_held(format!(
            "this process already holds node lease {} on {} (generation {generation}) through \
             a Lease of this Fence or another with the same store and node id: use that \
             Lease, or release it first (acquiring again would wait on itself)",
            self.node, self.url
        )))
    }
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
        let (store, url) = match store.cast::<Store>() {
            Ok(s) => (s.get().store()?, s.get().url.clone()),
            Err(_) => {
                let url: String = store.extract()?;
                let s = Store::open(&url, Some(ttl))?;
                (s.store()?, s.url)
            }
        };
        let hold_key = format!("{url}\n{}\n{node}", prefix.as_deref().unwrap_or(""));
        let mut b = fence_core::Fence::builder(store, node).ttl(ttl);
        if let Some(p) = prefix {
            b = b.prefix(p);
        }
        if let Some(a) = addr {
            b = b.addr(a);
        }
        let fence = b.build().map_err(crate::errors::to_py)?;
        Ok(Fence {
            fence: Local::new(fence),
            node: node.to_owned(),
            url,
            hold_key,
        })
    }

    /// The node id.
    #[getter]
    fn node(&self) -> &str {
        &self.node
    }

    /// Acquires the node lease and returns its ``Lease``, renewed in the background until
    /// released. As ``threading.Lock.acquire``: blocks by default until the lease is free
    /// (``timeout=None``: for ever; else at most ``timeout`` seconds); ``blocking=False``
    /// tries once. A live holder's lease is taken over once released, or seen unchanged for
    /// a full TTL. Raises ``BusyError`` when the wait ends without it (as filelock raises
    /// ``Timeout``), ``AlreadyHeldError`` at once while this process already holds this node
    /// lease. Ctrl-C during the wait raises ``KeyboardInterrupt`` and holds nothing.
    #[pyo3(signature = (blocking = true, timeout = None))]
    fn acquire(&self, py: Python<'_>, blocking: bool, timeout: Option<f64>) -> PyResult<Lease> {
        let timeout = wait_limit(blocking, timeout)?;
        let fence = self.fence.get()?.clone();
        self.refuse_if_held(py)?;
        let keeper = wait_blocking(py, move |cancel| acquire(fence, timeout, cancel))?;
        Ok(self.new_lease(py, keeper))
    }

    /// ``acquire`` as a coroutine; cancelling it holds nothing.
    #[pyo3(signature = (blocking = true, timeout = None))]
    fn acquire_async<'py>(
        &self,
        py: Python<'py>,
        blocking: bool,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = wait_limit(blocking, timeout)?;
        let fence = self.fence.get()?.clone();
        self.refuse_if_held(py)?;
        let key = self.hold_key.clone();
        wait_async(py, move |cancel| async move {
            let keeper = acquire(fence, timeout, cancel).await?;
            Ok(Python::attach(|py| Lease::held(py, keeper, key)))
        })
    }

    /// Acquires as the successor of this node's earlier process, whose lease generation was
    /// ``generation`` and which the caller KNOWS has ended: its record is taken over at once
    /// (even when a ``Lease`` of this process is that generation: the caller declares it
    /// ended). Never waits: a record of another generation is judged as ``acquire`` with
    /// ``blocking=False`` judges it.
    fn acquire_succeeding(&self, py: Python<'_>, generation: &str) -> PyResult<Lease> {
        let fence = self.fence.get()?;
        let keeper = run(py, fence.acquire_succeeding(generation))?;
        Ok(self.new_lease(py, keeper))
    }

    /// Whether this process holds this node lease now (through any ``Fence`` with the same
    /// store and node id): judged locally, without asking the store. False in a forked child.
    fn locked(&self, py: Python<'_>) -> bool {
        self.fence.here().is_some() && holding(py, &self.hold_key).is_some()
    }

    /// Reads ``cell``'s data (``None``: never written), without claiming it.
    fn read(&self, py: Python<'_>, cell: &str) -> PyResult<Option<CellData>> {
        check(cell)?;
        let d = run(py, read_cell(self.fence.get()?.ownership(), cell))?;
        Ok(cell_data(py, d))
    }

    /// ``read`` as a coroutine.
    fn read_async<'py>(&self, py: Python<'py>, cell: String) -> PyResult<Bound<'py, PyAny>> {
        check(&cell)?;
        let own = self.fence.get()?.ownership().clone();
        run_async(py, async move { read_cell(&own, &cell).await.map(Read) })
    }

    /// A raw fenced write of ``cell``'s whole data under ``epoch``, without a claim (for a
    /// process handed the epoch, as ``fence run`` hands ``FENCE_EPOCH`` to its command): it
    /// lands only while the cell's head names an owner at exactly ``epoch``; raises
    /// ``FencedError`` (not committed) once a later claim rewrote the head. Data that is a
    /// key map (what ``fence put`` and ``put`` keep) is not replaced unless
    /// ``overwrite_keymap=True`` (``InvalidInputError``, nothing written); after a raw write
    /// that is not a JSON object, ``fence put``/``fence get`` refuse the cell's data.
    /// ``timeout`` bounds each request.
    #[pyo3(signature = (cell, epoch, data, *, timeout = 10.0, overwrite_keymap = false))]
    fn write(
        &self,
        py: Python<'_>,
        cell: &str,
        epoch: u64,
        data: &Bound<'_, PyAny>,
        timeout: f64,
        overwrite_keymap: bool,
    ) -> PyResult<WriteAck> {
        check(cell)?;
        let data = payload(data)?;
        let bound = seconds(Some(timeout))?.unwrap_or_default();
        let own = self.fence.get()?.ownership();
        let ack = run(
            py,
            write_at(own, cell, epoch, data, overwrite_keymap, bound),
        )?;
        Ok(ack.into())
    }

    /// Sets ``key`` to ``value`` (bytes or str) in ``cell``'s key map under ``epoch``: exactly
    /// ``fence put --lease CELL --epoch EPOCH KEY``, one fenced read-modify-write. Raises
    /// ``FencedError`` once ``epoch`` is not the cell's current one, ``CorruptError`` when
    /// the cell's data is not a key map (nothing written).
    #[pyo3(signature = (cell, epoch, key, value, *, timeout = 10.0))]
    fn put(
        &self,
        py: Python<'_>,
        cell: &str,
        epoch: u64,
        key: &str,
        value: &Bound<'_, PyAny>,
        timeout: f64,
    ) -> PyResult<WriteAck> {
        check(cell)?;
        let value = payload(value)?;
        let bound = seconds(Some(timeout))?.unwrap_or_default();
        let own = self.fence.get()?.ownership();
        let ack = run(py, keymap::put(own, cell, epoch, key, &value, bound))?;
        Ok(ack.into())
    }

    /// Removes ``key`` from ``cell``'s key map under ``epoch``: ``True`` once removed,
    /// ``False`` when it was not there (nothing written). Errors as ``put``'s.
    #[pyo3(signature = (cell, epoch, key, *, timeout = 10.0))]
    fn delete(
        &self,
        py: Python<'_>,
        cell: &str,
        epoch: u64,
        key: &str,
        timeout: f64,
    ) -> PyResult<bool> {
        check(cell)?;
        let bound = seconds(Some(timeout))?.unwrap_or_default();
        let own = self.fence.get()?.ownership();
        run(py, keymap::delete(own, cell, epoch, key, bound))
    }

    /// The value of ``key`` in ``cell``'s key map as ``bytes`` (``None``: no such key or
    /// cell): exactly ``fence get --lease CELL KEY``. ``CorruptError`` when the cell's data
    /// is not a key map.
    fn get<'py>(&self, py: Python<'py>, cell: &str, key: &str) -> PyResult<Bound<'py, PyAny>> {
        check(cell)?;
        let own = self.fence.get()?.ownership();
        let value = run(py, keymap::get(own, cell, key))?;
        Value(value).into_pyobject(py)
    }

    /// The keys of ``cell``'s key map, sorted.
    fn keys(&self, py: Python<'_>, cell: &str) -> PyResult<Vec<String>> {
        check(cell)?;
        let own = self.fence.get()?.ownership();
        run(py, keymap::keys(own, cell))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "Fence",
            &[("store", v(py, &self.url)), ("node", v(py, &self.node))],
        )
    }
}

async fn acquire(
    fence: fence_core::Fence,
    timeout: Option<Duration>,
    cancel: crate::wait::Cancel,
) -> Result<LeaseKeeper, Error> {
    sliced(
        timeout,
        cancel,
        |limit| fence.acquire_wait(limit),
        |k: LeaseKeeper| k.release(),
    )
    .await
}

/// A held node lease, or nothing once released.
pub(crate) type KeeperSlot = RwLock<Option<LeaseKeeper>>;

/// Whether `slot` holds its lease now (a release under way: no).
pub(crate) fn slot_is_held(slot: &KeeperSlot) -> bool {
    slot.try_read()
        .is_ok_and(|k| k.as_ref().is_some_and(LeaseKeeper::is_held))
}

/// Releases the lease in `slot`, if it still holds one.
pub(crate) async fn release_slot(slot: &KeeperSlot) {
    if let Some(k) = slot.write().await.take() {
        k.release().await;
    }
}

/// A held node lease, renewed in the background. A context manager (also ``async with``):
/// leaving it releases the lease, so peers may take over at once.
#[pyclass(module = "fence", frozen)]
pub(crate) struct Lease {
    keeper: Local<Arc<KeeperSlot>>,
    node: String,
    generation: String,
}

impl Lease {
    /// A lease this process now holds, registered as held (`AlreadyHeldError` for another
    /// acquisition, release at interpreter exit).
    pub(crate) fn held(py: Python<'_>, keeper: LeaseKeeper, hold_key: String) -> Self {
        let lease = Lease {
            node: keeper.node().to_owned(),
            generation: keeper.generation(),
            keeper: Local::new(Arc::new(RwLock::new(Some(keeper)))),
        };
        if let Some(slot) = lease.keeper.here() {
            hold(py, Held::Lease(hold_key, Arc::downgrade(slot)));
        }
        lease
    }

    fn held_now(&self) -> bool {
        self.keeper.here().is_some_and(|s| slot_is_held(s))
    }
}

fn released() -> Error {
    Error::fenced("the lease was released; nothing written").not_committed()
}

async fn claim(
    keeper: Arc<KeeperSlot>,
    cell: String,
    timeout: Option<Duration>,
    cancel: crate::wait::Cancel,
) -> Result<CellClaim, Error> {
    let held = keeper.read().await;
    let keeper = held.as_ref().ok_or_else(released)?;
    sliced(
        timeout,
        cancel,
        |limit| keeper.claim_wait(&cell, limit),
        |c: CellClaim| async move {
            let _ = c.release().await;
        },
    )
    .await
}

async fn release(keeper: Arc<KeeperSlot>) -> Result<bool, Error> {
    release_slot(&keeper).await;
    Ok(false)
}

/// Waits until the lease's authority ends — lost (renewals failed for a TTL, taken over) or
/// released — and says which: `"lease_lost"` or `"released"`. Never holds the slot while it
/// waits, so a release can go on meanwhile.
async fn lost(keeper: Arc<KeeperSlot>) -> &'static str {
    let clock = fence_core::Clock::system();
    let Some(mut status) = keeper.read().await.as_ref().map(LeaseKeeper::watch) else {
        return "released";
    };
    loop {
        let left = match keeper.read().await.as_ref() {
            None => return "released",
            Some(k) if !k.is_held() => return ended(&k.status()),
            Some(k) => k.remaining(),
        };
        // The authority may run out with no status change (renewals hanging): look again
        // when it would.
        tokio::select! {
            changed = status.changed() => {
                if changed.is_err() {
                    clock.sleep(left).await;
                }
            }
            () = clock.sleep(left) => {}
        }
    }
}

fn ended(status: &LeaseStatus) -> &'static str {
    match status {
        LeaseStatus::Released => "released",
        _ => "lease_lost",
    }
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
    /// clock at call time). False in a forked child: it holds nothing.
    fn is_held(&self) -> bool {
        self.held_now()
    }

    /// The authority left now, in seconds (0 once lost or released, and in a forked child).
    #[getter]
    fn remaining(&self) -> f64 {
        self.keeper.here().map_or(0.0, |slot| {
            slot.try_read().map_or(0.0, |k| {
                k.as_ref().map_or(0.0, |k| k.remaining().as_secs_f64())
            })
        })
    }

    /// Claims ``cell`` at a new epoch. As ``acquire``: blocks by default until a live owner
    /// lets go (``timeout=None``: for ever; else at most ``timeout`` seconds);
    /// ``blocking=False`` tries once. Raises ``BusyError`` when the wait ends without it,
    /// ``FencedError`` once this lease is lost. Ctrl-C during the wait raises
    /// ``KeyboardInterrupt`` and leaves the cell unclaimed.
    #[pyo3(signature = (cell, blocking = true, timeout = None))]
    fn claim(
        &self,
        py: Python<'_>,
        cell: String,
        blocking: bool,
        timeout: Option<f64>,
    ) -> PyResult<Claim> {
        check(&cell)?;
        let timeout = wait_limit(blocking, timeout)?;
        let keeper = self.keeper.get()?.clone();
        let claimed = wait_blocking(py, move |cancel| claim(keeper, cell, timeout, cancel))?;
        Ok(Claim::held(py, claimed))
    }

    /// ``claim`` as a coroutine; cancelling it leaves the cell unclaimed.
    #[pyo3(signature = (cell, blocking = true, timeout = None))]
    fn claim_async<'py>(
        &self,
        py: Python<'py>,
        cell: String,
        blocking: bool,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        check(&cell)?;
        let timeout = wait_limit(blocking, timeout)?;
        let keeper = self.keeper.get()?.clone();
        wait_async(py, move |cancel| async move {
            let claimed = claim(keeper, cell, timeout, cancel).await?;
            Ok(Python::attach(|py| Claim::held(py, claimed)))
        })
    }

    /// Waits until this lease's authority ends and says why: ``"lease_lost"`` (renewals
    /// failed for a TTL, or the lease was taken over) or ``"released"``. Run the work in a
    /// thread and stop it when this returns, or in asyncio race it against ``lost_async()``.
    /// Ctrl-C raises ``KeyboardInterrupt``.
    fn lost(&self, py: Python<'_>) -> PyResult<&'static str> {
        let keeper = self.keeper.get()?.clone();
        interruptible(py, lost(keeper))
    }

    /// ``lost`` as a coroutine.
    fn lost_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let keeper = self.keeper.get()?.clone();
        future_into_py(py, async move { Ok(lost(keeper).await) })
    }

    /// Stops renewing and writes a released record, so peers may take over at once.
    /// Release claims first: a claim's release is refused once the lease is gone. In a
    /// forked child it does nothing: the child holds nothing, and the parent keeps the lease.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        match self.keeper.here() {
            Some(k) => run(py, release(k.clone())).map(drop),
            None => Ok(()),
        }
    }

    /// ``release`` as a coroutine.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.keeper.here() {
            Some(k) => run_async(py, release(k.clone())),
            None => future_into_py(py, async { Ok(false) }),
        }
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
        future_into_py(py, async move { Ok(slf) })
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

    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "Lease",
            &[
                ("node", v(py, &self.node)),
                ("generation", v(py, &self.generation)),
                ("held", v(py, self.held_now())),
            ],
        )
    }
}
