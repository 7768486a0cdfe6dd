//! Faults on the wire between a real adapter and its real server.
//!
//! [`FaultProxy`] sits on 127.0.0.1 between an adapter (S3, GCS, Azure, …) and its server and,
//! by a seeded [`Schedule`], forwards each request, resets or closes the connection before or
//! after the server answered, answers 503/429/409/500 itself before or after forwarding, or
//! holds a request or an answer past the adapter's deadline. Its [`Ledger`] records what the
//! server did with every marked write, and [`judge`] checks what the adapter *said* against
//! it: Applied ⇒ applied; Rejected ⇒ not applied; NotCommitted ⇒ not applied, ever;
//! ambiguous may be either.
//!
//! The workloads over it are in [`scenarios::wire`](crate::scenarios::wire).

mod check;
mod ledger;
mod proxy;
mod schedule;

pub use check::{judge, Said};
pub use ledger::{fate_of, tokens_in, Fate, InFlight, Ledger, Send, Upstream, TOKEN_MARKER};
pub use proxy::{FaultProxy, WireStats};
pub use schedule::{FaultMix, Schedule, WireFault};
