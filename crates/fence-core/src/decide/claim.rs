//! A claim, a resume or an adoption of one cell, as a step machine: read the head, judge its
//! owner, carry its data forward, seal. The shell performs each step and feeds the answer in
//! (the tokio runtime's [`LeaseKeeper::claim`](crate::LeaseKeeper::claim),
//! [`claim_or_resume`](crate::LeaseKeeper::claim_or_resume) and
//! [`adopt`](crate::LeaseKeeper::adopt), and the model check alike).
//!
//! - A head naming us, written by one of the `resumable` generations (or any of ours, for an
//!   adoption), is **resumed** at its epoch: one compare-and-swap of the head at that epoch
//!   with our identity — the resume's seal, so a takeover racing it loses, or it does.
//! - Otherwise [`decide_claim`]: no head → epoch 1; ours or released → epoch + 1; a foreign
//!   owner → judged by observation of its lease ([`ClaimStep::JudgeOwner`]): live → busy,
//!   dead → takeover at epoch + 1. The claim's compare-and-swap carries the head's data
//!   forward and is the seal of every earlier epoch.
//!
//! ```
//! use fence_core::decide::claim::{ClaimEnd, ClaimFlow, ClaimStep};
//! use fence_core::decide::write::{PutAnswer, WriteStep};
//! use fence_core::Version;
//! let mut flow = ClaimFlow::new("me", "gen-1", "nonce-1");
//! assert_eq!(flow.start(), ClaimStep::ReadHead);
//! let ClaimStep::Seal { mut write, .. } = flow.on_head(None) else { panic!() };
//! assert_eq!(write.start(), WriteStep::Send);
//! let WriteStep::Done(settled) = write.on_put(PutAnswer::Applied(Version::new("v1").unwrap()))
//! else { panic!() };
//! assert!(matches!(flow.on_sealed(settled), ClaimStep::Done(ClaimEnd::Claimed { epoch: 1, .. })));
//! ```

use super::cell::{decide_claim, ClaimDecision, HeadView};
use super::observe::Liveness;
use super::write::{HeadWrite, Settled};
use crate::flaws::{sabotaged, Flaws};
use crate::record::{CellHead, CellPayload, Extra, HeadFormat};
use crate::store::{CasGuard, Version};

/// What the shell does next.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimStep {
    /// Read the cell's head; call [`ClaimFlow::on_head`].
    ReadHead,
    /// Wait this many ms, then read the head again (only a sabotaged claim asks).
    Sleep(u64),
    /// Judge the lease of the head's owner `node` (by observation); call
    /// [`ClaimFlow::on_liveness`]. `writer` is the process generation that wrote the head.
    JudgeOwner {
        /// The owner.
        node: String,
        /// The head's writer generation, if it names one.
        writer: Option<String>,
    },
    /// The head is in fence's version-1 format: the shell moves its separate data head into
    /// a payload for `epoch` and calls [`ClaimFlow::on_carried`].
    Carry {
        /// The head read.
        head: CellHead,
        /// The epoch the claim will hold.
        epoch: u64,
    },
    /// Settle `write` of `body` (the seal), then call [`ClaimFlow::on_sealed`].
    Seal {
        /// The head to write.
        body: CellHead,
        /// Its settlement.
        write: HeadWrite,
    },
    /// Finished.
    Done(ClaimEnd),
}

/// How a claim ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimEnd {
    /// The cell is ours at `epoch`; the head is `body` at `version`.
    Claimed {
        /// The epoch held.
        epoch: u64,
        /// The head as written.
        body: CellHead,
        /// Its version.
        version: Version,
        /// Whether the cell was resumed at the epoch it had (no new epoch).
        resumed: bool,
        /// The foreign owner taken over, if any.
        takeover_from: Option<String>,
    },
    /// A live foreign owner has the cell.
    Busy {
        /// The owner.
        node: String,
        /// Its epoch.
        epoch: u64,
        /// When (our monotonic clock) its lease would be judged dead if it stays unchanged.
        until_mono: u64,
    },
    /// Another claim won the race; `maybe_landed` if our seal may still have landed.
    LostRace {
        /// Whether an attempt of ours may have landed.
        maybe_landed: bool,
    },
    /// The head's epoch cannot be raised: corrupt.
    EpochExhausted {
        /// The epoch found.
        epoch: u64,
    },
    /// An adoption found no head naming this node (`found`: its owner and epoch, if any).
    NotAdoptable {
        /// The head's owner and epoch.
        found: Option<(Option<String>, u64)>,
    },
    /// A request failed after the lease was lost: the claim is over whatever the store did.
    LeaseLost {
        /// Whether an attempt of the seal may have landed (the head then names this node
        /// until it is taken over; a seal changes no data).
        maybe_landed: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Start,
    Reading,
    /// A sabotaged claim waits before its second read.
    Waiting,
    Judging {
        read: Option<(CellHead, Version)>,
    },
    Carrying {
        epoch: u64,
        guard: CasGuard,
        takeover_from: Option<String>,
    },
    Sealing {
        epoch: u64,
        resumed: bool,
        takeover_from: Option<String>,
        body: CellHead,
    },
    Done,
}

/// One claim (or resume, or adoption) of a cell by `me`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClaimFlow {
    me: String,
    generation: String,
    nonce: String,
    resumable: Vec<String>,
    adopt: bool,
    flaws: Flaws,
    wait_ms: u64,
    /// `early-seal-read` only: the payload of the first read.
    early: Option<CellPayload>,
    /// `rollback-acknowledged` only: what this process last wrote to the cell.
    last_written: Option<CellPayload>,
    phase: Phase,
}

impl ClaimFlow {
    /// A claim by node `me`, lease generation `generation`, whose seal carries `nonce`.
    pub fn new(me: &str, generation: &str, nonce: impl Into<String>) -> Self {
        ClaimFlow {
            me: me.to_owned(),
            generation: generation.to_owned(),
            nonce: nonce.into(),
            resumable: Vec::new(),
            adopt: false,
            flaws: Flaws::default(),
            wait_ms: 0,
            early: None,
            last_written: None,
            phase: Phase::Start,
        }
    }

    /// Resumes instead a head naming us written by one of `generations`.
    #[must_use]
    pub fn resuming(mut self, generations: &[String]) -> Self {
        self.resumable = generations.to_vec();
        self
    }

    /// An adoption: resumes a head naming us (any generation); anything else ends
    /// [`ClaimEnd::NotAdoptable`].
    #[must_use]
    pub fn adopting(mut self) -> Self {
        self.adopt = true;
        self
    }

    /// With sabotage `flaws` (only ever set with the `sabotage` feature); `ttl_ms` paces the
    /// broken `early-seal-read`, and `last_written` feeds `rollback-acknowledged`.
    #[must_use]
    pub fn with_flaws(
        mut self,
        flaws: Flaws,
        ttl_ms: u64,
        last_written: Option<CellPayload>,
    ) -> Self {
        self.flaws = flaws;
        self.wait_ms = ttl_ms / 4;
        self.last_written = last_written;
        self
    }

    /// The first step.
    pub fn start(&mut self) -> ClaimStep {
        self.phase = Phase::Reading;
        ClaimStep::ReadHead
    }

    /// After a [`ClaimStep::Sleep`]: read again.
    pub fn resume(&mut self) -> ClaimStep {
        self.phase = Phase::Reading;
        ClaimStep::ReadHead
    }

    /// The head as read (`None`: absent).
    pub fn on_head(&mut self, read: Option<(CellHead, Version)>) -> ClaimStep {
        let first = self.early.is_none() && self.phase == Phase::Reading;
        if sabotaged!(self.flaws, EarlySealRead) && first && !self.adopt {
            self.early = Some(read.map(|(h, _)| h.payload).unwrap_or_default());
            self.phase = Phase::Waiting;
            return ClaimStep::Sleep(self.wait_ms);
        }
        if let Some((h, v)) = &read {
            let ours = h.node.as_deref() == Some(self.me.as_str()) && h.format == HeadFormat::V2;
            let vouched = h
                .generation
                .as_ref()
                .is_some_and(|g| self.resumable.contains(g))
                || sabotaged!(self.flaws, ResumeUnvouched);
            if ours && (vouched || self.adopt) {
                return self.reseal(h.clone(), v.clone());
            }
        }
        if self.adopt {
            self.phase = Phase::Done;
            let found = read.map(|(h, _)| (h.node, h.epoch));
            return ClaimStep::Done(ClaimEnd::NotAdoptable { found });
        }
        let view = view(read.as_ref());
        match decide_claim(&self.me, view.as_ref(), None) {
            ClaimDecision::NeedLease { node } => {
                let writer = read.as_ref().and_then(|(h, _)| h.generation.clone());
                self.phase = Phase::Judging { read };
                ClaimStep::JudgeOwner { node, writer }
            }
            decision => self.decided(decision, read),
        }
    }

    /// Our verdict on the owner's lease.
    pub fn on_liveness(&mut self, liveness: Liveness) -> ClaimStep {
        let Phase::Judging { read } = std::mem::replace(&mut self.phase, Phase::Done) else {
            return ClaimStep::Done(ClaimEnd::LostRace {
                maybe_landed: false,
            });
        };
        let live = if sabotaged!(self.flaws, StealLiveOwner) {
            Liveness::Dead
        } else {
            liveness
        };
        let view = view(read.as_ref());
        let decision = decide_claim(&self.me, view.as_ref(), Some(live));
        self.decided(decision, read)
    }

    fn decided(&mut self, decision: ClaimDecision, read: Option<(CellHead, Version)>) -> ClaimStep {
        self.phase = Phase::Done;
        let (guard, epoch, takeover_from) = match decision {
            ClaimDecision::Claim {
                guard,
                epoch,
                takeover_from,
            } => (guard, epoch, takeover_from),
            ClaimDecision::NotOurs {
                node,
                epoch,
                until_mono,
            } => {
                return ClaimStep::Done(ClaimEnd::Busy {
                    node,
                    epoch,
                    until_mono,
                })
            }
            ClaimDecision::EpochExhausted { epoch } => {
                return ClaimStep::Done(ClaimEnd::EpochExhausted { epoch })
            }
            // Judged once already: a second verdict is never asked for.
            ClaimDecision::NeedLease { .. } => {
                return ClaimStep::Done(ClaimEnd::LostRace {
                    maybe_landed: false,
                })
            }
        };
        self.phase = Phase::Carrying {
            epoch,
            guard,
            takeover_from,
        };
        match read {
            Some((head, _)) if head.format == HeadFormat::V1 => ClaimStep::Carry { head, epoch },
            Some((head, _)) => self.on_carried(head.payload, head.extra),
            None => self.on_carried(CellPayload::Empty, Extra::new()),
        }
    }

    /// The payload and unknown fields the claim carries forward.
    pub fn on_carried(&mut self, payload: CellPayload, extra: Extra) -> ClaimStep {
        let Phase::Carrying {
            epoch,
            guard,
            takeover_from,
        } = std::mem::replace(&mut self.phase, Phase::Done)
        else {
            return ClaimStep::Done(ClaimEnd::LostRace {
                maybe_landed: false,
            });
        };
        let body = CellHead {
            node: Some(self.me.clone()),
            epoch,
            nonce: self.nonce.clone(),
            generation: Some(self.generation.clone()),
            payload: self.carry(payload),
            extra,
            format: HeadFormat::V2,
        };
        self.seal(body, guard, false, takeover_from)
    }

    /// The payload a claim carries: the current one (a sabotaged claim carries another).
    fn carry(&mut self, current: CellPayload) -> CellPayload {
        if let Some(p) = self.early.take() {
            return p;
        }
        if sabotaged!(self.flaws, RollbackAcknowledged) {
            if let Some(p) = self.last_written.clone() {
                return p;
            }
        }
        current
    }

    /// Resumes the head `h` (at `v`) naming us: a compare-and-swap at its epoch.
    fn reseal(&mut self, h: CellHead, v: Version) -> ClaimStep {
        let body = CellHead {
            node: Some(self.me.clone()),
            epoch: h.epoch,
            nonce: self.nonce.clone(),
            generation: Some(self.generation.clone()),
            payload: h.payload,
            extra: h.extra,
            format: HeadFormat::V2,
        };
        if sabotaged!(self.flaws, ResumeWithoutSeal) {
            // Acts on the head as read: nothing tells a racing takeover that we are back.
            return self.claimed(body, v, true, None);
        }
        self.seal(body, CasGuard::Match(v), true, None)
    }

    fn seal(
        &mut self,
        body: CellHead,
        guard: CasGuard,
        resumed: bool,
        takeover_from: Option<String>,
    ) -> ClaimStep {
        if sabotaged!(self.flaws, SkipSeal) && !resumed {
            if let CasGuard::Match(v) = guard {
                return self.claimed(body, v, false, takeover_from);
            }
        }
        let write = HeadWrite::new(body.nonce.clone(), guard, &self.me, body.epoch)
            .writing_as(&self.generation)
            .with_flaws(self.flaws);
        self.phase = Phase::Sealing {
            epoch: body.epoch,
            resumed,
            takeover_from,
            body: body.clone(),
        };
        ClaimStep::Seal { body, write }
    }

    fn claimed(
        &mut self,
        body: CellHead,
        version: Version,
        resumed: bool,
        takeover_from: Option<String>,
    ) -> ClaimStep {
        self.phase = Phase::Done;
        ClaimStep::Done(ClaimEnd::Claimed {
            epoch: body.epoch,
            body,
            version,
            resumed,
            takeover_from,
        })
    }

    /// A request of the claim failed: a read, a judgement, a carry, or a seal that got no
    /// verdict (`maybe_landed`: an attempt of the seal may have landed). With the lease no
    /// longer held (judged now), that is the answer, whatever the store did: even a landed
    /// seal could not be acted on ([`ClaimEnd::LeaseLost`]), and a process paused in the
    /// middle of a claim learns so instead of reporting the timeout its pause caused. With
    /// the lease held, `None`: the store's failure is the answer.
    pub fn on_failed(&mut self, lease_held: bool, maybe_landed: bool) -> Option<ClaimStep> {
        if lease_held {
            return None;
        }
        let sealing = matches!(self.phase, Phase::Sealing { .. });
        self.phase = Phase::Done;
        Some(ClaimStep::Done(ClaimEnd::LeaseLost {
            maybe_landed: maybe_landed && sealing,
        }))
    }

    /// How the seal settled (a seal that got no verdict is the shell's error to report).
    pub fn on_sealed(&mut self, settled: Settled) -> ClaimStep {
        let Phase::Sealing {
            resumed,
            takeover_from,
            body,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Done)
        else {
            return ClaimStep::Done(ClaimEnd::LostRace {
                maybe_landed: false,
            });
        };
        match settled {
            Settled::Landed(v) => self.claimed(body, v, resumed, takeover_from),
            Settled::Moved { .. } => ClaimStep::Done(ClaimEnd::LostRace {
                maybe_landed: false,
            }),
            Settled::Fenced { maybe_landed, .. } => {
                ClaimStep::Done(ClaimEnd::LostRace { maybe_landed })
            }
        }
    }
}

fn view(read: Option<&(CellHead, Version)>) -> Option<HeadView> {
    read.map(|(h, v)| HeadView {
        node: h.node.clone(),
        epoch: h.epoch,
        version: v.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(node: Option<&str>, epoch: u64, generation: &str) -> CellHead {
        CellHead {
            node: node.map(str::to_owned),
            epoch,
            nonce: "x".into(),
            generation: Some(generation.into()),
            payload: CellPayload::Inline("data".into()),
            extra: Extra::new(),
            format: HeadFormat::V2,
        }
    }

    fn v(s: &str) -> Version {
        Version::new(s).unwrap()
    }

    #[test]
    fn a_foreign_owner_is_judged_and_a_dead_one_taken_over_carrying_its_data() {
        let mut flow = ClaimFlow::new("me", "g", "n1");
        flow.start();
        let step = flow.on_head(Some((head(Some("peer"), 4, "pg"), v("h"))));
        assert_eq!(
            step,
            ClaimStep::JudgeOwner {
                node: "peer".into(),
                writer: Some("pg".into())
            }
        );
        let ClaimStep::Seal { body, write } = flow.on_liveness(Liveness::Dead) else {
            panic!("a seal");
        };
        assert_eq!(
            (body.epoch, body.payload.clone()),
            (5, CellPayload::Inline("data".into()))
        );
        assert_eq!(write.guard(), &CasGuard::Match(v("h")));
        let end = flow.on_sealed(Settled::Landed(v("i")));
        assert!(matches!(
            end,
            ClaimStep::Done(ClaimEnd::Claimed {
                epoch: 5,
                resumed: false,
                takeover_from: Some(_),
                ..
            })
        ));
    }

    /// Issue 35 item 5: a `fence run` stopped while its seal was in flight; meanwhile a
    /// waiter — another process of the same node `run.NAME` — claimed the same epoch. The
    /// read-back after the ambiguous answer shows that claim: the cell is the waiter's, and
    /// the claim lost its race (it was reported as an unsettled conflicting write).
    #[test]
    fn a_claim_of_our_epoch_by_another_process_of_our_node_settles_an_ambiguous_seal() {
        use crate::decide::write::{PutAnswer, ReadAnswer, WriteStep};
        let seal_then_read = |theirs: CellHead| {
            let mut flow = ClaimFlow::new("run.x", "g-stopped", "n1");
            flow.start();
            let ClaimStep::Seal { mut write, .. } = flow.on_head(None) else {
                panic!("a seal");
            };
            write.start();
            assert_eq!(write.on_put(PutAnswer::Ambiguous), WriteStep::Read);
            match write.on_read(ReadAnswer::Head(Some((theirs, v("w"))))) {
                WriteStep::Done(settled) => Some(flow.on_sealed(settled)),
                _ => None,
            }
        };
        let waiter = head(Some("run.x"), 1, "g-waiter");
        assert_eq!(
            seal_then_read(waiter),
            Some(ClaimStep::Done(ClaimEnd::LostRace { maybe_landed: true }))
        );
        // A head of this very process at the epoch is no proof either way: still unsettled.
        assert_eq!(seal_then_read(head(Some("run.x"), 1, "g-stopped")), None);
    }

    #[test]
    fn a_request_that_fails_after_the_lease_was_lost_ends_the_claim_as_lease_lost() {
        let mut flow = ClaimFlow::new("me", "g", "n1");
        flow.start();
        assert_eq!(
            flow.on_failed(true, false),
            None,
            "a held lease: the store's error"
        );
        assert_eq!(
            flow.on_failed(false, true),
            Some(ClaimStep::Done(ClaimEnd::LeaseLost {
                maybe_landed: false
            })),
            "nothing was sent: a read failed"
        );
        let mut sealing = ClaimFlow::new("me", "g", "n1");
        sealing.start();
        sealing.on_head(None);
        assert_eq!(
            sealing.on_failed(false, true),
            Some(ClaimStep::Done(ClaimEnd::LeaseLost { maybe_landed: true }))
        );
    }

    #[test]
    fn a_live_owner_is_busy_and_a_vouched_head_is_resumed_at_its_epoch() {
        let mut flow = ClaimFlow::new("me", "g", "n1");
        flow.start();
        flow.on_head(Some((head(Some("peer"), 4, "pg"), v("h"))));
        assert!(matches!(
            flow.on_liveness(Liveness::Live { until_mono: 9 }),
            ClaimStep::Done(ClaimEnd::Busy { epoch: 4, .. })
        ));
        let mut resume = ClaimFlow::new("me", "g2", "n2").resuming(&["g1".into()]);
        resume.start();
        let ClaimStep::Seal { body, .. } =
            resume.on_head(Some((head(Some("me"), 7, "g1"), v("h"))))
        else {
            panic!("a reseal");
        };
        assert_eq!((body.epoch, body.generation.as_deref()), (7, Some("g2")));
        let mut adopt = ClaimFlow::new("me", "g", "n").adopting();
        adopt.start();
        assert!(matches!(
            adopt.on_head(Some((head(Some("peer"), 7, "p"), v("h")))),
            ClaimStep::Done(ClaimEnd::NotAdoptable { .. })
        ));
    }
}
