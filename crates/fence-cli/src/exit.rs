//! Exit codes and the one-line failure every command reports on stderr.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (`probe`: the store is honest) |
//! | 1 | a check failed: `demo` saw a broken invariant, `probe` caught a contract violation |
//! | 2 | usage: bad arguments, bad store URL, missing store directory |
//! | 3 | `get`: no such key in the cell |
//! | 69 | the store failed: unreachable, denied, timed out, corrupt record (`probe`: could not tell) |
//! | 75 | busy: the lease is held by another live process (`run` without `--wait`, or its timeout ran out) |
//! | 76 | fenced: `put` with an epoch that is no longer current; `run` lost its lease while the command ran (the command was terminated) |
//! | 126, 127 | `run`: the command could not be executed / was not found |
//!
//! Otherwise `run` exits with its command's code, or 128 + N if a signal N killed it.

use std::fmt;

use fence_core::{Error, ErrorKind};

/// Success.
pub const OK: u8 = 0;
/// A check failed (demo invariant, probe violation).
pub const CHECK_FAILED: u8 = 1;
/// Bad arguments or configuration.
pub const USAGE: u8 = 2;
/// `get`: the key is not in the cell.
pub const NOT_FOUND: u8 = 3;
/// The store failed or could not be reached.
pub const STORE: u8 = 69;
/// The lease is held by another live process.
pub const BUSY: u8 = 75;
/// Our authority is gone: a stale epoch, or a lease lost while the command ran.
pub const FENCED: u8 = 76;
/// `run`: the command exists but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub const COMMAND_NOT_FOUND: u8 = 127;

/// Why a command failed: an exit code and one line for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The process exit code.
    pub code: u8,
    /// One line, without the `fence <command>:` prefix.
    pub message: String,
}

impl Failure {
    /// A failure with `code`.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: one_line(&message.into()),
        }
    }

    /// A usage failure (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(USAGE, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::new(code_of(e.kind()), e.to_string())
    }
}

/// The exit code for an error of `kind`.
///
/// ```
/// use fence_core::ErrorKind;
/// assert_eq!(fence_cli::exit::code_of(ErrorKind::Fenced), fence_cli::exit::FENCED);
/// assert_eq!(fence_cli::exit::code_of(ErrorKind::Unavailable), fence_cli::exit::STORE);
/// ```
pub fn code_of(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Fenced => FENCED,
        ErrorKind::Busy => BUSY,
        ErrorKind::InvalidKey | ErrorKind::InvalidInput => USAGE,
        _ => STORE,
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
