//! # fence-cli
//!
//! The `fence` command's library: every subcommand is a `pub` function over a
//! [`ConditionalStore`](fence_core::ConditionalStore), so it can be tested (and reused)
//! without spawning the binary.
//!
//! - [`run`]: hold a lease while a command runs (`fence run`), with [`tree`], [`reaper`],
//!   [`contain`], [`members`], [`killtimer`], [`signals`] and [`procs`] keeping every
//!   process of the command together; [`take`] takes the lease (waits, `--limit` slots, cells no `fence
//!   run` holds) and [`sightings`] keeps what a run saw of a busy lease for the next run on
//!   this host (cron);
//! - [`script`]: a lease held across a section of a shell script (`fence acquire`, `fence
//!   release`), [`holder`] proving to `fence release` which process holds it;
//! - [`kv`]: fenced writes and reads of named values in a cell (`fence put`, `fence get`);
//! - [`status`]: leases and cells (`fence status`);
//! - [`check`]: every record checked against the wire protocol (`fence check`);
//! - [`probe`]: the contract probe (`fence probe`);
//! - [`demo`]: the fleet demo (`fence demo`);
//! - [`stores`]: stores named by URL; [`names`]: lease names; [`exit`]: exit codes;
//!   [`terminal`]: what may reach the operator's terminal.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let opened = fence_cli::stores::open("memory://", None).unwrap();
//! let report = fence_cli::probe::run(opened.store.as_ref(), 1, false).await;
//! assert!(report.verdict.is_honest());
//! # });
//! ```
#![deny(missing_docs)]

/// `println!` that ignores a closed stdout (`fence demo | head` must not panic).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` through [`terminal::escape`]: one line on stderr that no text from a store or
/// a server can turn into terminal control.
macro_rules! errln {
    ($($arg:tt)*) => {{
        eprintln!("{}", $crate::terminal::escape(&format!($($arg)*)));
    }};
}

pub mod breaking;
pub mod check;
pub mod contain;
pub mod demo;
pub mod exit;
pub mod holder;
pub mod killtimer;
pub mod kv;
mod link;
pub mod members;
pub mod names;
pub mod probe;
pub mod procs;
pub mod reaper;
pub mod run;
pub mod script;
pub mod sightings;
pub mod signals;
pub mod status;
pub mod stores;
pub mod take;
pub mod terminal;
pub mod tree;
