//! Taking cells: following this node's record, hearing its notices, the cells it wants, and
//! how it takes them.

use std::collections::{BTreeMap, BTreeSet};

use super::node::{Claimed, FleetCore, FleetEffect, HeadsFor, Mine, Read, Seen, Stage};
use super::record::{Assignment, Notice, NoticeKind};
use super::Now;
use crate::leader::LEADER_CELL;

impl FleetCore {
    /// This node's record was read: its own part written if it is out of date, the
    /// placement followed, the notices heard.
    pub(super) fn record_read(
        &mut self,
        now: Now,
        r: Read<Assignment>,
        out: &mut Vec<FleetEffect>,
    ) {
        if self.leaving.is_some() {
            // A drain reads its record for where its cells go, and for the cells handed to
            // it meanwhile (the store names it: it takes them, to give them on).
            if let Read::Found(a) = r {
                self.follow_assignment(&a, out);
                self.hear(now, a.notices);
            }
            return;
        }
        let a = match r {
            Read::Found(a) => a,
            Read::Absent => Assignment::empty(&self.me),
            Read::Failed => return self.read_again(now),
        };
        if a.generation != self.generation || a.leaving {
            out.push(FleetEffect::WriteOwn { leaving: false });
        }
        self.follow_assignment(&a, out);
        let for_leader = self.hear(now, a.notices);
        self.for_leader.extend(for_leader);
        self.read_again(now);
    }

    fn read_again(&mut self, now: Now) {
        let every = self.read_every(now.mono_ms);
        self.next_read = self.round_at.saturating_add(every);
    }

    /// Takes what the record places on this node, and tells the watcher its duty.
    pub(super) fn follow_assignment(&mut self, a: &Assignment, out: &mut Vec<FleetEffect>) {
        let duty = (a.watch.clone(), a.leader.clone());
        if self.duty != duty {
            self.duty = duty;
            out.push(FleetEffect::Duty {
                watched: a.watch.clone(),
                leader: a.leader.clone(),
            });
        }
        let targets = a.cells.iter().filter(|c| self.cells.contains(c));
        self.mine = Mine {
            term: a.term,
            leader: a.leader.clone(),
            targets: targets.cloned().collect(),
            heirs: a.heirs.clone(),
            moves: a.moves.clone(),
        };
    }

    /// Takes in new notices; returns those addressed to the leader.
    pub fn hear(&mut self, now: Now, notices: Vec<Notice>) -> Vec<Notice> {
        let oldest = self.oldest_notice(now);
        self.processed.retain(|n| n.at >= oldest);
        self.inherit.retain(|_, at| *at >= oldest);
        self.handed.retain(|_, at| *at >= oldest);
        let mut for_leader = Vec::new();
        for n in notices {
            if n.at < oldest || self.processed.contains(&n) {
                continue;
            }
            self.processed.insert(n.clone());
            let cell_known = self.cells.contains(&n.cell);
            match n.kind {
                // The leadership handed to this node: resumed at the next check, now.
                NoticeKind::Handed if n.cell == LEADER_CELL => self.next_leader_check = 0,
                NoticeKind::Inherit if cell_known => {
                    self.inherit.insert(n.cell, n.at);
                    self.next_take = 0;
                }
                NoticeKind::Handed if cell_known => {
                    self.handed.insert(n.cell, n.at);
                    self.next_take = 0;
                }
                NoticeKind::Ask if cell_known => {
                    self.asked.insert(n.cell, n.node);
                }
                NoticeKind::Suspect => self.keep_vigil(now),
                NoticeKind::Joined | NoticeKind::Leaving | NoticeKind::Gone => for_leader.push(n),
                _ => {}
            }
        }
        for_leader
    }

    /// The cells this node should take now — its target cells, cells it inherits from a
    /// dead node, cells handed to it, and cells the store names as its own, none held —
    /// and forgets waiting for the others.
    pub fn wanted(&mut self) -> BTreeSet<String> {
        let mut wanted: BTreeSet<String> = self.mine.targets.clone();
        wanted.extend(self.inherit.keys().cloned());
        wanted.extend(self.handed.keys().cloned());
        wanted.extend(self.orphans.iter().cloned());
        wanted.retain(|c| !self.held.contains_key(c) && !self.unsettled.contains_key(c));
        self.waiting.retain(|c, _| wanted.contains(c));
        wanted
    }

    /// Splits `wanted` into the cells to claim now — with no live owner known, or one this
    /// node was told is gone, or waited for too long (the claim then judges the owner by the
    /// observation rule) — and those whose head must be read first.
    pub fn free_of(&self, now: Now, wanted: BTreeSet<String>) -> (Vec<String>, Vec<String>) {
        let give_up = 2 * self.t.scan_ms;
        let sure = |c: &String| {
            let waited = self.waiting.get(c).map(|t| now.mono_ms.saturating_sub(*t));
            let seen_free = self
                .seen
                .get(c)
                .map(|s| s.owner.as_ref().is_none_or(|o| *o == self.me));
            self.inherit.contains_key(c)
                || self.handed.contains_key(c)
                || self.orphans.contains(c)
                || waited.is_some_and(|w| w >= give_up)
                || seen_free == Some(true)
        };
        wanted.into_iter().partition(sure)
    }

    /// Takes what this node should hold: the cells free of a live owner are claimed, the
    /// others' heads are read first.
    pub(super) fn take(&mut self, now: Now, out: &mut Vec<FleetEffect>) -> bool {
        let wanted = self.wanted();
        if wanted.is_empty() {
            return false;
        }
        let (take, unsure) = self.free_of(now, wanted);
        self.to_take = take;
        self.stages.push_front(Stage::Claim);
        if unsure.is_empty() {
            return false;
        }
        out.push(FleetEffect::ReadHeads {
            cells: unsure,
            purpose: HeadsFor::Take,
        });
        true
    }

    /// The heads of wanted cells were read: a cell with no live owner (or this node) is
    /// taken, one a live node holds is waited for (it hands it over).
    pub(super) fn free_by_heads(
        &mut self,
        now: Now,
        heads: Vec<(String, Seen)>,
        out: &mut Vec<FleetEffect>,
    ) {
        for (cell, head) in heads {
            self.saw(&cell, head.clone(), out);
            if head.owner.as_ref().is_none_or(|o| *o == self.me) {
                self.to_take.push(cell);
            } else {
                self.waiting.entry(cell).or_insert(now.mono_ms);
            }
        }
    }

    /// Asks for the cells waited for too long — and claims them too, which the core judges
    /// by the observation rule: `Busy` while their holder lives, taken at once when it is
    /// gone (a node that left before taking a cell handed to it) — then claims what is
    /// free.
    pub(super) fn claim(&mut self, now: Now, out: &mut Vec<FleetEffect>) -> bool {
        self.ask_for_waited(now, out);
        let cells = std::mem::take(&mut self.to_take);
        if cells.is_empty() {
            return false;
        }
        out.push(FleetEffect::Claim { cells });
        true
    }

    /// What the claims did: a shard for each cell held; a failed one is read again first
    /// next time (its owner may be live, or it moved).
    pub(super) fn claimed(
        &mut self,
        now: Now,
        results: Vec<(String, Claimed)>,
        out: &mut Vec<FleetEffect>,
    ) {
        for (cell, r) in results {
            match r {
                Claimed::Held { epoch, resumed } => {
                    self.inherit.remove(&cell);
                    self.handed.remove(&cell);
                    self.install(now, &cell, epoch, resumed, out);
                }
                Claimed::Busy | Claimed::Failed => {
                    self.seen.remove(&cell);
                    self.orphans.remove(&cell);
                }
            }
        }
    }

    /// Asks the holder of each target cell waited for too long to hand it over (at most once
    /// per `scan`): after a restart, or a hand-off it does not know of, it may not know it
    /// holds the cell.
    fn ask_for_waited(&mut self, now: Now, out: &mut Vec<FleetEffect>) {
        let at = now.mono_ms;
        let patience = self.t.settle_ms + self.t.min_hold_ms + 2 * self.t.interval_ms;
        let mut asks: BTreeMap<String, Vec<Notice>> = BTreeMap::new();
        for (cell, since) in &self.waiting {
            let due = at.saturating_sub(*since) >= patience
                && self
                    .asked_at
                    .get(cell)
                    .is_none_or(|t| at.saturating_sub(*t) >= self.t.scan_ms);
            let owner = self.seen.get(cell).and_then(|s| s.owner.clone());
            if let Some(owner) = owner.filter(|o| due && *o != self.me) {
                let n = self.notice(now, NoticeKind::Ask, cell, &self.me);
                asks.entry(owner).or_default().push(n);
            }
        }
        for n in asks.values().flatten() {
            self.asked_at.insert(n.cell.clone(), at);
            self.to_take.push(n.cell.clone());
        }
        if !asks.is_empty() {
            out.push(FleetEffect::Post { to: asks });
        }
    }
}
