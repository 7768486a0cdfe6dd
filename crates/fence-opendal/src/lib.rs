//! # fence-opendal
//!
//! [`OpendalStore`]: fence's [`ConditionalStore`](fence_core::ConditionalStore) over an
//! [Apache OpenDAL](https://opendal.apache.org) [`Operator`](opendal::Operator), so every
//! OpenDAL service that can compare-and-swap is a fence backend. This build carries OpenDAL's
//! `s3`, `azblob` and `gcs` services.
//!
//! - **The dialect comes from the capabilities**, read once at construction
//!   ([`Dialect`]): version match (`if_version_match`, GCS generations) or ETag match
//!   (`if_match`, S3 and Azure) for `CasGuard::Match`, `if_not_exists` for
//!   `CasGuard::Absent`, conditional delete where offered and verified. A service without
//!   compare-and-swap (create-only: oss, cos, azdls, fs, memory; nothing: webdav, b2, ...) is
//!   refused with `Unsupported` naming the missing capability.
//! - **No retries, no layers that might**: an operator carrying a `RetryLayer` (or any layer
//!   not known to be harmless) is refused; fence's own transport replaces the operator's
//!   (no redirects, timeouts derived from the lease TTL).
//! - **Single-shot writes**: one `write_options` call with the whole body.
//! - **Every answer classified by fence's rules** from OpenDAL's error kind *and* what the
//!   transport saw on the wire: `Rejected` only for a precondition answer to the only request
//!   that carried the write, not committed only with proof (refused connect, 3xx, 4xx),
//!   ambiguous otherwise. The table is in `docs/opendal.md`.
//! - **Bounded**: bodies up to the record limit ([`fence_core::DEFAULT_RECORD_LIMIT`]); a
//!   larger object reads as `Corrupt`, and every answer body is cut off past the limit; an
//!   error answer is read up to its first 4 KiB; a listing stops at fence-wire's
//!   [`ListingLimits`](fence_wire::listing::ListingLimits) (names, bytes, pages) as on the
//!   other adapters.
//!
//! The S3 service advertises its conditions whatever the server does: only the contract
//! probe (`fence probe opendal+s3://…`) tells an honest S3-compatible server from a liar.
#![deny(missing_docs)]

mod builder;
mod classify;
mod dialect;
pub mod emulator;
mod store;
mod transport;

pub use builder::{OpendalStoreBuilder, DEFAULT_LEASE_TTL};
pub use dialect::{Dialect, Token};
pub use store::OpendalStore;

/// docs/opendal.md, compiled as doc tests so its examples cannot rot.
#[doc = include_str!("../../../docs/opendal.md")]
#[cfg(doctest)]
pub struct OpendalGuideDoctests;
