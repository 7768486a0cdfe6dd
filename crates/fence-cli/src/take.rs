//! Taking a lease for `fence run`: the node lease `run.NAME`, then the cell `NAME` at a new
//! epoch.
//!
//! - **Waiting** (`--wait`, `--timeout`): for the node lease, [`Fence::acquire_wait`]; for
//!   a cell another node owns (a library process, a seed record), the claim is tried again
//!   every poll until that node's lease is judged dead or the wait runs out.
//! - **Runs that do not wait** (cron): what a run saw of a busy lease is kept on this host
//!   ([`crate::sightings`]), and the next run continues that watch, so it takes over a dead
//!   holder a TTL after the first run saw its record — never a live one.
//! - **Slots** (`--limit N`): the cells `NAME#0` … `NAME#N-1`, each with its own node lease
//!   `run.NAME#k` and epoch; a run takes the first free one.

use std::time::Duration;

use fence_core::decide::{Liveness, Now};
use fence_core::{CellClaim, Clock, Error, ErrorKind, Fence, LeaseKeeper};

use crate::exit::{describe, shown, Failure, STORE};
use crate::names::{check_lease, node_of};
use crate::run::{until_terminating, RunOptions, FOREVER};
use crate::sightings::Sightings;
use crate::signals::Signals;

/// A taken lease: the node lease and the claimed cell.
#[derive(Debug)]
pub struct Taken {
    /// The node lease.
    pub keeper: LeaseKeeper,
    /// The cell at its new epoch.
    pub claim: CellClaim,
    /// The slot, with `--limit`.
    pub slot: Option<u32>,
}

/// One cell a run may take and the fence of its node.
struct Slot {
    cell: String,
    index: Option<u32>,
    fence: Fence,
}

impl Slot {
    fn node(&self) -> &str {
        self.fence.ownership().node()
    }
}

/// The cell name of slot `index` of lease `lease`.
///
/// ```
/// assert_eq!(fence_cli::take::slot_name("jobs", 2), "jobs#2");
/// ```
pub fn slot_name(lease: &str, index: u32) -> String {
    format!("{lease}#{index}")
}

/// Takes the lease (or, with `--limit`, one of its slots); says once on stderr that it waits
/// and, once a wait ends (or with `--verbose`), that it acquired. A signal that ends a
/// process ends the wait: 128 + N, with nothing held.
pub async fn take(opts: &RunOptions, signals: &mut Signals) -> Result<Taken, Failure> {
    let slots = slots(opts)?;
    let sightings = Sightings::open(&opts.store.url);
    for slot in &slots {
        sightings.load_into(&slot.fence, slot.node());
    }
    let clock = slots[0].fence.clock().clone();
    let wait_ms = opts
        .wait
        .map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX));
    let mut taker = Taker {
        opts,
        signals,
        sightings,
        deadline: wait_ms.map(|w| clock.mono_ms().saturating_add(w)),
        clock,
        announced: false,
        said_retrying: false,
    };
    let taken = match slots.as_slice() {
        [one] => taker.take_one(one).await?,
        many => taker.take_any(many).await?,
    };
    if taker.announced || opts.verbose {
        errln!(
            "{}: acquired lease {} at epoch {}",
            opts.said_as(),
            shown(taken.claim.cell()),
            taken.claim.epoch()
        );
    }
    Ok(taken)
}

/// The cells a run may take: `NAME`, or `NAME#0` … `NAME#N-1` with `--limit N`.
fn slots(opts: &RunOptions) -> Result<Vec<Slot>, Failure> {
    let cells: Vec<(String, Option<u32>)> = match opts.limit {
        None => vec![(opts.lease.clone(), None)],
        Some(n) => (0..n)
            .map(|i| (slot_name(&opts.lease, i), Some(i)))
            .collect(),
    };
    cells
        .into_iter()
        .map(|(cell, index)| {
            check_lease(&cell)?;
            let fence = Fence::builder(opts.store.store.clone(), node_of(&cell))
                .ttl(opts.ttl)
                .addr(holder_addr())
                .clock(Clock::host())
                .build()?;
            Ok(Slot { cell, index, fence })
        })
        .collect()
}

/// `pid:<pid>@<host>`: who holds the lease, for `fence status` and waiters.
pub fn holder_addr() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "host".into());
    let host: String = host.chars().take(64).collect();
    format!("pid:{}@{host}", std::process::id())
}

struct Taker<'a> {
    opts: &'a RunOptions,
    signals: &'a mut Signals,
    sightings: Sightings,
    clock: Clock,
    /// When the wait ends (the slots' clock); `None`: no wait.
    deadline: Option<u64>,
    announced: bool,
    said_retrying: bool,
}

impl Taker<'_> {
    fn time_left(&self) -> Duration {
        let left = self
            .deadline
            .map_or(0, |d| d.saturating_sub(self.clock.mono_ms()));
        Duration::from_millis(left)
    }

    /// Sleeps `d`, or fails at a signal that ends a process.
    async fn pause(&mut self, d: Duration) -> Result<(), Failure> {
        tokio::select! {
            () = self.clock.sleep(d) => Ok(()),
            s = until_terminating(self.signals) => Err(self.interrupted(s)),
        }
    }

    fn interrupted(&self, s: crate::signals::Caught) -> Failure {
        let code = 128u8.saturating_add(s.0 as u8);
        let lease = self.opts.lease_shown();
        Failure::new(code, format!("{s} while waiting for lease {lease}"))
    }

    fn announce(&mut self, whom: &str) {
        if self.announced || self.opts.quiet {
            return;
        }
        self.announced = true;
        let most = match self.opts.wait {
            Some(limit) if limit < FOREVER => {
                format!(" (at most {})", humantime::format_duration(limit))
            }
            _ => String::new(),
        };
        errln!(
            "{}: waiting for lease {}{most}: {whom}",
            self.opts.said_as(),
            self.opts.lease_shown()
        );
    }

    /// The one lease: its node lease (waiting for it as asked), then its cell.
    async fn take_one(&mut self, slot: &Slot) -> Result<Taken, Failure> {
        if self.opts.wait.is_some() {
            match holder(&slot.fence).await {
                Ok(Some(h)) => self.announce(&h.words),
                Ok(None) => {}
                Err(e) => self.announce(&format!(
                    "its lease record cannot be read now ({})",
                    describe(&e)
                )),
            }
        }
        let opts = self.opts;
        let acquiring = async {
            match opts.wait {
                None => slot.fence.acquire().await,
                Some(limit) => slot.fence.acquire_wait(limit).await,
            }
        };
        let acquired = tokio::select! {
            a = acquiring => a,
            s = until_terminating(self.signals) => return Err(self.interrupted(s)),
        };
        let keeper = match acquired {
            Ok(keeper) => keeper,
            Err(e) => {
                self.sightings.save_from(&slot.fence, slot.node());
                return Err(self.acquire_failure(slot, e).await);
            }
        };
        self.sightings.forget(slot.node());
        match self.claim(slot, &keeper, self.opts.wait.is_some()).await {
            Ok(claim) => Ok(Taken {
                keeper,
                claim,
                slot: slot.index,
            }),
            Err(f) => {
                keeper.release().await;
                Err(f)
            }
        }
    }

    /// The first free slot, trying them all every poll while the wait lasts.
    async fn take_any(&mut self, slots: &[Slot]) -> Result<Taken, Failure> {
        let poll = Duration::from_millis(slots[0].fence.config().poll_ms());
        let mut last_error: Option<Error> = None;
        loop {
            for slot in slots {
                match self.try_slot(slot).await {
                    Ok(Some(taken)) => return Ok(taken),
                    Ok(None) => {}
                    Err(e) if self.deadline.is_none() => return Err(self.store_failure(e)),
                    Err(e) => last_error = Some(e),
                }
            }
            let left = self.time_left();
            if left.is_zero() {
                return Err(match last_error {
                    Some(e) => self.store_failure(e),
                    None => self.all_busy(slots.len()),
                });
            }
            self.announce(&format!("all {} slots are held", slots.len()));
            self.pause(poll.min(left)).await?;
        }
    }

    /// One slot without waiting: `None` if it is busy.
    async fn try_slot(&mut self, slot: &Slot) -> Result<Option<Taken>, Error> {
        let keeper = match slot.fence.acquire().await {
            Ok(keeper) => keeper,
            Err(e) if e.kind() == ErrorKind::Busy => {
                self.sightings.save_from(&slot.fence, slot.node());
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        self.sightings.forget(slot.node());
        match self.claim(slot, &keeper, false).await {
            Ok(claim) => Ok(Some(Taken {
                keeper,
                claim,
                slot: slot.index,
            })),
            Err(f) if f.code == self.opts.conflict_exit_code => {
                keeper.release().await;
                Ok(None)
            }
            Err(f) => {
                keeper.release().await;
                Err(Error::new(ErrorKind::Unavailable, f.message).not_committed())
            }
        }
    }

    fn store_failure(&self, e: Error) -> Failure {
        Failure::from(e).prefixed(&format!("lease {}", self.opts.lease_shown()))
    }

    fn all_busy(&self, n: usize) -> Failure {
        let waited = if self.opts.wait.is_some() {
            " (the wait ran out)"
        } else {
            ""
        };
        Failure::new(
            self.opts.conflict_exit_code,
            format!(
                "lease {} is busy{waited}: all {n} slots are held (fence status shows them as {}#0 …)",
                self.opts.lease_shown(),
                self.opts.lease
            ),
        )
    }

    /// Claims the slot's cell at a new epoch. A cell another node owns is judged by that
    /// node's lease: taken over once it is dead; while it lives, tried again every poll if
    /// `wait`, else busy.
    async fn claim(
        &mut self,
        slot: &Slot,
        keeper: &LeaseKeeper,
        wait: bool,
    ) -> Result<CellClaim, Failure> {
        let mut imported = false;
        let mut retry = Duration::from_millis(50);
        loop {
            let busy = match keeper.claim(&slot.cell).await {
                Ok(claim) => return Ok(claim),
                Err(e) if e.kind() == ErrorKind::Busy => e,
                Err(e) => {
                    // A store failure while the wait lasts is retried, as the acquire's are:
                    // a waiter never exits 69 while its wait lasts.
                    let left = if wait {
                        self.time_left()
                    } else {
                        Duration::ZERO
                    };
                    let not_the_store = matches!(
                        e.kind(),
                        ErrorKind::Fenced | ErrorKind::InvalidInput | ErrorKind::InvalidKey
                    );
                    if not_the_store || left.is_zero() || !keeper.is_held() {
                        return Err(self.claim_failure(slot, e));
                    }
                    self.say_retrying(slot, &e);
                    self.pause(retry.min(left)).await?;
                    retry = (retry * 2).min(Duration::from_secs(1));
                    continue;
                }
            };
            let owner = owner_of(&slot.fence, &slot.cell).await;
            if let Some(owner) = &owner {
                // An earlier run on this host may have watched this owner already.
                if !imported {
                    imported = true;
                    if self.sightings.load_into(&slot.fence, owner) {
                        continue;
                    }
                }
                self.sightings.save_from(&slot.fence, owner);
            }
            let left = if wait {
                self.time_left()
            } else {
                Duration::ZERO
            };
            if left.is_zero() {
                return Err(self.foreign_owner(slot, owner.as_deref(), &busy));
            }
            let whom = match &owner {
                Some(o) if o == slot.node() => {
                    "another fence run of it took its cell first".to_owned()
                }
                Some(o) => format!(
                    "its cell is held by node {}, which is not a fence run of it",
                    shown(o)
                ),
                None => "its cell is held by another process".to_owned(),
            };
            self.announce(&whom);
            let poll = Duration::from_millis(slot.fence.config().poll_ms());
            self.pause(poll.min(left)).await?;
        }
    }

    /// Says once that a claim failed for a store reason and is retried.
    fn say_retrying(&mut self, slot: &Slot, e: &Error) {
        if self.said_retrying || self.opts.quiet {
            return;
        }
        self.said_retrying = true;
        errln!(
            "{}: claiming lease {} failed ({}); retrying while the wait lasts",
            self.opts.said_as(),
            shown(&slot.cell),
            describe(e)
        );
    }

    fn claim_failure(&self, slot: &Slot, e: Error) -> Failure {
        let lease = shown(&slot.cell);
        match e.kind() {
            ErrorKind::Fenced => Failure::new(
                self.opts.conflict_exit_code,
                format!("lease {lease} was lost before the command started"),
            ),
            _ => Failure::from(e).prefixed(&format!("lease {lease}")),
        }
    }

    /// A cell another node owns and that is not (yet) judged dead: say who, and what it
    /// takes.
    fn foreign_owner(&self, slot: &Slot, owner: Option<&str>, busy: &Error) -> Failure {
        let lease = shown(&slot.cell);
        let waited = if self.opts.wait.is_some() {
            " (the wait ran out)"
        } else {
            ""
        };
        let Some(owner) = owner else {
            return Failure::new(
                self.opts.conflict_exit_code,
                format!("lease {lease} is busy{waited}: {}", describe(busy)),
            );
        };
        if owner == slot.node() {
            // A claim that lost its race to another `fence run` of the same lease (the
            // same node name: say, one that waited while this one was stopped).
            return Failure::new(
                self.opts.conflict_exit_code,
                format!(
                    "lease {lease} is busy{waited}: another fence run of it took its cell first"
                ),
            );
        }
        let when = match next_run_in(&slot.fence, owner) {
            Some(s) => format!(
                "; fence run takes the cell over once that node's lease record has stayed \
                 unchanged for a whole TTL: at the earliest {s:.1}s from now{}",
                self.next_run_hint()
            ),
            None => String::new(),
        };
        Failure::new(
            self.opts.conflict_exit_code,
            format!(
                "lease {lease} is busy{waited}: its cell is held by node {}, a process that is \
                 not a fence run of it{when}",
                shown(owner)
            ),
        )
    }

    /// Where a later run continues this run's watch, or why it cannot.
    fn next_run_hint(&self) -> String {
        match self.sightings.unavailable() {
            None => " (a later run on this host continues this run's watch)".to_owned(),
            Some(why) => format!(" (this host cannot keep this run's watch: {why})"),
        }
    }

    async fn acquire_failure(&self, slot: &Slot, e: Error) -> Failure {
        let lease = shown(&slot.cell);
        let waited = if self.opts.wait.is_some() {
            " (the wait ran out)"
        } else {
            ""
        };
        let code = self.opts.conflict_exit_code;
        match e.kind() {
            ErrorKind::Busy | ErrorKind::Fenced => match holder(&slot.fence).await {
                Ok(Some(h)) if h.live => {
                    Failure::new(code, format!("lease {lease} is busy{waited}: {}", h.words))
                }
                Ok(Some(h)) if e.kind() == ErrorKind::Busy => Failure::new(
                    code,
                    format!(
                        "lease {lease} is busy{waited}: {}; {}",
                        h.words,
                        self.unobserved_expiry(slot)
                    ),
                ),
                Ok(_) if e.kind() == ErrorKind::Busy => {
                    Failure::new(code, format!("lease {lease} is busy{waited}"))
                }
                Ok(_) => Failure::new(
                    STORE,
                    format!(
                        "lease {lease}: the store did not take the lease record (FENCE_LOG=fence_core=debug shows why)"
                    ),
                ),
                Err(read) => Failure::from(read).prefixed(&format!("lease {lease}")),
            },
            _ => Failure::from(e).prefixed(&format!("lease {lease}")),
        }
    }

    /// Why an expired lease still reads as busy, and when it will not: a takeover never
    /// trusts the holder's wall clock, so it first watches the record unchanged for a whole
    /// TTL (see docs/design.md), which a later run on this host continues.
    fn unobserved_expiry(&self, slot: &Slot) -> String {
        let watch = "its holder may be gone, but a takeover first watches the lease record \
                     unchanged for a whole TTL";
        match (next_run_in(&slot.fence, slot.node()), self.opts.wait) {
            (Some(s), None) => format!(
                "{watch}: a run {s:.1}s from now or later takes it over if it stays unchanged{}, or use --wait",
                self.next_run_hint()
            ),
            (None, None) => format!("{watch}: use --wait or --timeout"),
            (_, Some(_)) => format!("{watch}: wait longer (--timeout)"),
        }
    }
}

/// Seconds until `node`'s lease, as `fence` watched it, can be judged dead by a read sent
/// then (if it stays unchanged); `None` if nothing was watched.
fn next_run_in(fence: &Fence, node: &str) -> Option<f64> {
    let seen = fence.observer().last(node)?;
    let now = Now {
        mono_ms: fence.clock().mono_ms(),
        wall_ms: fence.clock().wall_ms(),
    };
    match seen.judge(now, fence.config()) {
        Liveness::Live { until_mono } => Some(until_mono.saturating_sub(now.mono_ms) as f64 / 1e3),
        Liveness::Dead => Some(0.0),
    }
}

/// The node the head of `cell` names, if it can be read and names one.
async fn owner_of(fence: &Fence, cell: &str) -> Option<String> {
    let read = fence.ownership().read_head(cell).await.ok()??;
    read.0.node
}

/// The lease record as a waiter sees it.
struct Holder {
    /// "held by …" in words.
    words: String,
    /// Unexpired (by this machine's clock) and not released.
    live: bool,
}

async fn holder(fence: &Fence) -> Result<Option<Holder>, Error> {
    let own = fence.ownership();
    let Some(lease) = own.read_node_lease(own.node()).await? else {
        return Ok(None);
    };
    if lease.record.expires_ms == 0 {
        return Ok(None);
    }
    let by = match lease.record.addr.as_str() {
        "" => "another process".to_owned(),
        addr => shown(addr),
    };
    let (when, live) = expiry_words(lease.record.expires_ms, fence.clock().wall_ms());
    Ok(Some(Holder {
        words: format!("held by {by} ({when})"),
        live,
    }))
}

/// "its lease runs 3.2s more unless renewed" or "its lease expired 1.5s ago" for a record
/// expiring at `expires_ms`, at wall time `now_ms`; and whether that is in the future.
pub(crate) fn expiry_words(expires_ms: u64, now_ms: u64) -> (String, bool) {
    let left_ms = crate::status::ms_until(expires_ms, now_ms);
    let words = if left_ms > 0 {
        format!(
            "its lease runs {:.1}s more unless renewed",
            left_ms as f64 / 1e3
        )
    } else {
        format!(
            "its lease expired {:.1}s ago",
            left_ms.unsigned_abs() as f64 / 1e3
        )
    };
    (words, left_ms > 0)
}
