//! # fence
//!
//! Exactly one owner per resource, agreed by a fleet of processes through nothing but an
//! object store's conditional writes — and a deposed owner's late writes fail.
//!
//! This is the crate to add. It re-exports [fence-core]'s whole API (so [`Fence`],
//! [`ErrorKind`], [`ConditionalStore`], … are `fence::Fence`, `fence::ErrorKind`, …) and opens
//! any supported store by URL, as object_store's `parse_url` does:
//!
//! | URL | store | cargo feature |
//! |---|---|---|
//! | `file:///abs/dir` | local files, safe across processes ([`fs::FsStore`]): an absolute path to an existing directory | `fs` (default) |
//! | `memory://` | in this process only ([`MemoryStore`]) | always |
//! | `s3://bucket/prefix` | S3 and S3-compatible servers | `s3` |
//! | `gs://bucket/prefix` | Google Cloud Storage (an emulator, or real GCS with `gcs-auth`) | `gcs` |
//! | `az://container/prefix`, `azure://container/prefix` | Azure Blob Storage | `azure` |
//! | `dynamodb://table/prefix` | a DynamoDB table (the prefix is its partition) | `dynamodb` |
//! | `opendal+s3://…`, `opendal+azblob://…`, `opendal+gcs://…` | the OpenDAL service of that name | `opendal` |
//!
//! ```toml
//! [dependencies]
//! fence = { path = "../fence/crates/fence", features = ["s3"] }
//! ```
//!
//! A URL whose backend is not built in fails with [`ErrorKind::Unsupported`] naming the
//! feature to turn on.
//!
//! # Configuration
//!
//! Each backend reads its usual environment variables ([`open`]: `AWS_*` for `s3://` and
//! `dynamodb://` (whose endpoint is `AWS_ENDPOINT_URL_DYNAMODB`, else `AWS_ENDPOINT_URL`),
//! `FENCE_GCS_ENDPOINT` or `STORAGE_EMULATOR_HOST` for `gs://`, `AZURE_*` for `az://`,
//! `OPENDAL_<SERVICE>_<KEY>` for `opendal+`), and takes the same settings as options that
//! override them without touching the process environment ([`open_with`],
//! [`OpenOptions`]): object_store's keys for S3, DynamoDB and Azure (`endpoint`, `region`,
//! `access_key_id`, `allow_http`, `account_name`, …), `endpoint` for GCS, OpenDAL's own
//! config keys for `opendal+`. A key the backend does not know, or one that fence decides
//! itself (the bucket the URL names, conditional writes, timeouts), is refused.
//!
//! Nothing is contacted at open, and no cloud metadata service is asked unless the
//! configuration leads there: with no credentials for a non-AWS S3 or DynamoDB endpoint, a custom Azure
//! endpoint or an OpenDAL service at a custom endpoint, opening fails with
//! [`ErrorKind::InvalidInput`] naming every credential source tried and what to set.
//! [`missing_credentials`] says the same of an error a store gave later (a metadata service
//! asked that had none); [`describe`] makes one plain line of any error.
//!
//! # Names and cell data
//!
//! [`names::check_lease`] is the one check of lease and cell names (the `fence` command and
//! the Python package use it), [`names::node_of`] the node id of a `fence run --lease`; the
//! key map of `fence put`/`fence get` is [`keymap`] (fence-core's).
//!
//! # Errors
//!
//! [`Error`] with coarse kinds, not committed: [`ErrorKind::InvalidInput`] for a malformed
//! URL, a relative or missing `file://` directory, an unknown option or missing
//! configuration; [`ErrorKind::Unsupported`] for a backend not built in, or an OpenDAL service
//! that cannot compare-and-swap; other kinds from the backend itself. Secrets never appear in
//! an error's text or `Debug`.
//!
//! [fence-core]: fence_core
#![deny(missing_docs)]

mod backends;
mod credentials;
pub mod message;
pub mod names;
mod open;
mod scheme;

pub use credentials::missing_credentials;
#[doc(inline)]
pub use fence_core::*;
pub use message::describe;
pub use open::{open, open_with, OpenOptions, Opened};
pub use scheme::Scheme;

/// The local-file backend (`file://`), [fence-fs](fence_fs).
#[cfg(feature = "fs")]
pub use fence_fs as fs;

/// The S3 backend (`s3://`), [fence-s3](fence_s3).
#[cfg(feature = "s3")]
pub use fence_s3 as s3;

/// The GCS backend (`gs://`), [fence-gcs](fence_gcs).
#[cfg(feature = "gcs")]
pub use fence_gcs as gcs;

/// The Azure Blob backend (`az://`, `azure://`), [fence-azure](fence_azure).
#[cfg(feature = "azure")]
pub use fence_azure as azure;

/// The DynamoDB backend (`dynamodb://`), [fence-dynamodb](fence_dynamodb).
#[cfg(feature = "dynamodb")]
pub use fence_dynamodb as dynamodb;

/// The OpenDAL backend (`opendal+<service>://`), [fence-opendal](fence_opendal).
#[cfg(feature = "opendal")]
pub use fence_opendal as opendal;

/// The README's examples, compiled as doc tests so they cannot rot.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
