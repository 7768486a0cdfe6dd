//! The election's event queue: never blocks the campaign, stays a handful of events long
//! however long its reader sleeps, and keeps `Started` / `Stopped` paired.
//!
//! A bounded channel would either block the campaign (a reader that stopped reading would
//! stop the follower from ever taking over) or drop events (a `Stopped` lost after its
//! `Started` was read); an unbounded one grows with every change of leader. Events here are
//! coalesced instead, by what they mean: only the newest of consecutive `NewLeader`s
//! matters; a term nobody saw start need not be seen to stop; one `SafeTimeLow` per term
//! says it all.

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

use super::ElectionEvent;

/// The most unread events there can be: of the one term the reader saw start, a warning
/// and its `Stopped`; of the term in progress, unseen, its `Started` and a warning; and a
/// `NewLeader` between and around each of those four (runs of them merge).
#[cfg(test)]
const MOST_UNREAD: usize = 9;

/// Unread events, coalesced.
#[derive(Debug, Default)]
pub(super) struct Queue {
    events: VecDeque<ElectionEvent>,
    closed: bool,
    reader: Option<Waker>,
}

fn started_epoch(e: &ElectionEvent) -> Option<u64> {
    match e {
        ElectionEvent::Started(term) => Some(term.epoch()),
        _ => None,
    }
}

fn is_warning_of(e: &ElectionEvent, epoch: u64) -> bool {
    matches!(e, ElectionEvent::SafeTimeLow { epoch: w, .. } if *w == epoch)
}

impl Queue {
    /// Queues `event`; returns the reader to wake.
    pub(super) fn push(&mut self, event: ElectionEvent) -> Option<Waker> {
        match &event {
            ElectionEvent::NewLeader(_) => {
                if matches!(self.events.back(), Some(ElectionEvent::NewLeader(_))) {
                    self.events.pop_back();
                }
            }
            ElectionEvent::SafeTimeLow { epoch, .. } => {
                let epoch = *epoch;
                self.events.retain(|e| !is_warning_of(e, epoch));
                // The warning removed may have stood between two `NewLeader`s.
                self.merge_leaders();
            }
            ElectionEvent::Stopped { epoch, .. } => {
                let epoch = *epoch;
                if let Some(i) = self
                    .events
                    .iter()
                    .position(|e| started_epoch(e) == Some(epoch))
                {
                    // Nobody saw this term start: it need not be seen to stop.
                    self.events.remove(i);
                    self.events.retain(|e| !is_warning_of(e, epoch));
                    self.merge_leaders();
                    return None;
                }
            }
            ElectionEvent::Started(_) => {}
        }
        self.events.push_back(event);
        self.reader.take()
    }

    /// Keeps only the last of each run of consecutive `NewLeader`s.
    fn merge_leaders(&mut self) {
        let mut kept: VecDeque<ElectionEvent> = VecDeque::with_capacity(self.events.len());
        for e in self.events.drain(..) {
            let both = matches!(
                (kept.back(), &e),
                (
                    Some(ElectionEvent::NewLeader(_)),
                    ElectionEvent::NewLeader(_)
                )
            );
            if both {
                kept.pop_back();
            }
            kept.push_back(e);
        }
        self.events = kept;
    }

    /// No more events will come; returns the reader to wake.
    pub(super) fn close(&mut self) -> Option<Waker> {
        self.closed = true;
        self.reader.take()
    }

    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<ElectionEvent>> {
        if let Some(e) = self.events.pop_front() {
            return Poll::Ready(Some(e));
        }
        if self.closed {
            return Poll::Ready(None);
        }
        self.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Every event not read yet, taken out.
    pub(super) fn take_all(&mut self) -> Vec<ElectionEvent> {
        self.events.drain(..).collect()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.events.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use proptest::prelude::*;

    use super::super::{ElectionEvent, Leader, StepDown, Term};
    use super::{Queue, MOST_UNREAD};
    use crate::{Fence, MemoryStore};

    /// What the campaign can do next.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        SeeLeader(u8),
        Start,
        Warn,
        Stop,
        Read,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u8..3).prop_map(Step::SeeLeader),
            Just(Step::Start),
            Just(Step::Warn),
            Just(Step::Stop),
            Just(Step::Read),
        ]
    }

    /// A term at `epoch` (real claims: a `Term` is made from one).
    async fn terms(n: u64) -> Vec<Term> {
        let store = Arc::new(MemoryStore::new());
        let fence = Fence::builder(store, "me").build().unwrap();
        let lease = fence.acquire().await.unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            let claim = lease.claim("r").await.unwrap();
            claim.close().await;
            out.push(Term::new(claim, lease.shared.clone()));
        }
        out
    }

    fn read(q: &mut Queue) -> Option<ElectionEvent> {
        let waker = futures::task::noop_waker();
        match q.poll_next(&mut Context::from_waker(&waker)) {
            Poll::Ready(e) => e,
            Poll::Pending => None,
        }
    }

    /// The reader's view: which term it saw start, and the leader it last saw.
    #[derive(Default)]
    struct Reader {
        leading: Option<u64>,
        leader: Option<Option<Leader>>,
    }

    impl Reader {
        fn take(&mut self, e: ElectionEvent) {
            match e {
                ElectionEvent::Started(t) => {
                    assert_eq!(self.leading, None, "Started while a term is open");
                    self.leading = Some(t.epoch());
                }
                ElectionEvent::Stopped { epoch, .. } => {
                    assert_eq!(self.leading, Some(epoch), "Stopped of a term not seen");
                    self.leading = None;
                }
                ElectionEvent::SafeTimeLow { epoch, .. } => {
                    assert_eq!(self.leading, Some(epoch), "a warning outside its term")
                }
                ElectionEvent::NewLeader(l) => self.leader = Some(l),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the campaign does and whenever the reader reads: the queue stays short,
        /// terms are seen as pairs, and after draining the reader knows the last leader.
        #[test]
        fn coalesced_events_stay_few_paired_and_current(steps in prop::collection::vec(step(), 0..60)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            let terms = rt.block_on(terms(steps.len() as u64 + 1));
            let mut q = Queue::default();
            let mut reader = Reader::default();
            let mut open: Option<usize> = None;
            let mut next_term = 0;
            let mut last_leader = None;
            for s in steps {
                match s {
                    Step::SeeLeader(n) => {
                        let l = (n > 0).then(|| Leader { node: format!("n{n}"), epoch: u64::from(n) });
                        last_leader = Some(l.clone());
                        q.push(ElectionEvent::NewLeader(l));
                    }
                    Step::Start if open.is_none() => {
                        q.push(ElectionEvent::Started(terms[next_term].clone()));
                        open = Some(next_term);
                        next_term += 1;
                    }
                    Step::Warn => if let Some(t) = open {
                        q.push(ElectionEvent::SafeTimeLow {
                            epoch: terms[t].epoch(),
                            remaining: std::time::Duration::ZERO,
                            safe_until: rt.block_on(async { terms[t].safe_until() }),
                        });
                    },
                    Step::Stop => if let Some(t) = open.take() {
                        q.push(ElectionEvent::Stopped { epoch: terms[t].epoch(), reason: StepDown::Resigned });
                    },
                    Step::Read => if let Some(e) = read(&mut q) { reader.take(e) },
                    Step::Start => {}
                }
                prop_assert!(q.len() <= MOST_UNREAD, "queue grew to {}", q.len());
            }
            while let Some(e) = read(&mut q) {
                reader.take(e);
            }
            if let Some(l) = last_leader {
                prop_assert_eq!(reader.leader, Some(l));
            }
            prop_assert_eq!(reader.leading, open.map(|t| terms[t].epoch()));
        }
    }

    /// The worst case the property test found: nine unread events, none of them redundant.
    #[test]
    fn the_most_unread_events_are_nine() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let terms = rt.block_on(terms(2));
        let seen = |l: u8| {
            ElectionEvent::NewLeader(Some(Leader {
                node: format!("n{l}"),
                epoch: 1,
            }))
        };
        let warn = |t: &Term| ElectionEvent::SafeTimeLow {
            epoch: t.epoch(),
            remaining: std::time::Duration::ZERO,
            safe_until: rt.block_on(async { t.safe_until() }),
        };
        let mut q = Queue::default();
        q.push(ElectionEvent::Started(terms[0].clone()));
        assert!(read(&mut q).is_some());
        q.push(seen(1));
        q.push(warn(&terms[0]));
        q.push(seen(2));
        q.push(ElectionEvent::Stopped {
            epoch: terms[0].epoch(),
            reason: StepDown::Resigned,
        });
        q.push(seen(3));
        q.push(ElectionEvent::Started(terms[1].clone()));
        q.push(seen(4));
        q.push(warn(&terms[1]));
        q.push(seen(5));
        assert_eq!(q.len(), MOST_UNREAD);
        // One more of any kind does not grow it.
        q.push(seen(6));
        assert_eq!(q.len(), MOST_UNREAD);
        q.push(warn(&terms[1]));
        assert_eq!(
            q.len(),
            MOST_UNREAD - 1,
            "the newer warning goes last, and the leaders it stood between merge"
        );
        q.push(ElectionEvent::Stopped {
            epoch: terms[1].epoch(),
            reason: StepDown::Resigned,
        });
        assert_eq!(
            q.len(),
            5,
            "the unseen term went as a pair, its neighbours merged"
        );
    }

    /// proptest's case (its seed is in proptest-regressions/): a warning replaced by a newer
    /// one of its term left the `NewLeader`s on either side of it as a run of two, and the
    /// queue grew past its bound one `NewLeader` at a time.
    #[test]
    fn a_replaced_warning_merges_the_leaders_around_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let terms = rt.block_on(terms(1));
        let warn = ElectionEvent::SafeTimeLow {
            epoch: terms[0].epoch(),
            remaining: std::time::Duration::ZERO,
            safe_until: rt.block_on(async { terms[0].safe_until() }),
        };
        let mut q = Queue::default();
        q.push(ElectionEvent::Started(terms[0].clone()));
        for _ in 0..10 {
            q.push(ElectionEvent::NewLeader(None));
            q.push(warn.clone());
        }
        q.push(ElectionEvent::NewLeader(None));
        assert_eq!(
            q.len(),
            4,
            "Started, NewLeader, the newest warning, NewLeader"
        );
    }

    #[test]
    fn a_closed_queue_ends_after_its_events() {
        let mut q = Queue::default();
        q.push(ElectionEvent::NewLeader(None));
        q.close();
        assert!(matches!(read(&mut q), Some(ElectionEvent::NewLeader(None))));
        let waker = futures::task::noop_waker();
        let end = q.poll_next(&mut Context::from_waker(&waker));
        assert!(matches!(end, Poll::Ready(None)));
    }
}
