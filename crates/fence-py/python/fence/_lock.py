"""``fence.lock``: the lock API Python users know, over a run lease.

A ``Lock`` is the lock ``fence run --lease NAME`` takes (node lease ``run.NAME``, cell
``NAME``), so a Python process and ``fence run`` exclude each other, on one machine or many.
"""

import os
import threading
import weakref
from typing import List, Optional, Tuple, Union

from . import _fence
from ._fence import BusyError, Fence, FencedError, Store, WriteAck

Data = Union[bytes, bytearray, str]


def run_lease(store, name: str, *, ttl: float = 10.0) -> Fence:
    """The fence a ``fence run --lease NAME`` process uses: node ``run.NAME`` over ``store``.

    Its lease excludes every ``fence run`` of the same name (they all contend for that one
    node lease), and its claim of cell ``NAME`` raises the epoch ``fence run`` hands to its
    command as ``FENCE_EPOCH``. ``name`` is checked as the ``fence`` command checks it
    (``InvalidInputError``).

    >>> import fence, tempfile
    >>> fence.run_lease("file://" + tempfile.mkdtemp(), "nightly").node
    'run.nightly'
    """
    node = _fence.run_lease_node(name)
    return Fence(store, node, ttl=ttl, addr=f"python:{os.getpid()}")


def _error(cls, kind: str, message: str):
    """A fence exception raised by this module, with the attributes the native ones carry."""
    e = cls(message)
    e.kind, e.commit, e.ambiguous, e.key, e.message = kind, "not_committed", False, None, message
    return e


class Lock:
    """A lock across processes and machines: the run lease ``fence run --lease NAME`` takes.

    Held means this process holds the node lease ``run.NAME`` (renewed in the background)
    and a claim of cell ``NAME``, whose ``epoch`` is the fencing token.

    - ``acquire(blocking=True, timeout=None)`` blocks until the lock is free, as
      ``threading.Lock`` does (``timeout=None``: for ever; ``blocking=False``: try once), and
      raises ``BusyError`` when it gives up (as filelock raises ``Timeout``). It returns the
      lock, so ``with lock.acquire(timeout=5):`` works.
    - Reentrant, as ``threading.RLock`` and filelock are: the thread that holds it may
      acquire it again, and it is released when every acquire has been released. A nested
      acquire after the lock was lost (``locked()`` false) raises ``FencedError`` instead. Other
      threads of this process wait for it like any other holder.
    - ``locked()``: whether this process holds it now (judged locally, no request).
    - ``put``/``get``/``delete``/``keys``: the key map ``fence put``/``fence get`` keep in the
      cell's data, written at this lock's epoch.
    - ``lost()`` waits until the lock's authority ends (its lease lost or released).
    - After ``os.fork()`` the child holds nothing: ``locked()`` is false, leaving a ``with``
      block entered before the fork does nothing, and the child may acquire the lock for
      itself (when it was made from a URL: a ``Store`` object belongs to the parent). The
      parent keeps holding.
    - What a process still holds when the interpreter exits is released then, so a waiter
      gets it at once rather than a TTL later.
    """

    def __init__(self, store: Union[str, Store], name: str, *, ttl: float = 10.0):
        _fence.run_lease_node(name)
        _fence.check_wait(True, ttl)
        self._store, self._name, self._ttl = store, name, ttl
        self._pid = os.getpid()
        self._fence: Optional[Fence] = None
        self._reset()
        _all_locks.add(self)

    def _reset(self, inherited: int = 0) -> None:
        self._mutex = threading.Lock()  # the threads of this process take turns
        self._owner: Optional[int] = None
        self._count = 0
        self._lease = None
        self._claim = None
        self._inherited = inherited  # `with` blocks a forked child leaves without releasing

    def _forked(self) -> None:
        """In a forked child: hold nothing, and forget the parent's fence objects."""
        # Only the forking thread lives on in the child: only its `with` blocks are left there.
        mine = self._owner == threading.get_ident()
        self._reset(inherited=self._count if mine else 0)
        self._pid = os.getpid()
        self._fence = None

    def _run_lease(self) -> Fence:
        if self._fence is None:
            self._fence = run_lease(self._store, self._name, ttl=self._ttl)
        return self._fence

    @property
    def name(self) -> str:
        """The lease name."""
        return self._name

    @property
    def epoch(self) -> Optional[int]:
        """The epoch of the claim while held (the fencing token), else ``None``."""
        return self._claim.epoch if self._claim is not None else None

    @property
    def lease(self):
        """The node lease while held, else ``None``."""
        return self._lease

    @property
    def claim(self):
        """The claim of cell ``name`` while held, else ``None``."""
        return self._claim

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> "Lock":
        """Takes the lock: the node lease, then the cell at a new epoch (see the class)."""
        _fence.check_wait(blocking, timeout)
        me = threading.get_ident()
        if self._owner == me:
            if not self.locked():
                # The outer acquire's authority ended (lease lost, claim superseded): a nested
                # section must not run as if it held the lock. Release the outer one.
                raise _error(
                    FencedError,
                    "fenced",
                    f"lock {self._name!r} was lost while this thread held it; the nested acquire is refused",
                )
            self._count += 1
            return self
        start = _now()
        if not (self._mutex.acquire(blocking, -1 if timeout is None else timeout)):
            raise _error(BusyError, "busy", f"lock {self._name!r} is held by another thread of this process")
        try:
            lease = self._run_lease().acquire(blocking, _left(timeout, start))
            try:
                claim = lease.claim(self._name, blocking, _left(timeout, start))
            except BaseException:
                lease.release()
                raise
        except BaseException:
            self._mutex.release()
            raise
        self._lease, self._claim, self._owner, self._count = lease, claim, me, 1
        return self

    def release(self) -> None:
        """Gives the lock back once every acquire of the holding thread is released: the cell
        is released (its epoch and data kept), then the node lease, so a waiter takes it at
        once. ``RuntimeError`` from a thread that does not hold it."""
        if self._owner != threading.get_ident():
            if self._inherited > 0:  # a `with` block entered before a fork, left in the child
                self._inherited -= 1
                return
            raise RuntimeError(f"release of lock {self._name!r}, which this thread does not hold")
        self._count -= 1
        if self._count > 0:
            return
        claim, lease = self._claim, self._lease
        self._lease = self._claim = self._owner = None
        try:
            try:
                claim.__exit__(None, None, None)
            finally:
                lease.release()
        finally:
            self._mutex.release()

    def locked(self) -> bool:
        """Whether this process holds the lock now (in any thread), judged locally: the
        lease's authority stands and no write found the claim superseded."""
        claim = self._claim
        return claim is not None and claim.is_held()

    def lost(self) -> str:
        """Waits until the held lock's authority ends; ``"lease_lost"`` or ``"released"``
        (also at once when not held)."""
        lease = self._lease
        return lease.lost() if lease is not None else "released"

    def _held_claim(self, what: str):
        claim = self._claim
        if claim is None:
            raise _error(FencedError, "fenced", f"{what}: lock {self._name!r} is not held; nothing written")
        return claim

    def put(self, key: str, value: Data) -> WriteAck:
        """Sets ``key`` in the lock's key map at its epoch, as ``fence put KEY`` does inside
        ``fence run``."""
        return self._held_claim("put").put(key, value)

    def delete(self, key: str) -> bool:
        """Removes ``key`` from the key map at the lock's epoch; whether it was there."""
        return self._held_claim("delete").delete(key)

    def get(self, key: str) -> Optional[bytes]:
        """The value of ``key`` in the key map (``None``: absent), as ``fence get KEY`` prints
        it; held or not."""
        return self._run_lease().get(self._name, key)

    def keys(self) -> List[str]:
        """The keys of the key map, sorted; held or not."""
        return self._run_lease().keys(self._name)

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, *exc) -> bool:
        self.release()
        return False

    def __repr__(self) -> str:
        store = self._store if isinstance(self._store, str) else self._store.url
        return f"Lock(store={store!r}, name={self._name!r}, locked={self.locked()!r})"


def _now() -> float:
    import time

    return time.monotonic()


def _left(timeout: Optional[float], start: float) -> Optional[float]:
    return None if timeout is None else max(0.0, timeout - (_now() - start))


_all_locks: "weakref.WeakSet[Lock]" = weakref.WeakSet()
_named: "weakref.WeakValueDictionary[Tuple[str, str, float], Lock]" = weakref.WeakValueDictionary()
_named_guard = threading.Lock()


def lock(store: Union[str, Store], name: str, *, ttl: float = 10.0) -> Lock:
    """The lock ``fence run --lease NAME`` takes, on ``store`` (a URL or a ``Store``)::

        with fence.lock("file:///var/lock/app", "jobs"):
            ...  # one holder at a time, across processes and machines

    A run lease, a claim and a release: it excludes ``fence run --lease jobs`` both ways.
    The same ``Lock`` comes back for the same store, name and TTL while one is in use in
    this process, so threads that each write ``with fence.lock(...)`` take turns.
    """
    key = (store if isinstance(store, str) else store.url, name, ttl)
    with _named_guard:
        found = _named.get(key)
        if found is None:
            found = _named[key] = Lock(store, name, ttl=ttl)
        return found


def _after_fork_in_child() -> None:
    global _named_guard
    _named_guard = threading.Lock()
    for held in list(_all_locks):
        held._forked()
