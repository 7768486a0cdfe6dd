//! # fence-s3
//!
//! [`S3Store`]: fence's [`ConditionalStore`](fence_core::ConditionalStore) over Amazon S3 and
//! S3-compatible stores, built on `object_store`'s S3 client (SigV4, endpoints, regions,
//! `from_env`, `s3://bucket/prefix` URLs).
//!
//! - create: `PUT` with `If-None-Match: *`; replace: `PUT` with `If-Match: <etag>`;
//! - **no silent retries of conditional writes**: they run on their own client with retries
//!   off, its own connection pool and timeouts derived from the lease TTL (`ttl / 3`);
//!   redirects are never followed, by any client;
//! - every outcome is classified here from the HTTP status and S3 error code (the table is in
//!   `docs/s3.md`): 412/304 → rejected; 404 on `If-Match` → rejected; 409 → one read, bounded
//!   by what is left of the CAS timeout, decides between rejected and a not-committed
//!   [`Conflict`](fence_core::ErrorKind::Conflict); a redirect, 401/403 or a failed connect →
//!   not committed; timeouts, resets, 429, 5xx and unreadable answers → ambiguous;
//! - bodies are stored as given and object keys are the key's UTF-8 bytes; S3 ETags are
//!   content hashes, which the store declares
//!   ([`Capabilities::content_versions`](fence_core::Capabilities)); a body is read exactly
//!   as stored;
//! - no conditional delete: `delete` answers `Unsupported` (release with a tombstone);
//!   `delete_immutable` is one plain `DELETE`;
//! - every answer is bounded: a record at the record limit
//!   ([`S3StoreBuilder::with_record_limit`], [`fence_core::DEFAULT_RECORD_LIMIT`] by default;
//!   past it `get` is `Corrupt`), an error body at its first 4 KiB, a listing by
//!   [`ListingLimits`](fence_wire::listing::ListingLimits); an answer with two different
//!   `ETag`s is never trusted (`docs/backends.md`, "Limits").
//!
//! See `docs/s3.md` for the details and the test servers.
#![deny(missing_docs)]

mod builder;
mod classify;
pub mod credentials;
mod store;

pub use builder::{S3StoreBuilder, DEFAULT_LEASE_TTL};
pub use credentials::{CredentialSource, CredentialsUnavailable};
pub use store::S3Store;
