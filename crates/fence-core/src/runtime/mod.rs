//! The tokio driver of the decision core: a node-lease keeper that renews in the background,
//! cell claims with their epoch, and fenced writes.
//!
//! ```
//! # fn block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
//! # }
//! # block(async {
//! use std::{sync::Arc, time::Duration};
//! use fence_core::{Fence, MemoryStore};
//!
//! let store = Arc::new(MemoryStore::new());
//! let fence = Fence::builder(store, "node-a").ttl(Duration::from_secs(2)).build().unwrap();
//! let lease = fence.acquire().await.unwrap();
//! assert!(lease.is_held());
//! let cell = lease.claim("orders").await.unwrap();
//! assert_eq!(cell.epoch(), 1);
//! let ack = cell.write("state v1").await.unwrap();
//! assert_eq!(ack.epoch, 1);
//! cell.release().await.unwrap();
//! lease.release().await;
//! # });
//! ```
//!
//! - [`keeper`]: acquiring and keeping this node's lease;
//! - [`observer`]: judging other nodes' leases, one read shared by all cells of a node;
//! - [`claim`]: claims and the fenced writes of a claimed cell;
//! - `head`: the write protocol every head write goes through (evidence, never guesses);
//! - [`cell`]: reading a cell, and writing one without a keeper (`update_cell`);
//! - `wait`: waiting for a cell ([`LeaseKeeper::claim_wait`], and an election's campaign);
//! - [`leader`]: leader election for one resource ([`Election`]).

pub mod cell;
pub mod claim;
mod head;
pub mod keeper;
pub mod leader;
pub mod observer;
mod wait;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, Entropy};
use crate::decide::{LeaseConfig, Now};
use crate::error::{Error, ErrorKind};
use crate::flaws::Flaws;
use crate::ownership::{Ownership, INLINE_MAX_DEFAULT};
use crate::store::ConditionalStore;

pub use cell::{read_cell, update_cell, CellData};
pub use claim::{CellClaim, ClaimStatus, WriteAck};
pub use keeper::LeaseKeeper;
pub use leader::{Election, ElectionBuilder, ElectionEnd, ElectionEvent, Leader, StepDown, Term};
pub use observer::Observer;

/// Builds a [`Fence`].
#[derive(Debug)]
pub struct FenceBuilder {
    store: Arc<dyn ConditionalStore>,
    node: String,
    addr: String,
    prefix: Option<String>,
    cfg: LeaseConfig,
    skew_margin: Option<Duration>,
    stale_after: Option<Duration>,
    inline_max: usize,
    clock: Option<Clock>,
    entropy: Option<Entropy>,
    flaws: Flaws,
}

/// The longest TTL, skew margin or stale-after a fence accepts: a century. Longer ones are
/// certainly a unit mistake, and lease arithmetic near `u64::MAX` ms only saturates.
const MAX_SETTING_MS: u64 = crate::decide::observe::MAX_RECORD_TTL_MS;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl FenceBuilder {
    /// Lease TTL (default 10 s). Renewal happens at TTL/3; each attempt's timeout is about
    /// half the remaining authority, within the bounds of
    /// [`attempt_timeouts`](Self::attempt_timeouts), which (like `max_attempts`) stay as set
    /// whatever order the builder calls come in.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        let keep = self.cfg.clone();
        self.cfg = LeaseConfig::with_ttl_ms(ms(ttl));
        self.cfg.max_attempts = keep.max_attempts;
        self.cfg.attempt_min_ms = keep.attempt_min_ms;
        self.cfg.attempt_max_ms = keep.attempt_max_ms;
        self
    }

    /// Wall-clock slack when a foreign lease is *shown* as expired (default TTL/10, at most
    /// 1 s). Takeovers never depend on it: they wait until the lease was seen unchanged for
    /// a full TTL.
    #[must_use]
    pub fn skew_margin(mut self, margin: Duration) -> Self {
        self.skew_margin = Some(margin);
        self
    }

    /// How long past its `expires_ms` (by our wall clock) a foreign lease counts as left by a
    /// long-dead process and is taken over without a TTL of observation (default
    /// max(10 min, 30 × TTL)). See [`crate::decide::observe`].
    #[must_use]
    pub fn stale_after(mut self, after: Duration) -> Self {
        self.stale_after = Some(after);
        self
    }

    /// Bounds of one lease write or read attempt (defaults 250 ms – 2.5 s); an attempt never
    /// outlives the remaining authority whatever these say.
    #[must_use]
    pub fn attempt_timeouts(mut self, min: Duration, max: Duration) -> Self {
        self.cfg.attempt_min_ms = ms(min);
        self.cfg.attempt_max_ms = ms(max).max(ms(min));
        self
    }

    /// Writes per renewal before fencing (default 4).
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.cfg.max_attempts = n.max(1);
        self
    }

    /// Payloads up to this many bytes live inside the cell head (one request per write);
    /// larger ones go to a payload object the head points at (default 8 KiB, at most 32 KiB).
    #[must_use]
    pub fn inline_max(mut self, bytes: usize) -> Self {
        self.inline_max = bytes.min(32 * 1024);
        self
    }

    /// The address advertised in the lease record.
    #[must_use]
    pub fn addr(mut self, addr: impl Into<String>) -> Self {
        self.addr = addr.into();
        self
    }

    /// Puts every key under `prefix/`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The clock (default: the system's).
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The randomness (default: seeded from the OS).
    #[must_use]
    pub fn entropy(mut self, entropy: Entropy) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Breaks this fence on purpose (simulation tests only).
    #[cfg(feature = "sabotage")]
    #[must_use]
    pub fn sabotage(mut self, switch: crate::sabotage::Sabotage) -> Self {
        self.flaws.on = Some(switch);
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Fence, Error> {
        crate::ownership::check_name("node", &self.node)?;
        let mut cfg = self.cfg;
        if cfg.ttl_ms < 30 {
            return Err(
                Error::new(ErrorKind::InvalidInput, "lease TTL must be at least 30 ms")
                    .not_committed(),
            );
        }
        if let Some(m) = self.skew_margin {
            cfg.skew_margin_ms = ms(m);
        }
        if let Some(s) = self.stale_after {
            cfg.stale_after_ms = ms(s);
        }
        for (what, value) in [
            ("lease TTL", Some(cfg.ttl_ms)),
            ("skew margin", self.skew_margin.map(ms)),
            ("stale-after", self.stale_after.map(ms)),
        ] {
            if let Some(value) = value.filter(|v| *v > MAX_SETTING_MS) {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("{what} of {value} ms is longer than a century"),
                )
                .not_committed());
            }
        }
        let entropy = self.entropy.unwrap_or_default();
        let metered: Arc<dyn ConditionalStore> = Arc::new(crate::stats::Metered::new(self.store));
        let mut ownership =
            Ownership::new(metered, self.node.clone()).with_entropy(entropy.clone());
        if let Some(p) = &self.prefix {
            ownership = ownership.with_prefix(p)?;
        }
        Ok(Fence {
            ownership: Arc::new(ownership),
            cfg,
            addr: self.addr,
            clock: self.clock.unwrap_or_else(Clock::system),
            entropy,
            inline_max: self.inline_max,
            observer: Arc::new(Observer::new()),
            flaws: self.flaws,
            #[cfg(feature = "sabotage")]
            written: Arc::default(),
        })
    }
}

/// One node's entry point: acquires its lease and, through it, claims cells.
#[derive(Clone, Debug)]
pub struct Fence {
    ownership: Arc<Ownership>,
    cfg: LeaseConfig,
    addr: String,
    clock: Clock,
    entropy: Entropy,
    inline_max: usize,
    observer: Arc<Observer>,
    flaws: Flaws,
    /// `rollback-acknowledged` only: the payload this process last wrote, per cell.
    #[cfg(feature = "sabotage")]
    written: Arc<std::sync::Mutex<std::collections::HashMap<String, crate::record::CellPayload>>>,
}

#[cfg(feature = "sabotage")]
impl Fence {
    pub(crate) fn wrote(&self, cell: &str, payload: &crate::record::CellPayload) {
        let mut w = self.written.lock().unwrap_or_else(|p| p.into_inner());
        w.insert(cell.to_owned(), payload.clone());
    }

    pub(crate) fn last_written(&self, cell: &str) -> Option<crate::record::CellPayload> {
        let w = self.written.lock().unwrap_or_else(|p| p.into_inner());
        w.get(cell).cloned()
    }
}

impl Fence {
    /// A builder for node `node` over `store`.
    pub fn builder(store: Arc<dyn ConditionalStore>, node: impl Into<String>) -> FenceBuilder {
        FenceBuilder {
            store,
            node: node.into(),
            addr: String::new(),
            prefix: None,
            cfg: LeaseConfig::default(),
            skew_margin: None,
            stale_after: None,
            inline_max: INLINE_MAX_DEFAULT,
            clock: None,
            entropy: None,
            flaws: Flaws::default(),
        }
    }

    /// This fence's sabotage switch (always empty without the `sabotage` feature), for the
    /// rules other crates run on its behalf ([`crate::decide::claimed::record_is_ours`]).
    pub fn flaws(&self) -> crate::decide::Flaws {
        self.flaws
    }

    /// The ownership API underneath (records, keys).
    pub fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    /// The lease configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// What this node has observed of other nodes' leases.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }

    pub(crate) fn now(&self) -> Now {
        Now {
            mono_ms: self.clock.mono_ms(),
            wall_ms: self.clock.wall_ms(),
        }
    }
}

/// Runs `op` with a deadline on `clock`; a deadline hit is an ambiguous
/// [`ErrorKind::Timeout`] (the request may have been sent).
pub(crate) async fn bounded<T>(
    clock: &Clock,
    timeout_ms: u64,
    op: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match clock.timeout(timeout_ms.max(1), op).await {
        Some(r) => r,
        None => Err(Error::new(
            ErrorKind::Timeout,
            format!("no answer within {timeout_ms} ms"),
        )),
    }
}
