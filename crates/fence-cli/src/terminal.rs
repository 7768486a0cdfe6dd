//! What reaches the operator's terminal: every line `fence` prints from a store or a server
//! (node names, addresses, keys, error messages, JSON string values) goes through
//! [`escape`] first, so a record written by anyone who can write to the store cannot retitle,
//! clear or rewrite the terminal, write to its clipboard (OSC 52), or reorder what is shown.
//!
//! Escaped: every control character (C0 including tab and newline, DEL, C1 including the
//! one-byte CSI U+009B), the bidirectional controls (U+061C, U+200E/F, U+202A–U+202E,
//! U+2066–U+2069), the other invisible format characters (U+00AD, U+180E, U+200B–U+200D,
//! U+2060–U+2065, U+FEFF, U+FFF9–U+FFFB, the tag characters U+E0000–U+E007F) and the line and
//! paragraph separators U+2028/U+2029. Each becomes `\uXXXX` (a UTF-16 pair for the tags):
//! readable in a table or an error line, and a valid JSON escape of the same character, so
//! `--json` output still parses to exactly the stored strings.
//!
//! Written here because what is dangerous is a property of terminals, not of a data format:
//! serde_json escapes only what JSON requires (below U+0020, `"` and `\`) and leaves DEL and
//! C1 raw, and `{:?}` formatting leaves the bidi controls raw.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal raw.
///
/// ```
/// use fence_cli::terminal::is_unsafe;
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
/// use fence_cli::terminal::escape;
/// assert_eq!(escape("run.jobs"), "run.jobs");
/// assert_eq!(escape("\u{1b}]0;x\u{7}"), r"\u001b]0;x\u0007");
/// assert_eq!(escape("a\u{9b}2Jb"), r"a\u009b2Jb");
/// // In JSON the escape stands for the same character.
/// let json = escape("\"\u{9b}\"");
/// assert_eq!(serde_json::from_str::<String>(&json).unwrap(), "\u{9b}");
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

/// [`escape`] line by line: the line breaks of `text` stay, everything else unsafe is
/// escaped. For multi-line output made by `fence` itself (a table, pretty JSON, a report)
/// whose lines may carry text from a store.
///
/// ```
/// use fence_cli::terminal::escape_lines;
/// assert_eq!(escape_lines("a\nb\u{7}\n"), "a\nb\\u0007\n");
/// ```
pub fn escape_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&escape(line));
    }
    out
}

/// A value as pretty JSON that is safe on a terminal and parses to the same value.
///
/// ```
/// let text = fence_cli::terminal::json(&serde_json::json!({"node": "\u{1b}]0;x\u{7}\u{85}"}));
/// assert!(!text.contains('\u{1b}') && !text.contains('\u{85}'));
/// let back: serde_json::Value = serde_json::from_str(&text).unwrap();
/// assert_eq!(back["node"], "\u{1b}]0;x\u{7}\u{85}");
/// ```
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    // Outside its strings, serde_json's output is ASCII punctuation, digits, letters and
    // whitespace: every unsafe character it contains is inside a string, where `\uXXXX` is
    // the same character.
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|e| {
        serde_json::json!({ "error": format!("cannot encode the output: {e}") }).to_string()
    });
    escape_lines(&text)
}

/// Bytes for a terminal: valid UTF-8 kept (invalid sequences as U+FFFD), line breaks and tabs
/// kept, every other unsafe character escaped.
///
/// ```
/// use fence_cli::terminal::printable;
/// assert_eq!(printable(b"a\tb\nc\x1b[2J\xff"), "a\tb\nc\\u001b[2J\u{fffd}");
/// ```
pub fn printable(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for (j, part) in line.split('\t').enumerate() {
            if j > 0 {
                out.push('\t');
            }
            out.push_str(&escape(part));
        }
    }
    out
}
