//! Giving cells away: hand-offs (told only once their outcome is known), releases, answers
//! to asks, a hand-off the application asked for, and the settlement of a hand-off whose
//! answer was lost.

use fence_core::decide::{Liveness, Observation};
use fence_core::{Error, ErrorKind};

use super::node::{
    AdoptFor, FleetCore, FleetEffect, HandOffFor, HandOffOutcome, HeadsFor, Seen, Stage, Unsettled,
};
use super::record::{Notice, NoticeKind};
use super::Now;
use crate::shard::StopReason;

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput, msg).not_committed()
}

impl FleetCore {
    /// Hand-offs that got no verdict are settled by evidence: each cell is adopted again
    /// (a seal at its epoch, after which the hand-off can never land) or its head read.
    pub(super) fn settle(&mut self, out: &mut Vec<FleetEffect>) -> bool {
        if self.unsettled.is_empty() {
            return false;
        }
        let cells = self.unsettled.keys().cloned().collect();
        out.push(FleetEffect::Adopt {
            cells,
            purpose: AdoptFor::Settle,
        });
        true
    }

    /// What adoptions did: for a settlement, an adopted cell was not handed off (it is this
    /// node's again); for an ask or a drain, the cell is held again.
    pub(super) fn adopted(
        &mut self,
        now: Now,
        purpose: AdoptFor,
        results: Vec<(String, Result<u64, bool>)>,
        out: &mut Vec<FleetEffect>,
    ) {
        let mut unsure = Vec::new();
        for (cell, r) in results {
            match (purpose, r) {
                (AdoptFor::Settle, Ok(epoch)) => {
                    if self.unsettled.remove(&cell).is_some() {
                        let reason = StopReason::Closed;
                        out.push(FleetEffect::Finish {
                            cell: cell.clone(),
                            reason,
                        });
                    }
                    self.install(now, &cell, epoch, true, out);
                }
                // The lease is lost: settled once it is back.
                (AdoptFor::Settle, Err(false)) => {}
                (AdoptFor::Settle, Err(true)) => unsure.push(cell),
                (_, Ok(epoch)) => self.install(now, &cell, epoch, true, out),
                (_, Err(_)) => {
                    self.orphans.remove(&cell);
                    self.seen.remove(&cell);
                }
            }
        }
        if !unsure.is_empty() {
            self.stages.push_front(Stage::ReadUnsettled(unsure));
        }
    }

    /// Reads the heads of hand-offs not adopted back.
    pub(super) fn read_unsettled(
        &mut self,
        cells: Vec<String>,
        out: &mut Vec<FleetEffect>,
    ) -> bool {
        out.push(FleetEffect::ReadHeads {
            cells,
            purpose: HeadsFor::Settle,
        });
        true
    }

    /// A head naming the receiver at the next epoch says the hand-off landed; any other
    /// head not naming this node says the cell moved on; one naming this node, nothing yet.
    pub(super) fn settle_by_heads(
        &mut self,
        heads: Vec<(String, Seen)>,
        out: &mut Vec<FleetEffect>,
    ) {
        for (cell, head) in heads {
            if head.owner.as_deref() == Some(self.me.as_str()) {
                continue; // still ours: the adoption failed for another reason
            }
            let Some(u) = self.unsettled.remove(&cell) else {
                continue;
            };
            let reason = if head.is_owned_by(&u.to, u.epoch) {
                StopReason::HandedOff {
                    to: u.to,
                    epoch: u.epoch,
                }
            } else {
                StopReason::Superseded { epoch: head.epoch }
            };
            out.push(FleetEffect::Finish {
                cell: cell.clone(),
                reason,
            });
            self.saw(&cell, head, out);
        }
    }

    /// Answers asks for cells: one held (or named this node's) that is not this node's by
    /// the placement is handed to the node that asked.
    pub(super) fn answer_asks(&mut self, out: &mut Vec<FleetEffect>) -> bool {
        let asks: Vec<(String, String)> = std::mem::take(&mut self.asked)
            .into_iter()
            .filter(|(cell, asker)| !self.mine.targets.contains(cell) && *asker != self.me)
            .collect();
        if asks.is_empty() {
            return false;
        }
        let adopt: Vec<String> = asks
            .iter()
            .filter(|(c, _)| !self.held.contains_key(c))
            .map(|(c, _)| c.clone())
            .collect();
        self.stages.push_front(Stage::AskHandOff(asks));
        if adopt.is_empty() {
            return false;
        }
        out.push(FleetEffect::Adopt {
            cells: adopt,
            purpose: AdoptFor::Ask,
        });
        true
    }

    pub(super) fn ask_hand_off(&mut self, asks: Vec<(String, String)>) -> bool {
        let moves = asks
            .into_iter()
            .filter(|(c, _)| self.held.contains_key(c))
            .collect();
        self.stages
            .push_front(Stage::HandOff(moves, HandOffFor::Ask));
        false
    }

    /// Hands off every held cell the placement moved elsewhere, once held long enough;
    /// releases a cell placed elsewhere with no receiver named, once held a `scan`.
    pub(super) fn shed(&mut self, now: Now) -> bool {
        if self.mine.term == 0 {
            return false;
        }
        let mut moves = Vec::new();
        let mut release = Vec::new();
        for (c, h) in &self.held {
            let held_for = now.mono_ms.saturating_sub(h.since);
            if self.mine.targets.contains(c) || held_for < self.t.min_hold_ms {
                continue;
            }
            match self.mine.moves.get(c).filter(|to| **to != self.me) {
                Some(to) => moves.push((c.clone(), to.clone())),
                None if held_for >= self.t.scan_ms.max(self.t.min_hold_ms) => {
                    release.push(c.clone())
                }
                None => {}
            }
        }
        self.stages.push_front(Stage::Release(release));
        self.stages
            .push_front(Stage::HandOff(moves, HandOffFor::Shed));
        false
    }

    /// A hand-off's first step: the receivers' records, for their generations (a receiver
    /// that is leaving or unknown is refused).
    pub(super) fn read_receivers(
        &mut self,
        moves: Vec<(String, String)>,
        purpose: HandOffFor,
        out: &mut Vec<FleetEffect>,
    ) -> bool {
        if moves.is_empty() {
            return false;
        }
        let nodes = moves.iter().map(|(_, to)| to.clone()).collect();
        self.stages.push_front(Stage::HandOffSend(moves, purpose));
        out.push(FleetEffect::ReadReceivers { nodes });
        true
    }

    /// Sends the hand-offs to ready receivers; the others are refused.
    pub(super) fn send_hand_offs(
        &mut self,
        moves: Vec<(String, String)>,
        purpose: HandOffFor,
        out: &mut Vec<FleetEffect>,
    ) -> bool {
        let ready = std::mem::take(&mut self.receivers);
        let mut jobs = Vec::new();
        for (cell, to) in moves {
            match ready.get(&to).filter(|_| self.held.contains_key(&cell)) {
                Some(generation) => jobs.push((cell, to, generation.clone())),
                None if purpose == HandOffFor::Asked => {
                    let e = invalid(format!(
                        "{to} is leaving or unknown; {cell} not handed to it"
                    ));
                    out.push(FleetEffect::Reply(Err(e)));
                }
                None => {}
            }
        }
        if jobs.is_empty() {
            return false;
        }
        self.handing = Some(purpose);
        out.push(FleetEffect::HandOff { jobs, purpose });
        true
    }

    /// Tells what each hand-off did — only what is known: landed, not made, or (no
    /// verdict) left to the settlement; tells the receivers when the purpose asks for it.
    pub(super) fn handed_off(
        &mut self,
        now: Now,
        results: Vec<(String, String, HandOffOutcome)>,
        out: &mut Vec<FleetEffect>,
    ) {
        let purpose = self.handing.take().unwrap_or(HandOffFor::Shed);
        let mut told: std::collections::BTreeMap<String, Vec<Notice>> = Default::default();
        for (cell, to, outcome) in results {
            let landed = self.hand_off_done(&cell, &to, outcome, purpose, out);
            if landed && purpose.notify() {
                let n = self.notice(now, NoticeKind::Handed, &cell, &self.me);
                told.entry(to).or_default().push(n);
            }
            if landed {
                if let Some(l) = self.leaving.as_mut() {
                    l.handed_off.insert(cell);
                }
            }
        }
        if !told.is_empty() {
            out.push(FleetEffect::Post { to: told });
        }
    }

    /// One hand-off's outcome; whether it landed.
    fn hand_off_done(
        &mut self,
        cell: &str,
        to: &str,
        outcome: HandOffOutcome,
        purpose: HandOffFor,
        out: &mut Vec<FleetEffect>,
    ) -> bool {
        let Some(h) = self.held.remove(cell) else {
            return false;
        };
        let cell_owned = cell.to_owned();
        let (landed, reply) = match outcome {
            HandOffOutcome::Landed(epoch) => {
                let reason = StopReason::HandedOff {
                    to: to.to_owned(),
                    epoch,
                };
                out.push(FleetEffect::Remove {
                    cell: cell_owned,
                    reason: Some(reason),
                });
                let owner = Some(to.to_owned());
                self.learned(cell, Seen { owner, epoch }, out);
                (true, Ok(epoch))
            }
            HandOffOutcome::NotMade { lease_held, error } => {
                let reason = if lease_held {
                    StopReason::Closed
                } else {
                    StopReason::LeaseLost
                };
                out.push(FleetEffect::Remove {
                    cell: cell_owned,
                    reason: Some(reason),
                });
                // Still this node's in the store: adopted again next round.
                self.seen.remove(cell);
                self.orphans.insert(cell.to_owned());
                (false, Err(error))
            }
            HandOffOutcome::Unsettled { error } => {
                out.push(FleetEffect::Unsettle { cell: cell_owned });
                let u = Unsettled {
                    to: to.to_owned(),
                    epoch: h.epoch.saturating_add(1),
                };
                self.unsettled.insert(cell.to_owned(), u);
                (false, Err(error))
            }
        };
        if purpose == HandOffFor::Asked {
            out.push(FleetEffect::Reply(reply));
        }
        landed
    }

    /// Releases the held ones of `cells`.
    pub(super) fn release(&mut self, cells: Vec<String>, out: &mut Vec<FleetEffect>) -> bool {
        let cells: Vec<String> = cells
            .into_iter()
            .filter(|c| self.held.contains_key(c))
            .collect();
        if cells.is_empty() {
            return false;
        }
        out.push(FleetEffect::Release { cells });
        true
    }

    /// What the releases did: a released cell names nobody (its epoch kept); a failed one
    /// is still this node's in the store.
    pub(super) fn released(
        &mut self,
        results: Vec<(String, Result<(), bool>)>,
        out: &mut Vec<FleetEffect>,
    ) {
        for (cell, r) in results {
            let Some(h) = self.held.remove(&cell) else {
                continue;
            };
            match r {
                Ok(()) => {
                    let reason = Some(StopReason::Released);
                    out.push(FleetEffect::Remove {
                        cell: cell.clone(),
                        reason,
                    });
                    self.learned(
                        &cell,
                        Seen {
                            owner: None,
                            epoch: h.epoch,
                        },
                        out,
                    );
                    self.orphans.remove(&cell);
                    if let Some(l) = self.leaving.as_mut() {
                        l.released.insert(cell);
                    }
                }
                Err(lease_held) => {
                    let reason = if lease_held {
                        StopReason::Closed
                    } else {
                        StopReason::LeaseLost
                    };
                    out.push(FleetEffect::Remove {
                        cell: cell.clone(),
                        reason: Some(reason),
                    });
                    self.orphans.insert(cell);
                }
            }
        }
    }

    /// The application asks to hand `cell` to `to`: refused unless this node holds it and
    /// `to` is another node whose lease is live by one read.
    pub(super) fn hand_off_asked(
        &mut self,
        now: Now,
        cell: String,
        to: String,
        out: &mut Vec<FleetEffect>,
    ) {
        if self.busy() {
            let e = invalid("the fleet is leaving".into());
            return out.push(FleetEffect::Reply(Err(e)));
        }
        if !self.held.contains_key(&cell) {
            let e = invalid(format!("cell {cell} is not held by this node"));
            return out.push(FleetEffect::Reply(Err(e)));
        }
        if to == self.me {
            let e = invalid(format!("{to} is not another live member"));
            return out.push(FleetEffect::Reply(Err(e)));
        }
        self.stages.push_back(Stage::Asked(cell, to));
        self.advance(now, out);
    }

    pub(super) fn asked_check(
        &mut self,
        cell: String,
        to: String,
        out: &mut Vec<FleetEffect>,
    ) -> bool {
        out.push(FleetEffect::ObserveLease { node: to.clone() });
        self.stages.push_front(Stage::AskedSend(cell, to));
        true
    }

    /// The receiver's lease, observed: a live one gets the hand-off.
    pub(super) fn asked_observed(
        &mut self,
        now: Now,
        o: Option<Observation>,
        out: &mut Vec<FleetEffect>,
    ) {
        let live =
            o.is_some_and(|o| o.lease.is_some() && o.judge(now, &self.t.lease) != Liveness::Dead);
        let Some(Stage::AskedSend(cell, to)) = self.stages.pop_front() else {
            return;
        };
        if !live {
            let e = invalid(format!("{to} is not another live member"));
            return out.push(FleetEffect::Reply(Err(e)));
        }
        self.stages
            .push_front(Stage::HandOff(vec![(cell, to)], HandOffFor::Asked));
    }
}
