//! One process's share of the package — its tokio runtime and what it holds — and what a
//! forked child gets of it: nothing.
//!
//! `fork()` copies a process's memory but only the calling thread. The parent's runtime has
//! no worker threads in the child (a call on it would wait for ever), its connections are
//! the parent's sockets, and its leases are the parent's: a child that renewed, wrote or
//! released through them would act as the parent. So every object that reaches the runtime
//! or the store is a [`Local`]: it remembers the process that made it, and in any other
//! process its calls raise `ForkedError` at once (its `is_held()` is false), and it is never
//! dropped there (its destructor would act on the parent's runtime). A child gets a runtime
//! of its own at its first call, for the objects it makes itself.
//!
//! The per-process state lives behind a mutex that is taken only while the GIL is held and
//! never across a wait, so no thread can hold it at the instant `os.fork()` (which holds the
//! GIL) copies the process; the child replaces the parent's state without touching it.

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use fence_core::CellClaim;
use pyo3::prelude::*;
use pyo3_async_runtimes::generic::{ContextExt, Runtime as GenericRuntime};
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::{Handle, Runtime};

use crate::election::ElectionSlot;
use crate::fleet::FleetSlot;
use crate::lease::KeeperSlot;

/// A process as this package tells one from another: its pid and how many `os.fork()`s
/// made it from the process the package was loaded in. A pid alone is no identity: a forked
/// child can have its parent's pid (the parent was pid 1 of a PID namespace it then left with
/// `unshare`, or it ended and its pid came round again to a grandchild).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ident {
    pid: u32,
    forks: u64,
}

/// How many `os.fork()`s lie between the process the package was loaded in and this one:
/// raised by [`forked_in_child`], which `os.register_at_fork(after_in_child=…)` runs.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// Called in every child `os.fork()` makes (registered by the package's `__init__`).
#[pyfunction]
pub(crate) fn forked_in_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

/// This process.
fn here() -> Ident {
    Ident {
        pid: std::process::id(),
        forks: FORKS.load(Ordering::SeqCst),
    }
}

/// This process's state.
pub(crate) struct Process {
    id: Ident,
    runtime: &'static Runtime,
    /// What this process's objects hold, released at interpreter exit ([`release_all`]).
    held: Vec<Held>,
}

/// Something a `Lease`, `Claim`, `Fleet` or `Election` of this process holds (weakly: the
/// object's own end releases it).
pub(crate) enum Held {
    /// A node lease, with its [`hold key`](crate::lease::Fence): store, prefix and node.
    Lease(String, Weak<KeeperSlot>),
    /// A claimed cell.
    Claim(Weak<CellClaim>),
    /// A fleet member.
    Fleet(Weak<FleetSlot>),
    /// A campaigning or leading election.
    Election(Weak<ElectionSlot>),
}

impl Held {
    fn is_alive(&self) -> bool {
        match self {
            Held::Lease(_, w) => w.strong_count() > 0,
            Held::Claim(w) => w.strong_count() > 0,
            Held::Fleet(w) => w.strong_count() > 0,
            Held::Election(w) => w.strong_count() > 0,
        }
    }
}

static PROCESS: Mutex<Option<Process>> = Mutex::new(None);

/// This process's state, made at the first call in this process. The `Python` token is the
/// proof that the GIL is held (see the module docs): never wait while holding the guard.
pub(crate) fn process(_py: Python<'_>) -> MutexGuard<'static, Option<Process>> {
    let mut guard = PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    let id = here();
    if guard.as_ref().is_none_or(|p| p.id != id) {
        let runtime = Box::leak(Box::new(new_runtime()));
        // A parent's state is never dropped here: its destructors would act as the parent.
        if let Some(parent) = guard.replace(Process {
            id,
            runtime,
            held: Vec::new(),
        }) {
            std::mem::forget(parent);
        }
    }
    guard
}

fn new_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("fence")
        .build()
        .unwrap_or_else(|e| panic!("fence: cannot start its tokio runtime: {e}"))
}

/// The runtime of this process.
pub(crate) fn runtime(py: Python<'_>) -> &'static Runtime {
    process(py)
        .as_ref()
        .map(|p| p.runtime)
        .unwrap_or_else(|| unreachable!("process() always leaves this process's state in place"))
}

/// Whether this is still the process `id`.
fn is_current(id: Ident) -> bool {
    id == here()
}

/// A value that belongs to the process that made it (see the module docs).
pub(crate) struct Local<T> {
    id: Ident,
    value: Option<T>,
}

impl<T> Local<T> {
    /// `value`, belonging to this process.
    pub(crate) fn new(value: T) -> Self {
        Local {
            id: here(),
            value: Some(value),
        }
    }

    /// The value, in the process that made it; `ForkedError` in a forked child.
    pub(crate) fn get(&self) -> PyResult<&T> {
        self.here().ok_or_else(|| forked(self.id.pid))
    }

    /// The value, in the process that made it; `None` in a forked child.
    pub(crate) fn here(&self) -> Option<&T> {
        self.value.as_ref().filter(|_| is_current(self.id))
    }
}

impl<T> Drop for Local<T> {
    fn drop(&mut self) {
        if !is_current(self.id) {
            // The parent's lease, claim or connection: dropping it would act as the parent.
            std::mem::forget(self.value.take());
        }
    }
}

/// The error of any call, in a forked child, on an object its parent made.
fn forked(parent: u32) -> PyErr {
    crate::errors::forked(format!(
        "this object belongs to process {parent}; after os.fork() the child (process {}) \
         holds nothing and may not use its parent's fence objects: make new ones in the child",
        std::process::id()
    ))
}

/// Registers what an object of this process holds, for [`release_all`].
pub(crate) fn hold(py: Python<'_>, held: Held) {
    let mut guard = process(py);
    if let Some(p) = guard.as_mut() {
        p.held.retain(Held::is_alive);
        p.held.push(held);
    }
}

/// The node lease of hold key `key` that this process holds now, if any.
pub(crate) fn holding(py: Python<'_>, key: &str) -> Option<Arc<KeeperSlot>> {
    let guard = process(py);
    let p = guard.as_ref()?;
    p.held.iter().find_map(|h| match h {
        Held::Lease(k, slot) if k == key => {
            slot.upgrade().filter(|s| crate::lease::slot_is_held(s))
        }
        _ => None,
    })
}

/// What is still held at interpreter exit: released — elections stopped, fleets drained,
/// then claims, then node leases (a claim's release is refused once its lease is gone) —
/// within 5 s in all, so that exit never hangs on an unreachable store. Called by `atexit`;
/// does nothing in a forked child (it holds nothing).
#[pyfunction]
pub(crate) fn release_all(py: Python<'_>) {
    let held: Vec<Held> = {
        let _gil = py;
        let mut guard = PROCESS.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_mut() {
            // Nothing made in this process (a forked child's state is its parent's): nothing
            // to release, and no runtime to start for it.
            Some(p) if is_current(p.id) => std::mem::take(&mut p.held),
            _ => return,
        }
    };
    if held.is_empty() {
        return;
    }
    let rt = runtime(py);
    py.detach(|| {
        rt.block_on(async {
            let clock = fence_core::Clock::system();
            tokio::select! {
                () = release(held) => {}
                () = clock.sleep(std::time::Duration::from_secs(5)) => {}
            }
        });
    });
}

async fn release(held: Vec<Held>) {
    for h in &held {
        if let Held::Election(w) = h {
            if let Some(e) = w.upgrade() {
                crate::election::stop_slot(&e).await;
            }
        }
    }
    for h in &held {
        if let Held::Fleet(w) = h {
            if let Some(f) = w.upgrade() {
                crate::fleet::drain_slot(&f).await;
            }
        }
    }
    for h in &held {
        if let Held::Claim(w) = h {
            match w.upgrade() {
                Some(c) if c.is_held() => {
                    let _ = c.release_shared().await;
                }
                _ => {}
            }
        }
    }
    for h in &held {
        if let Held::Lease(_, w) = h {
            if let Some(l) = w.upgrade() {
                crate::lease::release_slot(&l).await;
            }
        }
    }
}

/// pyo3-async-runtimes' runtime interface over this process's runtime, so that coroutines
/// run on the runtime of the process that awaits them (pyo3-async-runtimes' own keeps the
/// first process's for ever).
pub(crate) struct ProcessRuntime;

tokio::task_local! {
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

/// The runtime a spawn goes to: the current one inside a task, else this process's.
fn handle() -> Handle {
    Handle::try_current().unwrap_or_else(|_| Python::attach(|py| runtime(py).handle().clone()))
}

impl GenericRuntime for ProcessRuntime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        handle().spawn(fut)
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        handle().spawn_blocking(f)
    }
}

impl ContextExt for ProcessRuntime {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|c| c.get().cloned())
            .unwrap_or_default()
    }
}

/// A Rust future as an asyncio awaitable, run on this process's runtime.
pub(crate) fn future_into_py<F, T>(py: Python<'_>, fut: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    pyo3_async_runtimes::generic::future_into_py::<ProcessRuntime, F, T>(py, fut)
}
