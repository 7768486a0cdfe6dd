//! Exit codes and the one-line failure every command reports on stderr.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (`probe`: the store is honest) |
//! | 1 | a check failed: `demo` saw a broken invariant, `probe` caught a contract violation |
//! | 2 | usage: bad arguments, bad store URL (or bucket name), missing store directory, invalid lease name, missing store configuration (no credential source, no account); `release` without proof that `FENCE_HOLDER` names this lease's holder (nothing signalled) |
//! | 3 | `get`: no such key in the cell; `status NAME`, `break`: no such lease |
//! | 69 | the store failed: unreachable, denied, timed out, no credentials from a metadata endpoint, corrupt record (`status`: some record is bad; `probe`: could not tell) |
//! | 75 | busy: the lease is held by another process not yet seen dead (`run` or `acquire` without a wait, or its wait ran out; `--conflict-exit-code` changes it); `break`: the holder looks alive |
//! | 76 | fenced: `put` with an epoch that is no longer current; `run` lost its lease while the command ran (the command was terminated; `--fenced-exit-code` changes it); `release`: the lease was lost before it (or its holder was killed) |
//! | 126, 127 | `run`: the command could not be executed / was not found |
//!
//! Otherwise `run` exits with its command's code, or 128 + N if a signal N killed it.
//!
//! The line is printed through [`crate::terminal::escape`]: a store's or server's text in it
//! cannot act on the terminal.

use std::fmt;

use fence_core::decide::{FenceReason, LeaseStatus};
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
/// The lease is held by another process not yet seen dead.
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
            message: fence::message::one_line(&message.into()),
        }
    }

    /// A usage failure (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(USAGE, message)
    }

    /// A failure whose line was already printed: the exit code only.
    pub fn silent(code: u8) -> Self {
        Failure {
            code,
            message: String::new(),
        }
    }

    /// The same failure with every whole repetition of the user-supplied `name` longer than
    /// about 100 bytes cut short: store errors name the keys and URLs they failed on, and
    /// a lease name is part of its keys, so a 196-byte name would otherwise come back two
    /// or three times.
    ///
    /// ```
    /// use fence_cli::exit::{Failure, STORE};
    /// let name = "n".repeat(196);
    /// let f = Failure::new(STORE, format!("at cells/{name}/own.json: gone")).eliding(&name);
    /// assert!(!f.message.contains(&name));
    /// assert!(f.message.ends_with("…/own.json: gone"));
    /// ```
    #[must_use]
    pub fn eliding(self, name: &str) -> Self {
        if name.len() <= SHOWN_BYTES {
            return self;
        }
        let cut = format!("{}…", head(name, SHOWN_BYTES / 2));
        Failure {
            code: self.code,
            message: self.message.replace(name, &cut),
        }
    }

    /// The same failure, its message preceded by `context: `.
    #[must_use]
    pub fn prefixed(self, context: &str) -> Self {
        Failure::new(self.code, format!("{context}: {}", self.message))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Error> for Failure {
    /// A write whose outcome is unknown (it may have landed) exits 69 whatever its kind:
    /// 75 and 76 say the store proved nothing was written. Missing credentials are said as
    /// such, with what to set ([`fence::missing_credentials`]): exit 2 when no source could
    /// be tried, 69 when a service asked (a metadata endpoint) gave none.
    fn from(e: Error) -> Self {
        if let Some(missing) = fence::missing_credentials(&e) {
            return Failure::new(code_of(missing.kind()), describe(&missing));
        }
        let code = if e.is_ambiguous() {
            STORE
        } else {
            code_of(e.kind())
        };
        Failure::new(code, describe(&e))
    }
}

/// Longest part of a user-supplied name that a message repeats.
const SHOWN_BYTES: usize = 100;

/// A user-supplied name for a message: quoted and escaped once, cut after about 100 bytes
/// (the cut says how long the whole name was).
///
/// ```
/// use fence_cli::exit::shown;
/// assert_eq!(shown("nightly"), "\"nightly\"");
/// assert_eq!(shown("a\"b"), r#""a\"b""#);
/// let long = "x".repeat(5000);
/// assert!(shown(&long).len() < 130);
/// assert!(shown(&long).ends_with("(5000 bytes)"));
/// ```
pub fn shown(name: &str) -> String {
    if name.len() <= SHOWN_BYTES {
        return format!("{name:?}");
    }
    format!("{:?}… ({} bytes)", head(name, SHOWN_BYTES), name.len())
}

/// The longest start of `text` that is at most `max` bytes and ends on a character boundary.
fn head(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

pub use fence::message::{describe, plain_cause};

/// Why a lease was lost, in words.
///
/// ```
/// use fence_core::decide::{FenceReason, LeaseStatus};
/// let why = fence_cli::exit::lease_lost(&LeaseStatus::Fenced { reason: FenceReason::Expired });
/// assert!(!why.contains("Expired"));
/// ```
pub fn lease_lost(status: &LeaseStatus) -> String {
    match status {
        LeaseStatus::Fenced { reason } => fence_reason(*reason).to_owned(),
        LeaseStatus::Released => "it was released".to_owned(),
        LeaseStatus::Busy { .. } => "another process holds it".to_owned(),
        LeaseStatus::Unavailable => "the store failed".to_owned(),
        LeaseStatus::Acquiring | LeaseStatus::Held => {
            "its authority ran out before a renewal got through".to_owned()
        }
    }
}

fn fence_reason(reason: FenceReason) -> &'static str {
    match reason {
        FenceReason::Rejected => "another process took the lease over (the store refused our renewal)",
        FenceReason::LandedAfterExpiry => "a renewal got through only after the lease had expired",
        FenceReason::Expired => {
            "the lease expired before a renewal got through (fence was paused, or the store was unreachable)"
        }
        FenceReason::Superseded => "another process rewrote the lease record",
        FenceReason::AttemptsExhausted => "every renewal attempt failed",
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
