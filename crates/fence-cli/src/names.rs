//! Lease names as `fence` accepts them, and the node each `fence run` of a lease acts as: the
//! fence library's [`names`](fence::names) (the Python package checks names with the same
//! code), with the command's exit code.

use crate::exit::Failure;

pub use fence::names::{node_of, MAX_LEASE_BYTES};

/// Checks a lease name before anything is sent ([`fence::names::check_lease`]); exit 2.
///
/// ```
/// use fence_cli::names::check_lease;
/// assert!(check_lease("nightly-backup").is_ok());
/// assert_eq!(check_lease("cafe\u{301}").unwrap_err().code, 2); // NFD
/// assert_eq!(check_lease("night\u{200b}ly").unwrap_err().code, 2); // a zero-width space
/// ```
pub fn check_lease(name: &str) -> Result<(), Failure> {
    fence::names::check_lease(name).map_err(|e| Failure::usage(e.message()))
}
