//! Leader election for one resource: three candidates share one store; each leader writes
//! the resource's state with its fencing token until its term ends; the leader is stopped
//! twice and leadership moves on at once; the first leader's token is refused afterwards.
//!
//! ```text
//! cargo run -p fence-core --example leader
//! ```
//!
//! The store is in memory here; any `ConditionalStore` works the same (local files with
//! `fence_fs::FsStore`, S3, GCS, Azure), with the candidates in separate processes.

use std::sync::Arc;
use std::time::Duration;

use fence_core::{
    update_cell, Clock, ConditionalStore, Election, ElectionEvent, Error, ErrorKind, Fence, Leader,
    MemoryStore, Ownership, Term,
};
use tokio::sync::{oneshot, watch};

/// The lease TTL: a dead leader is replaced within about a TTL, a stopped one at once.
const TTL: Duration = Duration::from_secs(2);

const RESOURCE: &str = "scheduler";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let handovers = demo(Clock::system()).await?;
    for h in &handovers {
        println!(
            "handover to {} at epoch {}: {} ms after the leader stopped (TTL {} ms)",
            h.to.node,
            h.to.epoch,
            h.after_ms,
            TTL.as_millis()
        );
    }
    Ok(())
}

/// A leader that took over, and how long after its predecessor stopped.
#[derive(Debug)]
struct Handover {
    to: Leader,
    after_ms: u64,
}

/// A running candidate: its view of the leader, and a way to stop it.
struct Candidate {
    node: String,
    leader: watch::Receiver<Option<Leader>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), Error>>,
}

impl Candidate {
    fn start(store: Arc<dyn ConditionalStore>, node: &str, clock: Clock) -> Result<Self, Error> {
        let fence = Fence::builder(store, node).ttl(TTL).clock(clock).build()?;
        let election = Election::builder(fence, RESOURCE).start()?;
        let (stop, stopped) = oneshot::channel();
        Ok(Candidate {
            node: node.to_owned(),
            leader: election.watch_leader(),
            stop: Some(stop),
            task: tokio::spawn(campaign(election, stopped)),
        })
    }

    /// Stops the candidate: a term in progress ends, the cell and the lease are released.
    async fn stop(&mut self) -> Result<(), Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task)
            .await
            .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?
    }
}

/// One candidate: follows the election's events until told to stop, the leader's work in a
/// task of its own. The shutdown is the one README shows: `stop` (a term in progress ends,
/// and its work sees `lost()`), then the events nobody read (a step-down among them), then
/// the work joined.
async fn campaign(mut election: Election, mut stop: oneshot::Receiver<()>) -> Result<(), Error> {
    let node = election.node().to_owned();
    let mut work = Vec::new();
    loop {
        let event = tokio::select! {
            _ = &mut stop => break,
            event = election.next_event() => event,
        };
        let Some(event) = event else { break };
        work.extend(on_event(&node, event));
    }
    let end = election.stop().await;
    for event in end.unread {
        work.extend(on_event(&node, event));
    }
    for w in work {
        let _ = w.await;
    }
    end.result
}

/// Reports `event`; a term that starts gets its work task.
fn on_event(node: &str, event: ElectionEvent) -> Option<tokio::task::JoinHandle<()>> {
    match event {
        ElectionEvent::Started(term) => {
            println!("{node}: leading at epoch {}", term.epoch());
            return Some(tokio::spawn(lead(term)));
        }
        ElectionEvent::Stopped { epoch, reason } => {
            println!("{node}: stopped leading epoch {epoch}: {reason:?}")
        }
        ElectionEvent::NewLeader(Some(l)) if l.node != node => {
            println!("{node}: {} leads at epoch {}", l.node, l.epoch)
        }
        ElectionEvent::SafeTimeLow { remaining, .. } => {
            println!("{node}: safe time low, {remaining:?} left: finishing up")
        }
        _ => {}
    }
    None
}

/// The leader's work: checks that the term stands before each action, and writes the
/// resource's state with its fencing token, until the term ends. A write the store refuses
/// (a later epoch exists) ends the work too.
async fn lead(term: Term) {
    for tick in 0u64.. {
        if !term.is_held() {
            break;
        }
        let state = format!("tick {tick} by {} at epoch {}", term.node(), term.epoch());
        tokio::select! {
            _ = term.lost() => break,
            written = term.claim().write(state) => if let Err(e) = written {
                if term.ended().is_none() {
                    println!("{}: write refused ({:?})", term.node(), e.kind());
                }
                break;
            },
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let why = term.lost().await;
    println!(
        "{}: term {} over ({why:?}): work stopped",
        term.node(),
        term.epoch()
    );
}

/// Waits until `watcher` sees a leader other than `not`.
async fn next_leader(
    watcher: &mut watch::Receiver<Option<Leader>>,
    not: Option<&str>,
) -> Result<Leader, Error> {
    let seen = watcher.wait_for(|l| l.as_ref().is_some_and(|l| Some(l.node.as_str()) != not));
    let seen = tokio::time::timeout(TTL * 10, seen).await;
    match seen {
        Ok(Ok(l)) => l
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::Other, "no leader")),
        _ => Err(Error::new(ErrorKind::Timeout, "no new leader")),
    }
}

/// The demo: three candidates, the leader stopped twice; returns the handovers.
async fn demo(clock: Clock) -> Result<Vec<Handover>, Error> {
    let store: Arc<dyn ConditionalStore> = Arc::new(MemoryStore::new());
    let mut candidates = Vec::new();
    for node in ["a", "b", "c"] {
        candidates.push(Candidate::start(store.clone(), node, clock.clone())?);
    }
    let mut watcher = candidates[0].leader.clone();
    let first = next_leader(&mut watcher, None).await?;
    let mut leader = first.clone();
    let mut handovers = Vec::new();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let i = candidates.iter().position(|c| c.node == leader.node);
        let mut stopped = candidates.swap_remove(i.unwrap_or_default());
        stopped.stop().await?;
        let at = clock.mono_ms();
        let mut watcher = candidates[0].leader.clone();
        leader = next_leader(&mut watcher, Some(&stopped.node)).await?;
        handovers.push(Handover {
            to: leader.clone(),
            after_ms: clock.mono_ms() - at,
        });
    }
    // The first leader's fencing token, used by anyone after its term: refused by the store.
    let own = Ownership::new(store.clone(), first.node.clone());
    let late = update_cell(&own, RESOURCE, first.epoch, TTL, |_| Ok("late".into())).await;
    match late {
        Err(e) if e.kind() == ErrorKind::Fenced => {
            println!(
                "a write with epoch {} was refused by the store",
                first.epoch
            )
        }
        other => return Err(Error::new(ErrorKind::Other, format!("{other:?}"))),
    }
    for mut c in candidates {
        c.stop().await?;
    }
    Ok(handovers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo in virtual time (run by `cargo test --examples`): each stopped leader is
    /// replaced within one poll period, at the next epoch, by another node.
    #[tokio::test(start_paused = true)]
    async fn leadership_moves_on_at_once_when_the_leader_stops() {
        let handovers = demo(Clock::virtual_at(1_700_000_000_000)).await.unwrap();
        assert_eq!(handovers.len(), 2);
        assert_eq!(handovers[0].to.epoch, 2);
        assert_eq!(handovers[1].to.epoch, 3);
        assert_ne!(handovers[0].to.node, handovers[1].to.node);
        for h in &handovers {
            assert!(h.after_ms <= 200, "{h:?}: more than a poll period");
        }
    }
}
