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
            message: one_line(&message.into()),
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
    /// such, with what to set ([`crate::stores::credential_failure`]).
    fn from(e: Error) -> Self {
        if let Some(f) = crate::stores::credential_failure(&e) {
            return f;
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

/// Longest part of one cause that a message repeats (HTTP bodies can be long).
const CAUSE_CHARS: usize = 300;

/// One plain line for `e`: what failed, then each underlying cause that adds something (an
/// unreachable endpoint, missing credentials, the store's error code and message), never Rust
/// debug text or HTTP-client internals.
///
/// ```
/// use fence_core::{Error, ErrorKind};
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// let e = Error::new(ErrorKind::Unavailable, "listing failed").with_source(io).not_committed();
/// assert_eq!(fence_cli::exit::describe(&e), "store unavailable: listing failed: connection refused");
/// ```
pub fn describe(e: &Error) -> String {
    with_causes(e.to_string(), std::error::Error::source(e))
}

/// `line`, then `: ` and each of `cause` and its sources that adds something, plainly.
pub(crate) fn with_causes(
    mut line: String,
    mut cause: Option<&(dyn std::error::Error + 'static)>,
) -> String {
    let mut seen: Vec<String> = vec![line.clone()];
    while let Some(c) = cause {
        let text = one_line(&c.to_string());
        // Error chains often repeat their cause in their own text: skip what was said.
        if !text.is_empty() && !seen.iter().any(|s| s.contains(&text)) {
            line.push_str(": ");
            line.push_str(&plain_cause(&text));
            seen.push(text);
        }
        cause = c.source();
    }
    line
}

/// A cause as an operator reads it: an HTTP error answer as its status, error code and message
/// (`HTTP 403 Forbidden: SignatureDoesNotMatch: The request signature …`), a transport failure
/// as the server asked (scheme, host and port) and what failed, without the client's request
/// line and timing; at most 300 characters, cut at a character boundary and marked `…`.
///
/// ```
/// use fence_cli::exit::plain_cause;
/// let text = "Generic S3 error: Error performing GET http://h/b?list-type=2 in 10ms - Server \
///     returned non-2xx status code: 403 Forbidden: <Error><Code>SignatureDoesNotMatch</Code>\
///     <Message>The request signature &amp; more</Message></Error>";
/// assert_eq!(
///     plain_cause(text),
///     "HTTP 403 Forbidden: SignatureDoesNotMatch: The request signature & more"
/// );
/// let text = "Generic S3 error: Error performing GET http://127.0.0.1:9/b?x=1 in 51µs - HTTP \
///     error: error sending request";
/// assert_eq!(plain_cause(text), "http://127.0.0.1:9: HTTP error: error sending request");
/// ```
pub fn plain_cause(text: &str) -> String {
    const STATUS: &str = "Server returned non-2xx status code: ";
    let plain = if let Some(at) = text.find(STATUS) {
        http_answer(&text[at + STATUS.len()..])
    } else if let Some((request, failure)) = text
        .find("Error performing ")
        .and_then(|at| text[at..].split_once(" - "))
    {
        match origin(request) {
            Some(server) => format!("{server}: {failure}"),
            None => failure.to_owned(),
        }
    } else {
        text.to_owned()
    };
    if plain.chars().count() <= CAUSE_CHARS {
        return plain;
    }
    let cut: String = plain.chars().take(CAUSE_CHARS).collect();
    format!("{cut}…")
}

/// `scheme://host[:port]` of the URL in `Error performing GET <url> in …`, if there is one.
fn origin(request: &str) -> Option<&str> {
    let url = request.split_whitespace().find(|w| w.contains("://"))?;
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split(['/', '?']).next()?;
    Some(&url[..scheme.len() + 3 + host.len()])
}

/// `403 Forbidden: <Error><Code>C</Code><Message>M</Message></Error>` → `HTTP 403 Forbidden:
/// C: M`.
fn http_answer(answer: &str) -> String {
    let (status, body) = answer.split_once(": ").unwrap_or((answer, ""));
    let mut out = format!("HTTP {}", status.trim().trim_end_matches(':'));
    for name in ["Code", "Message"] {
        if let Some(value) = xml_text(body, name) {
            out.push_str(": ");
            out.push_str(&value);
        }
    }
    out
}

/// The unescaped text of the first `<name>` element in `body`, if it has any.
fn xml_text(body: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = body.find(&open)? + open.len();
    let end = body[start..]
        .find(&format!("</{name}>"))
        .map_or(body.len(), |n| start + n);
    let text = body[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&");
    let text = one_line(&text);
    (!text.is_empty()).then_some(text)
}

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

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
