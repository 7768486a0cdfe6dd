//! The cell rules: who may claim, at which epoch, and what a read-back proves about a write.
//!
//! # Claims
//!
//! [`decide_claim`]: no head → epoch 1 with `Absent`; ours or released → epoch + 1; a foreign
//! owner → judged by [observation](super::observe) of its lease: live → not ours; dead →
//! takeover at epoch + 1. Every claim is guarded on the head's version, so a head that moved
//! meanwhile rejects it. Release keeps the epoch. An epoch that cannot be raised (`u64::MAX`)
//! is a corrupt record, never a wrap to 0.
//!
//! # Evidence of a write
//!
//! A write's outcome is settled only by evidence ([`readback`]): a head carrying one of our
//! nonces → landed; the head still at the guard's version → not landed *yet* (it may still
//! land: only the same write, under the same guard, may be sent again); a head at another
//! version still owned by us → ours can never land any more, but may have landed underneath
//! (never re-applied, never acknowledged); a later epoch or another owner → fenced. A head
//! at our node and epoch that another process wrote (another lease generation: a `fence
//! run` of the same lease, a resume or an adoption elsewhere) is another owner too: the cell
//! is that process's now, not a co-writer's move to build on or wait out.

use super::observe::Liveness;
use crate::record::CellHead;
use crate::store::{CasGuard, Version};

/// A cell head as the claim rule needs it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HeadView {
    /// The owner, `None` when released.
    pub node: Option<String>,
    /// The epoch.
    pub epoch: u64,
    /// The head's version: the guard of the next claim.
    pub version: Version,
}

/// What to do about a cell.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClaimDecision {
    /// Write a head naming us at `epoch`, under `guard`.
    Claim {
        /// The condition: `Absent` for a new cell, else the head's version.
        guard: CasGuard,
        /// The new epoch (always the old one + 1).
        epoch: u64,
        /// The owner we take over from, if it was another node.
        takeover_from: Option<String>,
    },
    /// A foreign node owns it: judge that node's lease first.
    NeedLease {
        /// The owner.
        node: String,
    },
    /// A live foreign owner has it.
    NotOurs {
        /// The owner.
        node: String,
        /// Its epoch.
        epoch: u64,
        /// When (our monotonic clock) its lease would be judged dead if it stays unchanged.
        until_mono: u64,
    },
    /// The epoch cannot be raised: the head is corrupt.
    EpochExhausted {
        /// The epoch found.
        epoch: u64,
    },
}

/// `epoch + 1`, or `None` when it would overflow (a corrupt or hostile record).
pub fn next_epoch(epoch: u64) -> Option<u64> {
    epoch.checked_add(1)
}

/// The claim rule. `owner` is our verdict on the lease of the head's owner, when that is a
/// foreign node and we have one.
///
/// ```
/// use fence_core::decide::*;
/// use fence_core::{CasGuard, Version};
/// assert_eq!(decide_claim("me", None, None),
///            ClaimDecision::Claim { guard: CasGuard::Absent, epoch: 1, takeover_from: None });
/// let v = Version::new("v").unwrap();
/// let theirs = HeadView { node: Some("peer".into()), epoch: 4, version: v.clone() };
/// assert_eq!(decide_claim("me", Some(&theirs), None),
///            ClaimDecision::NeedLease { node: "peer".into() });
/// assert!(matches!(decide_claim("me", Some(&theirs), Some(Liveness::Live { until_mono: 9 })),
///                  ClaimDecision::NotOurs { .. }));
/// assert_eq!(decide_claim("me", Some(&theirs), Some(Liveness::Dead)),
///            ClaimDecision::Claim { guard: CasGuard::Match(v), epoch: 5,
///                                   takeover_from: Some("peer".into()) });
/// ```
pub fn decide_claim(me: &str, head: Option<&HeadView>, owner: Option<Liveness>) -> ClaimDecision {
    let Some(head) = head else {
        return ClaimDecision::Claim {
            guard: CasGuard::Absent,
            epoch: 1,
            takeover_from: None,
        };
    };
    let Some(epoch) = next_epoch(head.epoch) else {
        return ClaimDecision::EpochExhausted { epoch: head.epoch };
    };
    let claim = |takeover_from| ClaimDecision::Claim {
        guard: CasGuard::Match(head.version.clone()),
        epoch,
        takeover_from,
    };
    match head.node.as_deref() {
        None => claim(None),
        Some(n) if n == me => claim(None),
        Some(n) => match owner {
            None => ClaimDecision::NeedLease { node: n.to_owned() },
            Some(Liveness::Live { until_mono }) => ClaimDecision::NotOurs {
                node: n.to_owned(),
                epoch: head.epoch,
                until_mono,
            },
            Some(Liveness::Dead) => claim(Some(n.to_owned())),
        },
    }
}

/// What a read of the head proves about a write sent under `guard` with one of `nonces`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Evidence {
    /// The write is in the store at this version.
    Landed(Version),
    /// The head is still at the guard's version (or still absent): the write has not landed
    /// and may still; only the same write under the same guard may be sent again.
    Unchanged,
    /// The head moved to this version by a write that is not ours and is still owned by
    /// `(me, epoch)`: ours can never land now; whether it landed underneath is unknown.
    MovedOn(Version),
    /// Another owner, a later epoch, a release, or a deleted head: no longer ours.
    Superseded {
        /// The epoch found (0 when the head is gone).
        epoch: u64,
    },
}

/// Judges a read of the head (`None`: absent) for a write sent under `guard` with one of
/// `nonces`, by `me` at `epoch`. The sent write itself may release the cell; a release by
/// anyone else is `Superseded`. [`readback_as`] also tells a head of another process of
/// `me` apart.
///
/// ```
/// use fence_core::decide::{readback, Evidence};
/// use fence_core::CasGuard;
/// assert_eq!(readback(None, &["n1".into()], &CasGuard::Absent, "me", 1), Evidence::Unchanged);
/// ```
pub fn readback(
    head: Option<(&CellHead, &Version)>,
    nonces: &[String],
    guard: &CasGuard,
    me: &str,
    epoch: u64,
) -> Evidence {
    readback_as(head, nonces, guard, me, epoch, None)
}

/// [`readback`] for a write by the process of lease generation `generation` (`None`: not
/// known, any process of `me` counts as ours). A head at `(me, epoch)` that names another
/// generation was written by another process of node `me` — a claim of the same epoch by
/// a `fence run` of the same lease, or a resume elsewhere — so the cell is no longer this
/// process's: `Superseded`, not a co-writer's move ([`Evidence::MovedOn`]). Its co-writers
/// (`fence put` through `update_cell`, this claim's own writes) keep the generation of the
/// head they build on; a head without one (the seed's, `cas_owner`'s) proves nothing.
///
/// ```
/// use fence_core::decide::{readback_as, Evidence};
/// use fence_core::record::{CellHead, CellPayload, Extra, HeadFormat};
/// use fence_core::{CasGuard, Version};
/// let theirs = CellHead {
///     node: Some("run.nightly".into()), epoch: 4, nonce: "b".into(),
///     generation: Some("g-waiter".into()), payload: CellPayload::Empty,
///     extra: Extra::new(), format: HeadFormat::V2,
/// };
/// let (v0, v1) = (Version::new("v0").unwrap(), Version::new("v1").unwrap());
/// let seen = readback_as(Some((&theirs, &v1)), &["a".into()], &CasGuard::Match(v0),
///                        "run.nightly", 4, Some("g-me"));
/// assert_eq!(seen, Evidence::Superseded { epoch: 4 });
/// ```
pub fn readback_as(
    head: Option<(&CellHead, &Version)>,
    nonces: &[String],
    guard: &CasGuard,
    me: &str,
    epoch: u64,
    generation: Option<&str>,
) -> Evidence {
    let Some((head, version)) = head else {
        return match guard {
            CasGuard::Absent => Evidence::Unchanged,
            CasGuard::Match(_) => Evidence::Superseded { epoch: 0 },
        };
    };
    if !head.nonce.is_empty() && nonces.contains(&head.nonce) {
        return Evidence::Landed(version.clone());
    }
    if matches!(guard, CasGuard::Match(g) if g == version) {
        return Evidence::Unchanged;
    }
    let other_process = match (head.generation.as_deref(), generation) {
        (Some(theirs), Some(ours)) => theirs != ours,
        _ => false,
    };
    if head.is_owned_by(me, epoch) && !other_process {
        Evidence::MovedOn(version.clone())
    } else {
        Evidence::Superseded { epoch: head.epoch }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CellPayload, Extra, HeadFormat};

    fn v(s: &str) -> Version {
        Version::new(s).unwrap()
    }

    fn head(node: Option<&str>, epoch: u64, nonce: &str) -> CellHead {
        CellHead {
            node: node.map(str::to_owned),
            epoch,
            nonce: nonce.into(),
            generation: None,
            payload: CellPayload::Empty,
            extra: Extra::new(),
            format: HeadFormat::V2,
        }
    }

    #[test]
    fn ours_or_released_raises_the_epoch_and_max_is_exhausted() {
        for node in [Some("me"), None] {
            let h = HeadView {
                node: node.map(str::to_owned),
                epoch: 3,
                version: v("o"),
            };
            assert!(matches!(
                decide_claim("me", Some(&h), None),
                ClaimDecision::Claim {
                    epoch: 4,
                    takeover_from: None,
                    ..
                }
            ));
        }
        let max = HeadView {
            node: None,
            epoch: u64::MAX,
            version: v("o"),
        };
        assert_eq!(
            decide_claim("me", Some(&max), None),
            ClaimDecision::EpochExhausted { epoch: u64::MAX }
        );
    }

    #[test]
    fn evidence_is_settled_only_by_identity_or_version() {
        let ours = ["a".to_owned(), "b".to_owned()];
        let guard = CasGuard::Match(v("g"));
        let read = |h: &CellHead, ver: &str| readback(Some((h, &v(ver))), &ours, &guard, "me", 5);
        assert_eq!(
            read(&head(Some("me"), 5, "b"), "x"),
            Evidence::Landed(v("x"))
        );
        assert_eq!(read(&head(Some("me"), 5, "old"), "g"), Evidence::Unchanged);
        assert_eq!(
            read(&head(Some("me"), 5, "other"), "y"),
            Evidence::MovedOn(v("y"))
        );
        assert_eq!(
            read(&head(Some("me"), 6, "z"), "y"),
            Evidence::Superseded { epoch: 6 }
        );
        assert_eq!(
            read(&head(None, 5, "z"), "y"),
            Evidence::Superseded { epoch: 5 }
        );
        assert_eq!(
            read(&head(Some("peer"), 5, "z"), "y"),
            Evidence::Superseded { epoch: 5 }
        );
        assert_eq!(
            readback(None, &ours, &guard, "me", 5),
            Evidence::Superseded { epoch: 0 }
        );
        // Another process of `me` at our epoch is another owner; a head without a
        // generation, or a write whose generation is not known, proves nothing more.
        let mut other = head(Some("me"), 5, "other");
        other.generation = Some("g2".into());
        let as_g1 = |h: &CellHead, g| readback_as(Some((h, &v("y"))), &ours, &guard, "me", 5, g);
        assert_eq!(as_g1(&other, Some("g1")), Evidence::Superseded { epoch: 5 });
        assert_eq!(as_g1(&other, Some("g2")), Evidence::MovedOn(v("y")));
        assert_eq!(as_g1(&other, None), Evidence::MovedOn(v("y")));
        other.generation = None;
        assert_eq!(as_g1(&other, Some("g1")), Evidence::MovedOn(v("y")));
        // A seed record has no nonce: it never matches an empty identity.
        assert_eq!(
            readback(
                Some((&head(Some("me"), 5, ""), &v("q"))),
                &[String::new()],
                &guard,
                "me",
                5
            ),
            Evidence::MovedOn(v("q"))
        );
    }
}
