//! `Store`: a store opened by URL by the fence library, as the `fence` command opens it.

use std::sync::Arc;

use fence_core::ConditionalStore;
use pyo3::prelude::*;

use crate::errors::to_py;
use crate::process::Local;

/// A store named by URL, opened as the ``fence`` command opens it: ``file:///abs/dir``
/// (an existing directory), ``s3://bucket/prefix`` (``AWS_*`` variables),
/// ``gs://bucket/prefix`` (``FENCE_GCS_ENDPOINT`` for an emulator), ``az://container/prefix``
/// (``AZURE_*`` variables) or ``memory://`` (this process only).
///
/// >>> import fence, tempfile
/// >>> store = fence.Store("file://" + tempfile.mkdtemp())
/// >>> store.url.startswith("file:///")
/// True
#[pyclass(module = "fence", frozen)]
pub(crate) struct Store {
    store: Local<Arc<dyn ConditionalStore>>,
    pub(crate) url: String,
}

impl Store {
    /// Opens `url` with [`fence::OpenOptions`] (the environment's configuration).
    pub(crate) fn open(url: &str, lease_ttl: Option<std::time::Duration>) -> PyResult<Self> {
        let mut options = fence::OpenOptions::new();
        if let Some(ttl) = lease_ttl {
            options = options.lease_ttl(ttl);
        }
        let opened = options.open(url).map_err(to_py)?;
        Ok(Store {
            store: Local::new(opened.store),
            url: opened.url,
        })
    }

    /// The opened store; `ForkedError` in a forked child (its connections are the parent's).
    pub(crate) fn store(&self) -> PyResult<Arc<dyn ConditionalStore>> {
        self.store.get().cloned()
    }
}

#[pymethods]
impl Store {
    /// Opens the store named by ``url``. ``lease_ttl`` (seconds) tunes a remote store's
    /// transport timeouts to the TTL of the leases it will hold, as ``fence run --ttl`` does.
    #[new]
    #[pyo3(signature = (url, *, lease_ttl = None))]
    fn new(url: &str, lease_ttl: Option<f64>) -> PyResult<Self> {
        Store::open(url, crate::wait::seconds(lease_ttl)?)
    }

    /// The store's canonical URL (a ``file://`` path made absolute).
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Store({})", crate::repr::v(py, &self.url).repr()?))
    }
}
