//! # fence-gcs
//!
//! [`GcsStore`]: fence's [`ConditionalStore`](fence_core::ConditionalStore) on Google Cloud
//! Storage. The compare-and-swap token is the object's **generation**; every record goes as
//! one JSON-API `multipart` upload guarded by `ifGenerationMatch` — the path real GCS and the
//! fake-gcs-server emulator both check. See `docs/gcs.md`.
//!
//! Every answer is bounded: a download at the record limit
//! ([`GcsStoreBuilder::with_record_limit`], [`fence_core::DEFAULT_RECORD_LIMIT`] by default;
//! past it `get` is `Corrupt`), an upload's answer at 64 KiB, a 404's body at 4 KiB, a
//! listing by [`ListingLimits`](fence_wire::listing::ListingLimits); an answer with two
//! different `x-goog-generation`s is never trusted (`docs/backends.md`, "Limits").
//!
//! ```
//! use fence_gcs::GcsStore;
//! let store = GcsStore::builder()
//!     .with_url("gs://fence-test/ci")
//!     .with_endpoint("http://127.0.0.1:4443")
//!     .with_anonymous()
//!     .build()
//!     .unwrap();
//! assert_eq!(store.bucket(), "fence-test");
//! ```
#![deny(missing_docs)]

mod auth;
mod builder;
mod classify;
mod store;
mod wire;

#[cfg(feature = "auth")]
pub use auth::GoogleDefaultCredentials;
pub use auth::{AccessToken, StaticToken, TokenProvider};
pub use builder::{GcsStoreBuilder, Timeouts, DEFAULT_ENDPOINT, DEFAULT_LEASE_TTL};
pub use store::GcsStore;
