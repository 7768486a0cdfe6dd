//! Leading: the leader's round on the node holding the leadership cell, and elsewhere the
//! attempt at that cell now and then, and the join notice.

use super::lead::{Death, LeadInput, LeadStep, LeaderCore};
use super::node::{Claimed, FleetCore, FleetEffect, HeadsFor, Seen, Stage};
use super::record::NoticeKind;
use super::Now;
use crate::leader::LEADER_CELL;

impl FleetCore {
    /// The leader's round on the leader; elsewhere, now and then (and at once when unplaced
    /// or when the leader died), an attempt at the leadership cell — taken only when its
    /// holder is gone by the observation rule — and a join notice to the leader.
    pub(super) fn lead(&mut self, now: Now, out: &mut Vec<FleetEffect>) -> bool {
        if let Some(l) = self.leader.as_mut() {
            let notices = std::mem::take(&mut self.for_leader);
            let step = l.round(now, notices);
            return self.lead_step(step, out);
        }
        self.for_leader.clear();
        if now.mono_ms < self.next_leader_check {
            return false;
        }
        self.next_leader_check = now.mono_ms + self.t.scan_ms;
        out.push(FleetEffect::ClaimLeadership);
        true
    }

    /// The leader asks for an effect (the round waits), or its round is done: the deaths it
    /// found are buried one by one.
    fn lead_step(&mut self, step: LeadStep, out: &mut Vec<FleetEffect>) -> bool {
        match step {
            LeadStep::Effect(e) => {
                out.push(FleetEffect::Lead(e));
                true
            }
            LeadStep::Done(deaths) => {
                if !deaths.is_empty() && self.leaving.is_none() {
                    self.stages.push_front(Stage::Bury(deaths));
                }
                false
            }
        }
    }

    /// An answer to the leader's effect.
    pub(super) fn lead_input(&mut self, now: Now, input: LeadInput, out: &mut Vec<FleetEffect>) {
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let step = l.step(now, input);
        self.lead_step(step, out);
    }

    /// What the attempt at the leadership cell did: a takeover when taken; a join notice
    /// to the leader when a live node holds it.
    pub(super) fn leadership_claimed(&mut self, now: Now, c: Claimed, out: &mut Vec<FleetEffect>) {
        match c {
            Claimed::Held { epoch, .. } => {
                let mut l = LeaderCore::new(
                    &self.me,
                    epoch,
                    self.cells.clone(),
                    self.t.clone(),
                    self.flaws,
                );
                let step = l.take_over();
                self.leader = Some(l);
                self.joined = true;
                self.lead_step(step, out);
            }
            Claimed::Failed => self.next_leader_check = now.mono_ms + self.t.interval_ms,
            Claimed::Busy if !self.joined => {
                let cells = vec![LEADER_CELL.to_owned()];
                self.stages.push_front(Stage::JoinRead(cells));
            }
            Claimed::Busy => {}
        }
    }

    pub(super) fn join_read(&mut self, cells: Vec<String>, out: &mut Vec<FleetEffect>) -> bool {
        out.push(FleetEffect::ReadHeads {
            cells,
            purpose: HeadsFor::Join,
        });
        true
    }

    /// The leadership's head was read: its holder is told this node is here (once per
    /// lease).
    pub(super) fn join(&mut self, heads: Vec<(String, Seen)>) {
        let leader = heads.into_iter().find(|(c, _)| c == LEADER_CELL);
        let Some(leader) = leader.and_then(|(_, h)| h.owner).filter(|l| *l != self.me) else {
            return;
        };
        self.stages.push_front(Stage::JoinPost(leader));
    }

    pub(super) fn join_post(
        &mut self,
        now: Now,
        leader: String,
        out: &mut Vec<FleetEffect>,
    ) -> bool {
        let notice = self.notice(now, NoticeKind::Joined, "", &self.me);
        out.push(FleetEffect::Join { leader, notice });
        true
    }

    /// Buries the deaths the leader found, one at a time.
    pub(super) fn bury(&mut self, mut deaths: Vec<Death>, out: &mut Vec<FleetEffect>) -> bool {
        if deaths.is_empty() {
            return false;
        }
        let first = deaths.remove(0);
        if !deaths.is_empty() {
            self.stages.push_front(Stage::Bury(deaths));
        }
        out.push(FleetEffect::Bury(first));
        true
    }
}
