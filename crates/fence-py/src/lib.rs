//! # fence for Python
//!
//! The extension module `fence._fence`, re-exported by the `fence` package
//! (`python/fence/__init__.py`): fence-core's leases, claims, fenced writes and leader
//! election, and fence-fleet's fleets, over stores opened by URL as the `fence` command opens
//! them. Every call runs on its process's tokio runtime with the GIL released; every wait can
//! be interrupted (Ctrl-C, asyncio cancellation) without leaving a lease or claim taken (the
//! `wait` module); a forked child holds nothing of its parent's (the `process` module). The
//! guide is the package's docstrings and the README's "Python".

mod claim;
mod data;
mod election;
mod errors;
mod fleet;
mod lease;
mod names;
mod process;
mod repr;
mod store;
mod wait;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _fence(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<store::Store>()?;
    m.add_class::<lease::Fence>()?;
    m.add_class::<lease::Lease>()?;
    m.add_class::<lease::Claim>()?;
    m.add_class::<lease::WriteAck>()?;
    m.add_class::<lease::CellData>()?;
    fleet::register(m)?;
    election::register(m)?;
    m.add_function(wrap_pyfunction!(process::release_all, m)?)?;
    m.add_function(wrap_pyfunction!(process::forked_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(names::run_lease_node, m)?)?;
    m.add_function(wrap_pyfunction!(lease::check_wait, m)?)?;
    Ok(())
}
