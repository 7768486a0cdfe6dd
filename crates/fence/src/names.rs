//! Lease and cell names as fence accepts them — one validator for the `fence` command, the
//! Python package and applications — and the node each `fence run` of a lease acts as.
//!
//! A name is checked before anything is sent, so a name that some store cannot hold never
//! leaves half a lock behind (the node lease written, the cell refused):
//!
//! - one path segment of 1 to [`MAX_LEASE_BYTES`] bytes: no `/`, `\`, control characters or
//!   invisible formatting characters (bidi controls, zero-width spaces: a name that prints
//!   like another would be another lock that looks the same), not `.` or `..`;
//! - valid on every store fence ships: its keys (`nodes/run.NAME.json`,
//!   `cells/NAME/own.json`) are valid keys, also for local files (with the `fs` feature,
//!   the default), which reserve segments ending in `.fence`;
//! - in Unicode Normalization Form C. Names are compared byte for byte, so `é` typed as one
//!   code point (NFC) and as `e` + a combining accent (NFD, what macOS file names give) would
//!   be two locks that look alike. fence refuses the NFD spelling instead of normalising it:
//!   normalising would silently move an existing NFD-named lock to another key, where an
//!   older `fence` still holding the old one would not exclude the new one.

use fence_core::{Error, ErrorKind, Key};
use icu_normalizer::ComposingNormalizerBorrowed;

use crate::message::{is_unsafe, quoted};

/// The longest lease name, in bytes: the node id `run.<name>` must fit the store's 200-byte
/// name segment.
pub const MAX_LEASE_BYTES: usize = 196;

/// Checks a lease (or cell) name before anything is sent (see the module docs). Errors:
/// [`ErrorKind::InvalidKey`], not committed, saying what is wrong.
///
/// ```
/// use fence::names::check_lease;
/// assert!(check_lease("nightly-backup").is_ok());
/// assert!(check_lease("caf\u{e9}").is_ok());
/// assert!(check_lease("cafe\u{301}").is_err()); // NFD
/// assert!(check_lease("night\u{200b}ly").is_err()); // a zero-width space
/// assert!(check_lease("a/b").is_err());
/// assert!(check_lease(".fence").is_err());
/// assert!(check_lease(&"x".repeat(300)).is_err());
/// assert_eq!(check_lease("a/b").unwrap_err().kind(), fence::ErrorKind::InvalidKey);
/// ```
pub fn check_lease(name: &str) -> Result<(), Error> {
    let bad = name.is_empty()
        || name.len() > MAX_LEASE_BYTES
        || name == "."
        || name == ".."
        || name.chars().any(|c| c == '/' || c == '\\' || is_unsafe(c));
    if bad {
        return Err(invalid(format!(
            "lease name {}: must be 1 to {MAX_LEASE_BYTES} bytes without '/', '\\', control \
             or invisible formatting characters (bidi controls, zero-width spaces), and not \
             \".\" or \"..\"",
            quoted(name)
        )));
    }
    if let Some(why) = unstorable(name) {
        return Err(invalid(format!("lease name {}: {why}", quoted(name))));
    }
    if !ComposingNormalizerBorrowed::new_nfc().is_normalized(name) {
        let nfc = ComposingNormalizerBorrowed::new_nfc().normalize(name);
        return Err(invalid(format!(
            "lease name {} is not in Unicode NFC (it has decomposed accents): names are \
             compared byte for byte, so use the NFC spelling {}",
            quoted(name),
            quoted(&nfc)
        )));
    }
    Ok(())
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidKey, message).not_committed()
}

/// Why some store fence ships cannot hold the keys of lease `name`, if one cannot.
fn unstorable(name: &str) -> Option<String> {
    let keys = [
        format!("nodes/{}.json", node_of(name)),
        format!("cells/{name}/own.json"),
    ];
    keys.iter().find_map(|k| match Key::new(k) {
        Ok(key) => unstorable_in_files(name, &key),
        Err(e) => Some(e.message().to_owned()),
    })
}

/// Why local files cannot hold `key` of lease `name`, if they cannot.
#[cfg(feature = "fs")]
fn unstorable_in_files(name: &str, key: &Key) -> Option<String> {
    fence_fs::layout::object_path(key).err().map(|e| {
        if name.ends_with(fence_fs::layout::OBJECT_SUFFIX) {
            "a name ending in \".fence\" is reserved by local-file stores".to_owned()
        } else {
            e.message().to_owned()
        }
    })
}

#[cfg(not(feature = "fs"))]
fn unstorable_in_files(_name: &str, _key: &Key) -> Option<String> {
    None
}

/// The node id every `fence run` of lease `name` uses: all of them contend for one node
/// lease, so at most one holds it, and a waiter takes it over once the holder is gone.
///
/// ```
/// assert_eq!(fence::names::node_of("nightly"), "run.nightly");
/// ```
pub fn node_of(name: &str) -> String {
    format!("run.{name}")
}
