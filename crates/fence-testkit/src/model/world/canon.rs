//! The canonical form of a state: what cannot affect the future is forgotten, so paths that
//! differ only in it meet in one state.
//!
//! Each rule below is sound in the same way: two states that differ only in what the rule
//! erases have the same successors (up to the same erasure) and the same verdict on every
//! property, so exploring one of them explores both. For each field the comment names
//! every place that reads it and why none of them can read the erased value.

use super::{Budget, FenceModel, Node, Op, Req, ReqState, Thread, World};

impl FenceModel {
    /// Brings `w` to its canonical form (after every step, and for the initial state).
    pub(super) fn canonical(&self, w: &mut World) {
        let keep_last_written = self.keeps_last_written();
        for n in 0..w.nodes.len() {
            if !w.nodes[n].alive {
                // A crashed process: `Restart` replaces the node by a fresh one in every
                // cell (`reset_node`) and keeps only its incarnation; nothing else reads a
                // dead node (`due`, `due_in_cell`, `choices`, `choices_in_cell`,
                // `believes_in` and `answer` look at `alive` first, and the crash turned
                // every request of it into an orphan).
                let incarnation = w.nodes[n].incarnation;
                self.reset_node(w, n, incarnation, false);
                continue;
            }
            canonical_node(&mut w.nodes[n]);
            self.each_cell(w, |w| {
                let time = w.time;
                canonical_node_cell(&mut w.nodes[n], time, keep_last_written);
            });
        }
        if !self.chaos(w) {
            self.spend_all(w);
        }
        self.each_cell(w, forget_refusals_that_cannot_land);
        let may_turn_slow = w.budget.faults > 0 && self.chaos(w);
        for r in &mut w.net {
            canonical_req(r, may_turn_slow);
        }
        // The network is a multiset: nothing reads its order but `tick`, which times out
        // slow requests in order. Sorting by sender (stably) keeps each sender's requests in
        // the order they were sent, and only changes the order in which *different* senders
        // learn of their timeouts within one tick. Those handlers commute: each changes only
        // its sender's own state (node or co-writer), appends requests (whose order this sort
        // then fixes), and updates the history by commutative steps (a sorted set of
        // epochs, a maximum, flags). The one exception is which property a breach names
        // when two different ones happen in the same tick; a breach is reported either way.
        w.net.sort_by_key(|r| r.from);
    }

    /// Once the chaos ticks are over (time never goes back), what is left of the budgets
    /// can no longer be spent: faults are offered, and choices made, only during them
    /// (`actions`, `choices`), so the paths that spent their budget and those that kept it
    /// meet.
    fn spend_all(&self, w: &mut World) {
        w.budget = Budget {
            faults: 0,
            pauses: 0,
            crashes: 0,
            releases: 0,
            hand_offs: 0,
            collections: 0,
            adopts: 0,
            // Not spent: a lapsed lease is taken back (`Succeed`, in `due`) whenever it
            // lapses, also after the chaos ticks.
            successions: w.budget.successions,
        };
        // (A node that appends without making choices appends after the chaos too.)
        let actors = self.cfg.actors;
        self.each_cell(w, |w| {
            w.co.left = 0;
            for node in w.nodes.iter_mut().take(actors) {
                node.cell.writes_left = 0;
                node.cell.appends_left = 0;
            }
        });
    }

    /// Only the switch `rollback-acknowledged` reads what a process last wrote (it makes a
    /// claim carry it instead of the current payload).
    fn keeps_last_written(&self) -> bool {
        #[cfg(feature = "sabotage")]
        {
            self.cfg.sabotage == Some(fence_core::sabotage::Sabotage::RollbackAcknowledged)
        }
        #[cfg(not(feature = "sabotage"))]
        {
            false
        }
    }
}

fn canonical_node(node: &mut Node) {
    // `paused_at` is read only while the node is suspended (its frozen monotonic clock in
    // `now`, its lag when the pause ends in `tick`); `Pause` sets it anew.
    if !node.suspended {
        node.paused_at = 0;
    }
    // `authority_sent` is read only while the node's lease is held (the authority property
    // in props.rs); a finished lease is never held again, and a new one starts without it
    // (`acquire_as`). An orphan of the finished lease landing sets it again, and this rule
    // erases it again.
    if node.lease.as_ref().is_none_or(|l| l.is_finished()) {
        node.authority_sent = None;
    }
}

/// The node's part of the cell in place.
fn canonical_node_cell(node: &mut Node, time: u64, keep_last_written: bool) {
    // `retry_at` is read only as `time >= retry_at` (in `due_in_cell`); time never goes back, so
    // once it has passed it reads as 0 does.
    if node.cell.retry_at <= time {
        node.cell.retry_at = 0;
    }
    if !keep_last_written {
        node.cell.last_written = None;
    }
}

/// The history's refused data writes (of the cell in place) are read only when a data
/// write lands (`head_lands`: was it refused?); recording a refusal reads whether the
/// write already landed, not the set. A refusal is recorded when the write's task is over,
/// so from then on only a request of it still travelling can land it: a refused write that
/// no request in the network carries any more can never land, and is forgotten.
fn forget_refusals_that_cannot_land(w: &mut World) {
    if w.hist.refused.is_empty() {
        return;
    }
    let cell = w.in_place;
    let travelling = |id: u8| {
        w.net.iter().any(|r| {
            r.cell == cell
                && !matches!(r.state, ReqState::Landed(_))
                && matches!(r.op, Op::PutHead { data: Some(d), .. } if d == id)
        })
    };
    let keep: Vec<u8> = w
        .hist
        .refused
        .iter()
        .copied()
        .filter(|id| travelling(*id))
        .collect();
    w.hist.refused = keep;
}

fn canonical_req(r: &mut Req, may_turn_slow: bool) {
    match r.state {
        ReqState::Orphan => {
            // An orphan is only ever landed (`land` reads its sender, its cell and its
            // operation: those stay) or
            // dropped: its sender gave up, so no answer reaches anyone (`give_up` answered
            // the sender when it made the orphan), and `tick` and `quiet` skip orphans.
            r.incarnation = 0;
            r.thread = Thread::Lease;
            r.slow = false;
            r.deadline = 0;
        }
        // The deadline is read only for slow requests (`tick`); a request turns slow only
        // in flight, by a fault during the chaos ticks (time never goes back, the fault
        // budget never grows).
        _ if r.slow => {}
        ReqState::InFlight if may_turn_slow => {}
        ReqState::InFlight | ReqState::Landed(_) => r.deadline = 0,
    }
}
