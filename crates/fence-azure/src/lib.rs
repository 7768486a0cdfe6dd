//! # fence-azure
//!
//! [`AzureStore`]: fence's [`ConditionalStore`](fence_core::ConditionalStore) over Azure Blob
//! Storage, built on `object_store`'s Azure client (shared keys, SAS tokens, Entra ID
//! credentials, `from_env`, the Azurite emulator), with `az://container/prefix` URLs.
//!
//! - create: `PUT` with `If-None-Match: *`; replace: `PUT` with `If-Match: <etag>`; delete:
//!   `DELETE` with `If-Match: <etag>` (conditional delete is a capability here);
//! - **no silent retries of conditional requests**: they run on their own client with retries
//!   off, its own connection pool and timeouts derived from the lease TTL (`ttl / 3`); no
//!   client follows a redirect;
//! - every outcome is classified here from the HTTP status and the `x-ms-error-code`: 412 →
//!   rejected (real Azure's failed create, a failed replace, a condition on a missing blob);
//!   409 `BlobAlreadyExists` on create → rejected (Azurite's failed create); other 409s →
//!   not-committed [`Conflict`](fence_core::ErrorKind::Conflict); 401/403 → permission
//!   denied naming the container; a redirect → invalid input, not committed; a refused
//!   connection → unavailable, not committed; timeouts, resets, 429, 5xx and unreadable
//!   answers → ambiguous;
//! - blob names are the key's own characters (`prefix/key`, at most 1024); error bodies are
//!   cut down to their code and message before object_store sees them;
//! - Azure ETags change on every write, also of identical bytes, so bodies are stored as
//!   given (no nonce) and [`Capabilities::content_versions`](fence_core::Capabilities) is
//!   false;
//! - every answer is bounded: a record at the record limit
//!   ([`AzureStoreBuilder::with_record_limit`], [`fence_core::DEFAULT_RECORD_LIMIT`] by
//!   default; past it `get` is `Corrupt`), an error body at its first 4 KiB, a listing by
//!   [`ListingLimits`](fence_wire::listing::ListingLimits); an answer with two different
//!   `ETag`s or `x-ms-error-code`s is never trusted (`docs/backends.md`, "Limits").
//!
//! See `docs/azure.md` for the details and the test server.
#![deny(missing_docs)]

mod builder;
mod classify;
pub mod credentials;
mod observe;
mod store;

pub use builder::{AzureStoreBuilder, DEFAULT_LEASE_TTL, EMULATOR_ACCOUNT};
pub use credentials::CredentialsUnavailable;
pub use store::AzureStore;
