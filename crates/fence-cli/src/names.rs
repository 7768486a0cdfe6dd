//! Lease names as `fence` accepts them, and the node each `fence run` of a lease acts as.

use crate::exit::{shown, Failure};

/// The longest lease name, in bytes: the node id `run.<name>` must fit the store's 200-byte
/// name segment.
pub const MAX_LEASE_BYTES: usize = 196;

/// Checks a lease name before anything is sent: one non-empty path segment of at most
/// [`MAX_LEASE_BYTES`] bytes without `/`, `\` or control characters, and not `.` or `..`.
///
/// ```
/// use fence_cli::names::check_lease;
/// assert!(check_lease("nightly-backup").is_ok());
/// assert_eq!(check_lease("a/b").unwrap_err().code, 2);
/// assert_eq!(check_lease(&"x".repeat(300)).unwrap_err().code, 2);
/// ```
pub fn check_lease(name: &str) -> Result<(), Failure> {
    let bad = name.is_empty()
        || name.len() > MAX_LEASE_BYTES
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control());
    if bad {
        return Err(Failure::usage(format!(
            "lease name {}: must be 1 to {MAX_LEASE_BYTES} bytes without '/', '\\' or control \
             characters, and not \".\" or \"..\"",
            shown(name)
        )));
    }
    Ok(())
}

/// The node id every `fence run` of lease `name` uses: all of them contend for one node
/// lease, so at most one holds it, and a waiter takes it over once the holder is gone.
///
/// ```
/// assert_eq!(fence_cli::names::node_of("nightly"), "run.nightly");
/// ```
pub fn node_of(name: &str) -> String {
    format!("run.{name}")
}
