//! # fence-wire
//!
//! What fence's object_store adapters ([fence-s3] and [fence-azure]) share below their
//! dialects, so each piece has one home:
//!
//! - [`names`]: object names that are the key's own characters under a prefix, the escaped
//!   names earlier versions wrote, listed names back to keys, and `scheme://bucket/prefix` URLs;
//! - [`outcome`]: the [`Failure`](outcome::Failure) a classified request comes to, what a
//!   transport failure proves, and which ETags can be versions;
//! - [`error_body`]: error answers cut down to their code and message before object_store
//!   (which puts whole bodies into its error text) sees them;
//! - [`client`]: the reqwest client of every adapter request, which never follows a redirect.
//!
//! Status codes and error codes stay in each adapter: they are the dialect.
//!
//! [fence-s3]: https://example.invalid/fence/crates/fence-s3
//! [fence-azure]: https://example.invalid/fence/crates/fence-azure
#![deny(missing_docs)]

pub mod client;
pub mod error_body;
pub mod names;
pub mod outcome;
