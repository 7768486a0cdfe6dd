//! Stores named by URL.

use std::sync::Arc;

use fence_core::{ConditionalStore, Error, ErrorKind, MemoryStore};

/// Opens the demo's store: `memory://`, or the default.
pub fn open_demo_store(url: Option<&str>) -> Result<(Arc<dyn ConditionalStore>, String), Error> {
    match url {
        None | Some("memory://") => Ok((Arc::new(MemoryStore::new()), "memory://".into())),
        Some(other) => Err(Error::new(
            ErrorKind::InvalidInput,
            format!("unsupported store URL {other:?}"),
        )),
    }
}
