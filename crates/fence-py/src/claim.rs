//! `Claim`: a claimed cell of a `Lease` (fenced writes, the key map, release).

use std::sync::Arc;

use fence_core::keymap;
use fence_core::{CellClaim, Error};
use pyo3::prelude::*;

use crate::data::{claim_delete, claim_put, payload, RawWrites};
use crate::lease::{cell_data, CellData, Read, Value, WriteAck};
use crate::process::{future_into_py, hold, Held, Local};
use crate::repr::{repr, v};
use crate::wait::{run, run_async};

/// A claimed cell: its epoch, fenced writes of its data, and its key map. A context manager
/// (also ``async with``): leaving it releases the cell (same epoch, nobody named), so the
/// next claim takes epoch + 1 at once.
#[pyclass(module = "fence", frozen)]
pub(crate) struct Claim {
    pub(crate) claim: Local<Arc<CellClaim>>,
    cell: String,
    epoch: u64,
    raw: Arc<RawWrites>,
}

impl Claim {
    /// A claim of this process, registered as held (released at interpreter exit).
    pub(crate) fn held(py: Python<'_>, claim: CellClaim) -> Self {
        let claim = Claim::of(Arc::new(claim));
        if let Some(c) = claim.claim.here() {
            hold(py, Held::Claim(Arc::downgrade(c)));
        }
        claim
    }

    /// A view of a claim something else keeps (a fleet's shard).
    pub(crate) fn of(claim: Arc<CellClaim>) -> Self {
        Claim {
            cell: claim.cell().to_owned(),
            epoch: claim.epoch(),
            claim: Local::new(claim),
            raw: Arc::default(),
        }
    }

    fn held_now(&self) -> bool {
        self.claim.here().is_some_and(|c| c.is_held())
    }

    fn parts(&self) -> PyResult<(Arc<CellClaim>, Arc<RawWrites>)> {
        Ok((self.claim.get()?.clone(), self.raw.clone()))
    }
}

/// Releases at the end of a ``with`` block: a claim already ended (lost, superseded,
/// released) has nothing to release.
async fn release_claim(claim: Arc<CellClaim>) -> Result<bool, Error> {
    if !claim.is_held() {
        return Ok(false);
    }
    match claim.release_shared().await {
        Err(e) if e.kind() == fence_core::ErrorKind::Fenced && !e.is_ambiguous() => Ok(false),
        other => other.map(|()| false),
    }
}

#[pymethods]
impl Claim {
    /// The cell.
    #[getter]
    fn cell(&self) -> &str {
        &self.cell
    }

    /// The epoch of this claim: the fencing token.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the lease is held and no write found the claim superseded. False in a forked
    /// child.
    fn is_held(&self) -> bool {
        self.held_now()
    }

    /// A raw fenced write of the cell's whole data: one compare-and-swap of the cell head,
    /// guarded on a version that named this node at this epoch. Raises ``FencedError`` once a
    /// later claim exists (the store refuses it); an error whose ``commit`` is
    /// ``"ambiguous"`` may have landed and is never re-sent.
    ///
    /// The cell's data is also the key map of ``put``/``get`` and of the ``fence put`` /
    /// ``fence get`` commands: a raw write replaces all of it. Over a key map it is refused
    /// (``InvalidInputError``, nothing written) unless ``overwrite_keymap=True``; checking
    /// costs one read, except over this claim's own last raw write. After a raw write that is
    /// not a JSON object, ``fence put``/``fence get`` refuse the cell's data.
    #[pyo3(signature = (data, *, overwrite_keymap = false))]
    fn write(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        overwrite_keymap: bool,
    ) -> PyResult<WriteAck> {
        let data = payload(data)?;
        let (claim, raw) = self.parts()?;
        let ack = run(py, raw.write(&claim, data, None, overwrite_keymap))?;
        Ok(ack.into())
    }

    /// ``write`` as a coroutine.
    #[pyo3(signature = (data, *, overwrite_keymap = false))]
    fn write_async<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        overwrite_keymap: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = payload(data)?;
        let (claim, raw) = self.parts()?;
        run_async(py, async move {
            let ack = raw.write(&claim, data, None, overwrite_keymap).await;
            ack.map(WriteAck::from)
        })
    }

    /// A ``write`` that lands only over the head ``version`` (a ``CellData.version`` or
    /// ``WriteAck.version``; ``None``: only while the cell holds no data). A head that moved
    /// raises ``ConflictError`` with ``commit == "not_committed"``: read again and rebuild.
    /// A key map is not replaced unless ``overwrite_keymap=True``, as for ``write``.
    #[pyo3(signature = (version, data, *, overwrite_keymap = false))]
    fn write_if(
        &self,
        py: Python<'_>,
        version: Option<&str>,
        data: &Bound<'_, PyAny>,
        overwrite_keymap: bool,
    ) -> PyResult<WriteAck> {
        let data = payload(data)?;
        let expected = Some(crate::lease::version(version)?);
        let (claim, raw) = self.parts()?;
        let ack = run(py, raw.write(&claim, data, expected, overwrite_keymap))?;
        Ok(ack.into())
    }

    /// ``write_if`` as a coroutine.
    #[pyo3(signature = (version, data, *, overwrite_keymap = false))]
    fn write_if_async<'py>(
        &self,
        py: Python<'py>,
        version: Option<&str>,
        data: &Bound<'py, PyAny>,
        overwrite_keymap: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = payload(data)?;
        let expected = Some(crate::lease::version(version)?);
        let (claim, raw) = self.parts()?;
        run_async(py, async move {
            let ack = raw.write(&claim, data, expected, overwrite_keymap).await;
            ack.map(WriteAck::from)
        })
    }

    /// Reads the cell's data (``None``: no data yet).
    fn read(&self, py: Python<'_>) -> PyResult<Option<CellData>> {
        let d = run(py, self.claim.get()?.read())?;
        Ok(cell_data(py, d))
    }

    /// ``read`` as a coroutine.
    fn read_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let claim = self.claim.get()?.clone();
        run_async(py, async move { claim.read().await.map(Read) })
    }

    /// Sets ``key`` to ``value`` (bytes, or str written as UTF-8) in the cell's key map, at
    /// this claim's epoch: what ``fence put KEY`` does inside ``fence run`` (one fenced
    /// read-modify-write; the same format, so ``fence get`` reads it). Raises
    /// ``FencedError`` once the claim does not hold or a later claim exists,
    /// ``CorruptError`` when the data is not a key map (raw bytes; nothing written).
    fn put(&self, py: Python<'_>, key: &str, value: &Bound<'_, PyAny>) -> PyResult<WriteAck> {
        let value = payload(value)?;
        let claim = self.claim.get()?;
        run(py, claim_put(claim, key, &value)).map(WriteAck::from)
    }

    /// ``put`` as a coroutine.
    fn put_async<'py>(
        &self,
        py: Python<'py>,
        key: String,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let value = payload(value)?;
        let claim = self.claim.get()?.clone();
        run_async(py, async move {
            claim_put(&claim, &key, &value).await.map(WriteAck::from)
        })
    }

    /// The value of ``key`` in the cell's key map as ``bytes``, ``None`` if absent (what
    /// ``fence get KEY`` prints).
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        let claim = self.claim.get()?;
        let value = run(py, keymap::get(claim.fence().ownership(), &self.cell, key))?;
        Value(value).into_pyobject(py)
    }

    /// ``get`` as a coroutine.
    fn get_async<'py>(&self, py: Python<'py>, key: String) -> PyResult<Bound<'py, PyAny>> {
        let claim = self.claim.get()?.clone();
        run_async(py, async move {
            let own = claim.fence().ownership();
            keymap::get(own, claim.cell(), &key).await.map(Value)
        })
    }

    /// Removes ``key`` from the cell's key map at this claim's epoch: ``True`` once removed,
    /// ``False`` when it was not there (nothing written). Errors as ``put``'s.
    fn delete(&self, py: Python<'_>, key: &str) -> PyResult<bool> {
        let claim = self.claim.get()?;
        run(py, claim_delete(claim, key))
    }

    /// The keys of the cell's key map, sorted.
    fn keys(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let claim = self.claim.get()?;
        run(py, keymap::keys(claim.fence().ownership(), &self.cell))
    }

    /// Releases the cell: nobody named, same epoch, data kept. Raises ``FencedError`` once
    /// the lease is gone. In a forked child it does nothing (the parent keeps the cell).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        match self.claim.here() {
            Some(c) => run(py, c.release_shared()),
            None => Ok(()),
        }
    }

    /// ``release`` as a coroutine.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.claim.here() {
            Some(c) => {
                let claim = c.clone();
                run_async(py, async move { claim.release_shared().await })
            }
            None => future_into_py(py, async { Ok(()) }),
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
        match self.claim.here() {
            Some(c) => run(py, release_claim(c.clone())),
            None => Ok(false),
        }
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
        match self.claim.here() {
            Some(c) => run_async(py, release_claim(c.clone())),
            None => future_into_py(py, async { Ok(false) }),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        repr(
            "Claim",
            &[
                ("cell", v(py, &self.cell)),
                ("epoch", v(py, self.epoch)),
                ("held", v(py, self.held_now())),
            ],
        )
    }
}
