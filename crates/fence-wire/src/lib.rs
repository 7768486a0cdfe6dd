//! # fence-wire
//!
//! What fence's HTTP adapters ([fence-s3], [fence-azure], and for the body and header
//! checks [fence-gcs]) share below their dialects, so each piece has one home:
//!
//! - [`names`]: object names that are the key's own characters under a prefix, the escaped
//!   names earlier versions wrote, listed names back to keys, and `scheme://bucket/prefix` URLs;
//! - [`outcome`]: the [`Failure`](outcome::Failure) a classified request comes to, what a
//!   transport failure proves, and which ETags can be versions;
//! - [`error_body`]: error answers cut down to their code and message before object_store
//!   (which puts whole bodies into its error text) sees them;
//! - [`client`]: the reqwest client of every adapter request, which never follows a redirect,
//!   and the bounds of what object_store reads whole under it;
//! - [`exchange`]: the HTTP layer under object_store's clients, which records what every
//!   attempt of an operation came to and bounds what object_store reads;
//! - [`body`]: answer bodies read only up to a cap, over any stream of chunks (reqwest,
//!   object_store, OpenDAL), or under a client that reads bodies whole;
//! - [`headers`]: headers an answer is trusted on only when they say one thing;
//! - [`listing`]: listings bounded in names, bytes and pages;
//! - [`limits`]: a store's record limit and listing limits, in one place;
//! - [`options`]: the timeouts and limits the S3 and Azure builders share, and their setters.
//!
//! Status codes and error codes stay in each adapter: they are the dialect.
//!
//! # Bounds
//!
//! Every body an adapter reads has a cap, and is read only up to it:
//!
//! | answer | cap | over the cap |
//! |---|---|---|
//! | a record (`get`) | the store's record limit ([`fence_core::DEFAULT_RECORD_LIMIT`] unless set) | `Corrupt` naming the key, connection closed |
//! | an error answer | [`error_body::ERROR_BODY_LIMIT`] | the rest is never read; classified by status as usual |
//! | a listing | [`listing::ListingLimits`] (names, bytes, pages) and [`listing::MAX_LISTING_PAGE`] a page | `Unsupported`, saying which limit |
//! | anything else object_store reads (credentials, answers to writes) | [`client::CONTROL_ANSWER_LIMIT`] | the request fails as an unreadable answer |
//!
//! [fence-gcs]: https://example.invalid/fence/crates/fence-gcs
//!
//! [fence-s3]: https://example.invalid/fence/crates/fence-s3
//! [fence-azure]: https://example.invalid/fence/crates/fence-azure
#![deny(missing_docs)]

pub mod body;
pub mod client;
pub mod error_body;
pub mod exchange;
pub mod headers;
pub mod limits;
pub mod listing;
pub mod names;
pub mod options;
pub mod outcome;
