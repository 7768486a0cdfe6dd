//! Lease and cell names, checked as the `fence` command checks them (one validator): a name
//! the command refuses — NFD accents, zero-width spaces, bidi controls, `/`, names some store
//! cannot hold — is refused here too, before anything is sent.

use fence_core::{Error, ErrorKind};
use pyo3::prelude::*;

/// Checks a lease or cell name; `InvalidKeyError` with the command's words.
pub(crate) fn check(name: &str) -> PyResult<()> {
    fence_cli::names::check_lease(name).map_err(|f| {
        crate::errors::to_py(Error::new(ErrorKind::InvalidKey, f.message).not_committed())
    })
}

/// Checks a lease or cell name as the `fence` command does; raises ``InvalidKeyError``.
#[pyfunction]
pub(crate) fn check_name(name: &str) -> PyResult<()> {
    check(name)
}
