//! Adapters over [`object_store`](https://docs.rs/object_store/0.14/object_store/), tested without a server.
//!
//! - [`FaultyObjectStore`]: an [`ObjectStore`](https://docs.rs/object_store/0.14/object_store/trait.ObjectStore.html) wrapping another
//!   (an [`InMemory`](https://docs.rs/object_store/0.14/object_store/memory/struct.InMemory.html) one, say) that injects lost answers,
//!   failures before sending and late landings into conditional puts, and records in a
//!   [`Ledger`](crate::wire::Ledger) what the store below did;
//! - [`ObjectStoreAdapter`]: the reference adapter over object_store, the one
//!   docs/testkit.md walks through.
//!
//! Run [`scenarios::wire::outcomes`](crate::scenarios::wire::outcomes) over your adapter on a
//! `FaultyObjectStore` to check its classification of every failure against what landed.

mod adapter;
mod faulty;

pub use adapter::ObjectStoreAdapter;
pub use faulty::{FaultyObjectStore, InjectedFault, StoreFault};
