//! Lease names as `fence` accepts them, and the node each `fence run` of a lease acts as.
//!
//! A lease name is checked before anything is sent, so a name that some store cannot hold
//! never leaves half a lock behind (the node lease written, the cell refused):
//!
//! - one path segment of 1 to [`MAX_LEASE_BYTES`] bytes: no `/`, `\`, control characters or
//!   invisible formatting characters (bidi controls, zero-width spaces: a name that prints
//!   like another would be another lock that looks the same), not `.` or `..`;
//! - valid on every store fence ships: its keys (`nodes/run.NAME.json`,
//!   `cells/NAME/own.json`) are valid keys, also for local files, which reserve segments
//!   ending in `.fence`;
//! - in Unicode Normalization Form C. Names are compared byte for byte, so `é` typed as one
//!   code point (NFC) and as `e` + a combining accent (NFD, what macOS file names give) would
//!   be two locks that look alike. fence refuses the NFD spelling instead of normalising it:
//!   normalising would silently move an existing NFD-named lock to another key, where an
//!   older `fence` still holding the old one would not exclude the new one.

use fence_core::Key;
use icu_normalizer::ComposingNormalizerBorrowed;

use crate::exit::{shown, Failure};

/// The longest lease name, in bytes: the node id `run.<name>` must fit the store's 200-byte
/// name segment.
pub const MAX_LEASE_BYTES: usize = 196;

/// Checks a lease name before anything is sent (see the module docs).
///
/// ```
/// use fence_cli::names::check_lease;
/// assert!(check_lease("nightly-backup").is_ok());
/// assert!(check_lease("caf\u{e9}").is_ok());
/// assert_eq!(check_lease("cafe\u{301}").unwrap_err().code, 2); // NFD
/// assert_eq!(check_lease("night\u{200b}ly").unwrap_err().code, 2); // a zero-width space
/// assert_eq!(check_lease("a/b").unwrap_err().code, 2);
/// assert_eq!(check_lease(".fence").unwrap_err().code, 2);
/// assert_eq!(check_lease(&"x".repeat(300)).unwrap_err().code, 2);
/// ```
pub fn check_lease(name: &str) -> Result<(), Failure> {
    let bad = name.is_empty()
        || name.len() > MAX_LEASE_BYTES
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == '\\' || crate::terminal::is_unsafe(c));
    if bad {
        return Err(Failure::usage(format!(
            "lease name {}: must be 1 to {MAX_LEASE_BYTES} bytes without '/', '\\', control \
             or invisible formatting characters (bidi controls, zero-width spaces), and not \
             \".\" or \"..\"",
            shown(name)
        )));
    }
    if let Some(why) = unstorable(name) {
        return Err(Failure::usage(format!("lease name {}: {why}", shown(name))));
    }
    if !ComposingNormalizerBorrowed::new_nfc().is_normalized(name) {
        let nfc = ComposingNormalizerBorrowed::new_nfc().normalize(name);
        return Err(Failure::usage(format!(
            "lease name {} is not in Unicode NFC (it has decomposed accents): names are \
             compared byte for byte, so use the NFC spelling {}",
            shown(name),
            shown(&nfc)
        )));
    }
    Ok(())
}

/// Why some store fence ships cannot hold the keys of lease `name`, if one cannot.
fn unstorable(name: &str) -> Option<String> {
    let keys = [
        format!("nodes/{}.json", node_of(name)),
        format!("cells/{name}/own.json"),
    ];
    keys.iter().find_map(|k| {
        let key = match Key::new(k) {
            Ok(key) => key,
            Err(e) => return Some(e.to_string()),
        };
        fence_fs::layout::object_path(&key).err().map(|e| {
            if name.ends_with(".fence") {
                "a name ending in \".fence\" is reserved by local-file stores".to_owned()
            } else {
                e.to_string()
            }
        })
    })
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
