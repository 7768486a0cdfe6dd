//! One plain line for an error, as an operator reads it: what failed, then each underlying
//! cause that adds something, never Rust debug text or HTTP-client internals; and text from a
//! store or a server made safe for a terminal ([`escape`]). The `fence` command prints these
//! lines, and the Python package raises them.
//!
//! [`escape`] writes every control character (C0 including tab and newline, DEL, C1 including
//! the one-byte CSI U+009B), the bidirectional controls (U+061C, U+200E/F, U+202A–U+202E,
//! U+2066–U+2069), the other invisible format characters (U+00AD, U+180E, U+200B–U+200D,
//! U+2060–U+2065, U+FEFF, U+FFF9–U+FFFB, the tag characters U+E0000–U+E007F) and the line and
//! paragraph separators U+2028/U+2029 as `\uXXXX` (a UTF-16 pair for the tags): readable in
//! an error line, and a valid JSON escape of the same character. A record written by anyone
//! who can write to the store then cannot retitle, clear or rewrite the terminal, write to its
//! clipboard (OSC 52), or reorder what is shown.

use std::borrow::Cow;
use std::fmt::Write as _;

use fence_core::Error;

/// Longest part of one cause that a line repeats (HTTP bodies can be long).
const CAUSE_CHARS: usize = 300;

/// Longest part of a user-supplied text (a URL, an option) that a message quotes.
const QUOTED_CHARS: usize = 100;

/// One plain line for `e`: what failed, then each underlying cause that adds something (an
/// unreachable endpoint, missing credentials, the store's error code and message).
///
/// ```
/// use fence::{Error, ErrorKind};
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// let e = Error::new(ErrorKind::Unavailable, "listing failed").with_source(io).not_committed();
/// assert_eq!(fence::describe(&e), "store unavailable: listing failed: connection refused");
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
/// use fence::message::plain_cause;
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
    cut(&plain, CAUSE_CHARS)
}

/// A user-supplied text for a message: quoted and escaped, cut after 100 characters (the cut
/// says how long the whole text was).
pub(crate) fn quoted(text: &str) -> String {
    let shown: String = text.chars().take(QUOTED_CHARS).collect();
    if shown.len() == text.len() {
        return format!("{text:?}");
    }
    format!("{shown:?}… ({} bytes)", text.len())
}

/// `text` cut after `max` characters, marked `…`.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}…")
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

/// Whether `c` must not reach a terminal raw.
///
/// ```
/// use fence::message::is_unsafe;
/// assert!(is_unsafe('\u{1b}') && is_unsafe('\u{9b}') && is_unsafe('\u{202e}'));
/// assert!(!is_unsafe('é') && !is_unsafe('日') && !is_unsafe('\\'));
/// ```
pub fn is_unsafe(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}'
            | '\u{7f}'..='\u{9f}'
            | '\u{ad}'
            | '\u{61c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e007f}'
    )
}

/// `text` with every [unsafe](is_unsafe) character written as `\uXXXX`; borrowed when there
/// is none.
///
/// ```
/// use fence::message::escape;
/// assert_eq!(escape("run.jobs"), "run.jobs");
/// assert_eq!(escape("\u{1b}]0;x\u{7}"), r"\u001b]0;x\u0007");
/// assert_eq!(escape("a\u{9b}2Jb"), r"a\u009b2Jb");
/// ```
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            for unit in c.encode_utf16(&mut [0; 2]) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` with every run of white space (new lines too) made one space.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_texts_are_escaped_and_cut() {
        assert_eq!(quoted("s3://b"), "\"s3://b\"");
        assert_eq!(quoted("a\u{1b}b"), "\"a\\u{1b}b\"");
        let long = "é".repeat(150);
        let shown = quoted(&long);
        assert!(shown.ends_with("… (300 bytes)"), "{shown}");
        assert_eq!(shown.matches('é').count(), QUOTED_CHARS);
    }

    #[test]
    fn tags_are_escaped_as_utf16_pairs() {
        assert_eq!(escape("a\u{e0041}"), r"a\udb40\udc41");
        assert_eq!(escape("é日\\"), "é日\\");
    }

    #[test]
    fn long_causes_are_cut_at_a_character() {
        let long = "ü".repeat(400);
        let plain = plain_cause(&long);
        assert_eq!(plain.chars().count(), CAUSE_CHARS + 1);
        assert!(plain.ends_with('…'));
    }
}
