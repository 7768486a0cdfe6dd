//! # fence-testkit
//!
//! Proves a [`ConditionalStore`](fence_core::ConditionalStore) safe with one call, and catches
//! a store (or an emulator) that lies about its conditional writes.
//!
//! - [`run_all`]: every conformance scenario, the [contract probe](probe()) first; returns a
//!   [`Report`] ending in the line `N passed, M failed`.
//! - [`probe()`]: the contract probe of `fence-probe`, re-exported: a short check any user can
//!   run against a live store; says [`Verdict::Honest`], [`Verdict::Violation`],
//!   [`Verdict::Unsupported`] or [`Verdict::Error`] (could not tell).
//! - [`FaultyStore`]: a seeded wrapper injecting lost answers, failures before sending, 409s,
//!   5xx after applying, latency and hangs. [`CountingStore`]: round trips per operation.
//! - [`canned`]: a canned HTTP server for the adapters' wire tests, and the suite of hostile
//!   answers every HTTP adapter runs with one line ([`bounded_answers!`]).
//! - [`wire`]: a fault proxy on the wire between a real adapter and its real server, recording
//!   what the server applied; [`scenarios::wire`] checks every answer of the adapter against
//!   it, and runs the lease/claim/write runtime through the faults.
//! - [`objstore`]: the same below an adapter over object_store, without a server, and the
//!   reference adapter over object_store.
//! - [`linearizability`]: records histories of concurrent gets and puts and checks them
//!   against a per-key CAS register.
//! - [`sabotage`]: deliberately broken stores the suite must catch.
//! - [`model`]: an exhaustive model check of the real decision core (stateright), with
//!   readable counterexamples.
//! - [`sim`]: deterministic simulation of the runtime: one seed drives time, actions, clock
//!   skew, pauses, crashes and store faults; properties are checked on the record.
//!
//! ```
//! # fn block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! # block(async {
//! use std::sync::Arc;
//! use fence_core::MemoryStore;
//! use fence_testkit::{run_all, SuiteConfig};
//! let cfg = SuiteConfig::light();
//! let report = run_all(Arc::new(MemoryStore::new()), &cfg).await;
//! println!("{report}");
//! assert!(report.is_success());
//! # });
//! ```
#![deny(missing_docs)]

pub mod canned;
pub mod counting;
pub mod faulty;
pub mod linearizability;
pub mod model;
pub mod objstore;
pub mod round_trips;
pub mod sabotage;
pub mod scenarios;
pub mod servers;
pub mod sim;
pub mod suite;
pub mod wire;

pub use counting::{BodyBytes, CountingStore, OpCounts};
pub use faulty::{Fault, FaultyStore, OpKind, RandomFaults};
pub use fence_probe::{probe, ProbeConfig, ProbeReport, Verdict};
/// docs/testkit.md, compiled as doctests so its examples cannot rot.
#[doc = include_str!("../../../docs/testkit.md")]
#[cfg(doctest)]
pub struct TestkitGuideDoctests;

pub use suite::{
    run_all, run_scenarios, Report, Scenario, ScenarioCtx, ScenarioResult, SuiteConfig,
};
