//! The pure decision core: events in, effects out.
//!
//! No I/O, no clock reads, no randomness: time arrives as [`Now`] with every event, write
//! identities are derived from the process generation and a counter, and the shell
//! ([`crate::runtime`]) performs the effects and feeds their results back. The same core runs
//! under the tokio runtime, in unit tests and in the deterministic simulation.
//!
//! # The lease rules
//!
//! - Authority is anchored on the **monotonic** clock at the moment a write is *issued*
//!   (before it is sent): it lasts while `now.mono_ms < anchor + ttl`, judged when asked
//!   ([`LeaseCore::is_held`]), not by a timer alone.
//! - Renew at `anchor + ttl/3` with `Match(held version)`.
//! - Rejected renewal → fenced at once. Applied, but the answer came after the prior authority
//!   ended → fenced (a peer may already be taking over cells, guarded on their owner records,
//!   which the renewal does not touch).
//! - Ambiguous → read back: our nonce → held; the prior nonce and version → still the prior
//!   lease (retry); anything else → fenced.
//! - At most [`LeaseConfig::max_attempts`] writes per renewal, each bounded by the remaining
//!   authority ([`LeaseConfig::attempt_timeout`]); exhausting them fences.
//!
//! # The cell rules
//!
//! [`decide_claim`]: absent → epoch 1; ours or released → epoch + 1; a live foreign owner →
//! not ours; a foreign owner whose lease expired by our wall clock plus the skew margin →
//! takeover at epoch + 1, guarded on the owner record's version. Release keeps the epoch.

use crate::record::NodeLeaseRecord;
use crate::store::{CasGuard, Version};

/// The time of an event: the process's monotonic clock and its wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Monotonic milliseconds (arbitrary origin); judges our own authority.
    pub mono_ms: u64,
    /// Wall-clock milliseconds since the Unix epoch; written for peers, judges theirs.
    pub wall_ms: u64,
}

/// Lease timing. `Default` is the seed's production setting: TTL 10 s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Lease time to live.
    pub ttl_ms: u64,
    /// Extra wall-clock time a peer waits past a foreign lease's `expires_ms` before taking
    /// over, to absorb clock skew between machines.
    pub skew_margin_ms: u64,
    /// Writes per renewal before giving up (fencing).
    pub max_attempts: u32,
    /// Lower bound of one attempt's timeout.
    pub attempt_min_ms: u64,
    /// Upper bound of one attempt's timeout.
    pub attempt_max_ms: u64,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig::with_ttl_ms(10_000)
    }
}

impl LeaseConfig {
    /// Defaults scaled to `ttl_ms`: skew margin ttl/10 (at most 1 s), attempts bounded to
    /// 250 ms–2.5 s.
    pub fn with_ttl_ms(ttl_ms: u64) -> Self {
        LeaseConfig {
            ttl_ms,
            skew_margin_ms: (ttl_ms / 10).min(1_000),
            max_attempts: 4,
            attempt_min_ms: 250,
            attempt_max_ms: 2_500,
        }
    }

    /// When a lease anchored at `anchor` is renewed.
    pub fn renew_at(&self, anchor: u64) -> u64 {
        anchor + self.ttl_ms / 3
    }

    /// The timeout of one write or read attempt with `remaining_ms` of authority left: about
    /// half of it, clamped to `attempt_min_ms..=attempt_max_ms`, and never beyond the
    /// remaining authority itself. A transport timeout is a correctness setting: a renewal
    /// that outlives the lease can only fence.
    pub fn attempt_timeout(&self, remaining_ms: u64) -> u64 {
        (remaining_ms / 2)
            .clamp(self.attempt_min_ms, self.attempt_max_ms)
            .min(remaining_ms)
    }

    /// Whether a peer's lease expiring at `expires_ms` (its wall clock) is expired by our
    /// wall clock `now_wall_ms`, with the skew margin.
    pub fn foreign_expired(&self, expires_ms: u64, now_wall_ms: u64) -> bool {
        now_wall_ms > expires_ms.saturating_add(self.skew_margin_ms)
    }
}

/// The lease as another node sees it in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedLease {
    /// The record.
    pub record: NodeLeaseRecord,
    /// Its version.
    pub version: Version,
    /// Its write nonce.
    pub nonce: String,
}

/// The answer to a write effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteResult {
    /// Applied with this version.
    Applied(Version),
    /// The condition was false.
    Rejected,
    /// Provably not applied (includes a local timeout before anything was sent).
    NotCommitted,
    /// May have been applied (includes a timeout after sending).
    Ambiguous,
}

/// The answer to a read-back effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadResult {
    /// The lease record is there, written with `nonce`, at `version`.
    Found {
        /// The nonce of the stored record.
        nonce: String,
        /// The stored version.
        version: Version,
    },
    /// No lease record.
    Absent,
    /// The read failed or timed out.
    Failed,
}

/// An input to the lease core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseEvent {
    /// Start acquiring, given what a read of our lease key just showed.
    Acquire(Option<ObservedLease>),
    /// Time passed (a wake-up the core asked for, or any other reason to look).
    Tick,
    /// The application asks to give the lease up.
    Release,
    /// The last [`LeaseEffect::Write`] finished.
    Written(WriteResult),
    /// The last [`LeaseEffect::Read`] finished.
    Read(ReadResult),
}

/// The holder's externally visible state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Not held yet.
    Acquiring,
    /// Held (authority is still judged by [`LeaseCore::is_held`]).
    Held,
    /// Someone else holds a live lease under our key: acquisition refused.
    Busy {
        /// The holder's process generation.
        generation: String,
        /// Its wall-clock expiry.
        expires_ms: u64,
    },
    /// Authority lost: stop writing.
    Fenced {
        /// Why.
        reason: FenceReason,
    },
    /// Given up on purpose.
    Released,
}

/// Why a lease was fenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// An output of the lease core, for the shell to perform.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Read our lease key back, giving up after `timeout_ms`.
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
#[derive(Clone, Debug, PartialEq, Eq)]
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

#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    version: Version,
    nonce: String,
    anchor: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Attempt {
    nonce: String,
    anchor: u64,
    guard: CasGuard,
    /// Writes made in this renewal (or acquisition) so far.
    writes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Acquiring(Attempt),
    Held,
    /// A renewal write is in flight.
    Renewing(Attempt),
    /// A renewal answered ambiguously; a read-back is in flight.
    Resolving(Attempt),
    /// Between renewal attempts (a not-committed failure, or the prior record read back).
    Backoff(Attempt),
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
/// let effects = core.step(t0, LeaseEvent::Acquire(None));
/// assert!(matches!(&effects[0], LeaseEffect::Write { guard: CasGuard::Absent, .. }));
/// let v1 = Version::new("v1").unwrap();
/// core.step(Now { mono_ms: 5, ..t0 }, LeaseEvent::Written(WriteResult::Applied(v1)));
/// assert!(core.is_held(2_999));
/// assert!(!core.is_held(3_000)); // anchored at 0, before the write was sent
/// ```
#[derive(Clone, Debug)]
pub struct LeaseCore {
    holder: Holder,
    cfg: LeaseConfig,
    phase: Phase,
    held: Option<Held>,
    writes_issued: u64,
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
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// The holder identity.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// Whether we may act as the holder at monotonic time `mono_ms`: a lease is held, not
    /// released or fenced, and `mono_ms < anchor + ttl`.
    pub fn is_held(&self, mono_ms: u64) -> bool {
        let live_phase = matches!(
            self.phase,
            Phase::Held | Phase::Renewing(_) | Phase::Resolving(_) | Phase::Backoff(_)
        );
        live_phase
            && self
                .held
                .as_ref()
                .is_some_and(|h| mono_ms < h.anchor + self.cfg.ttl_ms)
    }

    /// The version of the held lease record, if any.
    pub fn held_version(&self) -> Option<&Version> {
        self.held.as_ref().map(|h| &h.version)
    }

    /// Monotonic time at which the current authority ends, if held.
    pub fn authority_until(&self) -> Option<u64> {
        self.held.as_ref().map(|h| h.anchor + self.cfg.ttl_ms)
    }

    /// The current status.
    pub fn status(&self) -> LeaseStatus {
        match &self.phase {
            Phase::Idle | Phase::Acquiring(_) => LeaseStatus::Acquiring,
            Phase::Held | Phase::Renewing(_) | Phase::Resolving(_) | Phase::Backoff(_) => {
                LeaseStatus::Held
            }
            Phase::Releasing => LeaseStatus::Released,
            Phase::Done(s) => s.clone(),
        }
    }

    /// Whether the core has reached a final state (fenced, released or busy).
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Done(_))
    }

    /// Feeds one event at time `now`; returns what to do.
    pub fn step(&mut self, now: Now, event: LeaseEvent) -> Vec<LeaseEffect> {
        let mut out = Vec::new();
        match event {
            LeaseEvent::Acquire(observed) => self.on_acquire(now, observed, &mut out),
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

    /// Issues a lease write anchored at `now` (before it is sent).
    fn issue_write(
        &mut self,
        now: Now,
        guard: CasGuard,
        writes: u32,
        timeout_ms: u64,
    ) -> (Attempt, LeaseEffect) {
        let nonce = self.next_nonce();
        let record = self.record(now.wall_ms + self.cfg.ttl_ms);
        let attempt = Attempt {
            nonce: nonce.clone(),
            anchor: now.mono_ms,
            guard: guard.clone(),
            writes: writes + 1,
        };
        let effect = LeaseEffect::Write {
            guard,
            record,
            nonce,
            timeout_ms,
        };
        (attempt, effect)
    }

    fn finish(&mut self, status: LeaseStatus, out: &mut Vec<LeaseEffect>) {
        self.phase = Phase::Done(status.clone());
        out.push(LeaseEffect::Status(status));
    }

    fn fence(&mut self, reason: FenceReason, out: &mut Vec<LeaseEffect>) {
        self.finish(LeaseStatus::Fenced { reason }, out);
    }

    fn on_acquire(
        &mut self,
        now: Now,
        observed: Option<ObservedLease>,
        out: &mut Vec<LeaseEffect>,
    ) {
        if !matches!(self.phase, Phase::Idle) {
            return;
        }
        let guard = match observed {
            None => CasGuard::Absent,
            Some(o) if self.cfg.foreign_expired(o.record.expires_ms, now.wall_ms) => {
                CasGuard::Match(o.version)
            }
            Some(o) => {
                let busy = LeaseStatus::Busy {
                    generation: o.record.generation,
                    expires_ms: o.record.expires_ms,
                };
                return self.finish(busy, out);
            }
        };
        let timeout = self.cfg.attempt_timeout(self.cfg.ttl_ms);
        let (attempt, effect) = self.issue_write(now, guard, 0, timeout);
        self.phase = Phase::Acquiring(attempt);
        out.push(effect);
    }

    fn on_tick(&mut self, now: Now, out: &mut Vec<LeaseEffect>) {
        let Some(held) = self.held.clone() else {
            return;
        };
        let until = held.anchor + self.cfg.ttl_ms;
        match self.phase.clone() {
            Phase::Held | Phase::Renewing(_) | Phase::Resolving(_) | Phase::Backoff(_)
                if now.mono_ms >= until =>
            {
                self.fence(FenceReason::Expired, out)
            }
            Phase::Held if now.mono_ms >= self.cfg.renew_at(held.anchor) => {
                self.renew(now, CasGuard::Match(held.version), 0, out)
            }
            Phase::Held => out.push(LeaseEffect::WakeAt(self.cfg.renew_at(held.anchor))),
            Phase::Backoff(a) => self.renew(now, a.guard, a.writes, out),
            _ => {}
        }
    }

    fn renew(&mut self, now: Now, guard: CasGuard, writes: u32, out: &mut Vec<LeaseEffect>) {
        let until = self.authority_until().unwrap_or(0);
        if writes >= self.cfg.max_attempts {
            return self.fence(FenceReason::AttemptsExhausted, out);
        }
        let remaining = until.saturating_sub(now.mono_ms);
        if remaining == 0 {
            return self.fence(FenceReason::Expired, out);
        }
        let timeout = self.cfg.attempt_timeout(remaining);
        let (attempt, effect) = self.issue_write(now, guard, writes, timeout);
        self.phase = Phase::Renewing(attempt);
        out.push(effect);
        // Wake at expiry too, so a hung attempt still fences on time.
        out.push(LeaseEffect::WakeAt(until));
    }

    fn on_release(&mut self, now: Now, out: &mut Vec<LeaseEffect>) {
        match (&self.phase, self.held.clone()) {
            (Phase::Done(_), _) | (Phase::Releasing, _) => {}
            (Phase::Held | Phase::Backoff(_), Some(held))
                if now.mono_ms < held.anchor + self.cfg.ttl_ms =>
            {
                let nonce = self.next_nonce();
                // expires_ms 0: peers see the lease as expired at once.
                let record = self.record(0);
                let remaining = held.anchor + self.cfg.ttl_ms - now.mono_ms;
                out.push(LeaseEffect::Write {
                    guard: CasGuard::Match(held.version),
                    record,
                    nonce,
                    timeout_ms: self.cfg.attempt_timeout(remaining),
                });
                self.phase = Phase::Releasing;
                out.push(LeaseEffect::Status(LeaseStatus::Released));
            }
            // Mid-renewal or not held: stop acting as holder; the record expires by itself.
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

    fn on_acquire_written(
        &mut self,
        now: Now,
        a: Attempt,
        r: WriteResult,
        out: &mut Vec<LeaseEffect>,
    ) {
        match r {
            WriteResult::Applied(version) => self.install(now, a, version, None, out),
            WriteResult::Rejected => self.fence(FenceReason::Rejected, out),
            // Provably nothing landed: the caller may simply acquire again.
            WriteResult::NotCommitted => self.fence(FenceReason::AttemptsExhausted, out),
            WriteResult::Ambiguous => {
                let timeout = self.cfg.attempt_timeout(self.cfg.ttl_ms);
                self.phase = Phase::Resolving(a);
                out.push(LeaseEffect::Read {
                    timeout_ms: timeout,
                });
            }
        }
    }

    /// Takes the applied attempt as the held lease, unless the prior authority had already
    /// ended when the answer arrived.
    fn install(
        &mut self,
        now: Now,
        a: Attempt,
        version: Version,
        prior_until: Option<u64>,
        out: &mut Vec<LeaseEffect>,
    ) {
        if prior_until.is_some_and(|until| now.mono_ms >= until) {
            return self.fence(FenceReason::LandedAfterExpiry, out);
        }
        let was_held = self.held.is_some();
        self.held = Some(Held {
            version,
            nonce: a.nonce,
            anchor: a.anchor,
        });
        self.phase = Phase::Held;
        if !was_held {
            out.push(LeaseEffect::Status(LeaseStatus::Held));
        }
        out.push(LeaseEffect::WakeAt(self.cfg.renew_at(a.anchor)));
    }

    fn on_renew_written(
        &mut self,
        now: Now,
        a: Attempt,
        r: WriteResult,
        out: &mut Vec<LeaseEffect>,
    ) {
        let until = self.authority_until().unwrap_or(0);
        match r {
            WriteResult::Applied(version) => self.install(now, a, version, Some(until), out),
            WriteResult::Rejected => self.fence(FenceReason::Rejected, out),
            WriteResult::NotCommitted => self.backoff(now, a, out),
            WriteResult::Ambiguous => {
                let remaining = until.saturating_sub(now.mono_ms);
                if remaining == 0 {
                    return self.fence(FenceReason::Expired, out);
                }
                self.phase = Phase::Resolving(a);
                out.push(LeaseEffect::Read {
                    timeout_ms: self.cfg.attempt_timeout(remaining),
                });
            }
        }
    }

    fn backoff(&mut self, now: Now, a: Attempt, out: &mut Vec<LeaseEffect>) {
        let until = self.authority_until().unwrap_or(0);
        let remaining = until.saturating_sub(now.mono_ms);
        let delay = (remaining / 8).clamp(10, 500);
        if a.writes >= self.cfg.max_attempts {
            return self.fence(FenceReason::AttemptsExhausted, out);
        }
        self.phase = Phase::Backoff(a);
        out.push(LeaseEffect::WakeAt((now.mono_ms + delay).min(until)));
    }

    fn on_read(&mut self, now: Now, r: ReadResult, out: &mut Vec<LeaseEffect>) {
        let Phase::Resolving(a) = self.phase.clone() else {
            return;
        };
        let prior = self.held.clone();
        let prior_until = self.authority_until();
        match r {
            ReadResult::Found { nonce, version } if nonce == a.nonce => {
                self.install(now, a, version, prior_until, out)
            }
            ReadResult::Found { nonce, version }
                if prior
                    .as_ref()
                    .is_some_and(|p| p.nonce == nonce && p.version == version) =>
            {
                self.backoff(now, a, out)
            }
            ReadResult::Failed => self.retry_read(now, a, prior_until, out),
            ReadResult::Found { .. } | ReadResult::Absent => {
                self.fence(FenceReason::Superseded, out)
            }
        }
    }

    fn retry_read(&mut self, now: Now, a: Attempt, until: Option<u64>, out: &mut Vec<LeaseEffect>) {
        // An acquisition has no prior authority: allow reads for one TTL from its anchor.
        let until = until.unwrap_or(a.anchor + self.cfg.ttl_ms);
        let remaining = until.saturating_sub(now.mono_ms);
        if remaining == 0 {
            return self.fence(FenceReason::Expired, out);
        }
        self.phase = Phase::Resolving(a);
        out.push(LeaseEffect::Read {
            timeout_ms: self.cfg.attempt_timeout(remaining),
        });
    }
}

// ----- cells -------------------------------------------------------------------------------

/// An owner record as the cell rules need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerView {
    /// The owner, `None` when released.
    pub node: Option<String>,
    /// The epoch.
    pub epoch: u64,
    /// The record's version: the guard of the next claim.
    pub version: Version,
}

/// What to do about a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Write an owner record naming us at `epoch`, under `guard`.
    Claim {
        /// The condition: `Absent` for a new cell, else the owner record's version.
        guard: CasGuard,
        /// The new epoch (always the old one + 1).
        epoch: u64,
        /// The live-looking owner we take over from, if it was someone else.
        takeover_from: Option<String>,
    },
    /// A live foreign owner has it.
    NotOurs {
        /// The owner.
        node: String,
        /// Its epoch.
        epoch: u64,
        /// Its lease's wall-clock expiry, if it has a lease.
        expires_ms: Option<u64>,
    },
}

/// The claim rule. `owner_lease_expires_ms` is the wall-clock expiry in the lease record of
/// the owner named by `owner` (`None` if it has no lease record).
///
/// ```
/// use fence_core::decide::*;
/// use fence_core::{CasGuard, Version};
/// let cfg = LeaseConfig::with_ttl_ms(2_000);
/// assert_eq!(decide_claim("me", None, None, 0, &cfg),
///            ClaimDecision::Claim { guard: CasGuard::Absent, epoch: 1, takeover_from: None });
/// let v = Version::new("v").unwrap();
/// let theirs = OwnerView { node: Some("peer".into()), epoch: 4, version: v.clone() };
/// assert!(matches!(decide_claim("me", Some(&theirs), Some(10_000), 9_000, &cfg),
///                  ClaimDecision::NotOurs { .. }));
/// assert_eq!(decide_claim("me", Some(&theirs), Some(10_000), 10_201, &cfg),
///            ClaimDecision::Claim { guard: CasGuard::Match(v), epoch: 5,
///                                   takeover_from: Some("peer".into()) });
/// ```
pub fn decide_claim(
    me: &str,
    owner: Option<&OwnerView>,
    owner_lease_expires_ms: Option<u64>,
    now_wall_ms: u64,
    cfg: &LeaseConfig,
) -> ClaimDecision {
    let Some(owner) = owner else {
        return ClaimDecision::Claim {
            guard: CasGuard::Absent,
            epoch: 1,
            takeover_from: None,
        };
    };
    let claim = |takeover_from| ClaimDecision::Claim {
        guard: CasGuard::Match(owner.version.clone()),
        epoch: owner.epoch + 1,
        takeover_from,
    };
    match owner.node.as_deref() {
        None => claim(None),
        Some(n) if n == me => claim(None),
        Some(n) => match owner_lease_expires_ms {
            Some(exp) if !cfg.foreign_expired(exp, now_wall_ms) => ClaimDecision::NotOurs {
                node: n.to_owned(),
                epoch: owner.epoch,
                expires_ms: Some(exp),
            },
            _ => claim(Some(n.to_owned())),
        },
    }
}

/// What a fenced data write should do, given the cell's data head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataDecision {
    /// Write under this guard.
    Write(CasGuard),
    /// The head carries a later epoch: we are fenced.
    Fenced {
        /// The epoch found.
        found: u64,
    },
}

/// The fenced-write rule: a writer at `epoch` may replace a head written at an epoch ≤ its
/// own, never one written at a later epoch.
pub fn decide_data_write(epoch: u64, head: Option<(u64, &Version)>) -> DataDecision {
    match head {
        None => DataDecision::Write(CasGuard::Absent),
        Some((found, _)) if found > epoch => DataDecision::Fenced { found },
        Some((_, v)) => DataDecision::Write(CasGuard::Match(v.clone())),
    }
}

/// The acknowledgement rule: a write is acknowledged only if the owner record still names
/// `(me, epoch)`.
pub fn may_acknowledge(me: &str, epoch: u64, owner: Option<&OwnerView>) -> bool {
    owner.is_some_and(|o| o.node.as_deref() == Some(me) && o.epoch == epoch)
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
        c.step(at(0), LeaseEvent::Acquire(None));
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
        assert!(c.is_held(3_999));
        assert!(
            !c.is_held(4_000),
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
        assert!(!c.is_held(3_000));
    }

    #[test]
    fn rejected_renewal_fences_at_once() {
        let mut c = held_core();
        c.step(at(1_000), LeaseEvent::Tick);
        c.step(at(1_010), LeaseEvent::Written(WriteResult::Rejected));
        assert!(!c.is_held(1_010));
        assert!(c.is_finished());
    }

    #[test]
    fn authority_is_judged_when_asked_without_any_tick() {
        let c = held_core();
        assert!(c.is_held(2_999));
        assert!(!c.is_held(3_000));
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
        c.step(
            at(1_200),
            LeaseEvent::Read(ReadResult::Found {
                nonce,
                version: v("v2"),
            }),
        );
        assert_eq!(c.held_version(), Some(&v("v2")));
        assert!(c.is_held(3_999));

        // The prior record is still there: retry, same guard.
        let mut c = held_core();
        c.step(at(1_000), LeaseEvent::Tick);
        c.step(at(1_100), LeaseEvent::Written(WriteResult::Ambiguous));
        c.step(
            at(1_200),
            LeaseEvent::Read(ReadResult::Found {
                nonce: "g-1".into(),
                version: v("v1"),
            }),
        );
        assert_eq!(c.status(), LeaseStatus::Held);
        let wake = c.step(at(1_200), LeaseEvent::Tick);
        let (guard, _, _) = write_of(&wake);
        assert_eq!(guard, CasGuard::Match(v("v1")));

        // Someone else's record: fenced.
        let mut c = held_core();
        c.step(at(1_000), LeaseEvent::Tick);
        c.step(at(1_100), LeaseEvent::Written(WriteResult::Ambiguous));
        c.step(
            at(1_200),
            LeaseEvent::Read(ReadResult::Found {
                nonce: "x".into(),
                version: v("v9"),
            }),
        );
        assert_eq!(
            c.status(),
            LeaseStatus::Fenced {
                reason: FenceReason::Superseded
            }
        );
    }

    #[test]
    fn attempts_are_bounded() {
        let mut c = held_core();
        let mut t = 1_000;
        c.step(at(t), LeaseEvent::Tick);
        for _ in 0..10 {
            t += 20;
            c.step(at(t), LeaseEvent::Written(WriteResult::NotCommitted));
            if c.is_finished() {
                break;
            }
            t += 200;
            c.step(at(t), LeaseEvent::Tick);
        }
        assert_eq!(
            c.status(),
            LeaseStatus::Fenced {
                reason: FenceReason::AttemptsExhausted
            }
        );
    }

    #[test]
    fn busy_when_a_live_lease_exists_and_takeover_when_expired() {
        let record = NodeLeaseRecord {
            node: "n".into(),
            expires_ms: 1_000_000 + 500,
            addr: String::new(),
            peer_protocol: 1,
            generation: "old".into(),
        };
        let observed = ObservedLease {
            record,
            version: v("v0"),
            nonce: "x".into(),
        };
        let mut c = core();
        c.step(at(0), LeaseEvent::Acquire(Some(observed.clone())));
        assert!(matches!(c.status(), LeaseStatus::Busy { .. }));
        let mut c = core();
        let skew = c.config().skew_margin_ms;
        let (guard, _, _) = write_of(&c.step(at(501 + skew), LeaseEvent::Acquire(Some(observed))));
        assert_eq!(guard, CasGuard::Match(v("v0")));
    }

    #[test]
    fn claim_and_data_rules() {
        let cfg = LeaseConfig::with_ttl_ms(TTL);
        let mine = OwnerView {
            node: Some("me".into()),
            epoch: 3,
            version: v("o"),
        };
        let released = OwnerView {
            node: None,
            ..mine.clone()
        };
        for o in [&mine, &released] {
            assert!(matches!(
                decide_claim("me", Some(o), None, 0, &cfg),
                ClaimDecision::Claim {
                    epoch: 4,
                    takeover_from: None,
                    ..
                }
            ));
        }
        assert!(may_acknowledge("me", 3, Some(&mine)));
        assert!(!may_acknowledge("me", 2, Some(&mine)));
        assert!(!may_acknowledge("me", 3, Some(&released)));
        assert_eq!(
            decide_data_write(3, Some((4, &v("h")))),
            DataDecision::Fenced { found: 4 }
        );
        assert_eq!(
            decide_data_write(3, Some((3, &v("h")))),
            DataDecision::Write(CasGuard::Match(v("h")))
        );
        assert_eq!(
            decide_data_write(3, None),
            DataDecision::Write(CasGuard::Absent)
        );
    }
}
