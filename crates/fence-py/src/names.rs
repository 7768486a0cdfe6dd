//! Lease and cell names, checked as the `fence` command checks them: the fence library's
//! [`names`](fence::names), one validator for both. A name the command refuses — NFD
//! accents, zero-width spaces, bidi controls, `/`, names some store cannot hold — is refused
//! here too, before anything is sent.

use pyo3::prelude::*;

/// Checks a lease or cell name; `InvalidKeyError` with the command's words.
pub(crate) fn check(name: &str) -> PyResult<()> {
    fence::names::check_lease(name).map_err(crate::errors::to_py)
}

/// The node id of the run lease ``name`` (``run.NAME``, what every ``fence run --lease NAME``
/// acts as), after checking ``name`` as the ``fence`` command does (``InvalidKeyError``).
#[pyfunction]
pub(crate) fn run_lease_node(name: &str) -> PyResult<String> {
    check(name)?;
    Ok(fence::names::node_of(name))
}
