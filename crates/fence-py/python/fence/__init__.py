"""fence: exactly one owner per resource, agreed through an object store's conditional
writes, and a deposed owner's late writes refused by the store.

The Rust core (``fence-core``, ``fence-fleet``), not a re-implementation: the same records,
the same rules (docs/protocol.md), so Python and Rust processes share one lock domain. The
distribution is ``fence-lock``; the import name is ``fence``.

The common case is one line: the lock ``fence run --lease jobs`` takes, so a Python job and
``fence run`` exclude each other (blocks until free; ``BusyError`` when ``acquire`` gives up)::

    with fence.lock("file:///var/lock/app", "jobs"):
        ...

After ``os.fork()`` the child holds nothing (its parent's objects raise ``ForkedError``);
what a process still holds at interpreter exit is released then.

>>> import fence, tempfile
>>> f = fence.Fence("file://" + tempfile.mkdtemp(), "worker-1", ttl=5.0)
>>> with f.acquire(timeout=10) as lease:              # the node lease, renewed in the background
...     with lease.claim("orders", timeout=10) as cell:  # the cell at a new epoch
...         ack = cell.write(b"state v1")               # one compare-and-swap, fenced
...         (ack.epoch, cell.read().data)
(1, b'state v1')

Blocking calls release the GIL; every method that talks to the store has an ``*_async``
twin for asyncio, and leases, claims, fleets and elections work with ``async with`` /
``async for``. Errors are ``FenceError`` subclasses carrying ``kind`` and ``commit``.
"""

from ._fence import (
    AlreadyHeldError,
    BusyError,
    CellData,
    Claim,
    ConflictError,
    CorruptError,
    Drained,
    Election,
    ElectionEvent,
    Fence,
    FenceError,
    FencedError,
    Fleet,
    FleetEvent,
    ForkedError,
    InvalidInputError,
    InvalidKeyError,
    Lease,
    NotFoundError,
    PermissionDeniedError,
    Shard,
    Store,
    StoreTimeoutError,
    Term,
    UnavailableError,
    UnsupportedError,
    WriteAck,
)


import atexit as _atexit
import os as _os

from . import _fence
from ._lock import Lock, lock, run_lease

# A forked child holds nothing: its Locks start empty, and every native object its parent
# made raises ForkedError (the native module checks, on each call, the process id and the
# count of forks this hook keeps: a child can have its parent's pid).
if hasattr(_os, "register_at_fork"):
    from ._lock import _after_fork_in_child

    _os.register_at_fork(after_in_child=_fence.forked_in_child)
    _os.register_at_fork(after_in_child=_after_fork_in_child)

# What is still held at interpreter exit is released then, so a waiter gets it at once
# instead of a TTL later (a forked child releases nothing: it holds nothing).
_atexit.register(_fence.release_all)

__all__ = [
    "AlreadyHeldError",
    "BusyError",
    "CellData",
    "Claim",
    "ConflictError",
    "CorruptError",
    "Drained",
    "Election",
    "ElectionEvent",
    "Fence",
    "FenceError",
    "FencedError",
    "Fleet",
    "FleetEvent",
    "ForkedError",
    "InvalidInputError",
    "InvalidKeyError",
    "Lease",
    "Lock",
    "NotFoundError",
    "PermissionDeniedError",
    "Shard",
    "Store",
    "StoreTimeoutError",
    "Term",
    "UnavailableError",
    "UnsupportedError",
    "WriteAck",
    "lock",
    "run_lease",
]
