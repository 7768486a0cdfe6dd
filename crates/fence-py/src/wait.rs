//! Running fence's async operations from Python: on one shared tokio runtime, with the GIL
//! released, and — for waits — interruptible without leaving anything half-done.
//!
//! A *wait* (for a lease, a cell, an event) runs as its own task in slices of at most
//! [`SLICE`]: each slice is one call of the core's own waiting operation (`acquire_wait`,
//! `claim_wait`), which keeps what it observed in the fence between calls, so slicing costs
//! one extra request per slice and changes no verdict. A cancellation — Ctrl-C in a blocking
//! call, `Task.cancel()` in asyncio — is looked at only between slices: the slice under way
//! runs to its end, and if it got what it waited for (a lease, a claim), that is released
//! before the wait reports the cancellation. So no lease or claim is ever left taken by a
//! wait nobody is waiting for, and no write is ever dropped midway.

use std::future::Future;
use std::time::Duration;

use fence_core::{Clock, Error, ErrorKind};
use pyo3::prelude::*;
use tokio::sync::watch;

use crate::errors::to_py;
use crate::process::{future_into_py, runtime};

/// The longest slice of a wait: how late a cancellation may be seen.
pub(crate) const SLICE: Duration = Duration::from_millis(500);

/// How often a blocking call looks for a pending signal (Ctrl-C) while it waits.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Runs a bounded operation (a write, a read, a release) to its end with the GIL released.
pub(crate) fn block_on<F>(py: Python<'_>, fut: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime(py);
    py.detach(|| rt.block_on(fut))
}

/// [`block_on`] of a fence operation, its error mapped to the Python exception.
pub(crate) fn run<T: Send>(
    py: Python<'_>,
    fut: impl Future<Output = Result<T, Error>> + Send,
) -> PyResult<T> {
    block_on(py, fut).map_err(to_py)
}

/// The same operation as an asyncio awaitable.
pub(crate) fn run_async<'py, T>(
    py: Python<'py>,
    fut: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    future_into_py(py, async move { fut.await.map_err(to_py) })
}

/// A wait's view of its cancellation.
#[derive(Clone, Debug)]
pub(crate) struct Cancel(watch::Receiver<bool>);

impl Cancel {
    pub(crate) fn is_set(&self) -> bool {
        *self.0.borrow()
    }
}

/// Cancels the wait when dropped (a blocking call interrupted, an asyncio task cancelled).
struct CancelOnDrop(watch::Sender<bool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// Why a wait ended without its result.
fn cancelled() -> Error {
    Error::new(ErrorKind::Other, "the wait was cancelled; nothing is held").not_committed()
}

/// A wait in slices: `slice(limit)` is one bounded call of the core's waiting operation;
/// [`ErrorKind::Busy`] at a slice's end means "not yet". `undo` gives back what a slice got
/// after the wait was cancelled. `timeout`: `None` waits forever, zero tries once.
pub(crate) async fn sliced<T, S, SF, U, UF>(
    timeout: Option<Duration>,
    cancel: Cancel,
    mut slice: S,
    undo: U,
) -> Result<T, Error>
where
    S: FnMut(Duration) -> SF,
    SF: Future<Output = Result<T, Error>>,
    U: FnOnce(T) -> UF,
    UF: Future<Output = ()>,
{
    let clock = Clock::system();
    let deadline = timeout.map(|t| clock.mono_ms().saturating_add(millis(t)));
    loop {
        let left = deadline.map(|d| d.saturating_sub(clock.mono_ms()));
        let limit = match left {
            Some(ms) => Duration::from_millis(ms).min(SLICE),
            None => SLICE,
        };
        let result = slice(limit).await;
        if cancel.is_set() {
            if let Ok(got) = result {
                undo(got).await;
            }
            return Err(cancelled());
        }
        let more = left.is_none_or(|ms| ms > millis(limit));
        match result {
            Err(e) if e.kind() == ErrorKind::Busy && more => {}
            other => return other,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs a wait as its own task and blocks on it with the GIL released, looking for signals
/// every [`SIGNAL_CHECK`]. A pending signal (Ctrl-C raises `KeyboardInterrupt`) cancels the
/// wait; the call returns the signal's exception only once the task has ended (after the
/// undo of whatever its last slice got).
pub(crate) fn wait_blocking<T, W, WF>(py: Python<'_>, wait: W) -> PyResult<T>
where
    T: Send + 'static,
    W: FnOnce(Cancel) -> WF,
    WF: Future<Output = Result<T, Error>> + Send + 'static,
{
    let rt = runtime(py);
    let (tx, rx) = watch::channel(false);
    let guard = CancelOnDrop(tx);
    let mut task = rt.spawn(wait(Cancel(rx)));
    loop {
        let done = py
            .detach(|| rt.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut task).await }));
        match done {
            Ok(joined) => return joined.map_err(panicked)?.map_err(to_py),
            Err(_elapsed) => {
                if let Err(signal) = py.check_signals() {
                    drop(guard);
                    // The slice under way ends, then its gains are undone: wait for both.
                    let _ = py.detach(|| rt.block_on(&mut task));
                    return Err(signal);
                }
            }
        }
    }
}

/// The same wait as an asyncio awaitable: cancelling the asyncio task cancels the wait (its
/// last slice and undo finish in the background).
pub(crate) fn wait_async<'py, T, W, WF>(py: Python<'py>, wait: W) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
    W: FnOnce(Cancel) -> WF,
    WF: Future<Output = Result<T, Error>> + Send + 'static,
{
    let (tx, rx) = watch::channel(false);
    let task = runtime(py).spawn(wait(Cancel(rx)));
    future_into_py(py, async move {
        let _guard = CancelOnDrop(tx);
        task.await.map_err(panicked)?.map_err(to_py)
    })
}

fn panicked(e: tokio::task::JoinError) -> PyErr {
    crate::errors::FenceError::new_err(format!("fence task failed: {e}"))
}

/// A Python duration in seconds (`None`: no limit), checked: anything but a finite number
/// of seconds from 0 to 100 years raises `InvalidInputError` (also a `ValueError`), as every
/// duration argument of the package does.
pub(crate) fn seconds(s: Option<f64>) -> PyResult<Option<Duration>> {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    match s {
        None => Ok(None),
        Some(s) => Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| *d <= CENTURY)
            .map(Some)
            .ok_or_else(|| {
                crate::errors::invalid_input(format!(
                    "a duration must be a finite number of seconds from 0 to 100 years, not {s}"
                ))
            }),
    }
}

/// Blocks on a cancellation-safe future (a receive from an event queue) with the GIL
/// released, looking for signals every [`SIGNAL_CHECK`]: a pending signal drops the future
/// (losing nothing) and raises its exception (Ctrl-C: `KeyboardInterrupt`).
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    fut: impl Future<Output = T> + Send,
) -> PyResult<T> {
    let rt = runtime(py);
    let mut fut = std::pin::pin!(fut);
    loop {
        let done =
            py.detach(|| rt.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut fut).await }));
        match done {
            Ok(v) => return Ok(v),
            Err(_elapsed) => py.check_signals()?,
        }
    }
}

/// A Python duration argument in seconds, `None` left as the default.
pub(crate) fn opt_seconds(s: Option<f64>) -> PyResult<Option<Duration>> {
    seconds(s)
}

/// The error of an operation on something already closed.
pub(crate) fn closed(what: &str) -> Error {
    Error::new(ErrorKind::InvalidInput, format!("the {what} was stopped")).not_committed()
}
