//! The holder's own lease: a state machine fed with events, answering with effects.
//!
//! - **Acquire** creates the record first (`Absent`): one request when the key is free. Only a
//!   rejected or ambiguous create reads the record; a record of another process is taken over
//!   (guarded on its version) once it is judged dead by [observation](super::observe),
//!   otherwise the acquisition is `Busy` — or, waiting, polls it every
//!   [`LeaseConfig::poll_ms`].
//! - Authority is anchored at the moment a write is *issued* (before it is sent): it lasts
//!   while **both** `now.mono_ms < anchor + ttl` on the monotonic clock and
//!   `now.wall_ms < anchor_wall + ttl` on the wall clock, judged when asked
//!   ([`LeaseCore::is_held`]), not by a timer alone. The monotonic clock is the authority; the
//!   wall clock can only end it sooner — after a machine was suspended (its monotonic clock
//!   stood still while others' ran), the resumed holder sees its authority gone at once.
//! - Renew at `anchor + ttl/3` with `Match(held version)`. Every attempt of one renewal has its
//!   own identity (nonce and anchor), and a read-back accepts any of them.
//! - A rejected first attempt → fenced at once. Applied, but the answer came after the prior
//!   authority ended → fenced (a peer may already be taking over cells). Ambiguous, or
//!   rejected after an earlier attempt → read back: one of our nonces → held, anchored at that
//!   attempt; the prior record unchanged → try again; anything else → fenced.
//! - At most [`LeaseConfig::max_attempts`] writes per renewal, each bounded by the remaining
//!   authority ([`LeaseConfig::attempt_timeout`]); exhausting them fences.

use std::fmt;

use super::observe::{Liveness, Observation, ObservedLease};
use super::{LeaseConfig, Now};
use crate::flaws::{sabotaged, Flaws};
use crate::record::NodeLeaseRecord;
use crate::store::{CasGuard, Version};

/// The answer to a write effect.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WriteResult {
    /// Applied with this version.
    Applied(Version),
    /// The condition was false.
    Rejected,
    /// Provably not applied.
    NotCommitted,
    /// May have been applied (includes a timeout after sending).
    Ambiguous,
}

/// The answer to a read effect.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReadResult {
    /// The lease record is there.
    Found(ObservedLease),
    /// No lease record.
    Absent,
    /// The read failed or timed out.
    Failed,
}

/// An input to the lease core.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LeaseEvent {
    /// Start acquiring. With `wait`, a live holder is polled until it is judged dead instead of
    /// answering `Busy`, and store failures are retried with backoff (the shell bounds the
    /// wait).
    Acquire {
        /// Wait for a live holder instead of giving up.
        wait: bool,
    },
    /// Time passed (a wake-up the core asked for, or any other reason to look).
    Tick,
    /// The application asks to give the lease up (or to stop acquiring).
    Release,
    /// The last [`LeaseEffect::Write`] finished.
    Written(WriteResult),
    /// The last [`LeaseEffect::Read`] finished.
    Read(ReadResult),
}

/// The holder's externally visible state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LeaseStatus {
    /// Not held yet.
    Acquiring,
    /// Held (authority is still judged by [`LeaseCore::is_held`]).
    Held,
    /// Another live process holds the lease: acquisition refused.
    Busy {
        /// The holder's process generation.
        generation: String,
        /// Its wall-clock expiry as written.
        expires_ms: u64,
    },
    /// The store failed and nothing of ours is held: acquisition gave up.
    Unavailable,
    /// Authority lost: stop writing.
    Fenced {
        /// Why.
        reason: FenceReason,
    },
    /// Given up on purpose.
    Released,
}

impl fmt::Display for LeaseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseStatus::Acquiring => f.write_str("acquiring"),
            LeaseStatus::Held => f.write_str("held"),
            LeaseStatus::Busy { generation, .. } => {
                write!(f, "held by another process (generation {generation})")
            }
            LeaseStatus::Unavailable => f.write_str("not acquired: the store failed"),
            LeaseStatus::Fenced { reason } => write!(f, "lost: {reason}"),
            LeaseStatus::Released => f.write_str("released"),
        }
    }
}

/// Why a lease was fenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FenceReason {
    /// The store rejected our write: someone else wrote the lease.
    Rejected,
    /// The renewal's answer came after our authority had ended.
    LandedAfterExpiry,
    /// Authority ran out before a renewal got a verdict.
    Expired,
    /// A read-back found a record that is neither ours nor the prior one.
    Superseded,
    /// Renewal attempts were exhausted.
    AttemptsExhausted,
}

impl fmt::Display for FenceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FenceReason::Rejected => "another process wrote the lease",
            FenceReason::LandedAfterExpiry => "a renewal was answered after the lease had expired",
            FenceReason::Expired => "the lease expired before a renewal was answered",
            FenceReason::Superseded => "another process holds the lease now",
            FenceReason::AttemptsExhausted => "every renewal attempt failed",
        })
    }
}

/// An output of the lease core, for the shell to perform.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LeaseEffect {
    /// Write `record` (with `nonce`) to our lease key under `guard`, giving up after
    /// `timeout_ms` (a timeout after sending is [`WriteResult::Ambiguous`]).
    Write {
        /// The condition.
        guard: CasGuard,
        /// The record.
        record: NodeLeaseRecord,
        /// The write's identity.
        nonce: String,
        /// The attempt's bound.
        timeout_ms: u64,
    },
    /// Read our lease key, giving up after `timeout_ms`.
    Read {
        /// The attempt's bound.
        timeout_ms: u64,
    },
    /// Call [`LeaseEvent::Tick`] at this monotonic time (replaces any earlier wake-up).
    WakeAt(u64),
    /// The status changed.
    Status(LeaseStatus),
}

/// The identity of the process and what it advertises.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    /// Node id.
    pub node: String,
    /// Advertised address.
    pub addr: String,
    /// Peer protocol version.
    pub peer_protocol: u32,
    /// This process's generation (unique per process start; nonces derive from it).
    pub generation: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Held {
    version: Version,
    nonce: String,
    anchor: u64,
    anchor_wall: u64,
}

/// One write sent: its identity and the time it was issued.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Try {
    nonce: String,
    anchor: u64,
    anchor_wall: u64,
}

/// The writes of one acquisition or one renewal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Attempts {
    guard: CasGuard,
    tries: Vec<Try>,
    /// Some try may have landed (an ambiguous answer).
    uncertain: bool,
    /// The next step after a wait is a read-back (a failed read), not a write.
    read_next: bool,
    /// Not-committed writes and failed reads so far.
    failures: u32,
    /// Acquisition only: wait for a live holder.
    wait: bool,
    /// Acquisition only: what we have seen of another process's record.
    seen: Option<Observation>,
    /// Acquisition only: when the read in flight was sent.
    read_sent: Option<u64>,
}

impl Attempts {
    fn new(guard: CasGuard, wait: bool) -> Self {
        Attempts {
            guard,
            tries: Vec::new(),
            uncertain: false,
            read_next: false,
            failures: 0,
            wait,
            seen: None,
            read_sent: None,
        }
    }

    fn ours(&self, nonce: &str) -> Option<&Try> {
        self.tries.iter().find(|t| t.nonce == nonce)
    }

    fn last(&self) -> Option<&Try> {
        self.tries.last()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    /// Acquiring: a write (create or takeover) in flight.
    Acquiring(Attempts),
    /// Acquiring: a read in flight.
    Looking(Attempts),
    /// Acquiring: waiting for the next look (a live holder, or a store failure).
    Waiting(Attempts),
    Held,
    /// A renewal write is in flight.
    Renewing(Attempts),
    /// A renewal needs a read-back; it is in flight.
    Resolving(Attempts),
    /// Between renewal attempts.
    Backoff(Attempts),
    Releasing,
    Done(LeaseStatus),
}

/// The lease state machine of one holder.
///
/// ```
/// use fence_core::decide::*;
/// use fence_core::{CasGuard, Version};
/// let holder = Holder { node: "n1".into(), addr: "a".into(), peer_protocol: 1,
///                       generation: "g1".into() };
/// let mut core = LeaseCore::new(holder, LeaseConfig::with_ttl_ms(3_000));
/// let t0 = Now { mono_ms: 0, wall_ms: 1_000_000 };
/// let effects = core.step(t0, LeaseEvent::Acquire { wait: false });
/// assert!(matches!(&effects[0], LeaseEffect::Write { guard: CasGuard::Absent, .. }));
/// let v1 = Version::new("v1").unwrap();
/// core.step(Now { mono_ms: 5, ..t0 }, LeaseEvent::Written(WriteResult::Applied(v1)));
/// assert!(core.is_held(Now { mono_ms: 2_999, ..t0 }));
/// assert!(!core.is_held(Now { mono_ms: 3_000, ..t0 })); // anchored at 0, before it was sent
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseCore {
    holder: Holder,
    cfg: LeaseConfig,
    phase: Phase,
    held: Option<Held>,
    writes_issued: u64,
    flaws: Flaws,
    /// The generation of a predecessor process the caller knows is gone.
    predecessor: Option<String>,
    /// What an earlier acquisition saw of another process's record under our key (it keeps
    /// its observation clock running across calls), and what this one saw last.
    seen: Option<Observation>,
}

impl LeaseCore {
    /// A core that holds nothing yet.
    pub fn new(holder: Holder, cfg: LeaseConfig) -> Self {
        LeaseCore {
            holder,
            cfg,
            phase: Phase::Idle,
            held: None,
            writes_issued: 0,
            flaws: Flaws::default(),
            predecessor: None,
            seen: None,
        }
    }

    /// Starts from what an earlier acquisition saw of the record under our key, so that
    /// retried acquisitions keep counting one observation instead of starting over.
    #[must_use]
    pub fn seeing(mut self, seen: Option<Observation>) -> Self {
        self.seen = seen;
        self
    }

    /// What the acquisition last saw of another process's record under our key.
    pub fn last_seen(&self) -> Option<&Observation> {
        self.seen.as_ref()
    }

    /// Acquires as the successor of the process with lease generation `generation`, which
    /// the caller knows is no longer running (this host's previous process, say): a record
    /// of that generation is taken over at once, without a TTL of observation. This trusts
    /// the caller; a record of any other generation is judged as usual.
    #[must_use]
    pub fn succeeding(mut self, generation: impl Into<String>) -> Self {
        self.predecessor = Some(generation.into());
        self
    }

    /// The same core with sabotage `flaws` (only ever set with the `sabotage` feature).
    #[must_use]
    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// The holder identity.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// Whether we may act as the holder at `now`: a lease is held, not released or fenced,
    /// and neither clock says a TTL has passed since its anchor.
    pub fn is_held(&self, now: Now) -> bool {
        self.remaining_ms(now) > 0
    }

    /// Authority left at `now` in ms: 0 when not held.
    pub fn remaining_ms(&self, now: Now) -> u64 {
        if !self.is_live_phase() {
            return 0;
        }
        self.held
            .as_ref()
            .map_or(0, |h| self.left(h.anchor, h.anchor_wall, now))
    }

    fn left(&self, anchor: u64, anchor_wall: u64, now: Now) -> u64 {
        let ttl = self.own_ttl();
        let mono = anchor.saturating_add(ttl).saturating_sub(now.mono_ms);
        let wall = anchor_wall.saturating_add(ttl).saturating_sub(now.wall_ms);
        mono.min(wall)
    }

    /// The TTL this holder counts its own authority by (a sabotaged one overstays).
    fn own_ttl(&self) -> u64 {
        let ttl = self.cfg.ttl_ms;
        if sabotaged!(self.flaws, HolderOverstays) {
            return ttl + ttl / 5;
        }
        ttl
    }

    /// Whether the core holds a lease now (renewing, resolving, backing off included),
    /// whatever the clock says.
    pub fn is_live(&self) -> bool {
        self.is_live_phase()
    }

    fn is_live_phase(&self) -> bool {
        matches!(
            self.phase,
            Phase::Held | Phase::Renewing(_) | Phase::Resolving(_) | Phase::Backoff(_)
        )
    }

    /// The version of the held lease record, if any.
    pub fn held_version(&self) -> Option<&Version> {
        self.held.as_ref().map(|h| &h.version)
    }

    /// Monotonic time at which the current authority ends, if held.
    pub fn authority_until(&self) -> Option<u64> {
        self.held
            .as_ref()
            .map(|h| h.anchor.saturating_add(self.own_ttl()))
    }

    /// The current status, judged at `now`: a lease whose authority ran out reads as
    /// fenced (expired) at once, before the next tick says so.
    pub fn status_at(&self, now: Now) -> LeaseStatus {
        match self.status() {
            LeaseStatus::Held if !self.is_held(now) => LeaseStatus::Fenced {
                reason: FenceReason::Expired,
            },
            s => s,
        }
    }

    /// The current status as of the last event.
    pub fn status(&self) -> LeaseStatus {
        match &self.phase {
            Phase::Idle | Phase::Acquiring(_) | Phase::Looking(_) | Phase::Waiting(_) => {
                LeaseStatus::Acquiring
            }
            Phase::Held | Phase::Renewing(_) | Phase::Resolving(_) | Phase::Backoff(_) => {
                LeaseStatus::Held
            }
            Phase::Releasing => LeaseStatus::Released,
            Phase::Done(s) => s.clone(),
        }
    }

    /// What the last read showed of another process's record while acquiring.
    pub fn observed(&self) -> Option<&Observation> {
        match &self.phase {
            Phase::Acquiring(a) | Phase::Looking(a) | Phase::Waiting(a) => a.seen.as_ref(),
            _ => None,
        }
    }

    /// Whether the core has reached a final state (fenced, released, busy or unavailable).
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Done(_))
    }

    /// Feeds one event at time `now`; returns what to do.
    pub fn step(&mut self, now: Now, event: LeaseEvent) -> Vec<LeaseEffect> {
        let mut out = Vec::new();
        match event {
            LeaseEvent::Acquire { wait } => self.on_acquire(now, wait, &mut out),
            LeaseEvent::Tick => self.on_tick(now, &mut out),
            LeaseEvent::Release => self.on_release(now, &mut out),
            LeaseEvent::Written(r) => self.on_written(now, r, &mut out),
            LeaseEvent::Read(r) => self.on_read(now, r, &mut out),
        }
        out
    }

    fn next_nonce(&mut self) -> String {
        self.writes_issued += 1;
        format!("{}-{}", self.holder.generation, self.writes_issued)
    }

    fn record(&self, expires_ms: u64) -> NodeLeaseRecord {
        NodeLeaseRecord {
            node: self.holder.node.clone(),
            expires_ms,
            addr: self.holder.addr.clone(),
            peer_protocol: self.holder.peer_protocol,
            generation: self.holder.generation.clone(),
        }
    }

    /// Issues one more write of `a`, anchored at `now` (before it is sent).
    fn send(&mut self, now: Now, a: &mut Attempts, timeout_ms: u64) -> LeaseEffect {
        let nonce = self.next_nonce();
        a.tries.push(Try {
            nonce: nonce.clone(),
            anchor: now.mono_ms,
            anchor_wall: now.wall_ms,
        });
        LeaseEffect::Write {
            guard: a.guard.clone(),
            record: self.record(now.wall_ms.saturating_add(self.cfg.ttl_ms)),
            nonce,
            timeout_ms,
        }
    }

    fn finish(&mut self, status: LeaseStatus, out: &mut Vec<LeaseEffect>) {
        self.phase = Phase::Done(status.clone());
        out.push(LeaseEffect::Status(status));
    }

    fn fence(&mut self, reason: FenceReason, out: &mut Vec<LeaseEffect>) {
        self.finish(LeaseStatus::Fenced { reason }, out);
    }

    // ----- acquisition ---------------------------------------------------------------------

    fn acquire_timeout(&self) -> u64 {
        self.cfg.attempt_timeout(self.cfg.ttl_ms)
    }

    fn on_acquire(&mut self, now: Now, wait: bool, out: &mut Vec<LeaseEffect>) {
        if !matches!(self.phase, Phase::Idle) {
            return;
        }
        let mut a = Attempts::new(CasGuard::Absent, wait);
        a.seen = self.seen.clone();
        self.acquire_write(now, a, out);
    }

    fn acquire_write(&mut self, now: Now, mut a: Attempts, out: &mut Vec<LeaseEffect>) {
        let effect = self.send(now, &mut a, self.acquire_timeout());
        self.phase = Phase::Acquiring(a);
        out.push(effect);
    }

    fn look(&mut self, now: Now, mut a: Attempts, out: &mut Vec<LeaseEffect>) {
        a.read_sent = Some(now.mono_ms);
        self.phase = Phase::Looking(a);
        out.push(LeaseEffect::Read {
            timeout_ms: self.acquire_timeout(),
        });
    }

    /// A store failure while acquiring: wait and look again, or give up.
    fn acquire_failed(&mut self, now: Now, mut a: Attempts, out: &mut Vec<LeaseEffect>) {
        a.failures += 1;
        let bounded_out = a.failures >= self.cfg.max_attempts;
        if !a.wait && (bounded_out || !a.uncertain) {
            return self.finish(LeaseStatus::Unavailable, out);
        }
        // Exponential backoff, capped at the poll interval's 4×, never below 10 ms.
        let shift = a.failures.min(6);
        let delay = (10u64 << shift).min(self.cfg.poll_ms() * 4);
        self.phase = Phase::Waiting(a);
        out.push(LeaseEffect::WakeAt(now.mono_ms.saturating_add(delay)));
    }

    fn on_acquire_written(
        &mut self,
        now: Now,
        mut a: Attempts,
        r: WriteResult,
        out: &mut Vec<LeaseEffect>,
    ) {
        match r {
            WriteResult::Applied(version) => {
                let t = a.last().cloned();
                if let Some(t) = t {
                    self.install(now, t, version, None, out)
                }
            }
            WriteResult::Rejected => self.look(now, a, out),
            WriteResult::NotCommitted => self.acquire_failed(now, a, out),
            WriteResult::Ambiguous => {
                a.uncertain = true;
                self.look(now, a, out)
            }
        }
    }

    fn on_acquire_read(
        &mut self,
        now: Now,
        mut a: Attempts,
        r: ReadResult,
        out: &mut Vec<LeaseEffect>,
    ) {
        match r {
            ReadResult::Found(o) => {
                if let Some(t) = a.ours(&o.nonce).cloned() {
                    return self.install(now, t, o.version, None, out);
                }
                let sent = a.read_sent.unwrap_or(now.mono_ms);
                let prior = a.seen.as_ref();
                let seen =
                    Observation::update_with(prior, Some(o.clone()), sent, now.mono_ms, self.flaws);
                let succeeded = self.predecessor.as_deref() == Some(o.record.generation.as_str());
                let verdict = if succeeded {
                    Liveness::Dead
                } else {
                    seen.judge(now, &self.cfg)
                };
                self.seen = Some(seen.clone());
                a.seen = Some(seen);
                match verdict {
                    Liveness::Dead => {
                        a.guard = CasGuard::Match(o.version);
                        self.acquire_write(now, a, out)
                    }
                    Liveness::Live { until_mono } if a.wait => {
                        self.phase = Phase::Waiting(a);
                        let next = now.mono_ms.saturating_add(self.cfg.poll_ms());
                        out.push(LeaseEffect::WakeAt(next.min(until_mono.max(now.mono_ms))));
                    }
                    Liveness::Live { .. } => self.finish(
                        LeaseStatus::Busy {
                            generation: o.record.generation,
                            expires_ms: o.record.expires_ms,
                        },
                        out,
                    ),
                }
            }
            // Nobody's record (or ours has not landed yet, and may still): create, keeping
            // every earlier try as ours.
            ReadResult::Absent => {
                a.guard = CasGuard::Absent;
                a.seen = None;
                self.seen = None;
                if a.tries.len() as u32 >= self.cfg.max_attempts.saturating_mul(2) && !a.wait {
                    return self.finish(LeaseStatus::Unavailable, out);
                }
                self.acquire_write(now, a, out)
            }
            ReadResult::Failed => self.acquire_failed(now, a, out),
        }
    }

    // ----- holding and renewing ------------------------------------------------------------

    fn on_tick(&mut self, now: Now, out: &mut Vec<LeaseEffect>) {
        if let Phase::Waiting(a) = self.phase.clone() {
            return self.look(now, a, out);
        }
        let (Some(until), Some(held)) = (self.authority_until(), self.held.clone()) else {
            return;
        };
        match self.phase.clone() {
            _ if self.is_live_phase() && (now.mono_ms >= until || !self.is_held(now)) => {
                self.fence(FenceReason::Expired, out)
            }
            Phase::Held if now.mono_ms >= self.cfg.renew_at(held.anchor) => {
                let a = Attempts::new(CasGuard::Match(held.version), false);
                self.renew(now, a, out)
            }
            Phase::Held => out.push(LeaseEffect::WakeAt(self.cfg.renew_at(held.anchor))),
            Phase::Backoff(a) if a.read_next => self.resolve(now, a, out),
            Phase::Backoff(a) => self.renew(now, a, out),
            _ => {}
        }
    }

    fn renew(&mut self, now: Now, mut a: Attempts, out: &mut Vec<LeaseEffect>) {
        let until = self.authority_until().unwrap_or(0);
        // Only attempts that may have reached the store count: provably unsent ones are
        // dropped from `tries`, so a store that refuses connections is retried until the
        // authority runs out, never fenced early by a count.
        if a.tries.len() as u32 >= self.cfg.max_attempts {
            return self.fence(FenceReason::AttemptsExhausted, out);
        }
        let remaining = self.remaining_ms(now);
        if remaining == 0 {
            return self.fence(FenceReason::Expired, out);
        }
        let effect = self.send(now, &mut a, self.cfg.attempt_timeout(remaining));
        self.phase = Phase::Renewing(a);
        out.push(effect);
        // Wake at expiry too, so a hung attempt still fences on time.
        out.push(LeaseEffect::WakeAt(until));
    }

    /// Takes the try `t` as the held lease, unless the prior authority had already ended when
    /// the answer arrived.
    fn install(
        &mut self,
        now: Now,
        t: Try,
        version: Version,
        prior: Option<&Held>,
        out: &mut Vec<LeaseEffect>,
    ) {
        let late = prior.is_some_and(|p| self.left(p.anchor, p.anchor_wall, now) == 0);
        if late && !sabotaged!(self.flaws, NoLandedAfterExpiry) {
            return self.fence(FenceReason::LandedAfterExpiry, out);
        }
        let was_held = self.held.is_some();
        // Anchored when the write was sent (a sabotaged core counts from the answer).
        let (anchor, anchor_wall) = if sabotaged!(self.flaws, AuthorityFromAnswer) {
            (now.mono_ms, now.wall_ms)
        } else {
            (t.anchor, t.anchor_wall)
        };
        self.held = Some(Held {
            version,
            nonce: t.nonce,
            anchor,
            anchor_wall,
        });
        self.phase = Phase::Held;
        if !was_held {
            out.push(LeaseEffect::Status(LeaseStatus::Held));
        }
        out.push(LeaseEffect::WakeAt(self.cfg.renew_at(anchor)));
    }

    fn resolve(&mut self, now: Now, mut a: Attempts, out: &mut Vec<LeaseEffect>) {
        let remaining = self.remaining_ms(now);
        if remaining == 0 {
            return self.fence(FenceReason::Expired, out);
        }
        a.read_next = false;
        self.phase = Phase::Resolving(a);
        out.push(LeaseEffect::Read {
            timeout_ms: self.cfg.attempt_timeout(remaining),
        });
    }

    fn on_renew_written(
        &mut self,
        now: Now,
        mut a: Attempts,
        r: WriteResult,
        out: &mut Vec<LeaseEffect>,
    ) {
        let prior = self.held.clone();
        match r {
            WriteResult::Applied(version) => {
                if let Some(t) = a.last().cloned() {
                    self.install(now, t, version, prior.as_ref(), out)
                }
            }
            // Proof that someone else wrote — unless an earlier attempt of ours may be what
            // moved the record.
            WriteResult::Rejected if a.tries.len() == 1 && !a.uncertain => {
                self.fence(FenceReason::Rejected, out)
            }
            WriteResult::Rejected => self.resolve(now, a, out),
            WriteResult::NotCommitted => {
                // Provably never sent: it can never land, so it is no longer one of ours.
                a.tries.pop();
                self.backoff(now, a, false, out)
            }
            WriteResult::Ambiguous => {
                a.uncertain = true;
                self.resolve(now, a, out)
            }
        }
    }

    /// Waits before the next attempt (a write, or with `read` a read-back), at most until the
    /// authority ends.
    fn backoff(&mut self, now: Now, mut a: Attempts, read: bool, out: &mut Vec<LeaseEffect>) {
        a.failures += 1;
        a.read_next = read;
        if !read && a.tries.len() as u32 >= self.cfg.max_attempts {
            return self.fence(FenceReason::AttemptsExhausted, out);
        }
        let remaining = self.remaining_ms(now);
        if remaining == 0 {
            return self.fence(FenceReason::Expired, out);
        }
        let delay = (remaining / 8).clamp(10, 500).min(remaining);
        self.phase = Phase::Backoff(a);
        out.push(LeaseEffect::WakeAt(now.mono_ms.saturating_add(delay)));
    }

    fn on_resolve_read(
        &mut self,
        now: Now,
        a: Attempts,
        r: ReadResult,
        out: &mut Vec<LeaseEffect>,
    ) {
        let prior = self.held.clone();
        match r {
            ReadResult::Found(o) => {
                if let Some(t) = a.ours(&o.nonce).cloned() {
                    return self.install(now, t, o.version, prior.as_ref(), out);
                }
                let unchanged = prior.is_some_and(|p| p.version == o.version && p.nonce == o.nonce);
                if unchanged {
                    // Nothing of ours landed (yet): the same guard, a new attempt.
                    self.backoff(now, a, false, out)
                } else {
                    self.fence(FenceReason::Superseded, out)
                }
            }
            ReadResult::Absent => self.fence(FenceReason::Superseded, out),
            // Read again after a pause, never in a tight loop.
            ReadResult::Failed => self.backoff(now, a, true, out),
        }
    }

    // ----- release and dispatch ------------------------------------------------------------

    fn on_release(&mut self, now: Now, out: &mut Vec<LeaseEffect>) {
        match (&self.phase, self.held.clone()) {
            (Phase::Done(_), _) | (Phase::Releasing, _) => {}
            (Phase::Held | Phase::Backoff(_), Some(held)) if self.is_held(now) => {
                let nonce = self.next_nonce();
                // expires_ms 0: peers see the lease as released and may take over at once.
                let record = self.record(0);
                let remaining = self.remaining_ms(now);
                out.push(LeaseEffect::Write {
                    guard: CasGuard::Match(held.version),
                    record,
                    nonce,
                    timeout_ms: self.cfg.attempt_timeout(remaining),
                });
                self.phase = Phase::Releasing;
                out.push(LeaseEffect::Status(LeaseStatus::Released));
            }
            // Acquiring, mid-renewal or not held: stop acting as holder; the record expires
            // by itself.
            _ => self.finish(LeaseStatus::Released, out),
        }
    }

    fn on_written(&mut self, now: Now, result: WriteResult, out: &mut Vec<LeaseEffect>) {
        match self.phase.clone() {
            Phase::Acquiring(a) => self.on_acquire_written(now, a, result, out),
            Phase::Renewing(a) => self.on_renew_written(now, a, result, out),
            Phase::Releasing => {
                self.held = None;
                self.phase = Phase::Done(LeaseStatus::Released);
            }
            _ => {}
        }
    }

    fn on_read(&mut self, now: Now, r: ReadResult, out: &mut Vec<LeaseEffect>) {
        match self.phase.clone() {
            Phase::Looking(a) => self.on_acquire_read(now, a, r, out),
            Phase::Resolving(a) => self.on_resolve_read(now, a, r, out),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: u64 = 3_000;

    fn core() -> LeaseCore {
        let holder = Holder {
            node: "n".into(),
            addr: String::new(),
            peer_protocol: 1,
            generation: "g".into(),
        };
        LeaseCore::new(holder, LeaseConfig::with_ttl_ms(TTL))
    }

    fn at(mono_ms: u64) -> Now {
        Now {
            mono_ms,
            wall_ms: 1_000_000 + mono_ms,
        }
    }

    fn v(s: &str) -> Version {
        Version::new(s).unwrap()
    }

    fn held_core() -> LeaseCore {
        let mut c = core();
        c.step(at(0), LeaseEvent::Acquire { wait: false });
        c.step(at(10), LeaseEvent::Written(WriteResult::Applied(v("v1"))));
        c
    }

    fn write_of(effects: &[LeaseEffect]) -> (CasGuard, String, u64) {
        effects
            .iter()
            .find_map(|e| match e {
                LeaseEffect::Write {
                    guard,
                    nonce,
                    timeout_ms,
                    ..
                } => Some((guard.clone(), nonce.clone(), *timeout_ms)),
                _ => None,
            })
            .expect("a write")
    }

    fn found(nonce: &str, version: &str, generation: &str, expires_ms: u64) -> ReadResult {
        ReadResult::Found(ObservedLease {
            record: NodeLeaseRecord {
                node: "n".into(),
                expires_ms,
                addr: String::new(),
                peer_protocol: 1,
                generation: generation.into(),
            },
            version: v(version),
            nonce: nonce.into(),
            ttl_ms: Some(TTL),
        })
    }

    #[test]
    fn a_fresh_acquire_is_one_create() {
        let mut c = core();
        let out = c.step(at(0), LeaseEvent::Acquire { wait: false });
        assert_eq!(out.len(), 1);
        assert_eq!(write_of(&out).0, CasGuard::Absent);
        c.step(at(5), LeaseEvent::Written(WriteResult::Applied(v("v1"))));
        assert_eq!(c.status(), LeaseStatus::Held);
    }

    #[test]
    fn renews_at_a_third_with_the_held_version() {
        let mut c = held_core();
        assert!(c
            .step(at(500), LeaseEvent::Tick)
            .iter()
            .all(|e| !matches!(e, LeaseEffect::Write { .. })));
        let (guard, _, timeout) = write_of(&c.step(at(1_000), LeaseEvent::Tick));
        assert_eq!(guard, CasGuard::Match(v("v1")));
        assert!(
            timeout <= 2_000,
            "an attempt never outlives the remaining authority"
        );
        c.step(
            at(1_050),
            LeaseEvent::Written(WriteResult::Applied(v("v2"))),
        );
        assert!(c.is_held(at(3_999)));
        assert!(
            !c.is_held(at(4_000)),
            "re-anchored at the renewal's send time (1000)"
        );
    }

    #[test]
    fn renewal_answered_after_expiry_fences() {
        let mut c = held_core();
        c.step(at(1_000), LeaseEvent::Tick);
        let out = c.step(
            at(3_000),
            LeaseEvent::Written(WriteResult::Applied(v("v2"))),
        );
        assert!(out.contains(&LeaseEffect::Status(LeaseStatus::Fenced {
            reason: FenceReason::LandedAfterExpiry
        })));
        assert!(!c.is_held(at(3_000)));
    }

    #[test]
    fn a_rejected_first_attempt_fences_at_once() {
        let mut c = held_core();
        c.step(at(1_000), LeaseEvent::Tick);
        c.step(at(1_010), LeaseEvent::Written(WriteResult::Rejected));
        assert!(!c.is_held(at(1_010)));
        assert_eq!(
            c.status(),
            LeaseStatus::Fenced {
                reason: FenceReason::Rejected
            }
        );
    }

    /// Issue 11, edge 4: the first attempt's answer is late (it timed out: ambiguous), the
    /// read-back still shows the prior record, then the first attempt lands before the retry,
    /// which is rejected. The read-back finds the first attempt's nonce: still held, anchored
    /// at the first attempt.
    #[test]
    fn a_retry_rejected_because_an_earlier_attempt_landed_is_not_a_fence() {
        let mut c = held_core();
        let (_, first, _) = write_of(&c.step(at(1_000), LeaseEvent::Tick));
        c.step(at(1_900), LeaseEvent::Written(WriteResult::Ambiguous));
        c.step(at(1_910), LeaseEvent::Read(found("g-1", "v1", "g", 0)));
        let (_, second, _) = write_of(&c.step(at(2_100), LeaseEvent::Tick));
        assert_ne!(first, second, "every attempt has its own identity");
        let out = c.step(at(2_120), LeaseEvent::Written(WriteResult::Rejected));
        assert!(out.iter().any(|e| matches!(e, LeaseEffect::Read { .. })));
        c.step(at(2_140), LeaseEvent::Read(found(&first, "v2", "g", 0)));
        assert_eq!(c.status(), LeaseStatus::Held);
        assert_eq!(c.held_version(), Some(&v("v2")));
        assert!(
            c.is_held(at(3_999)) && !c.is_held(at(4_000)),
            "anchored at the first attempt"
        );
    }

    #[test]
    fn ambiguous_renewal_read_back_three_ways() {
        // Ours landed.
        let mut c = held_core();
        let (_, nonce, _) = write_of(&c.step(at(1_000), LeaseEvent::Tick));
        let out = c.step(at(1_100), LeaseEvent::Written(WriteResult::Ambiguous));
        assert!(out
            .iter()
            .any(|e| matches!(e, LeaseEffect::Read { timeout_ms } if *timeout_ms <= 1_900)));
        c.step(at(1_200), LeaseEvent::Read(found(&nonce, "v2", "g", 0)));
        assert_eq!(c.held_version(), Some(&v("v2")));
        assert!(c.is_held(at(3_999)));

        // The prior record is still there: retry, same guard.
        let mut c = held_core();
        c.step(at(1_000), LeaseEvent::Tick);
        c.step(at(1_100), LeaseEvent::Written(WriteResult::Ambiguous));
        c.step(at(1_200), LeaseEvent::Read(found("g-1", "v1", "g", 0)));
        assert_eq!(c.status(), LeaseStatus::Held);
        let (guard, _, _) = write_of(&c.step(at(1_300), LeaseEvent::Tick));
        assert_eq!(guard, CasGuard::Match(v("v1")));

        // Someone else's record: fenced.
        let mut c = held_core();
        c.step(at(1_000), LeaseEvent::Tick);
        c.step(at(1_100), LeaseEvent::Written(WriteResult::Ambiguous));
        c.step(at(1_200), LeaseEvent::Read(found("x", "v9", "other", 0)));
        assert_eq!(
            c.status(),
            LeaseStatus::Fenced {
                reason: FenceReason::Superseded
            }
        );
    }

    /// Attempts that may have reached the store are bounded by count; provably unsent ones
    /// (a store refusing connections) are retried until the authority runs out, never fenced
    /// early by a count.
    #[test]
    fn attempts_are_bounded() {
        let mut c = held_core();
        let mut t = 1_000;
        c.step(at(t), LeaseEvent::Tick);
        for _ in 0..10 {
            t += 20;
            c.step(at(t), LeaseEvent::Written(WriteResult::Ambiguous));
            c.step(at(t), LeaseEvent::Read(found("g-1", "v1", "g", 0)));
            if c.is_finished() {
                break;
            }
            t += 20;
            c.step(at(t), LeaseEvent::Tick);
        }
        assert_eq!(
            c.status(),
            LeaseStatus::Fenced {
                reason: FenceReason::AttemptsExhausted
            }
        );

        let mut c = held_core();
        let mut t = 1_000;
        let mut writes = 0;
        c.step(at(t), LeaseEvent::Tick);
        while !c.is_finished() && t < 10_000 {
            writes += 1;
            t += 20;
            c.step(at(t), LeaseEvent::Written(WriteResult::NotCommitted));
            t += 200;
            c.step(at(t), LeaseEvent::Tick);
        }
        assert!(
            writes > 4,
            "{writes} refused writes, not cut off by a count"
        );
        assert_eq!(
            c.status(),
            LeaseStatus::Fenced {
                reason: FenceReason::Expired
            }
        );
        assert!(t >= 3_000, "fenced only when the authority ran out ({t})");
    }

    #[test]
    fn a_live_record_is_busy_and_is_taken_over_only_after_a_full_ttl_unchanged() {
        // The holder's record says it expired long ago by its (slow) clock: no matter.
        let mut c = core();
        c.step(at(0), LeaseEvent::Acquire { wait: false });
        c.step(at(5), LeaseEvent::Written(WriteResult::Rejected));
        c.step(
            at(10),
            LeaseEvent::Read(found("x", "v0", "old", 1_000_000 - 60_000)),
        );
        assert!(matches!(c.status(), LeaseStatus::Busy { .. }));

        let mut c = core();
        c.step(at(0), LeaseEvent::Acquire { wait: true });
        c.step(at(5), LeaseEvent::Written(WriteResult::Rejected));
        let out = c.step(
            at(10),
            LeaseEvent::Read(found("x", "v0", "old", 9_999_999_999)),
        );
        assert!(out.contains(&LeaseEffect::WakeAt(10 + c.config().poll_ms())));
        let mut t = 10;
        let hold = TTL + TTL / 500;
        while t < 10 + hold {
            assert_eq!(c.status(), LeaseStatus::Acquiring);
            t = (t + c.config().poll_ms()).min(10 + hold);
            c.step(at(t), LeaseEvent::Tick);
            let out = c.step(
                at(t),
                LeaseEvent::Read(found("x", "v0", "old", 9_999_999_999)),
            );
            if t >= 10 + hold {
                assert_eq!(
                    write_of(&out).0,
                    CasGuard::Match(v("v0")),
                    "taken over at {t}"
                );
            } else {
                assert!(
                    out.iter().all(|e| !matches!(e, LeaseEffect::Write { .. })),
                    "{t}"
                );
            }
        }
    }

    #[test]
    fn a_released_record_is_taken_over_at_once_and_store_failures_are_unavailable() {
        let mut c = core();
        c.step(at(0), LeaseEvent::Acquire { wait: false });
        c.step(at(5), LeaseEvent::Written(WriteResult::Rejected));
        let out = c.step(at(10), LeaseEvent::Read(found("x", "v0", "old", 0)));
        assert_eq!(write_of(&out).0, CasGuard::Match(v("v0")));

        let mut c = core();
        c.step(at(0), LeaseEvent::Acquire { wait: false });
        c.step(at(5), LeaseEvent::Written(WriteResult::NotCommitted));
        assert_eq!(c.status(), LeaseStatus::Unavailable);
    }

    /// Issue 11, edge 3 for leases: an ambiguous create whose read-back still shows no
    /// record is still ambiguous — the same create is sent again, and a later read that
    /// finds the *first* attempt's nonce installs it.
    #[test]
    fn an_ambiguous_create_still_absent_is_sent_again_and_any_attempt_counts() {
        let mut c = core();
        let (_, first, _) = write_of(&c.step(at(0), LeaseEvent::Acquire { wait: false }));
        c.step(at(300), LeaseEvent::Written(WriteResult::Ambiguous));
        let out = c.step(at(310), LeaseEvent::Read(ReadResult::Absent));
        assert_eq!(write_of(&out).0, CasGuard::Absent);
        c.step(at(400), LeaseEvent::Written(WriteResult::Rejected));
        c.step(at(410), LeaseEvent::Read(found(&first, "v1", "g", 0)));
        assert_eq!(c.status(), LeaseStatus::Held);
        assert!(!c.is_held(at(TTL)), "anchored at the first attempt (0)");
    }
}
