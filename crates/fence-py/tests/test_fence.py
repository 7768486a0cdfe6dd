"""The Python package against real stores: leases, claims, fenced writes, errors, asyncio,
fleets, elections, the GIL and Ctrl-C."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import fence


def test_claim_write_read_and_release_raise_the_epoch(url):
    f = fence.Fence(url, "n1", ttl=2.0)
    with f.acquire(timeout=10) as lease:
        assert lease.is_held() and lease.remaining > 0
        with lease.claim("orders", timeout=10) as cell:
            ack = cell.write(b"v1")
            assert ack.epoch == 1 == cell.epoch
            assert cell.read().data == b"v1"
            ack2 = cell.write_if(ack.version, "v2")
            assert cell.read().version == ack2.version
        with lease.claim("orders") as again:
            assert again.epoch == 2
            assert again.read().data == b"v2"  # a claim carries the data forward
    seen = f.read("orders")
    assert (seen.epoch, seen.owner, seen.data) == (2, None, b"v2")
    assert not lease.is_held()


def test_errors_carry_kind_and_commit(file_url):
    a = fence.Fence(file_url, "a", ttl=2.0).acquire()
    b = fence.Fence(file_url, "b", ttl=2.0).acquire()
    cell = a.claim("c")
    with pytest.raises(fence.BusyError) as busy:
        b.claim("c", timeout=0)
    assert busy.value.kind == "busy" and busy.value.commit == "not_committed"
    cell.write(b"first")
    seen = cell.read()
    cell.write(b"moved on")
    with pytest.raises(fence.ConflictError) as conflict:
        cell.write_if(seen.version, b"stale")
    assert conflict.value.commit == "not_committed" and not conflict.value.ambiguous
    with pytest.raises(fence.InvalidKeyError):
        a.claim("a/b")
    with pytest.raises(fence.InvalidInputError):
        fence.Store("ftp://nowhere")
    assert isinstance(conflict.value, fence.FenceError)
    cell.release()
    a.release()
    b.release()


def test_store_text_in_an_error_message_cannot_act_on_a_terminal(file_url):
    """A node name comes from the store like any record's text: it reaches str(error)
    escaped, so a traceback shows it instead of running it (here a bidi override, which
    would print the name reversed)."""
    holder = fence.Fence(file_url, "mallory\u202eexe.txt", ttl=5.0).acquire()
    cell = holder.claim("c")
    other = fence.Fence(file_url, "b", ttl=5.0).acquire()
    with pytest.raises(fence.BusyError) as busy:
        other.claim("c", timeout=0)
    said = str(busy.value)
    assert "\u202e" not in said and "mallory\\u202eexe.txt" in said, said
    assert busy.value.message == said
    cell.release()
    holder.release()
    other.release()


def test_a_stale_holders_write_is_refused_by_the_store(file_url):
    """Holder A still believes it holds (its lease renews every TTL/3 and has not noticed),
    but a successor took the node's lease and claimed the cell at a later epoch: A's write
    passes every local check, goes to the store, and the store refuses it."""
    a = fence.run_lease(file_url, "jobs", ttl=30.0).acquire()
    stale = a.claim("jobs")
    stale.write(b"from A")
    b = fence.run_lease(file_url, "jobs", ttl=30.0).acquire_succeeding(a.generation)
    fresh = b.claim("jobs")
    assert fresh.epoch == stale.epoch + 1
    assert a.is_held() and stale.is_held()  # nothing local has noticed yet
    with pytest.raises(fence.FencedError) as refused:
        stale.write(b"late write from A")
    assert refused.value.commit == "not_committed"
    assert fence.Fence(file_url, "reader").read("jobs").data == b"from A"
    with pytest.raises(fence.FencedError):
        fence.Fence(file_url, "x").write("jobs", stale.epoch, b"stale put")
    fresh.release()
    b.release()


def test_asyncio_api(url):
    async def main():
        f = fence.Fence(url, "aio", ttl=2.0)
        async with await f.acquire_async(timeout=10) as lease:
            async with await lease.claim_async("c", timeout=10) as cell:
                ack = await cell.write_async(b"x")
                got = await cell.read_async()
                await cell.write_if_async(got.version, b"y")
                # Many concurrent reads run on the shared runtime, none blocking the loop.
                reads = await asyncio.gather(*(f.read_async("c") for _ in range(8)))
                assert {r.data for r in reads} == {b"y"}
                return ack.epoch

    assert asyncio.run(main()) == 1


def test_asyncio_cancellation_of_a_wait_holds_nothing(file_url):
    holder = fence.Fence(file_url, "holder", ttl=2.0).acquire()
    held = holder.claim("c")
    held.write(b"x")  # a cell with data reads back with its owner
    waiter = fence.Fence(file_url, "waiter", ttl=2.0).acquire()

    async def main():
        task = asyncio.ensure_future(waiter.claim_async("c", timeout=None))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    time.sleep(1.0)  # the cancelled wait ends its slice and gives back what it got
    assert held.is_held() and fence.Fence(file_url, "reader").read("c").owner == "holder"
    held.release()
    waiter.release()
    holder.release()


def test_the_gil_is_released_while_waiting(file_url):
    holder = fence.Fence(file_url, "holder", ttl=2.0).acquire()
    held = holder.claim("c")
    waiter = fence.Fence(file_url, "waiter", ttl=2.0).acquire()
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=tick)
    t.start()
    with pytest.raises(fence.BusyError):
        waiter.claim("c", timeout=0.6)
    stop.set()
    t.join()
    # A Python thread ran throughout the wait: it never held the GIL for long.
    assert len(ticks) >= 10
    held.release()
    waiter.release()
    holder.release()


WAITER = """
import sys, fence
f = fence.Fence(sys.argv[1], "waiter", ttl=2.0)
with f.acquire(timeout=10) as lease:
    print("waiting", flush=True)
    lease.claim("c", timeout=None)
"""


def test_ctrl_c_during_a_wait_raises_keyboard_interrupt_and_holds_nothing(file_url):
    holder = fence.Fence(file_url, "holder", ttl=2.0).acquire()
    cell = holder.claim("c")
    p = subprocess.Popen([sys.executable, "-c", WAITER, file_url], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=20)
    assert p.returncode != 0 and "KeyboardInterrupt" in err, err
    # The waiter claimed nothing and its lease was released on the way out: both are free.
    assert fence.Fence(file_url, "reader").read("c") is None or holder.is_held()
    assert cell.is_held()
    fence.Fence(file_url, "waiter", ttl=2.0).acquire(timeout=0).release()
    cell.release()
    holder.release()


def test_fleet_events_as_an_iterator(file_url):
    f = fence.Fence(file_url, "fa", ttl=1.0)
    fleet = fence.Fleet(f, [f"s{i}" for i in range(4)], timeout=10)
    kinds = []
    for event in fleet:
        kinds.append(event.kind)
        if event.kind == "started":
            assert event.shard.write(b"hi").epoch == event.epoch
        if kinds.count("started") == 4:
            break
    assert kinds[0] == "lease_acquired"
    assert fleet.held() == ["s0", "s1", "s2", "s3"]
    drained = fleet.drain(5.0)
    assert sorted(drained.released) == ["s0", "s1", "s2", "s3"] and drained.lease_released
    # The loop was left before the drain: the drain tells every stop nobody read.
    stops = sorted(e.cell for e in drained.unread if e.kind == "stopped")
    assert stops == ["s0", "s1", "s2", "s3"]


def test_election_leads_writes_and_hands_over_on_stop(file_url):
    a = fence.Election(fence.Fence(file_url, "a", ttl=1.0), "leader", retry_period=0.05)
    started = next(e for e in a if e.kind == "started")
    term = started.term
    assert term.is_held() and term.write(b"plan").epoch == started.epoch
    b = fence.Election(fence.Fence(file_url, "b", ttl=1.0), "leader", retry_period=0.05)
    seen = b.next_event(timeout=5)
    assert seen.kind == "new_leader" and seen.node == "a"
    unread = a.stop()
    assert [e.epoch for e in unread if e.kind == "stopped"] == [started.epoch]
    assert not term.is_held()
    with pytest.raises(fence.FencedError):
        term.write(b"after the term")
    nxt = next(e for e in b if e.kind == "started")
    assert nxt.epoch == started.epoch + 1
    b.stop()


def test_ctrl_c_while_the_claim_lands_gives_the_claim_back(file_url):
    """Ctrl-C arrives just as the awaited cell comes free: the slice under way still claims
    it, and the wait gives the claim back before it raises KeyboardInterrupt (no cell is left
    named by a node that nobody is waiting for). The SIGINT handler frees the cell itself, so
    the claim can only land after the interrupt was seen; a run in which the slice ended
    before it looked again claims nothing and is tried again."""
    holder = fence.Fence(file_url, "holder", ttl=0.3).acquire()
    waiter = fence.Fence(file_url, "waiter", ttl=0.3).acquire()
    reader = fence.Fence(file_url, "reader")
    claimed_and_given_back = False
    for _ in range(8):
        held = holder.claim("c")
        held.write(b"data")  # a cell with data reads back with its owner and epoch

        def on_sigint(signum, frame, held=held):
            held.release()
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGINT, on_sigint)
        try:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            with pytest.raises(KeyboardInterrupt):
                waiter.claim("c", timeout=None)
        finally:
            signal.signal(signal.SIGINT, old)
        seen = reader.read("c")
        assert seen.owner is None, f"the cancelled wait left the cell claimed by {seen.owner}"
        if seen.epoch == held.epoch + 1:
            claimed_and_given_back = True
            break
    assert claimed_and_given_back
    waiter.release()
    holder.release()
