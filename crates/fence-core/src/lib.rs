//! # fence-core
//!
//! Exactly one owner per resource, agreed through nothing but an object store's conditional
//! writes — and a deposed owner's late writes fail.
//!
//! Two fences:
//! - a **node lease** (`nodes/<node>.json`): a record with a TTL, renewed by compare-and-swap;
//!   a holder that cannot renew in time stops writing (protects the process);
//! - an **ownership epoch** per cell (`cells/<cell>/own.json`): raised by CAS on every claim.
//!   The cell's data lives in the same object, so a write is a CAS on the object that holds
//!   the epoch: a stale writer is rejected by the store even if its clock or its lease check
//!   is wrong (protects the data).
//!
//! Applications add the `fence` crate instead (crates/fence): it re-exports this API
//! (`fence::Fence`, `fence::ErrorKind`, …) and opens stores by URL.
//!
//! Layers: [`store`] (the [`ConditionalStore`] contract) → [`record`] and [`ownership`]
//! (records and keys) → [`decide`] (the pure decision core) → [`runtime`] (the tokio driver).
//! [`keymap`] is the key map of `fence put`/`fence get` and the Python package, over
//! [`runtime`]'s fenced read-modify-write.
#![deny(missing_docs)]

pub mod clock;
pub mod decide;
pub mod error;
mod flaws;
pub mod key;
pub mod keymap;
pub mod memory;
pub mod ownership;
pub mod record;
pub mod runtime;
#[cfg(feature = "sabotage")]
pub mod sabotage;
pub mod stats;
pub mod store;

pub use clock::{now_ms, Clock, Entropy, HostInstant, Stop, Suspension};
pub use decide::{FenceReason, LeaseConfig, LeaseStatus, Liveness, Observation};
pub use error::{Commit, Error, ErrorKind, Result};
pub use key::{Key, MAX_KEY_LEN};
pub use memory::MemoryStore;
pub use ownership::{CasOutcome, LeaseCasError, LeaseCasOutcome, Ownership};
pub use record::{CellHead, NodeLease, NodeLeaseRecord, OwnerRecord};
pub use runtime::{
    read_cell, update_cell, CellClaim, CellData, ClaimStatus, Election, ElectionBuilder,
    ElectionEnd, ElectionEvent, Fence, FenceBuilder, Leader, LeaseKeeper, Observer, StepDown, Term,
    WriteAck,
};
pub use store::DEFAULT_RECORD_LIMIT;
pub use store::{
    Capabilities, CasGuard, ConditionalStore, Current, DeleteOutcome, PutOutcome, Stored, Version,
};
