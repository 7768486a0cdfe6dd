//! Leader election for one resource (`fence_core::Election`), in virtual time: who leads,
//! what the others are told, the fencing token a deposed leader's writes are refused by,
//! stepping down on a lost lease or a deposition, and release on drop or stop.

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::*;
use fence_testkit::sim::PausableStore;
use futures::StreamExt;
use support::{advance, clock, fence, key, Steered, Step, TTL};
use tokio::sync::{mpsc, oneshot};

const TTL_MS: u64 = TTL.as_millis() as u64;

/// The tests' fences poll every min(TTL/10, 250 ms).
const POLL_MS: u64 = 200;

/// How a recorded election is ended.
enum End {
    Stop(oneshot::Sender<Result<(), Error>>),
    Drop,
}

/// An election whose events a background task reads as they come, stamped with the
/// virtual time they were reported at (a woken reader runs before time can advance).
struct Recorder {
    events: mpsc::UnboundedReceiver<(u64, ElectionEvent)>,
    end: Option<oneshot::Sender<End>>,
    leader: tokio::sync::watch::Receiver<Option<Leader>>,
}

impl Recorder {
    fn new(election: Election, clock: Clock) -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        let (end, mut ended) = oneshot::channel::<End>();
        let leader = election.watch_leader();
        tokio::spawn(async move {
            let mut election = election;
            loop {
                tokio::select! {
                    end = &mut ended => {
                        if let Ok(End::Stop(done)) = end {
                            let _ = done.send(election.stop().await.result);
                        }
                        return;
                    }
                    event = election.next() => match event {
                        Some(e) => { let _ = tx.send((clock.mono_ms(), e)); }
                        None => return,
                    },
                }
            }
        });
        Recorder {
            events,
            end: Some(end),
            leader,
        }
    }

    /// The next event within a minute of virtual time, and when it was reported.
    async fn next(&mut self) -> Option<(u64, ElectionEvent)> {
        tokio::time::timeout(Duration::from_secs(60), self.events.recv())
            .await
            .ok()
            .flatten()
    }

    /// Skips to the next `Started`: the term and when it began.
    async fn started(&mut self) -> (u64, Term) {
        loop {
            match self.next().await {
                Some((t, ElectionEvent::Started(term))) => return (t, term),
                Some(_) => {}
                None => panic!("no term started"),
            }
        }
    }

    async fn stop(&mut self) -> Result<(), Error> {
        let (done, result) = oneshot::channel();
        let _ = self.end.take().unwrap().send(End::Stop(done));
        result.await.unwrap()
    }

    fn drop_election(&mut self) {
        let _ = self.end.take().unwrap().send(End::Drop);
    }
}

fn start(store: Arc<dyn ConditionalStore>, node: &str) -> Election {
    Election::builder(fence(store, node), "sched")
        .start()
        .unwrap()
}

fn leader(node: &str, epoch: u64) -> Option<Leader> {
    Some(Leader {
        node: node.into(),
        epoch,
    })
}

async fn head(store: Arc<dyn ConditionalStore>) -> (Option<String>, u64) {
    let read = Ownership::new(store, "reader").read_head("sched").await;
    let (head, _) = read.unwrap().unwrap();
    (head.node, head.epoch)
}

/// A lone candidate leads at epoch 1 with a TTL of safe time, and reports itself as the
/// new leader; the election is a `Stream` of events.
#[tokio::test(start_paused = true)]
async fn a_lone_candidate_leads_with_a_token_and_a_safe_time() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let clock = clock();
    let mut election = start(store.clone(), "a");
    let Some(ElectionEvent::Started(term)) = election.next().await else {
        panic!("the first event is Started");
    };
    assert_eq!(
        (term.epoch(), term.node(), term.resource()),
        (1, "a", "sched")
    );
    assert!(term.is_held());
    assert_eq!(term.ended(), None);
    let remaining = term.remaining();
    assert!(remaining <= TTL && remaining >= TTL - Duration::from_millis(POLL_MS));
    let now = || clock.instant_at(clock.mono_ms());
    assert_eq!(term.safe_until(), now() + remaining);
    advance(100).await;
    assert_eq!(term.safe_until(), now() + term.remaining());
    assert_eq!(term.remaining(), remaining - Duration::from_millis(100));
    let next = election.next().await;
    assert!(
        matches!(&next, Some(ElectionEvent::NewLeader(l)) if *l == leader("a", 1)),
        "{next:?}"
    );
    assert_eq!(election.leader(), leader("a", 1));
    assert_eq!(election.term().map(|t| t.epoch()), Some(1));
    term.claim().write("state").await.unwrap();
    // Cancelled, the election reports the end of the term and the release, then ends.
    election.cancel();
    let rest: Vec<ElectionEvent> = (&mut election).collect().await;
    assert!(
        matches!(
            &rest[..],
            [
                ElectionEvent::Stopped {
                    epoch: 1,
                    reason: StepDown::Resigned
                },
                ElectionEvent::NewLeader(None)
            ]
        ),
        "{rest:?}"
    );
    election.stop().await.result.unwrap();
    assert_eq!(term.lost().await, StepDown::Resigned);
    assert_eq!(head(store).await, (None, 1), "released, epoch kept");
}

/// A follower is told who leads (client-go's OnNewLeader), and does not lead itself while
/// the leader renews, however long it waits.
#[tokio::test(start_paused = true)]
async fn a_follower_is_told_the_other_node_leads() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let mut a = Recorder::new(start(store.clone(), "a"), clock());
    a.started().await;
    let mut b = Recorder::new(start(store.clone(), "b"), clock());
    let (_, first) = b.next().await.unwrap();
    assert!(
        matches!(&first, ElectionEvent::NewLeader(l) if *l == leader("a", 1)),
        "{first:?}"
    );
    assert_eq!(*b.leader.borrow(), leader("a", 1));
    let more = tokio::time::timeout(Duration::from_millis(10 * TTL_MS), b.next()).await;
    assert!(more.is_err(), "b saw {more:?} while a renews");
}

/// Release on drop (client-go's ReleaseOnCancel): a dropped leader's election releases the
/// cell and its lease, and a follower leads within its retry period — not a TTL later — at
/// the next epoch.
#[tokio::test(start_paused = true)]
async fn release_on_drop_lets_a_peer_lead_at_once() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let clock = clock();
    let mut a = Recorder::new(start(store.clone(), "a"), clock.clone());
    let (_, term_a) = a.started().await;
    let mut b = Recorder::new(start(store.clone(), "b"), clock.clone());
    b.next().await.unwrap();
    advance(TTL_MS + 33).await;
    let dropped = clock.mono_ms();
    a.drop_election();
    let (led, term_b) = b.started().await;
    assert!(
        led - dropped <= POLL_MS,
        "b led {} ms after a's election was dropped",
        led - dropped
    );
    assert_eq!(term_b.epoch(), 2);
    assert_eq!(term_a.lost().await, StepDown::Resigned);
    assert!(!term_a.is_held());
    let record = Ownership::new(store.clone(), "x")
        .read_node_lease("a")
        .await;
    assert_eq!(
        record.unwrap().unwrap().record.expires_ms,
        0,
        "a's lease released"
    );
    // `stop` does the same, and returns once the cell and the lease are released.
    b.stop().await.unwrap();
    assert_eq!(head(store).await, (None, 2));
}

/// The leader's store path stalls: its renewals stop landing. It is warned while its safe
/// time runs low, steps down when its lease runs out, and only then does a peer lead, at a
/// higher epoch; the old leader campaigns again and reports the new one.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_lease_is_lost_steps_down_before_a_peer_leads() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let clock = clock();
    let mut a = Recorder::new(start(path.clone(), "a"), clock.clone());
    let (_, term_a) = a.started().await;
    let mut b = Recorder::new(start(store.clone(), "b"), clock.clone());
    advance(TTL_MS).await;
    path.freeze();
    let mut warned = None;
    let stopped = loop {
        match a.next().await.expect("a steps down") {
            (
                t,
                ElectionEvent::SafeTimeLow {
                    epoch,
                    remaining,
                    safe_until,
                },
            ) => {
                assert_eq!(epoch, 1);
                assert!(remaining <= TTL / 2, "{remaining:?}");
                assert_eq!(safe_until, clock.instant_at(t) + remaining);
                warned = Some(t);
            }
            (t, ElectionEvent::Stopped { epoch, reason }) => {
                assert_eq!(epoch, 1);
                assert!(matches!(reason, StepDown::LeaseLost { .. }), "{reason:?}");
                break t;
            }
            (_, ElectionEvent::NewLeader(_)) => {}
            (_, other) => panic!("{other:?}"),
        }
    };
    let warned = warned.expect("warned before stepping down");
    assert!(warned < stopped);
    assert!(!term_a.is_held());
    assert!(matches!(term_a.lost().await, StepDown::LeaseLost { .. }));
    let (led, term_b) = b.started().await;
    assert!(
        stopped <= led,
        "b led at {led} ms, a stepped down at {stopped} ms"
    );
    assert_eq!(term_b.epoch(), 2);
    // a's term is over for the store too.
    let e = term_a.claim().write("late").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced);
    // a's network comes back: it campaigns again, under a new lease, and follows b.
    path.thaw();
    loop {
        match a.next().await.expect("a reports b") {
            (_, ElectionEvent::NewLeader(l)) if l == leader("b", 2) => break,
            (_, ElectionEvent::Started(t)) => panic!("a led again at {}", t.epoch()),
            _ => {}
        }
    }
    assert_eq!(head(store).await, (Some("b".into()), 2));
}

/// The epoch is the fencing token: writes a leader sent just before it was deposed, held up
/// in the network until after a peer's takeover, are refused by the store — and so is a
/// keeperless write at the old epoch.
#[tokio::test(start_paused = true)]
async fn a_deposed_leaders_write_is_refused_by_the_store() {
    let memory = Arc::new(MemoryStore::new());
    let store: Arc<dyn ConditionalStore> = memory.clone();
    let path = Steered::over(memory);
    let clock = clock();
    let mut a = Recorder::new(start(path.clone(), "a"), clock.clone());
    let (_, term_a) = a.started().await;
    let mut b = Recorder::new(start(store.clone(), "b"), clock.clone());
    // From now on a's renewals never land, and its head writes land 10 s late.
    let never = Step::Delay(Duration::from_secs(600));
    path.puts("nodes/a.json", std::iter::repeat_n(never, 64));
    path.puts(
        "own.json",
        std::iter::repeat_n(Step::Late(Duration::from_secs(10)), 64),
    );
    let write = tokio::spawn({
        let term_a = term_a.clone();
        async move { term_a.claim().write("deposed-write").await }
    });
    let (_, term_b) = b.started().await;
    assert_eq!(term_b.epoch(), 2);
    // Its sender cannot know whether it landed (no answer, no evidence)...
    let written = write.await.unwrap().unwrap_err();
    assert!(written.is_ambiguous(), "{written:?}");
    advance(30_000).await;
    let landed = path
        .applied("own.json")
        .iter()
        .any(|body| body.windows(13).any(|w| w == b"deposed-write"));
    // ...but the store refused every attempt when it arrived, after b's claim.
    assert!(!landed, "the deposed leader's write landed");
    assert_eq!(head(store.clone()).await, (Some("b".into()), 2));
    let keeperless = update_cell(
        &Ownership::new(store.clone(), "a"),
        "sched",
        term_a.epoch(),
        Duration::from_secs(1),
        |_| Ok("with the old token".into()),
    )
    .await
    .unwrap_err();
    assert_eq!(keeperless.kind(), ErrorKind::Fenced);
}

/// Deposed behind its back (an operator's takeover; the lease cannot show it): the leader
/// finds out at its next check of the head, steps down naming the new owner, and reports
/// it as the new leader.
#[tokio::test(start_paused = true)]
async fn a_leader_deposed_behind_its_back_steps_down_at_its_next_check() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let clock = clock();
    let mut a = Recorder::new(start(store.clone(), "a"), clock.clone());
    let (_, term_a) = a.started().await;
    operator_takes_the_cell(&store).await;
    let deposed = clock.mono_ms();
    let (t, why) = loop {
        if let (t, ElectionEvent::Stopped { reason, .. }) = a.next().await.expect("a steps down") {
            break (t, reason);
        }
    };
    assert_eq!(
        why,
        StepDown::Deposed {
            epoch: 5,
            by: Some("z".into())
        }
    );
    assert!(
        t - deposed <= TTL_MS / 3,
        "found out {} ms later",
        t - deposed
    );
    let (_, next) = a.next().await.unwrap();
    assert!(
        matches!(&next, ElectionEvent::NewLeader(l) if *l == leader("z", 5)),
        "{next:?}"
    );
    assert_eq!(term_a.lost().await, why);
    let e = term_a.claim().write("x").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced);
}

/// Without re-campaigning, the election ends after its first term: the events end after
/// `Stopped`, and `stop` reports a clean end.
#[tokio::test(start_paused = true)]
async fn without_recampaign_the_election_ends_with_its_term() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let mut election = Election::builder(fence(path.clone(), "a"), "sched")
        .recampaign(false)
        .start()
        .unwrap();
    let Some(ElectionEvent::Started(_)) = election.next_event().await else {
        panic!("leads first");
    };
    path.freeze();
    let mut last = None;
    while let Some(e) = election.next_event().await {
        last = Some(e);
    }
    assert!(
        matches!(
            last,
            Some(ElectionEvent::Stopped {
                reason: StepDown::LeaseLost { .. },
                ..
            })
        ),
        "{last:?}"
    );
    election.stop().await.result.unwrap();
}

/// An error the store keeps giving (here a corrupt head) ends the election: its events end,
/// and `stop` returns the error's kind.
#[tokio::test(start_paused = true)]
async fn a_corrupt_head_ends_the_election_with_its_error() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    store
        .put(
            &key("cells/sched/own.json"),
            "{not json".into(),
            CasGuard::Absent,
        )
        .await
        .unwrap();
    let mut election = start(store.clone(), "a");
    let ended = tokio::time::timeout(Duration::from_secs(60), election.next_event()).await;
    assert!(matches!(ended, Ok(None)), "{ended:?}");
    let e = election.stop().await.result.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
}

/// Bad settings are refused with a clear error kind, before anything is sent.
#[tokio::test(start_paused = true)]
async fn bad_settings_are_refused() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let builder = |resource: &str| Election::builder(fence(store.clone(), "a"), resource);
    let kind = |r: Result<Election, Error>| r.unwrap_err().kind();
    assert_eq!(kind(builder("a/b").start()), ErrorKind::InvalidKey);
    assert_eq!(
        kind(builder("r").retry_period(Duration::ZERO).start()),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        kind(builder("r").check_period(Duration::ZERO).start()),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        kind(builder("r").retry_period(Duration::MAX).start()),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        kind(builder("r").safe_time_warning(TTL).start()),
        ErrorKind::InvalidInput
    );
    assert!(
        store.list(None).await.unwrap().is_empty(),
        "nothing written"
    );
}

/// The handles move between tasks and threads.
#[test]
fn the_handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Election>();
    send_sync::<Term>();
    send_sync::<ElectionEvent>();
    send_sync::<StepDown>();
}

/// Outside a Tokio runtime, `start` is an error, not a panic.
#[test]
fn starting_outside_a_runtime_is_an_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let fence = rt.block_on(async { fence(Arc::new(MemoryStore::new()), "a") });
    let e = Election::builder(fence, "r").start().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

/// The leader's machine is suspended (its monotonic clock stands still, its wall clock runs
/// on): the term ends at the instant its wall clock says the authority ran out, although
/// its monotonic clock — and the keeper's schedule — say otherwise.
#[tokio::test(start_paused = true)]
async fn a_suspended_leaders_term_ends_when_its_wall_clock_says_so() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let suspension = Arc::new(Suspension::default());
    let fence = Fence::builder(path.clone(), "a")
        .ttl(TTL)
        .clock(clock().with_suspension(suspension.clone()))
        .build()
        .unwrap();
    let mut election = Election::builder(fence, "sched").start().unwrap();
    let Some(ElectionEvent::Started(term)) = election.next_event().await else {
        panic!("leads");
    };
    let watch = clock();
    let left = term.remaining().as_millis() as u64;
    suspension.suspend();
    path.freeze();
    let suspended = watch.mono_ms();
    let why = term.lost().await;
    let ended = watch.mono_ms() - suspended;
    assert!(matches!(why, StepDown::LeaseLost { .. }), "{why:?}");
    assert_eq!(
        ended, left,
        "the term ended {ended} ms into the suspension, {left} ms were left"
    );
}

/// A follower that looks rarely (a retry period of a minute) still looks at the instant the
/// leader's lease could be judged dead: a crashed leader is replaced within two TTLs of its
/// crash, not a minute later — and only after its authority ended.
#[tokio::test(start_paused = true)]
async fn a_slow_follower_replaces_a_dead_leader_within_two_ttls() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let path = Arc::new(PausableStore::new(store.clone()));
    let clock = clock();
    let mut a = Recorder::new(start(path.clone(), "a"), clock.clone());
    let (_, term_a) = a.started().await;
    let slow = Election::builder(fence(store.clone(), "b"), "sched")
        .retry_period(Duration::from_secs(60))
        .start()
        .unwrap();
    let mut b = Recorder::new(slow, clock.clone());
    advance(3 * TTL_MS / 2).await;
    path.kill();
    let killed = clock.mono_ms();
    let (led, term_b) = b.started().await;
    assert!(
        led - killed <= 2 * TTL_MS,
        "replaced {} ms after the crash",
        led - killed
    );
    assert!(!term_a.is_held());
    assert_eq!(term_b.epoch(), 2);
}

/// Deposed, and found out by a write through the term's claim (not by the check of the
/// head, which comes only once an hour here): the step-down names the new owner the store
/// names, in the `Stopped` event and in `lost()` alike.
#[tokio::test(start_paused = true)]
async fn a_leader_deposed_found_out_by_a_write_names_who_deposed_it() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let election = Election::builder(fence(store.clone(), "a"), "sched")
        .check_period(Duration::from_secs(3_600))
        .start()
        .unwrap();
    let mut a = Recorder::new(election, clock());
    let (_, term_a) = a.started().await;
    operator_takes_the_cell(&store).await;
    let e = term_a
        .claim()
        .write("after the takeover")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced);
    let named = StepDown::Deposed {
        epoch: 5,
        by: Some("z".into()),
    };
    assert_eq!(term_a.lost().await, named);
    let why = loop {
        if let (_, ElectionEvent::Stopped { reason, .. }) = a.next().await.expect("a steps down") {
            break reason;
        }
    };
    assert_eq!(why, named);
    loop {
        match a.next().await.expect("a reports z") {
            (_, ElectionEvent::NewLeader(l)) if l == leader("z", 5) => break,
            (_, ElectionEvent::Started(t)) => panic!("a led again at {}", t.epoch()),
            _ => {}
        }
    }
}

/// What the documented shutdown saw: the terms started, the step-downs told (read, or
/// returned unread by `stop`), and the step-downs the work tasks saw through `lost()`.
#[derive(Debug, Default)]
struct Seen {
    started: Vec<u64>,
    told: Vec<(u64, StepDown)>,
    worked: Vec<(u64, StepDown)>,
}

/// The leader's work as README shows it: checks the term before each action.
async fn work(term: Term) -> (u64, StepDown) {
    while term.is_held() {
        tokio::select! {
            _ = term.lost() => break,
            written = term.claim().write(format!("plan of epoch {}", term.epoch())) => {
                if written.is_err() {
                    break;
                }
            }
        }
        advance(50).await;
    }
    (term.epoch(), term.lost().await)
}

/// README's election loop and shutdown: events read until `shutdown`, the work in its own
/// task; then `stop`, the unread events, the work joined.
async fn run_until(election: Election, shutdown: impl std::future::Future<Output = ()>) -> Seen {
    let mut election = election;
    let mut seen = Seen::default();
    let mut tasks = Vec::new();
    tokio::pin!(shutdown);
    loop {
        let event = tokio::select! {
            event = election.next_event() => event,
            _ = &mut shutdown => break,
        };
        match event {
            Some(ElectionEvent::Started(term)) => {
                seen.started.push(term.epoch());
                tasks.push(tokio::spawn(work(term)));
            }
            Some(ElectionEvent::Stopped { epoch, reason }) => seen.told.push((epoch, reason)),
            Some(_) => {}
            None => break,
        }
    }
    let end = election.stop().await;
    end.result.unwrap();
    for event in end.unread {
        match event {
            ElectionEvent::Stopped { epoch, reason } => seen.told.push((epoch, reason)),
            ElectionEvent::Started(t) => panic!("an unread Started of epoch {}", t.epoch()),
            _ => {}
        }
    }
    for t in tasks {
        seen.worked.push(t.await.unwrap());
    }
    seen
}

/// The documented shutdown (README, "Leader election"): whenever the owner leaves its event
/// loop — before the term started, just after, while its work writes, after a peer took
/// over — every term whose start it read has its step-down told (read, or returned unread
/// by `stop`), and the term's work saw it end. Then the cell is released.
#[tokio::test(start_paused = true)]
async fn the_documented_shutdown_always_observes_the_step_down() {
    for at in [0, 1, 10, 60, 170, 400, 1_300, 6_600, 9_000] {
        let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
        let path = Arc::new(PausableStore::new(store.clone()));
        let a = start(path.clone(), "a");
        let b = Recorder::new(start(store.clone(), "b"), clock());
        let stalls = at > 3 * TTL_MS;
        let shutdown = async move {
            if stalls {
                // a's store path stalls past its TTL: a steps down, b takes over, and a
                // follows b once its path is back.
                advance(500).await;
                path.freeze();
                advance(3 * TTL_MS).await;
                path.thaw();
                advance(at - 500 - 3 * TTL_MS).await;
            } else {
                advance(at).await;
            }
        };
        let seen = run_until(a, shutdown).await;
        let told: Vec<u64> = seen.told.iter().map(|(e, _)| *e).collect();
        let worked: Vec<u64> = seen.worked.iter().map(|(e, _)| *e).collect();
        assert_eq!(told, seen.started, "at {at} ms: {seen:?}");
        assert_eq!(worked, seen.started, "at {at} ms: {seen:?}");
        for ((_, by_event), (_, by_work)) in seen.told.iter().zip(&seen.worked) {
            assert_eq!(by_event, by_work, "at {at} ms: {seen:?}");
        }
        drop(b);
        let (owner, _) = head(store).await;
        assert_ne!(
            owner.as_deref(),
            Some("a"),
            "at {at} ms: a's cell not released"
        );
    }
}

/// The next `Started` of `e` within a minute of virtual time, and its term.
async fn next_term(e: &mut Election) -> Term {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(60), e.next_event()).await;
        match next.expect("a term starts") {
            Some(ElectionEvent::Started(term)) => return term,
            Some(_) => {}
            None => panic!("the election ended"),
        }
    }
}

/// The next `Stopped` of `e` within a minute of virtual time.
async fn next_step_down(e: &mut Election) -> StepDown {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(60), e.next_event()).await;
        match next.expect("a term stops") {
            Some(ElectionEvent::Stopped { reason, .. }) => return reason,
            Some(_) => {}
            None => panic!("the election ended"),
        }
    }
}

/// `Election::is_leader`, and the leadership handed to a named node: the leader's term ends
/// (resigned), the cell names the receiver at the next epoch, and the receiver leads within
/// its retry period. A hand-off by a follower, to itself or to a node with no lease is
/// refused, with nothing written.
#[tokio::test(start_paused = true)]
async fn the_leadership_is_handed_to_a_named_node() {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let clock = clock();
    let mut a = start(store.clone(), "a");
    let term_a = next_term(&mut a).await;
    let mut b = start(store.clone(), "b");
    advance(TTL_MS).await;
    assert!(a.is_leader() && !b.is_leader());
    let kind = |r: Result<u64, Error>| r.unwrap_err().kind();
    assert_eq!(kind(b.hand_off("a").await), ErrorKind::InvalidInput);
    assert_eq!(kind(a.hand_off("a").await), ErrorKind::InvalidInput);
    assert_eq!(kind(a.hand_off("z").await), ErrorKind::InvalidInput);
    assert_eq!(head(store.clone()).await, (Some("a".into()), 1));
    let handed = clock.mono_ms();
    assert_eq!(a.hand_off("b").await.unwrap(), 2);
    assert_eq!(next_step_down(&mut a).await, StepDown::Resigned);
    assert!(!term_a.is_held() && !a.is_leader());
    let term_b = next_term(&mut b).await;
    assert!(
        clock.mono_ms() - handed <= POLL_MS,
        "b led {} ms later",
        clock.mono_ms() - handed
    );
    assert!(term_b.epoch() > 2 && b.is_leader());
    let e = term_a.claim().write("late").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced);
    b.stop().await.result.unwrap();
    a.stop().await.result.unwrap();
}

/// A health check that turns false: the leader steps down (`Unhealthy`) at its next check
/// period and releases the cell, a healthy peer leads within its retry period, and the
/// unhealthy node does not campaign until it is healthy again.
#[tokio::test(start_paused = true)]
async fn an_unhealthy_leader_steps_down_and_does_not_campaign_until_healthy() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let clock = clock();
    let healthy = Arc::new(AtomicBool::new(true));
    let check = healthy.clone();
    let mut a = Election::builder(fence(store.clone(), "a"), "sched")
        .health_check(move || check.load(Ordering::SeqCst))
        .start()
        .unwrap();
    next_term(&mut a).await;
    let mut b = start(store.clone(), "b");
    advance(TTL_MS).await;
    healthy.store(false, Ordering::SeqCst);
    let sick = clock.mono_ms();
    assert_eq!(next_step_down(&mut a).await, StepDown::Unhealthy);
    assert!(
        clock.mono_ms() - sick <= TTL_MS / 3,
        "stepped down {} ms later",
        clock.mono_ms() - sick
    );
    let term_b = next_term(&mut b).await;
    assert!(clock.mono_ms() - sick <= TTL_MS / 3 + POLL_MS);
    assert_eq!(term_b.epoch(), 2);
    // b stops; a, still unhealthy, does not take the resource.
    b.stop().await.result.unwrap();
    advance(3 * TTL_MS).await;
    assert!(!a.is_leader());
    assert_eq!(head(store.clone()).await, (None, 2));
    healthy.store(true, Ordering::SeqCst);
    let term_a = next_term(&mut a).await;
    assert_eq!(term_a.epoch(), 3);
    a.stop().await.result.unwrap();
}

/// An operator (node `z`) writes itself into `sched`'s head at epoch 5, deposing whoever led.
async fn operator_takes_the_cell(store: &Arc<dyn ConditionalStore>) {
    let operator = Ownership::new(store.clone(), "z");
    let version = operator.read_head("sched").await.unwrap().unwrap().1;
    operator
        .cas_owner("sched", CasGuard::Match(version), 5)
        .await
        .unwrap();
}
