//! One module per backend, each behind its cargo feature, each with one entry point:
//! `open(url, options) -> Result<Opened, Error>`, given a URL of its scheme. A new backend is
//! a module here, a [`Scheme`] variant, a feature in Cargo.toml and one line below.

#[cfg(feature = "azure")]
mod azure;
#[cfg(feature = "fs")]
mod file;
#[cfg(feature = "gcs")]
mod gcs;
#[cfg(feature = "opendal")]
mod opendal;
#[cfg(feature = "s3")]
mod s3;

use std::sync::Arc;

use fence_core::{Error, MemoryStore};

use crate::message::quoted;
use crate::open::{invalid, OpenOptions, Opened};
use crate::scheme::Scheme;

/// Opens `url`, of `scheme`, with the backend built in for it.
pub(crate) fn open(scheme: Scheme, url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    // With every feature on, the last arm is unreachable.
    #[allow(unreachable_patterns)]
    match scheme {
        Scheme::Memory => memory(url, options),
        #[cfg(feature = "fs")]
        Scheme::File => file::open(url, options),
        #[cfg(feature = "s3")]
        Scheme::S3 => s3::open(url, options),
        #[cfg(feature = "gcs")]
        Scheme::Gcs => gcs::open(url, options),
        #[cfg(feature = "azure")]
        Scheme::Azure => azure::open(url, options),
        #[cfg(feature = "opendal")]
        Scheme::Opendal => opendal::open(url, options),
        other => Err(other.not_built_in()),
    }
}

/// `memory://`: a new store in this process's memory, which no other process shares.
fn memory(url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    if url != "memory://" {
        return Err(invalid(format!(
            "memory:// takes no path (got {}): each memory:// store is its own, in this \
             process only",
            quoted(url)
        )));
    }
    options.refuse_options(Scheme::Memory)?;
    let store = Arc::new(MemoryStore::new());
    Ok(Opened::remote(Scheme::Memory, url, store))
}

/// Whether an option's value says yes, as object_store reads its flags.
#[cfg(any(feature = "s3", feature = "azure", feature = "opendal"))]
fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "on" | "yes" | "y"
    )
}

/// The host of `endpoint` (`scheme://host[:port]/…` or `host[:port]`), lower-cased.
#[cfg(any(feature = "s3", feature = "azure"))]
fn host_of(endpoint: &str) -> String {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let host = rest.split(['/', ':']).next().unwrap_or_default();
    host.to_ascii_lowercase()
}
