//! # fence-s3
//!
//! [`S3Store`]: fence's [`ConditionalStore`](fence_core::ConditionalStore) over Amazon S3 and
//! S3-compatible stores, built on `object_store`'s S3 client (SigV4, endpoints, regions,
//! `from_env`, `s3://bucket/prefix` URLs).
//!
//! - create: `PUT` with `If-None-Match: *`; replace: `PUT` with `If-Match: <etag>`;
//! - **no silent retries of conditional writes**: they run on their own client with retries
//!   off, its own connection pool and timeouts derived from the lease TTL (`ttl / 3`);
//! - every outcome is classified here from the HTTP status and S3 error code: 412/304 →
//!   rejected; 404 on `If-Match` → rejected; 409 → one read decides between rejected and a
//!   not-committed [`Conflict`](fence_core::ErrorKind::Conflict); 401/403 → permission
//!   denied naming the bucket; a refused connection → unavailable, not committed; timeouts,
//!   resets, 5xx and unreadable answers → ambiguous;
//! - every body is stored with a 128-bit nonce trailer (stripped by `get`), because S3 ETags
//!   are content hashes and identical bytes would otherwise repeat a version (ABA);
//! - no conditional delete: `delete` answers `Unsupported`; release with a tombstone.
//!
//! See `docs/s3.md` for the details and the test servers.
#![deny(missing_docs)]

mod builder;
mod classify;
mod nonce;
mod observe;
mod store;

pub use builder::{S3StoreBuilder, DEFAULT_LEASE_TTL};
pub use store::S3Store;
