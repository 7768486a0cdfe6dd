//! Leaving the fleet: a drain, step by step. The shell drives it within the drain's
//! deadline and feeds [`FleetInput::DrainDeadline`](super::FleetInput::DrainDeadline) when
//! it passes: what is not done by then is left to be taken over.

use std::collections::BTreeSet;

use super::node::{AdoptFor, FleetCore, FleetEffect, HandOffFor, Leaving, Stage};
use super::record::{Notice, NoticeKind};
use super::Now;
use crate::flaws::sabotaged;
use crate::leader::LEADER_CELL;
use crate::shard::StopReason;

/// The legs of a drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Leg {
    /// Mark this node leaving in its record.
    Mark,
    /// Tell the leader (or, leading, hear it at once).
    Announce,
    /// Give nodes draining at the same moment the time to mark themselves too.
    Pause,
    /// Read the record again, for where each cell goes.
    Record,
    /// Take what the store may name as this node's — orphans, cells handed to it, cells
    /// placed on it or moved away from it that it does not hold (a hand-off to it may have
    /// landed, a claim whose answer was lost may have) — to give them on.
    Adopt,
    /// Hand each held cell to where the placement without this node puts it, else its heir.
    HandOff,
    /// Take back the cells whose hand-off was not made (the store still names this node),
    /// to release them.
    Readopt,
    /// Release the rest.
    Release,
    /// Hand the leadership on (or release it).
    Leadership,
    GiveLeadership,
    /// Stop every shard and release the node lease.
    End,
}

impl FleetCore {
    /// The application asks to leave: the drain's legs begin.
    pub(super) fn drain(&mut self, now: Now, out: &mut Vec<FleetEffect>) {
        self.leaving = Some(Leaving::default());
        let legs = [
            Leg::Mark,
            Leg::Announce,
            Leg::Pause,
            Leg::Record,
            Leg::Adopt,
            Leg::HandOff,
            Leg::Readopt,
            Leg::Release,
            Leg::Leadership,
            Leg::End,
        ];
        self.stages = legs.into_iter().map(Stage::Drain).collect();
        self.advance(now, out);
    }

    /// The drain's deadline passed: what waits is dropped, and the drain ends.
    pub(super) fn drain_deadline(&mut self, now: Now, out: &mut Vec<FleetEffect>) {
        if let Some(l) = self.leader.as_mut() {
            l.abandon();
        }
        self.handing = None;
        self.receivers.clear();
        self.to_take.clear();
        self.stages = [Stage::Drain(Leg::End)].into();
        self.advance(now, out);
    }

    pub(super) fn drain_leg(&mut self, now: Now, leg: Leg, out: &mut Vec<FleetEffect>) -> bool {
        match leg {
            Leg::Mark => {
                out.push(FleetEffect::WriteOwn { leaving: true });
                false
            }
            Leg::Announce => self.announce_leaving(now, out),
            Leg::Pause => {
                out.push(FleetEffect::Wait {
                    ms: self.t.poll_ms(),
                });
                true
            }
            Leg::Record => {
                out.push(FleetEffect::ReadRecord);
                true
            }
            Leg::HandOff => {
                let moves = self.drain_moves();
                self.stages
                    .push_front(Stage::HandOff(moves, HandOffFor::Drain));
                false
            }
            Leg::Adopt => {
                let mut cells = self.orphans.clone();
                cells.extend(self.handed.keys().cloned());
                cells.extend(self.mine.targets.iter().cloned());
                cells.extend(self.mine.moves.keys().cloned());
                self.adopt_for_drain(cells, out)
            }
            Leg::Readopt => self.adopt_for_drain(self.orphans.clone(), out),
            Leg::Release => {
                let rest = if sabotaged!(self.flaws, LeaveStrandsCells) {
                    Vec::new()
                } else {
                    self.held.keys().cloned().collect()
                };
                self.stages.push_front(Stage::Release(rest));
                false
            }
            Leg::Leadership => self.hand_over_leadership(out),
            Leg::GiveLeadership => self.give_leadership(now, out),
            Leg::End => {
                self.close_all(StopReason::Closed, out);
                out.push(FleetEffect::ReleaseLease);
                true
            }
        }
    }

    /// Tells the leader this node leaves; the leader itself hears it at once, after a sweep
    /// (a node that just started is a receiver too).
    fn announce_leaving(&mut self, now: Now, out: &mut Vec<FleetEffect>) -> bool {
        let leaving = self.notice(now, NoticeKind::Leaving, "", &self.me);
        if let Some(l) = self.leader.as_mut() {
            l.sweep_now();
            let step = l.round(now, vec![leaving]);
            return match step {
                super::LeadStep::Effect(e) => {
                    out.push(FleetEffect::Lead(e));
                    true
                }
                super::LeadStep::Done(_) => false,
            };
        }
        if !self.mine.leader.is_empty() {
            let to = [(self.mine.leader.clone(), vec![leaving])].into();
            out.push(FleetEffect::Post { to });
        }
        false
    }

    /// Where each held cell goes: where the placement without this node puts it (once the
    /// leader heard), else its heir.
    fn drain_moves(&self) -> Vec<(String, String)> {
        if sabotaged!(self.flaws, LeaveStrandsCells) {
            return Vec::new();
        }
        let to = |c: &String| self.mine.moves.get(c).or(self.mine.heirs.get(c)).cloned();
        self.held
            .keys()
            .filter_map(|c| Some((c.clone(), to(c)?)))
            .filter(|(_, to)| *to != self.me)
            .collect()
    }

    fn adopt_for_drain(&mut self, mut cells: BTreeSet<String>, out: &mut Vec<FleetEffect>) -> bool {
        cells.retain(|c| !self.held.contains_key(c));
        if cells.is_empty() || sabotaged!(self.flaws, LeaveStrandsCells) {
            return false;
        }
        let cells = cells.into_iter().collect();
        out.push(FleetEffect::Adopt {
            cells,
            purpose: AdoptFor::Drain,
        });
        true
    }

    /// The leader leaving hands its leadership to another member (or releases it).
    fn hand_over_leadership(&mut self, out: &mut Vec<FleetEffect>) -> bool {
        let Some(l) = self.leader.as_ref() else {
            return false;
        };
        let others = l.others(&self.me);
        if others.is_empty() {
            self.leader = None;
            out.push(FleetEffect::ReleaseLeadership);
            return false;
        }
        self.stages.push_front(Stage::Drain(Leg::GiveLeadership));
        let nodes = others.into_iter().collect();
        out.push(FleetEffect::ReadReceivers { nodes });
        true
    }

    fn give_leadership(&mut self, now: Now, out: &mut Vec<FleetEffect>) -> bool {
        let ready = std::mem::take(&mut self.receivers);
        self.leader = None;
        let Some((to, generation)) = ready.into_iter().next() else {
            out.push(FleetEffect::ReleaseLeadership);
            return false;
        };
        let notice: Notice = self.notice(now, NoticeKind::Handed, LEADER_CELL, &self.me);
        out.push(FleetEffect::HandLeadership {
            to,
            generation,
            notice,
        });
        true
    }

    /// The node lease was released (`shown`: a read shows it): the drain is done.
    pub(super) fn lease_released(&mut self, shown: bool, out: &mut Vec<FleetEffect>) {
        let Some(l) = self.leaving.take() else {
            return;
        };
        out.push(FleetEffect::Drained {
            handed_off: l.handed_off,
            released: l.released,
            left: self.orphans.clone(),
            lease_released: shown,
        });
        self.done = true;
    }
}
