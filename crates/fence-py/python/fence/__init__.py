"""fence: exactly one owner per resource, agreed through an object store's conditional
writes, and a deposed owner's late writes refused by the store.

The Rust core (``fence-core``, ``fence-fleet``), not a re-implementation: the same records,
the same rules (docs/protocol.md), so Python and Rust processes share one lock domain.

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


def run_lease(store, name: str, *, ttl: float = 10.0) -> Fence:
    """The fence a ``fence run --lease NAME`` process uses: node ``run.NAME`` over ``store``.

    Its lease excludes every ``fence run`` of the same name (they all contend for that one
    node lease), and its claim of cell ``NAME`` raises the epoch ``fence run`` hands to its
    command as ``FENCE_EPOCH``.

    >>> import fence, tempfile
    >>> fence.run_lease("file://" + tempfile.mkdtemp(), "nightly").node
    'run.nightly'
    """
    return Fence(store, "run." + name, ttl=ttl, addr=f"python:{_pid()}")


def _pid() -> int:
    import os

    return os.getpid()


__all__ = [
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
    "InvalidInputError",
    "InvalidKeyError",
    "Lease",
    "NotFoundError",
    "PermissionDeniedError",
    "Shard",
    "Store",
    "StoreTimeoutError",
    "Term",
    "UnavailableError",
    "UnsupportedError",
    "WriteAck",
    "run_lease",
]
