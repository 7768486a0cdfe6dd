//! The handshake between a write's caller and the blocking thread doing the write, so that a
//! write lands before its caller gives up or never.
//!
//! A caller gives up by dropping the write's future (`tokio::time::timeout` does). The thread
//! cannot be stopped, so it asks at its commit point (the rename, or the unlink of a delete)
//! whether the caller still waits. Both sides decide under one mutex: either the thread enters
//! the commit point first, and the caller's give-up then waits until the commit is done (so
//! the write is visible to any read after the give-up), or the caller gives up first, and the
//! thread writes nothing.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use fence_core::{Error, ErrorKind, Key};

/// The longest a giving-up caller waits for a commit under way: one `rename(2)`, normally
/// microseconds. Past it (a frozen file system) the give-up returns and the write may still
/// land, which the caller must treat as ambiguous, as it would have anyway.
const SETTLE_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The caller waits; the commit point is not reached.
    Waiting,
    /// The caller gave up first: nothing may be written any more.
    GaveUp,
    /// The thread is inside the commit point.
    Committing,
    /// The commit point is passed (the write is visible), or failed.
    Settled,
}

/// Shared by a write's future and its blocking thread.
#[derive(Debug)]
pub struct CommitPoint {
    state: Mutex<State>,
    settled: Condvar,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// A giving-up caller waits on `settled`: only then is a notification needed.
    watched: bool,
}

impl Default for CommitPoint {
    fn default() -> Self {
        CommitPoint {
            state: Mutex::new(State {
                phase: Phase::Waiting,
                watched: false,
            }),
            settled: Condvar::new(),
        }
    }
}

impl CommitPoint {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails with [`abandoned`] when the caller gave up, so the thread stops early.
    pub fn check(&self, key: &Key) -> Result<(), Error> {
        match self.state().phase {
            Phase::GaveUp => Err(abandoned(key)),
            _ => Ok(()),
        }
    }

    /// Enters the commit point: [`abandoned`] if the caller gave up (then nothing may be
    /// written), else a token to hold across the commit and drop as soon as it is done.
    pub fn enter(&self, key: &Key) -> Result<Committing<'_>, Error> {
        let mut state = self.state();
        match state.phase {
            Phase::GaveUp => Err(abandoned(key)),
            _ => {
                state.phase = Phase::Committing;
                Ok(Committing(self))
            }
        }
    }

    /// The caller gives up. A write before its commit point will never pass it; one inside it
    /// is waited for (at most [`SETTLE_WAIT`]), so that when this returns the write has
    /// either landed or never will.
    pub fn give_up(&self) {
        let mut state = self.state();
        match state.phase {
            Phase::Waiting => state.phase = Phase::GaveUp,
            Phase::Committing => {
                state.watched = true;
                let _settled = self
                    .settled
                    .wait_timeout_while(state, SETTLE_WAIT, |s| s.phase == Phase::Committing)
                    .unwrap_or_else(|p| p.into_inner());
            }
            Phase::GaveUp | Phase::Settled => {}
        }
    }
}

/// Held by the thread while it commits; dropping it settles the commit.
#[derive(Debug)]
pub struct Committing<'a>(&'a CommitPoint);

impl Drop for Committing<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.phase = Phase::Settled;
        if state.watched {
            self.0.settled.notify_all();
        }
    }
}

/// Gives up on a write when dropped: owned by the write's future, so a caller that stops
/// waiting (a timeout, a cancelled task) gives up the write with it.
#[derive(Debug)]
pub struct GiveUpOnDrop(pub Arc<CommitPoint>);

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        self.0.give_up();
    }
}

/// The error of a thread whose caller gave up before the commit point: nothing was written.
/// Nobody reads it (its caller is gone); it only stops the thread.
pub fn abandoned(key: &Key) -> Error {
    Error::new(
        ErrorKind::Timeout,
        "the caller gave up before the commit point; nothing was written",
    )
    .with_key(key)
    .not_committed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::new("k").unwrap()
    }

    #[test]
    fn a_give_up_before_the_commit_point_stops_the_write() {
        let point = CommitPoint::default();
        point.check(&key()).unwrap();
        point.give_up();
        assert_eq!(point.check(&key()).unwrap_err().kind(), ErrorKind::Timeout);
        let err = point.enter(&key()).unwrap_err();
        assert!(!err.is_ambiguous());
    }

    #[test]
    fn a_give_up_during_the_commit_waits_for_it() {
        let point = Arc::new(CommitPoint::default());
        let committed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let entered = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let token = point.enter(&key()).unwrap();
                entered.wait();
                std::thread::sleep(Duration::from_millis(50));
                committed.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(token);
            });
            entered.wait();
            point.give_up();
            assert!(committed.load(std::sync::atomic::Ordering::SeqCst));
        });
    }

    #[test]
    fn a_give_up_after_the_commit_changes_nothing() {
        let point = CommitPoint::default();
        drop(point.enter(&key()).unwrap());
        point.give_up();
        point.check(&key()).unwrap();
    }
}
