//! One race: `racers` writers released together on one key under one guard. A racer whose
//! answer has not come (or came as an error) is unknown evidence; the winner is whoever's
//! body the key reads back as.

use std::time::Duration;

use bytes::Bytes;
use fence_core::{CasGuard, Error, ErrorKind, Key, PutOutcome};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::run::{store_error, violation, ProbeRun, Step, Stop};

/// What the racers were answered.
#[derive(Debug, Default)]
struct Answers {
    applied: Vec<usize>,
    rejected: Vec<usize>,
    /// No answer in time, or an error: may or may not have landed.
    unknown: Vec<usize>,
    /// Answered an error that says nothing was written (also in `unknown`).
    not_committed: Vec<usize>,
    unsupported: Option<String>,
}

/// The result of a race that broke no rule.
#[derive(Debug)]
pub(crate) enum Round {
    /// Exactly one winner; `by_read` when its own answer had not come.
    Won { by_read: bool },
    /// No racer answered `Applied` and the key shows no racer's body yet: no evidence.
    Inconclusive(String),
}

/// Runs the race on `key` (`base`: the body it holds before, for an update race) and judges
/// it.
pub(crate) async fn run(
    probe: &ProbeRun<'_>,
    key: &Key,
    guard: CasGuard,
    base: Option<&Bytes>,
    label: &str,
) -> Step<Round> {
    let bodies: Vec<Bytes> = (0..probe.cfg.racers.max(1))
        .map(|i| probe.body(&format!("{label} racer {i}")))
        .collect();
    let answers = collect(probe, key, &guard, &bodies).await;
    // An unsupported answer (e.g. a write answered without a version) may have landed too.
    let all_not_committed = answers.applied.is_empty()
        && answers.unsupported.is_none()
        && answers.unknown.len() == answers.not_committed.len();
    if !all_not_committed {
        probe.may_have_written(key);
    }
    if let Some(why) = answers.unsupported {
        return Err(Stop::Unsupported(format!("{label}: {why}")));
    }
    let stored = match read_back(probe, key, label).await {
        Ok(stored) => stored,
        Err(Stop::Error(why)) => return Ok(Round::Inconclusive(why)),
        Err(stop) => return Err(stop),
    };
    judge(label, &answers, stored.as_ref(), base, &bodies)
}

/// Sends every racer at once and gathers answers until all came, or `race_grace` after the
/// first `Applied`, or `op_timeout`.
async fn collect(probe: &ProbeRun<'_>, key: &Key, guard: &CasGuard, bodies: &[Bytes]) -> Answers {
    let mut pending: FuturesUnordered<_> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let put = probe.store.put(key, body.clone(), guard.clone());
            async move { (i, put.await) }
        })
        .collect();
    let mut answers = Answers::default();
    let mut answered = vec![false; bodies.len()];
    let overall = tokio::time::sleep(probe.cfg.op_timeout);
    tokio::pin!(overall);
    let mut grace = None;
    loop {
        let grace_over = wait_grace(&mut grace);
        tokio::select! {
            next = pending.next() => match next {
                None => break,
                Some((i, answer)) => {
                    answered[i] = true;
                    if record(&mut answers, i, answer) && grace.is_none() {
                        grace = Some(Box::pin(tokio::time::sleep(probe.cfg.race_grace)));
                    }
                }
            },
            () = grace_over => break,
            () = &mut overall => break,
        }
    }
    let missing = answered.iter().enumerate().filter(|(_, a)| !**a);
    answers.unknown.extend(missing.map(|(i, _)| i));
    answers
}

type Grace = Option<std::pin::Pin<Box<tokio::time::Sleep>>>;

/// Completes when the grace period (if started) is over; never otherwise.
async fn wait_grace(grace: &mut Grace) {
    match grace {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Files one answer; true when it was `Applied`.
fn record(answers: &mut Answers, i: usize, answer: Result<PutOutcome, Error>) -> bool {
    match answer {
        Ok(PutOutcome::Applied(_)) => {
            answers.applied.push(i);
            return true;
        }
        Ok(PutOutcome::Rejected) => answers.rejected.push(i),
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            answers.unsupported.get_or_insert_with(|| e.to_string());
        }
        Err(e) => {
            if !e.is_ambiguous() {
                answers.not_committed.push(i);
            }
            answers.unknown.push(i);
        }
    }
    false
}

/// The key after the race, read up to three times.
async fn read_back(probe: &ProbeRun<'_>, key: &Key, label: &str) -> Step<Option<Bytes>> {
    let what = format!("{label} read-back");
    let mut last = String::new();
    for _ in 0..3 {
        match tokio::time::timeout(probe.cfg.op_timeout, probe.store.get(key)).await {
            Ok(Ok(stored)) => return Ok(stored.map(|s| s.body)),
            Ok(Err(e)) if e.kind() == ErrorKind::Unsupported => return Err(store_error(&what, &e)),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer within {:?}", probe.cfg.op_timeout),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(Stop::Error(format!("{what}: {last}")))
}

fn judge(
    label: &str,
    answers: &Answers,
    stored: Option<&Bytes>,
    base: Option<&Bytes>,
    bodies: &[Bytes],
) -> Step<Round> {
    let racers = bodies.len();
    if answers.applied.len() > 1 {
        return violation(format!(
            "{label}: {} of {racers} racers were answered Applied (exactly one may win)",
            answers.applied.len()
        ));
    }
    let holder = stored.and_then(|s| bodies.iter().position(|b| b == s));
    if holder.is_none() && stored.is_some() && stored != base {
        return violation(format!("{label}: the key holds a body no racer wrote"));
    }
    match (answers.applied.first(), holder) {
        (Some(w), Some(h)) if *w == h => Ok(Round::Won { by_read: false }),
        (Some(w), _) => violation(format!(
            "{label}: racer {w} was answered Applied, but the key does not hold its body \
             (the write was lost, or a second racer won)"
        )),
        (None, Some(h)) if answers.rejected.contains(&h) => violation(format!(
            "{label}: racer {h} was answered Rejected, but the key holds its body"
        )),
        (None, Some(h)) if answers.not_committed.contains(&h) => violation(format!(
            "{label}: racer {h} was answered an error saying nothing was written, but the key \
             holds its body"
        )),
        (None, Some(_)) => Ok(Round::Won { by_read: true }),
        (None, None) if answers.unknown.is_empty() => violation(format!(
            "{label}: all {racers} racers were rejected, none won"
        )),
        (None, None) => Ok(Round::Inconclusive(format!(
            "{label}: no winner yet ({} racers without an answer)",
            answers.unknown.len()
        ))),
    }
}

/// One line for the races of one kind; `Error` when none of them reached a verdict.
pub(crate) fn summary(what: &str, racers: usize, rounds: Vec<Step<Round>>) -> Step<String> {
    let mut stops: Vec<Stop> = Vec::new();
    let (mut won, mut by_read, mut unknown) = (0, 0, Vec::new());
    for round in rounds {
        match round {
            Ok(Round::Won { by_read: read }) => {
                won += 1;
                by_read += usize::from(read);
            }
            Ok(Round::Inconclusive(why)) => unknown.push(why),
            Err(stop) => stops.push(stop),
        }
    }
    if let Some(stop) = stops.into_iter().min_by_key(Stop::rank) {
        return Err(stop);
    }
    if won == 0 {
        return Err(Stop::Error(format!(
            "no {what} race reached a verdict: {}",
            unknown.join("; ")
        )));
    }
    let mut line = format!("{what} races: exactly 1 of {racers} racers won on each of {won} keys");
    if by_read > 0 {
        line.push_str(&format!(" ({by_read} winners found by reading back)"));
    }
    if !unknown.is_empty() {
        line.push_str(&format!(", {} keys without a verdict", unknown.len()));
    }
    Ok(line)
}
