//! Watching one node's lease, cheaply and promptly: the watcher task (a task of its own, so
//! a node's slow round never delays a read that confirms a death) and the tombstoner. When
//! to read and whom to tell are the pure rules of [`crate::decide::watch`].

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use fence_core::decide::{Now, Observation};

pub(crate) use crate::decide::watch::{burial, Schedule, WatchStep};
use fence_core::runtime::Fence;
use fence_core::CasGuard;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info};

use crate::assignment::{self, Notice, NoticeKind, Watched};

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
        let known = |c: &str| self.known.contains(c);
        let at = self.fence.clock().wall_ms();
        let (told, mine) = burial(self.me(), node, heirs, known, released, leader, at);
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
            match w.schedule.on_read(&o, now, &cfg, margin, self.scan_ms) {
                WatchStep::Wait => continue,
                WatchStep::WarnHeirs => {
                    let heirs = w.heirs.clone();
                    self.warn_heirs(&node, &heirs).await;
                    continue;
                }
                WatchStep::Bury => {}
            }
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
