//! Watching one node's lease, cheaply and promptly.
//!
//! A death is confirmed by the core's observation rule: the record seen unchanged for a full
//! TTL, counted from the first read that returned it. So a watcher that first sees the dead
//! node's last renewal late confirms the death late. Reading every few hundred milliseconds
//! would see it at once, at a price; this watcher reads once per renewal period instead,
//! just after the renewal is due: the record's `expires_ms` (the holder's wall clock at its
//! renewal, plus its TTL) says when the holder sends the next one — `expires_ms - TTL +
//! TTL/3` by its clock. A read that comes too early (the renewal not there yet: clocks that
//! disagree, a slow store) is repeated a margin later, and the lateness learned shifts later
//! reads; a record whose clock is far off is simply read once per renewal period. Clocks only
//! decide when to read, never what a read proves.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use fence_core::decide::{Liveness, Now, Observation};
use fence_core::runtime::Fence;
use fence_core::CasGuard;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info};

use crate::assignment::{self, Notice, NoticeKind, Watched};

/// Early reads in a row after which the watcher stops re-reading and waits for the moment
/// the observation rule can confirm a death.
const EARLY_RETRIES: u32 = 2;

/// A record unchanged for this many renewal periods (in halves) is overdue: its heirs are
/// told to watch their records closely.
const OVERDUE_HALF_PERIODS: u64 = 3;

/// The schedule of reads of one watched node's lease.
#[derive(Clone, Debug, Default)]
pub(crate) struct Schedule {
    /// When (monotonic ms) to read next; 0: at once.
    pub(crate) next_mono: u64,
    /// Reads in a row that found the record unchanged.
    early: u32,
    /// How much later than the record's schedule renewals have been landing, learned.
    lateness_ms: u64,
    /// The record state (version, nonce) last read.
    last: Option<(String, String)>,
    /// The heirs were told the renewal is overdue (until the record changes).
    pub(crate) suspected: bool,
}

impl Schedule {
    pub(crate) fn due(&self, now_mono: u64) -> bool {
        now_mono >= self.next_mono
    }

    /// Plans the next read after one that returned `seen`, judged `verdict`, at `now`.
    /// `ttl_ms` is ours (used when the record states none); `margin_ms` is how long after a
    /// renewal's due time a read should come.
    pub(crate) fn after_read(
        &mut self,
        seen: &Observation,
        verdict: Liveness,
        now: Now,
        ttl_ms: u64,
        margin_ms: u64,
    ) {
        let Liveness::Live { until_mono } = verdict else {
            self.next_mono = u64::MAX;
            return;
        };
        let state = seen
            .lease
            .as_ref()
            .map(|l| (l.version.as_str().to_owned(), l.nonce.clone()));
        let renewed = state != self.last;
        self.last = state;
        let ttl = seen.lease.as_ref().and_then(|l| l.ttl_ms).unwrap_or(ttl_ms);
        let period = (ttl / 3).max(1);
        let overdue_at = seen.first_seen_mono + OVERDUE_HALF_PERIODS * period / 2;
        let next = if renewed {
            self.early = 0;
            self.suspected = false;
            self.lateness_ms -= self.lateness_ms / 8;
            let due_wall = seen.lease.as_ref().map_or(0, |l| {
                l.record
                    .expires_ms
                    .saturating_sub(ttl)
                    .saturating_add(period)
            });
            let wait = due_wall.saturating_sub(now.wall_ms);
            let aligned = now.mono_ms + wait + margin_ms + self.lateness_ms;
            aligned.clamp(now.mono_ms + margin_ms, now.mono_ms + period + margin_ms)
        } else if self.early < EARLY_RETRIES {
            self.early += 1;
            self.lateness_ms = (self.lateness_ms + margin_ms).min(period / 2);
            now.mono_ms + margin_ms
        } else if !self.suspected && now.mono_ms < overdue_at {
            overdue_at
        } else {
            until_mono
        };
        // The moment the rule can confirm a death is never skipped.
        self.next_mono = next.min(until_mono).max(now.mono_ms + 1);
    }

    /// Whether the record read last (first seen at `first_seen_mono`) is overdue at
    /// `now_mono` and the heirs were not told yet.
    pub(crate) fn overdue(&self, seen: &Observation, now_mono: u64, ttl_ms: u64) -> bool {
        let ttl = seen.lease.as_ref().and_then(|l| l.ttl_ms).unwrap_or(ttl_ms);
        let period = (ttl / 3).max(1);
        let overdue_at = seen.first_seen_mono + OVERDUE_HALF_PERIODS * period / 2;
        !self.suspected && now_mono >= overdue_at
    }

    /// After a read that failed: try again a margin later.
    pub(crate) fn after_failure(&mut self, now_mono: u64, margin_ms: u64) {
        self.next_mono = now_mono + margin_ms.max(1);
    }
}

/// What a node's task tells its watcher: whom to watch (with the heir of each of that
/// node's cells) and who leads.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Duty {
    pub(crate) watched: Vec<Watched>,
    pub(crate) leader: String,
}

/// What the watcher tells its node's task.
#[derive(Debug)]
pub(crate) enum News {
    /// A death it handled: the cells this node inherits (the leader hears of it when this
    /// node leads; the dead node may have led).
    Buried { node: String, inherit: Vec<String> },
    /// This node is an heir of an overdue node: read the record closely for a while.
    Overdue,
}

/// Tombstones a dead node's lease and tells its heirs; used by the watcher and the leader.
#[derive(Clone)]
pub(crate) struct Tombstoner {
    pub(crate) fence: Fence,
    pub(crate) known: Arc<crate::cells::Cells>,
    pub(crate) bound_ms: u64,
    pub(crate) notices_ms: u64,
}

impl Tombstoner {
    fn me(&self) -> &str {
        self.fence.ownership().node()
    }

    fn notice(&self, kind: NoticeKind, cell: &str, node: &str) -> Notice {
        Notice {
            at: self.fence.clock().wall_ms(),
            kind,
            cell: cell.to_owned(),
            node: node.to_owned(),
        }
    }

    /// `node` is dead by this node's observation `seen`: tombstones its lease (a released
    /// record written by compare-and-swap over the version observed, so it lands only if
    /// the holder never renewed since — and then it never can), tells the heirs of its cells
    /// (unless it released its lease itself: it handed or released its cells) and the
    /// `leader` (unless that is this node, or the dead one). Returns whether this node
    /// tombstoned it (`tombstoned`: it did before) and the cells this node inherits, or
    /// `None` if it must be tried again.
    pub(crate) async fn bury(
        &self,
        node: &str,
        seen: &Observation,
        heirs: &BTreeMap<String, String>,
        tombstoned: bool,
        leader: &str,
    ) -> Option<(bool, Vec<String>)> {
        let lease = seen.lease.as_ref()?;
        let released = lease.record.is_released() && !tombstoned;
        if !lease.record.is_released() {
            let mut record = lease.record.clone();
            record.expires_ms = 0;
            let guard = CasGuard::Match(lease.version.clone());
            let cas = self.fence.ownership().cas_node_lease(guard, &record);
            match self.fence.clock().timeout(self.bound_ms, cas).await {
                Some(Ok(fence_core::LeaseCasOutcome::Applied { .. })) => {
                    info!(
                        node = self.me(),
                        dead = node,
                        "lease tombstoned: its heirs take its cells"
                    );
                }
                // It moved since: a late renewal or a new process. Watched afresh.
                Some(Ok(fence_core::LeaseCasOutcome::Rejected)) => return Some((false, vec![])),
                _ => return None,
            }
        }
        let mut told: BTreeMap<String, Vec<Notice>> = BTreeMap::new();
        let mut mine = Vec::new();
        if !released {
            for (cell, heir) in heirs.iter().filter(|(c, _)| self.known.contains(c)) {
                if heir == self.me() {
                    mine.push(cell.clone());
                } else {
                    let n = self.notice(NoticeKind::Inherit, cell, node);
                    told.entry(heir.clone()).or_default().push(n);
                }
            }
        }
        if !leader.is_empty() && leader != self.me() && leader != node {
            let gone = self.notice(NoticeKind::Gone, "", node);
            told.entry(leader.to_owned()).or_default().push(gone);
        }
        self.post(told).await;
        Some((!released, mine))
    }

    async fn post(&self, told: BTreeMap<String, Vec<Notice>>) {
        let oldest = self.fence.clock().wall_ms().saturating_sub(self.notices_ms);
        let sent = told.into_iter().map(|(to, notices)| async move {
            let r = assignment::notify(&self.fence, &to, notices, oldest, self.bound_ms).await;
            if let Err(e) = r {
                debug!(node = self.me(), to, error = %e, "notice not posted");
            }
        });
        futures::future::join_all(sent).await;
    }
}

/// A node this node watches.
struct Watching {
    heirs: BTreeMap<String, String>,
    schedule: Schedule,
    /// This node tombstoned its lease: its heirs were told to take its cells.
    tombstoned: bool,
}

/// The watcher: a task of its own, so a node's slow round (many heads to poll, a slow
/// store) never delays a read that confirms a death.
pub(crate) struct Watcher {
    pub(crate) tombstoner: Tombstoner,
    pub(crate) scan_ms: u64,
    pub(crate) duty: watch::Receiver<Duty>,
    pub(crate) news: mpsc::UnboundedSender<News>,
    watching: BTreeMap<String, Watching>,
}

impl Watcher {
    pub(crate) fn new(
        tombstoner: Tombstoner,
        scan_ms: u64,
        duty: watch::Receiver<Duty>,
        news: mpsc::UnboundedSender<News>,
    ) -> Self {
        Watcher {
            tombstoner,
            scan_ms,
            duty,
            news,
            watching: BTreeMap::new(),
        }
    }

    /// Runs until its node's task drops the duty's sender.
    pub(crate) async fn run(mut self) {
        let clock = self.tombstoner.fence.clock().clone();
        loop {
            let next = self.watching.values().map(|w| w.schedule.next_mono).min();
            let next = next.unwrap_or(u64::MAX);
            tokio::select! {
                changed = self.duty.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.follow();
                    continue;
                }
                _ = clock.sleep_until(next), if next != u64::MAX => {}
            }
            self.read_due().await;
        }
    }

    fn follow(&mut self) {
        let duty = self.duty.borrow_and_update().clone();
        let me = self.tombstoner.me().to_owned();
        let listed: HashSet<&String> = duty.watched.iter().map(|w| &w.node).collect();
        self.watching.retain(|n, _| listed.contains(n));
        for w in duty.watched.iter().filter(|w| w.node != me) {
            let entry = self.watching.entry(w.node.clone()).or_insert(Watching {
                heirs: BTreeMap::new(),
                schedule: Schedule::default(),
                tombstoned: false,
            });
            entry.heirs = w.heirs.clone();
        }
    }

    /// Reads the lease of each watched node whose read is due; handles a death.
    async fn read_due(&mut self) {
        let fence = self.tombstoner.fence.clone();
        let cfg = fence.config().clone();
        let margin = (cfg.poll_ms() / 2).max(1);
        let now = fence.clock().mono_ms();
        let due: Vec<String> = self
            .watching
            .iter()
            .filter(|(_, w)| w.schedule.due(now))
            .map(|(n, _)| n.clone())
            .collect();
        for node in due {
            let seen = fence
                .observer()
                .observe(&fence, &node, self.tombstoner.bound_ms)
                .await;
            let now = Now {
                mono_ms: fence.clock().mono_ms(),
                wall_ms: fence.clock().wall_ms(),
            };
            let Some(w) = self.watching.get_mut(&node) else {
                continue;
            };
            let o = match seen {
                Ok(o) => o,
                Err(e) => {
                    debug!(node, error = %e, "watched lease not read");
                    w.schedule.after_failure(now.mono_ms, margin);
                    continue;
                }
            };
            let verdict = o.judge(now, &cfg);
            w.schedule.after_read(&o, verdict, now, cfg.ttl_ms, margin);
            if verdict != Liveness::Dead && w.schedule.overdue(&o, now.mono_ms, cfg.ttl_ms) {
                w.schedule.suspected = true;
                let heirs = w.heirs.clone();
                self.warn_heirs(&node, &heirs).await;
                continue;
            }
            if verdict != Liveness::Dead || o.lease.is_none() {
                continue;
            }
            // Until the leader re-plans without it, the death is told again each `scan`.
            w.schedule.next_mono = now.mono_ms.saturating_add(self.scan_ms);
            let (heirs, tombstoned) = (w.heirs.clone(), w.tombstoned);
            let leader = self.duty.borrow().leader.clone();
            let buried = self
                .tombstoner
                .bury(&node, &o, &heirs, tombstoned, &leader)
                .await;
            let Some(w) = self.watching.get_mut(&node) else {
                continue;
            };
            match buried {
                Some((t, inherit)) => {
                    w.tombstoned |= t;
                    let _ = self.news.send(News::Buried { node, inherit });
                }
                None => w.schedule.after_failure(now.mono_ms, margin),
            }
        }
    }

    /// Tells the heirs of `node`'s cells that its renewal is overdue, so they read their
    /// records often until the verdict (a death is then taken over within a poll of its
    /// confirmation, not an interval).
    async fn warn_heirs(&self, node: &str, heirs: &BTreeMap<String, String>) {
        let t = &self.tombstoner;
        let mut told: BTreeMap<String, Vec<Notice>> = BTreeMap::new();
        for heir in heirs.values().collect::<HashSet<_>>() {
            if heir == t.me() {
                let _ = self.news.send(News::Overdue);
            } else {
                let n = t.notice(NoticeKind::Suspect, "", node);
                told.entry(heir.clone()).or_default().push(n);
            }
        }
        t.post(told).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fence_core::decide::ObservedLease;
    use fence_core::{NodeLeaseRecord, Version};

    fn seen(version: &str, expires_ms: u64, first_seen: u64) -> Observation {
        Observation {
            lease: Some(ObservedLease {
                record: NodeLeaseRecord {
                    node: "n".into(),
                    expires_ms,
                    addr: String::new(),
                    peer_protocol: 1,
                    generation: "g".into(),
                },
                version: Version::new(version).unwrap(),
                nonce: version.into(),
                ttl_ms: Some(9_000),
            }),
            first_seen_mono: first_seen,
            read_mono: first_seen,
        }
    }

    fn at(mono_ms: u64, wall_ms: u64) -> Now {
        Now { mono_ms, wall_ms }
    }

    #[test]
    fn reads_come_just_after_each_renewal_is_due_and_early_ones_are_repeated() {
        let mut s = Schedule::default();
        let live = |u| Liveness::Live { until_mono: u };
        // A renewal at wall 10_000 (expires 19_000, TTL 9 s): the next is due at 13_000.
        s.after_read(
            &seen("v1", 19_000, 100),
            live(9_100),
            at(100, 10_050),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, 100 + 2_950 + 200);
        // Read then, it is not there yet: again a margin later, and later from now on.
        s.after_read(
            &seen("v1", 19_000, 100),
            live(9_100),
            at(3_250, 13_200),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, 3_450);
        s.after_read(
            &seen("v2", 22_000, 3_450),
            live(12_450),
            at(3_450, 13_400),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, 3_450 + 2_600 + 200 + 175);
        // A record whose clock is an hour ahead is read once per renewal period.
        let mut far = Schedule::default();
        far.after_read(&seen("v1", 3_700_000, 0), live(9_000), at(0, 0), 9_000, 200);
        assert_eq!(far.next_mono, 3_000 + 200);
    }

    #[test]
    fn a_silent_node_is_read_again_exactly_when_its_death_can_be_confirmed() {
        let mut s = Schedule::default();
        let live = |u| Liveness::Live { until_mono: u };
        s.after_read(
            &seen("v1", 19_000, 100),
            live(9_118),
            at(100, 10_050),
            9_000,
            200,
        );
        for t in [3_250, 3_450, 3_650] {
            s.after_read(
                &seen("v1", 19_000, 100),
                live(9_118),
                at(t, 13_000),
                9_000,
                200,
            );
        }
        // After two early reads, one when it is overdue (a renewal period and a half: its
        // heirs are told), then the confirming one.
        assert_eq!(s.next_mono, 100 + 4_500);
        assert!(!s.overdue(&seen("v1", 19_000, 100), 4_599, 9_000));
        assert!(s.overdue(&seen("v1", 19_000, 100), 4_600, 9_000));
        s.suspected = true;
        s.after_read(
            &seen("v1", 19_000, 100),
            live(9_118),
            at(4_600, 14_000),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, 9_118);
        s.after_read(
            &seen("v1", 19_000, 100),
            Liveness::Dead,
            at(9_118, 0),
            9_000,
            200,
        );
        assert_eq!(s.next_mono, u64::MAX);
    }
}
