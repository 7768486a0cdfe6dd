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
//! C1 raw, and `{:?}` formatting leaves the bidi controls raw. [`escape`] itself lives in the
//! fence library ([`fence::message::escape`]), so the Python package escapes its messages as
//! this command does.

pub use fence::message::{escape, is_unsafe};

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
