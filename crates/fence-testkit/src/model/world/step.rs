//! The transitions: what may happen in a state (work due, faults, choices, time passing),
//! and each action taken.

use super::*;

/// What is left of the faults and choices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Budget {
    pub(super) faults: u8,
    pub(super) pauses: u8,
    pub(super) crashes: u8,
    pub(super) releases: u8,
    pub(super) hand_offs: u8,
    pub(super) collections: u8,
    pub(super) adopts: u8,
    pub(super) successions: u8,
}

impl FenceModel {
    /// Work a node must do before time may advance.
    pub(super) fn due(&self, w: &World, n: usize, out: &mut Vec<Action>) {
        let node = &w.nodes[n];
        if !node.alive || node.paused() {
            return;
        }
        let now = self.now(w, n);
        let lease_over = node.lease.as_ref().is_none_or(|l| l.is_finished());
        let idle = node.idle_everywhere(n, &w.parked);
        if lease_over && idle && !node.lease_busy {
            out.push(Action::Acquire(n as u8));
            if w.budget.successions > 0 && node.lease.is_some() {
                out.push(Action::Succeed(n as u8));
            }
        }
        if !node.lease_busy && node.wake.is_some_and(|t| t <= now.mono_ms) {
            out.push(Action::Wake(n as u8));
        }
    }

    /// Work node `n`'s tasks of the cell in place must do before time may advance.
    pub(super) fn due_in_cell(&self, w: &World, n: usize, out: &mut Vec<Action>) {
        let node = &w.nodes[n];
        if !node.alive || node.paused() {
            return;
        }
        let now = self.now(w, n);
        if let Some(Task {
            wait: Wait::Until(t),
            ..
        }) = &node.cell.task
        {
            if *t <= now.mono_ms {
                out.push(Action::Resume(n as u8));
            }
        }
        if let Some(Task {
            wait: Wait::Until(t),
            ..
        }) = &node.cell.side.task
        {
            if *t <= now.mono_ms {
                out.push(Action::ResumeSide(n as u8));
            }
        }
        let held = node.lease.as_ref().is_some_and(|l| l.is_held(now));
        let unclaimed =
            node.cell.claim.is_none() && node.register.epoch_of(w.cell_name()).is_none();
        if held && unclaimed && node.cell.task.is_none() && w.time >= node.cell.retry_at {
            out.push(Action::Claim(n as u8));
        }
        // The application settles an ambiguous append before anything else it does.
        if node.cell.pending.is_some() && node.cell.task.is_none() && w.time >= node.cell.retry_at {
            out.push(Action::Settle(n as u8));
        }
        // A node that appends but makes no choices appends as soon as it holds the cell,
        // during the chaos or after it.
        if n >= self.cfg.actors && n < self.cfg.appenders && self.may_append(node) {
            out.push(Action::Append(n as u8));
        }
    }

    /// Whether node `n`'s task may start an append of the cell in place now.
    fn may_append(&self, node: &Node) -> bool {
        let idle_claim = node.cell.task.is_none()
            && node.cell.collecting.is_none()
            && node.cell.claim.as_ref().is_some_and(|c| !c.ended());
        idle_claim && node.cell.appends_left > 0 && node.cell.pending.is_none()
    }

    pub(super) fn choices(&self, w: &World, n: usize, out: &mut Vec<Action>) {
        let node = &w.nodes[n];
        let b = &w.budget;
        if !node.alive {
            out.push(Action::Restart(n as u8));
            return;
        }
        if b.crashes > 0 {
            out.push(Action::Crash(n as u8));
        }
        if node.paused() {
            return;
        }
        if b.pauses > 0 {
            out.push(Action::Pause(n as u8, false));
            out.push(Action::Pause(n as u8, true));
        }
    }

    /// Node `n`'s choices in the cell in place.
    pub(super) fn choices_in_cell(&self, w: &World, n: usize, out: &mut Vec<Action>) {
        let node = &w.nodes[n];
        let b = &w.budget;
        if !node.alive || node.paused() {
            return;
        }
        let idle_claim = node.cell.task.is_none()
            && node.cell.collecting.is_none()
            && node.cell.claim.as_ref().is_some_and(|c| !c.ended());
        if idle_claim {
            if node.cell.writes_left > 0 {
                out.push(Action::Write(n as u8));
            }
            if b.releases > 0 {
                out.push(Action::Release(n as u8));
            }
            if b.hand_offs > 0 {
                out.push(Action::HandOff(n as u8));
            }
            if b.collections > 0 {
                out.push(Action::Collect(n as u8));
            }
            if self.may_append(node) {
                out.push(Action::Append(n as u8));
            }
        }
        // An adoption in a second task, whenever the lease is held: its register of claims
        // refuses it while another claim of the cell stands.
        let held = node
            .lease
            .as_ref()
            .is_some_and(|l| l.is_held(self.now(w, n)));
        if b.adopts > 0 && held && node.cell.side == Side::default() {
            out.push(Action::Adopt(n as u8));
        }
    }

    pub(super) fn tick(&self, w: &mut World) {
        w.time += self.cfg.tick_ms;
        for n in 0..w.nodes.len() {
            let node = &mut w.nodes[n];
            if node.paused_until.is_some_and(|t| t <= w.time) {
                node.paused_until = None;
                if node.suspended {
                    node.lag += w.time - node.paused_at;
                    node.suspended = false;
                }
            }
        }
        // Requests held up in the network land during the faults or never: once they are
        // over, what is still held up is lost.
        if !self.chaos(w) {
            w.net.retain(|r| r.state != ReqState::Orphan);
        }
        // Slow requests whose sender gave up.
        let mut i = 0;
        while i < w.net.len() {
            let r = &w.net[i];
            let from = r.from as usize;
            let expired = r.slow
                && r.state != ReqState::Orphan
                && !self.paused_sender(w, r)
                && (from == CO as usize || self.now(w, from).mono_ms > r.deadline);
            if expired {
                self.give_up(w, i, false);
            } else {
                i += 1;
            }
        }
    }
}

impl Model for FenceModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let nodes = (0..self.cfg.nodes).map(|_| self.fresh_node(1)).collect();
        let mut w = World {
            time: 0,
            nodes,
            store: Store {
                leases: vec![None; self.cfg.nodes],
                lease_versions: vec![0; self.cfg.nodes],
                cell: CellStore::default(),
            },
            net: Vec::new(),
            co: self.fresh_co(),
            budget: Budget {
                faults: self.cfg.faults,
                pauses: self.cfg.pauses,
                crashes: self.cfg.crashes,
                releases: self.cfg.releases,
                hand_offs: self.cfg.hand_offs,
                collections: self.cfg.collections,
                adopts: self.cfg.adopts,
                successions: self.cfg.successions,
            },
            hist: History::default(),
            parked: self.fresh_parked(),
            in_place: 0,
        };
        for n in 0..self.cfg.nodes {
            self.acquire(&mut w, n);
        }
        if self.cfg.canonical {
            self.canonical(&mut w);
        }
        vec![w]
    }

    fn actions(&self, w: &World, out: &mut Vec<Action>) {
        let mut due = Vec::new();
        for n in 0..w.nodes.len() {
            self.due(w, n, &mut due);
        }
        // Each cell's own work and choices, with the cell in place (cell 0 is).
        let mut cell_choices = Vec::new();
        for c in self.cells() {
            let view;
            let v = if c == 0 {
                w
            } else {
                view = w.viewing(c);
                &view
            };
            let (mut d, mut ch) = (Vec::new(), Vec::new());
            for n in 0..v.nodes.len() {
                self.due_in_cell(v, n, &mut d);
            }
            if self.chaos(v) {
                for n in 0..self.cfg.actors.min(v.nodes.len()) {
                    self.choices_in_cell(v, n, &mut ch);
                }
                let owned = v
                    .store
                    .cell
                    .head
                    .as_ref()
                    .is_some_and(|(h, _)| h.node.is_some());
                if v.co.left > 0 && v.co.write.is_none() && !v.co.reading && owned {
                    ch.push(Action::CoWrite);
                }
            }
            let at = |a| {
                if c == 0 {
                    a
                } else {
                    Action::At(c, Box::new(a))
                }
            };
            due.extend(d.into_iter().map(at));
            cell_choices.extend(ch.into_iter().map(at));
        }
        for (i, r) in w.net.iter().enumerate() {
            let paused = self.paused_sender(w, r);
            match &r.state {
                ReqState::InFlight => {
                    out.push(Action::Deliver(i));
                    let faulty = w.budget.faults > 0 && self.chaos(w) && !paused;
                    // Reads only ever come back late: a failed read is merely retried.
                    let write = r.op.is_write();
                    if faulty && write {
                        out.push(Action::Fault(i, Fault::HoldUp));
                        out.push(Action::Fault(i, Fault::Refuse));
                    }
                    if faulty && !r.slow {
                        out.push(Action::Fault(i, Fault::Slow));
                    }
                }
                ReqState::Landed(_) if !paused => {
                    out.push(Action::Answer(i));
                    let write = r.op.is_write();
                    if w.budget.faults > 0 && self.chaos(w) && write {
                        out.push(Action::Fault(i, Fault::LoseAnswer));
                    }
                }
                ReqState::Landed(_) => {}
                // An orphan lands now, or later, or never: it is lost for good when the
                // chaos ticks end (`tick`). There is no step that loses it sooner: no
                // property and no node reads an orphan that has not landed, so a path that
                // lost it sooner is the path that never lands it, a state for a state.
                ReqState::Orphan => out.push(Action::Deliver(i)),
            }
        }
        out.extend(due.iter().cloned());
        if self.chaos(w) {
            for n in 0..self.cfg.actors.min(w.nodes.len()) {
                self.choices(w, n, out);
            }
            out.extend(cell_choices);
        } else {
            // After the chaos, crashed processes come back.
            for n in 0..w.nodes.len() {
                if !w.nodes[n].alive {
                    out.push(Action::Restart(n as u8));
                }
            }
        }
        if due.is_empty() && self.quiet(w) && w.time < self.horizon() {
            out.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut w = last.clone();
        w.hist.end_pulses();
        for p in &mut w.parked {
            p.hist.end_pulses();
        }
        if !self.apply(&mut w, action) {
            return None;
        }
        if self.cfg.canonical {
            self.canonical(&mut w);
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        props::all()
    }

    fn within_boundary(&self, w: &World) -> bool {
        w.time <= self.horizon()
    }
}

impl FenceModel {
    /// Takes `action` in `w`; `false` if it does nothing.
    fn apply(&self, w: &mut World, action: Action) -> bool {
        match action {
            Action::Tick => self.tick(w),
            Action::Deliver(i) => {
                let outcome = self.land(w, i);
                match w.net[i].state {
                    ReqState::Orphan => {
                        w.net.remove(i);
                    }
                    _ if w.net[i].slow || self.sender_paused(w, i) => {
                        w.net[i].state = ReqState::Landed(outcome);
                    }
                    _ => self.answer(w, i, Some(outcome), false),
                }
            }
            Action::Answer(i) => {
                let ReqState::Landed(outcome) = w.net[i].state.clone() else {
                    return false;
                };
                self.answer(w, i, Some(outcome), false);
            }
            Action::Fault(i, fault) => {
                w.budget.faults -= 1;
                match fault {
                    Fault::Slow => w.net[i].slow = true,
                    Fault::LoseAnswer | Fault::HoldUp => self.give_up(w, i, false),
                    Fault::Refuse => self.give_up(w, i, true),
                }
            }
            Action::Wake(n) => {
                w.nodes[n as usize].wake = None;
                self.lease_step(w, n as usize, LeaseEvent::Tick);
            }
            Action::Resume(n) => {
                if !self.resume_task(w, n as usize) {
                    return false;
                }
            }
            Action::Acquire(n) => self.acquire(w, n as usize),
            Action::Succeed(n) => {
                w.budget.successions -= 1;
                let n = n as usize;
                let lapsed = w.nodes[n].generation();
                self.acquire_as(w, n, lapsed);
            }
            Action::Adopt(n) => {
                w.budget.adopts -= 1;
                let n = n as usize;
                self.on_side(w, n, |w| self.start_flow(w, n, true));
                // Refused by the register, or under way.
                w.hist.adopted = w.nodes[n].cell.side.task.is_some();
            }
            Action::ResumeSide(n) => {
                let n = n as usize;
                let mut resumed = false;
                self.on_side(w, n, |w| resumed = self.resume_task(w, n));
                if !resumed {
                    return false;
                }
            }
            Action::Claim(n) => self.start_claim(w, n as usize),
            Action::Write(n) => {
                let n = n as usize;
                let k = self.cfg.writes - w.nodes[n].cell.writes_left + 1;
                w.nodes[n].cell.writes_left -= 1;
                self.start_change(w, n, ChangeKind::Write(data_id(n, k)));
            }
            Action::Release(n) => {
                w.budget.releases -= 1;
                self.start_change(w, n as usize, ChangeKind::Release);
            }
            Action::HandOff(n) => {
                w.budget.hand_offs -= 1;
                self.start_change(w, n as usize, ChangeKind::HandOff);
            }
            Action::Collect(n) => {
                w.budget.collections -= 1;
                self.start_collect(w, n as usize);
            }
            Action::Append(n) => self.start_append(w, n as usize),
            Action::Settle(n) => self.start_settle(w, n as usize),
            Action::CoWrite => {
                w.co.left -= 1;
                w.co.reading = true;
                let bound = self.lease_cfg[0].attempt_max_ms;
                self.send(w, CO as usize, Thread::Co, Op::GetHead, bound);
            }
            Action::Pause(n, suspend) => {
                w.budget.pauses -= 1;
                let until = w.time + u64::from(self.cfg.pause_ticks) * self.cfg.tick_ms;
                let node = &mut w.nodes[n as usize];
                node.paused_until = Some(until);
                node.suspended = suspend;
                node.paused_at = w.time;
            }
            Action::Crash(n) => {
                w.budget.crashes -= 1;
                self.crash(w, n as usize);
            }
            Action::Restart(n) => {
                let n = n as usize;
                let incarnation = w.nodes[n].incarnation + 1;
                self.reset_node(w, n, incarnation, true);
                self.acquire(w, n);
            }
            Action::At(c, action) => return self.in_cell(w, c, |w| self.apply(w, *action)),
        }
        true
    }

    pub(super) fn crash(&self, w: &mut World, n: usize) {
        self.each_cell(w, |w| {
            let node = &mut w.nodes[n];
            node.cell.task = None;
            node.cell.claim = None;
            node.cell.side = Side::default();
            node.cell.collecting = None;
        });
        let node = &mut w.nodes[n];
        node.alive = false;
        node.lease = None;
        node.paused_until = None;
        node.suspended = false;
        let from = n as u8;
        // Its requests still travel: unlanded writes may land; answers go nowhere.
        w.net.retain_mut(|r| {
            if r.from != from || r.thread == Thread::Co {
                return true;
            }
            let write = r.op.is_write();
            let keep = r.state == ReqState::InFlight && write || r.state == ReqState::Orphan;
            r.state = ReqState::Orphan;
            keep
        });
    }
}
