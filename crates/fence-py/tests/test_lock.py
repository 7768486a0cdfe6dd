"""The package as Python users expect a lock to behave (issue 38): blocking acquire,
locked(), reentrancy, the one-line lock shared with `fence run`, fork safety, release at
interpreter exit, the key map shared with `fence put`/`fence get`, and errors said as the
`fence` command says them."""

import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import fence
from conftest import FENCE_BIN, fence_cli


def held_by_python(url, name, *, ttl=30.0):
    """A Python process holding `fence.lock(url, name)` until its stdin closes."""
    script = (
        "import sys, fence\n"
        f"with fence.lock({url!r}, {name!r}, ttl={ttl}):\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_acquire_blocks_until_the_holder_releases_and_blocking_false_tries_once(file_url):
    holder = held_by_python(file_url, "jobs")
    lock = fence.lock(file_url, "jobs", ttl=30.0)
    start = time.monotonic()
    with pytest.raises(fence.BusyError):
        lock.acquire(blocking=False)
    assert time.monotonic() - start < 2.0  # one try, no wait
    assert not lock.locked()
    got = []

    def wait_for_it():
        with lock:  # acquire() blocks by default
            got.append(time.monotonic())

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.5)
    assert not got, "acquire() returned while another process held the lock"
    released = time.monotonic()
    holder.stdin.close()
    assert holder.wait(timeout=20) == 0
    waiter.join(timeout=20)
    # The holder released (TTL 30 s): the waiter took it at its next look.
    assert len(got) == 1 and got[0] - released < 5.0


def test_locked_says_whether_this_process_holds_it(file_url):
    lock = fence.lock(file_url, "jobs")
    assert not lock.locked() and lock.epoch is None
    lock.acquire()
    assert lock.locked() and lock.epoch == 1
    lock.release()
    assert not lock.locked() and lock.epoch is None


def test_a_second_acquire_is_reentrant_on_a_lock_and_refused_on_a_fence(file_url):
    lock = fence.lock(file_url, "jobs")
    with lock:
        with lock:  # the holding thread again: a count, as threading.RLock and filelock keep
            lock.put("k", "v")
        assert lock.locked()
        assert fence.Fence(file_url, "reader").read("jobs").owner == "run.jobs"
        # Another thread of this process waits like any other holder.
        other = []

        def try_once():
            try:
                lock.acquire(blocking=False)
            except fence.BusyError as e:
                other.append(e.kind)

        t = threading.Thread(target=try_once)
        t.start()
        t.join()
        assert other == ["busy"]
    assert not lock.locked()
    assert fence.Fence(file_url, "reader").read("jobs").owner is None

    # The node lease itself, acquired twice in one process (same Fence or same node id):
    # refused at once with its own error, never "held by another process", never a wait.
    f = fence.Fence(file_url, "worker-1", ttl=5.0)
    lease = f.acquire()
    assert f.locked()
    for again in (f, fence.Fence(file_url, "worker-1", ttl=5.0)):
        start = time.monotonic()
        with pytest.raises(fence.AlreadyHeldError) as refused:
            again.acquire(timeout=3.0)  # would wait on itself, then say "another process"
        assert time.monotonic() - start < 1.0
        assert refused.value.kind == "already_held" and "another process" not in str(refused.value)
    lease.release()
    assert not f.locked()
    f.acquire(blocking=False).release()  # free again


def test_the_one_line_lock_is_the_lease_fence_run_takes(file_url):
    with fence.lock(file_url, "jobs", ttl=5.0) as lock:
        busy = fence_cli("run", "--store", file_url, "--lease", "jobs", "--ttl", "5s", "--", "true")
        assert busy.returncode == 75, busy.stderr
        held_epoch = lock.epoch
    ran = fence_cli("run", "--store", file_url, "--lease", "jobs", "--ttl", "5s", "--",
                    "sh", "-c", 'echo "$FENCE_EPOCH"')
    assert ran.returncode == 0, ran.stderr
    assert int(ran.stdout) == held_epoch + 1


def test_the_key_map_is_shared_with_fence_put_and_fence_get_both_ways(file_url):
    with fence.lock(file_url, "jobs") as lock:
        lock.put("config", "replicas=3\n")
        lock.put("blob", b"\x00\xff")
        for key, value in [("config", b"replicas=3\n"), ("blob", b"\x00\xff")]:
            got = fence_cli("get", "--store", file_url, "--lease", "jobs", key)
            assert got.returncode == 0 and got.stdout == value, got.stderr
        # A raw write would destroy the key map: refused unless asked for.
        with pytest.raises(fence.InvalidInputError) as refused:
            lock.claim.write(b"raw bytes")
        assert refused.value.commit == "not_committed"
        assert fence.Fence(file_url, "reader").get("jobs", "config") == b"replicas=3\n"
    put = fence_cli("run", "--store", file_url, "--lease", "jobs", "--", "sh", "-c",
                    '"$0" put from-cli --value "set by fence put"', FENCE_BIN)
    assert put.returncode == 0, put.stderr
    lock = fence.lock(file_url, "jobs")
    assert lock.get("from-cli") == b"set by fence put"
    assert lock.keys() == ["blob", "config", "from-cli"]
    with lock:
        assert lock.delete("blob") and not lock.delete("blob")
        lock.claim.write(b"raw bytes", overwrite_keymap=True)
        with pytest.raises(fence.CorruptError):  # raw data is not a key map: nothing written
            lock.put("k", "v")
    not_a_map = fence_cli("get", "--store", file_url, "--lease", "jobs", "config")
    assert not_a_map.returncode == 69


EXITS_HOLDING = """
import sys, threading, time, fence
held = threading.Event()

def work():  # a daemon thread holding a lock and a lease: never unwound at exit
    with fence.lock(sys.argv[1], "jobs", ttl=30.0):
        lease = fence.Fence(sys.argv[1], "worker", ttl=30.0).acquire()
        lease.claim("orders").write(b"x")
        held.set()
        time.sleep(3600)

threading.Thread(target=work, daemon=True).start()
held.wait()
print("held", flush=True)
"""  # ...and the interpreter exits


def test_what_is_held_is_released_at_interpreter_exit(file_url):
    child = subprocess.Popen([sys.executable, "-c", EXITS_HOLDING, file_url],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    lock = fence.lock(file_url, "jobs", ttl=30.0)
    got = []

    def wait_for_it():
        with lock.acquire(timeout=20):
            got.append(time.monotonic())

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    assert child.wait(timeout=20) == 0
    exited = time.monotonic()
    waiter.join(timeout=25)
    assert len(got) == 1, "the waiter did not get the lock"
    took = got[0] - exited
    assert took < 1.0, f"took {took:.2f} s (TTL 30 s)"
    # The plain node lease was released too: its cell (whose Claim object was dropped
    # unreleased) is taken over at once, and the node lease is free.
    with fence.Fence(file_url, "other").acquire(blocking=False) as other:
        assert other.claim("orders", blocking=False).epoch == 2
    fence.Fence(file_url, "worker").acquire(blocking=False).release()


def test_a_forked_child_holds_nothing_and_fails_fast(file_url):
    lock = fence.lock(file_url, "jobs", ttl=30.0)
    lock.acquire()
    lease = fence.Fence(file_url, "worker", ttl=30.0).acquire()
    cell = lease.claim("orders")
    cell.write(b"parent")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it saw on the pipe, never return into pytest
        said = []
        try:
            said.append(f"locked={lock.locked()} held={lease.is_held()} cell={cell.is_held()}")
            start = time.monotonic()
            for call in (lambda: cell.write(b"child"), lambda: lease.claim("other"),
                         lambda: cell.read(), lambda: lease.lost()):
                try:
                    call()
                    said.append("no error")
                except fence.ForkedError as e:
                    said.append(e.kind)
            said.append(f"fast={time.monotonic() - start < 1.0}")
            lease.release()  # the child holds nothing to release: nothing happens
            fence._fence.release_all()  # as at the child's exit: releases nothing of the parent's
            with pytest.raises(fence.BusyError):  # the child's own lock object: the parent holds
                lock.acquire(blocking=False)
            mine = fence.Fence(file_url, "child", ttl=5.0).acquire(timeout=5)  # its own runtime
            said.append(f"own={mine.claim('child-cell').write(b'c').epoch}")
            mine.release()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            said.append(f"error {type(e).__name__}: {e}")
        os.write(write, "\n".join(said).encode())
        os._exit(0)
    os.close(write)
    status = wait_or_kill(pid, 20.0)
    with os.fdopen(read) as pipe:
        said = pipe.read().splitlines()
    assert status == 0, f"the child hung or failed (status {status}): {said}"
    assert said == ["locked=False held=False cell=False", "forked", "forked", "forked", "forked",
                    "fast=True", "own=1"], said
    # The parent still holds everything.
    assert lock.locked() and lease.is_held() and cell.write(b"parent again").epoch == 1
    assert fence.Fence(file_url, "reader").read("orders").data == b"parent again"
    cell.release()
    lease.release()
    lock.release()


SAME_PID_CHILD = """
import sys, fence
lease = fence.Fence(sys.argv[1], "worker", ttl=30.0).acquire()
cell = lease.claim("orders")
# What a forked child that kept its parent's pid sees (the parent was pid 1 of a PID
# namespace it left, or its pid came round again): the fork hook ran, the pid is the same.
fence._fence.forked_in_child()
said = [f"held={lease.is_held()} cell={cell.is_held()}"]
for call in (lambda: cell.write(b"child"), lambda: lease.claim("other")):
    try:
        call()
        said.append("no error")
    except fence.ForkedError as e:
        said.append(e.kind)
print(" ".join(said))
"""


def test_a_child_with_its_parents_pid_still_holds_nothing(file_url):
    out = subprocess.run([sys.executable, "-c", SAME_PID_CHILD, file_url], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # With the pid as the only identity, the child took the parent's objects for its own.
    assert out.stdout.split() == ["held=False", "cell=False", "forked", "forked"], out.stdout


def wait_or_kill(pid, limit):
    """The exit code of child `pid`, killed after `limit` seconds (a hang fails the test)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "killed after a hang"


@pytest.mark.parametrize("name", ["cafe\u0301", "night\u200bly", "a/b", "x.fence", ".."])
def test_a_name_the_command_refuses_is_refused_in_python(file_url, name):
    refused = fence_cli("run", "--store", file_url, "--lease", name, "--", "true")
    assert refused.returncode == 2, refused.stderr
    with pytest.raises(fence.InvalidKeyError):
        fence.lock(file_url, name)
    with fence.Fence(file_url, "n").acquire() as lease:
        with pytest.raises(fence.InvalidKeyError):
            lease.claim(name)


NO_CREDENTIALS = """
import sys, fence
try:
    fence.Fence("s3://bucket/p", "n").acquire(blocking=False)
except fence.FenceError as e:
    print(e.kind)
    print(e)
"""


def test_s3_without_credentials_says_what_the_command_says(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE"))}
    # No credential source; the metadata service (the last one tried) at a closed port.
    env.update(HOME=str(tmp_path), AWS_METADATA_ENDPOINT="http://127.0.0.1:9")
    cli = fence_cli("status", "--store", "s3://bucket/p", env=env)
    assert cli.returncode == 69
    line = cli.stderr.decode().strip()
    words = line[line.index("no AWS credentials"):]
    py = subprocess.run([sys.executable, "-c", NO_CREDENTIALS], env=env, capture_output=True,
                        text=True, timeout=60)
    kind, message = py.stdout.splitlines()
    assert kind == "permission_denied", py.stdout
    assert words in message, (line, message)
    for source in ["AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "~/.aws", "127.0.0.1:9"]:
        assert source in message


def test_payloads_durations_and_reprs_say_one_thing(file_url):
    with fence.Fence(file_url, "worker-1", ttl=5.0).acquire() as lease:
        with lease.claim("c") as cell:
            cell.write("text is written as UTF-8")
            assert cell.read().data == b"text is written as UTF-8"
            with pytest.raises(TypeError, match="bytes, bytearray or str"):
                cell.write(42)
            data = cell.read()
            assert f"owner='worker-1'" in repr(data) and "Some(" not in repr(data)
            assert "held=True" in repr(lease) and "node='worker-1'" in repr(lease)
        assert "owner=None" in repr(fence.Fence(file_url, "r").read("c"))
        bad = [
            lambda: fence.Fence(file_url, "n", ttl=-1.0),
            lambda: fence.Fence(file_url, "n", ttl=float("nan")),
            lambda: lease.claim("c", timeout=-1),
            lambda: fence.Fence(file_url, "m").acquire(timeout=float("inf")),
            lambda: fence.Fence(file_url, "m").acquire(blocking=False, timeout=1.0),
            lambda: fence.lock(file_url, "jobs").acquire(timeout=-0.5),
        ]
        for call in bad:
            with pytest.raises(fence.InvalidInputError) as e:
                call()
            assert isinstance(e.value, ValueError) and e.value.kind == "invalid_input"


def test_a_lost_lock_refuses_a_nested_acquire(file_url):
    lock = fence.lock(file_url, "jobs", ttl=1.0)
    with lock:
        with lock:  # held: a count
            pass
        # A successor that KNOWS this holder has ended takes the run lease over.
        taker = fence.run_lease(file_url, "jobs", ttl=1.0).acquire_succeeding(lock.lease.generation)
        assert lock.lost() == "lease_lost"
        assert not lock.locked()
        with pytest.raises(fence.FencedError) as refused:
            lock.acquire()  # re-entry used to succeed silently while locked() was False
        assert refused.value.kind == "fenced" and not refused.value.ambiguous
    taker.release()


def test_lease_lost_returns_when_the_authority_ends(file_url):
    a = fence.Fence(file_url, "n", ttl=1.0).acquire()
    # A successor that KNOWS a has ended takes the record over; a's next renewal fails.
    b = fence.Fence(file_url, "n", ttl=1.0).acquire_succeeding(a.generation)
    start = time.monotonic()
    assert a.lost() == "lease_lost"
    assert time.monotonic() - start < 3.0
    b_done = threading.Timer(0.2, b.release)
    b_done.start()
    assert b.lost() == "released"
