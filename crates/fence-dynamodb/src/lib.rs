//! # fence-dynamodb
//!
//! [`DynamoDbStore`]: fence's [`ConditionalStore`](fence_core::ConditionalStore) on an Amazon
//! DynamoDB table. See `docs/dynamodb.md`.
//!
//! | fence | DynamoDB |
//! |---|---|
//! | create if absent | `PutItem` with `attribute_not_exists(sk)` |
//! | compare-and-swap | `PutItem` with `#v = :v` on the version fence writes (`<generation>-<random>`) |
//! | conditional delete | `DeleteItem` with `#v = :v` |
//! | read | `GetItem` with `ConsistentRead` |
//! | list a prefix | `Query` on the partition (the store's prefix) by sort key (the key); never a `Scan` |
//! | rejected | 400 `ConditionalCheckFailedException`, carrying the item the condition saw (`ALL_OLD`) |
//!
//! - **Outcomes**: a failed condition is rejected; any other 400 — throttling
//!   (`ProvisionedThroughputExceededException`, `ThrottlingException`,
//!   `RequestLimitExceeded`), validation, a missing table, credentials — is not committed;
//!   5xx, timeouts, resets and unreadable answers are ambiguous.
//! - **No retries of writes**: a conditional write is sent once, on its own connection
//!   pool, bounded by `ttl / 3`. Reads and listings are retried.
//! - **Evidence in the same round trip**: every write asks for
//!   `ReturnValuesOnConditionCheckFailure=ALL_OLD`, so a rejection carries the current item
//!   ([`Capabilities::current_on_reject`](fence_core::Capabilities::current_on_reject)): a
//!   lost compare-and-swap costs one request, and a write whose answer was lost is settled
//!   by sending it again (applied, or rejected with an item that has our nonce or not).
//! - **Bounded**: a record is at most [`MAX_RECORD`] bytes (a DynamoDB item holds 400 KB); a
//!   larger one is refused before anything is sent. Every answer is read only up to a cap.
//! - **Tables**: the table is described before the first request; one with another key
//!   schema, or a global table with replicas in multi-Region eventual consistency (where
//!   conditional writes do not fence across Regions), is refused.
//!
//! # Why a client of its own
//!
//! The client here is ~200 lines: JSON over HTTPS with `X-Amz-Target:
//! DynamoDB_20120810.<Operation>`, signed with object_store's SigV4 signer
//! (`object_store::aws::AwsAuthorizer`), which fence-s3 already links, with fence-s3's
//! credential sources. `aws-sdk-dynamodb` is not used: it needs a newer Rust (1.94.1) than
//! the workspace's 1.91, pulls in about 18 smithy crates, and its standard retry mode
//! replays a conditional `PutItem` whose answer was lost — whose retry is then answered
//! "condition failed" on its own landed write, the "spurious" failures several clients have
//! shipped. fence never repeats a write it cannot prove did not land.
//!
//! ```
//! use fence_dynamodb::DynamoDbStore;
//! let store = DynamoDbStore::builder()
//!     .with_url("dynamodb://fence-locks/fleet-a")
//!     .with_region("eu-west-1")
//!     .with_credentials("AKIDEXAMPLE", "not-a-real-secret")
//!     .build()
//!     .unwrap();
//! assert_eq!(store.table(), "fence-locks");
//! ```
#![deny(missing_docs)]

mod builder;
mod classify;
mod item;
mod store;
mod table;
mod wire;

pub use builder::{DynamoDbStoreBuilder, DEFAULT_LEASE_TTL, DEFAULT_REGION, MAX_RECORD};
pub use store::DynamoDbStore;

/// docs/dynamodb.md, compiled as doctests so its examples cannot rot.
#[doc = include_str!("../../../docs/dynamodb.md")]
#[cfg(doctest)]
pub struct DynamoDbGuideDoctests;
