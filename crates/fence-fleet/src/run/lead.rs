//! Leading: the leader's round on the node holding the leadership cell, and elsewhere the
//! attempt at that cell now and then, and the join notice.

use std::sync::Arc;

use fence_core::ErrorKind;
use tracing::debug;

use super::Run;
use crate::assignment::{self, Notice, NoticeKind};
use crate::leader::{Leader, Timing, LEADER_CELL};

impl Run {
    fn timing(&self) -> Timing {
        Timing {
            interval_ms: self.s.interval_ms,
            settle_ms: self.s.settle_ms,
            scan_ms: self.s.scan_ms,
            moves_ms: self.s.notices_ms,
            bound_ms: self.bound_ms(),
        }
    }

    /// The leader's round on the leader; elsewhere, now and then (and at once when unplaced
    /// or when the leader died), an attempt at the leadership cell — taken only when its
    /// holder is gone by the observation rule — and a join notice to the leader.
    pub(super) async fn lead(&mut self, notices: Vec<Notice>) {
        if let Some(l) = &mut self.leader {
            let deaths = l.round(notices).await;
            for d in deaths {
                let buried = self.tombstoner.bury(&d.node, &d.seen, &d.heirs, false, "");
                for cell in buried.await.map(|(_, mine)| mine).unwrap_or_default() {
                    self.inherit.insert(cell, self.wall());
                    self.next_take = 0;
                }
            }
            return;
        }
        let now = self.now();
        if now < self.next_leader_check {
            return;
        }
        self.next_leader_check = now + self.s.scan_ms;
        let vouched: Vec<String> = self.vouched.iter().cloned().collect();
        match self.lease.claim_or_resume(LEADER_CELL, &vouched).await {
            Ok((claim, _)) => {
                let (cells, filter) = (self.cells.clone(), self.s.filter.clone());
                let claim = Arc::new(claim);
                let l = Leader::take_over(&self.fence, claim, cells, filter, self.timing()).await;
                self.leader = Some(l);
                self.joined = true;
                return;
            }
            Err(e) if e.kind() != ErrorKind::Busy => {
                debug!(node = %self.inner.node, error = %e, "leadership not checked");
                self.next_leader_check = now + self.s.interval_ms;
                return;
            }
            Err(_) => {}
        }
        if !self.joined {
            self.join().await;
        }
    }

    /// Tells the leader this node is here (once per lease).
    async fn join(&mut self) {
        let read = self.fence.ownership().read_head(LEADER_CELL);
        let Some(Ok(Some((head, _)))) = self.fence.clock().timeout(self.bound_ms(), read).await
        else {
            return;
        };
        let Some(leader) = head.node.filter(|l| *l != self.inner.node) else {
            return;
        };
        let me = self.me();
        let joined = self.notice(NoticeKind::Joined, "", &me);
        let oldest = self.oldest_notice();
        let r = assignment::notify(&self.fence, &leader, vec![joined], oldest, self.bound_ms());
        self.joined = r.await.is_ok();
    }
}
