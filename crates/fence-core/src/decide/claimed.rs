//! The writes of a claimed cell — fenced data writes, release, hand-off — as a step machine:
//! build the new head on the one the claim knows (or reads), settle it
//! ([`HeadWrite`]), rebuild on a co-writer's head the store proved came first, end the claim
//! when the cell moved on. The tokio runtime's [`CellClaim`](crate::CellClaim) and the model
//! check run it alike.
//!
//! ```
//! use fence_core::decide::claimed::{Change, CellEnd, CellStep, CellWrite};
//! use fence_core::decide::write::{PutAnswer, WriteStep};
//! use fence_core::record::CellPayload;
//! use fence_core::Version;
//! let data = Change::Data { payload: CellPayload::Inline("v1".into()), exact: None };
//! let mut w = CellWrite::new("me", 1, "g", "nonce", data, None);
//! assert_eq!(w.start(), CellStep::ReadBase);
//! ```

pub use super::collect::{blob_epoch, collectable};
use super::write::{HeadWrite, Settled};
use crate::flaws::{sabotaged, Flaws};
use crate::record::{CellHead, CellPayload, Extra, HeadFormat};
use crate::store::{CasGuard, Version};

/// Head writes per change before it gives up on a head that keeps moving.
pub const MAX_REBUILDS: u8 = 4;

/// What a claim writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// New data at the claim's epoch; with `exact`, only over that head version (`None`:
    /// only while the cell holds no data).
    Data {
        /// The new payload.
        payload: CellPayload,
        /// The head the write must land on, if it must.
        exact: Option<Option<Version>>,
    },
    /// An unowned head at the same epoch, the data kept.
    Release,
    /// A head naming `to` at the next epoch, with `to`'s lease generation as its writer.
    HandOff {
        /// The receiver.
        to: String,
        /// The receiver's lease generation, if known.
        generation: Option<String>,
    },
}

/// The head a claim builds its next write on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Base {
    /// The head's version: the guard.
    pub version: Version,
    /// Its payload.
    pub payload: CellPayload,
    /// Its unknown fields, written back.
    pub extra: Extra,
}

/// Hashes all but the unknown fields (JSON values do not hash): equal bases hash equal.
impl std::hash::Hash for Base {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.version, &self.payload).hash(state);
    }
}

impl Base {
    /// The base a head `h` at `version` gives.
    pub fn of(h: CellHead, version: Version) -> Base {
        Base {
            version,
            payload: h.payload,
            extra: h.extra,
        }
    }

    /// Whether an exact write expecting `want` may build on this head.
    fn satisfies(&self, want: &Option<Version>) -> bool {
        match want {
            Some(v) => &self.version == v,
            None => self.payload == CellPayload::default(),
        }
    }
}

/// What the shell does next.
#[derive(Clone, Debug, PartialEq)]
pub enum CellStep {
    /// Read the head and call [`CellWrite::on_read`].
    ReadBase,
    /// Settle `write` of `body` and call [`CellWrite::on_settled`].
    Seal {
        /// The head to write.
        body: CellHead,
        /// Its settlement.
        write: HeadWrite,
    },
    /// Finished.
    Done(CellEnd),
}

/// How a change ended.
#[derive(Clone, Debug, PartialEq)]
pub enum CellEnd {
    /// Landed at `base.version`: acknowledged. `replaced` is the payload it replaced.
    Written {
        /// The head as written: the next write's base.
        base: Base,
        /// The payload the write replaced (its object, if any, is nobody's now).
        replaced: CellPayload,
    },
    /// An exact write found the head moved: not written; `base` is the head found.
    Conflict {
        /// The head found.
        base: Base,
    },
    /// The cell is no longer this claim's: a later epoch, another owner, a release.
    Superseded {
        /// The epoch found (0: no head).
        epoch: u64,
        /// Whether the change may have landed before.
        maybe_landed: bool,
    },
    /// The head kept moving under co-writers: not written.
    KeptMoving,
}

/// How a claim ended, as far as this process knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimStatus {
    /// The lease is held and no write has found the claim superseded.
    Held,
    /// A write found the cell at a later epoch or with another owner.
    Superseded {
        /// The epoch found (0 when the head was gone).
        epoch: u64,
    },
    /// The claim was released.
    Released,
    /// The claim was handed to another node, which holds the cell at `epoch` from now on
    /// ([`CellClaim::hand_off`](crate::CellClaim::hand_off)).
    HandedOff {
        /// The epoch the receiver holds.
        epoch: u64,
    },
    /// This process ended the claim ([`CellClaim::close`](crate::CellClaim::close), or a
    /// release or hand-off sent and not, or not yet, known to have landed): no write of it is
    /// sent any more, though the store may still name this node.
    Closed,
    /// The node lease is no longer held.
    LeaseLost,
}

/// A claim's standing in its own process: the rule behind `CellClaim::is_held`, `status`,
/// `lost` and the refusal of every later write. A claim believes it holds its cell only while
/// its lease is held (judged now) and nothing ended it. A release or a hand-off **stops the
/// claim acting before it is sent** ([`Standing::stop_acting`]): from the instant it may land,
/// and while its process is suspended with it in flight, another node may own the cell, so
/// the claim believes nothing any more; it learns how it really ended once the write settles
/// ([`Standing::end`]).
///
/// ```
/// use fence_core::decide::claimed::{ClaimStatus, Standing};
/// let mut s = Standing::default();
/// assert_eq!(s.status(true), ClaimStatus::Held);
/// s.stop_acting(); // a release is about to be sent
/// assert_eq!(s.status(true), ClaimStatus::Closed);
/// s.end(ClaimStatus::Released); // it landed
/// assert_eq!(s.status(true), ClaimStatus::Released);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Standing {
    ended: Option<ClaimStatus>,
}

impl Standing {
    /// The claim's status with its lease `lease_held` (judged now).
    pub fn status(&self, lease_held: bool) -> ClaimStatus {
        match self.ended {
            Some(how) => how,
            None if lease_held => ClaimStatus::Held,
            None => ClaimStatus::LeaseLost,
        }
    }

    /// Whether the claim has ended (closed included).
    pub fn ended(&self) -> Option<ClaimStatus> {
        self.ended
    }

    /// The claim acts no more: a release or a hand-off is about to be sent (or the claim was
    /// closed). No effect on a claim that already ended otherwise.
    pub fn stop_acting(&mut self) {
        self.ended.get_or_insert(ClaimStatus::Closed);
    }

    /// The claim ended as `how`. A claim this process closed (or stopped for a release or a
    /// hand-off) may still learn how it really ended — its release or hand-off landed, a
    /// write found it superseded; any other end is final.
    pub fn end(&mut self, how: ClaimStatus) {
        if matches!(self.ended, None | Some(ClaimStatus::Closed)) {
            self.ended = Some(how);
        }
    }

    /// Whether the claim may send a write now ([`admit`]).
    pub fn admit(&self, lease_held: bool, flaws: Flaws) -> Result<(), Refusal> {
        admit(lease_held, self.ended.is_some(), flaws)
    }
}

/// Why a claim refuses to send anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The lease is not held now.
    LeaseNotHeld,
    /// The claim has ended (closed, released, handed off, superseded).
    ClaimEnded,
}

/// Whether a claim may send a write now: its lease is held (judged now) and the claim has not
/// ended. Checked before a write and again once the claim's write lock is taken.
pub fn admit(lease_held: bool, ended: bool, flaws: Flaws) -> Result<(), Refusal> {
    if !lease_held && !sabotaged!(flaws, SkipFencedCheck) {
        return Err(Refusal::LeaseNotHeld);
    }
    if ended {
        return Err(Refusal::ClaimEnded);
    }
    Ok(())
}

/// Whether an object found at a log record's name is the record this append wrote (an
/// ambiguous create that landed): only if its bytes are exactly ours. Anything else belongs
/// to another writer (an orphan, another claim of the epoch) and is never taken as ours.
pub fn record_is_ours(found: &[u8], ours: &[u8], flaws: Flaws) -> bool {
    found == ours || sabotaged!(flaws, LogAcceptsForeignRecord)
}

/// One change of a claimed cell by `me` at `epoch`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CellWrite {
    me: String,
    epoch: u64,
    generation: String,
    nonce: String,
    change: Change,
    base: Option<Base>,
    /// Whether an exact write has checked its base.
    checked: bool,
    rebuilds: u8,
    flaws: Flaws,
}

impl CellWrite {
    /// A change by `me` (lease generation `generation`) at `epoch`, on the head `known` (the
    /// claim's last, if it has one). Each head it builds carries `nonce` and a suffix.
    pub fn new(
        me: &str,
        epoch: u64,
        generation: &str,
        nonce: impl Into<String>,
        change: Change,
        known: Option<Base>,
    ) -> Self {
        CellWrite {
            me: me.to_owned(),
            epoch,
            generation: generation.to_owned(),
            nonce: nonce.into(),
            change,
            base: known,
            checked: false,
            rebuilds: 0,
            flaws: Flaws::default(),
        }
    }

    /// With sabotage `flaws` (only ever set with the `sabotage` feature).
    #[must_use]
    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }

    /// The first step.
    pub fn start(&mut self) -> CellStep {
        if let Change::Data {
            exact: Some(want), ..
        } = &self.change
        {
            if !self.base.as_ref().is_some_and(|b| b.satisfies(want)) {
                self.base = None;
            }
        }
        self.next()
    }

    fn next(&mut self) -> CellStep {
        match self.base.take() {
            Some(base) => self.build(base),
            None => CellStep::ReadBase,
        }
    }

    /// The head as read: it must still name us at our epoch.
    pub fn on_read(&mut self, read: Option<(CellHead, Version)>) -> CellStep {
        match read {
            Some((h, v)) if h.is_owned_by(&self.me, self.epoch) => self.build(Base::of(h, v)),
            Some((h, _)) => CellStep::Done(CellEnd::Superseded {
                epoch: h.epoch,
                maybe_landed: false,
            }),
            None => CellStep::Done(CellEnd::Superseded {
                epoch: 0,
                maybe_landed: false,
            }),
        }
    }

    fn build(&mut self, base: Base) -> CellStep {
        if let Change::Data {
            exact: Some(want), ..
        } = &self.change
        {
            if !self.checked && !base.satisfies(want) {
                return CellStep::Done(CellEnd::Conflict { base });
            }
            self.checked = true;
        }
        let (node, epoch, generation, payload) = match &self.change {
            Change::Data { payload, .. } => (
                Some(self.me.clone()),
                self.epoch,
                Some(self.generation.clone()),
                payload.clone(),
            ),
            Change::Release => (
                None,
                self.epoch,
                Some(self.generation.clone()),
                base.payload.clone(),
            ),
            Change::HandOff { to, generation } => (
                Some(to.clone()),
                self.epoch.saturating_add(1),
                generation.clone(),
                base.payload.clone(),
            ),
        };
        let body = CellHead {
            node,
            epoch,
            nonce: format!("{}-{}", self.nonce, self.rebuilds),
            generation,
            payload,
            extra: base.extra.clone(),
            format: HeadFormat::V2,
        };
        let guard = CasGuard::Match(base.version.clone());
        let write = HeadWrite::new(body.nonce.clone(), guard, &self.me, self.epoch)
            .writing_as(&self.generation)
            .with_flaws(self.flaws);
        self.base = Some(base);
        CellStep::Seal { body, write }
    }

    /// How the write of `body` settled.
    pub fn on_settled(&mut self, body: CellHead, settled: Settled) -> CellStep {
        let replaced = self.base.take().map(|b| b.payload).unwrap_or_default();
        match settled {
            Settled::Landed(version) => CellStep::Done(CellEnd::Written {
                base: Base::of(body, version),
                replaced,
            }),
            Settled::Moved { head, version } => {
                let base = Base::of(head, version);
                if matches!(self.change, Change::Data { exact: Some(_), .. }) {
                    return CellStep::Done(CellEnd::Conflict { base });
                }
                self.rebuilds += 1;
                if self.rebuilds >= MAX_REBUILDS {
                    return CellStep::Done(CellEnd::KeptMoving);
                }
                self.build(base)
            }
            Settled::Fenced {
                epoch,
                maybe_landed,
            } => CellStep::Done(CellEnd::Superseded {
                epoch,
                maybe_landed,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::new(s).unwrap()
    }

    fn head(node: &str, epoch: u64, data: &'static str) -> CellHead {
        CellHead {
            node: Some(node.into()),
            epoch,
            nonce: "x".into(),
            generation: None,
            payload: CellPayload::Inline(data.into()),
            extra: Extra::new(),
            format: HeadFormat::V2,
        }
    }

    #[test]
    fn a_co_writer_first_is_rebuilt_on_unless_the_write_is_exact() {
        let data = |exact| Change::Data {
            payload: CellPayload::Inline("mine".into()),
            exact,
        };
        let mut w = CellWrite::new("me", 2, "g", "n", data(None), None);
        assert_eq!(w.start(), CellStep::ReadBase);
        let CellStep::Seal { body, .. } = w.on_read(Some((head("me", 2, "old"), v("a")))) else {
            panic!("a seal");
        };
        let moved = Settled::Moved {
            head: head("me", 2, "co"),
            version: v("b"),
        };
        let CellStep::Seal { write, .. } = w.on_settled(body.clone(), moved.clone()) else {
            panic!("rebuilt");
        };
        assert_eq!(write.guard(), &CasGuard::Match(v("b")));
        let mut exact = CellWrite::new("me", 2, "g", "n", data(Some(Some(v("a")))), None);
        exact.start();
        let CellStep::Seal { body, .. } = exact.on_read(Some((head("me", 2, "old"), v("a"))))
        else {
            panic!("a seal");
        };
        assert!(matches!(
            exact.on_settled(body, moved),
            CellStep::Done(CellEnd::Conflict { .. })
        ));
    }

    #[test]
    fn only_our_bytes_are_our_record() {
        let f = Flaws::default();
        assert!(record_is_ours(b"rec", b"rec", f));
        assert!(!record_is_ours(b"orphan", b"rec", f));
    }

    #[test]
    fn a_claim_believes_nothing_once_its_release_or_hand_off_may_land() {
        let f = Flaws::default();
        let mut s = Standing::default();
        assert_eq!(
            (s.status(true), s.status(false)),
            (ClaimStatus::Held, ClaimStatus::LeaseLost)
        );
        assert_eq!(s.admit(true, f), Ok(()));
        s.stop_acting();
        assert_eq!(
            s.status(true),
            ClaimStatus::Closed,
            "the release is on its way"
        );
        assert_eq!(s.admit(true, f), Err(Refusal::ClaimEnded));
        s.end(ClaimStatus::Released);
        assert_eq!(s.status(true), ClaimStatus::Released);
        s.end(ClaimStatus::Closed);
        assert_eq!(
            s.status(true),
            ClaimStatus::Released,
            "a known end is final"
        );
        let mut superseded = Standing::default();
        superseded.end(ClaimStatus::Superseded { epoch: 4 });
        superseded.stop_acting();
        assert_eq!(
            superseded.status(true),
            ClaimStatus::Superseded { epoch: 4 }
        );
    }

    #[test]
    fn a_head_no_longer_ours_supersedes_and_a_closed_claim_refuses() {
        let mut w = CellWrite::new("me", 2, "g", "n", Change::Release, None);
        w.start();
        assert_eq!(
            w.on_read(Some((head("peer", 3, "x"), v("a")))),
            CellStep::Done(CellEnd::Superseded {
                epoch: 3,
                maybe_landed: false
            })
        );
        assert_eq!(
            admit(false, false, Flaws::default()),
            Err(Refusal::LeaseNotHeld)
        );
        assert_eq!(
            admit(true, true, Flaws::default()),
            Err(Refusal::ClaimEnded)
        );
    }
}
