"""Cross-language exclusion: Python processes (this package) and Rust processes (`fence run`)
contend for one lease on one store. Runs never overlap, epochs rise run after run, and a
stale Python holder's write is refused by the store."""

import os
import subprocess
import sys
import tempfile

import pytest

import fence
from conftest import FENCE_BIN

RUNS = 3

PY_RUNNER = """
import sys, time, fence
url, log, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
f = fence.run_lease(url, "jobs", ttl=2.0)
for _ in range(runs):
    with f.acquire(timeout=60) as lease:
        with lease.claim("jobs", timeout=60) as cell:
            with open(log, "a") as out:
                out.write(f"start py {cell.epoch}\\n")
            cell.write(f"py {cell.epoch}")
            time.sleep(0.2)
            with open(log, "a") as out:
                out.write(f"end py {cell.epoch}\\n")
    time.sleep(0.05)
"""

RUST_JOB = 'echo "start rs $FENCE_EPOCH" >> "$LOG"; sleep 0.2; echo "end rs $FENCE_EPOCH" >> "$LOG"'


def rust_runner(url, log):
    script = " ; ".join(
        [f'{FENCE_BIN} run --store {url} --lease jobs --ttl 2s --timeout 60s --quiet -- sh -c \'{RUST_JOB}\''
         for _ in range(RUNS)]
    )
    return subprocess.Popen(["sh", "-c", script], env={**os.environ, "LOG": log})


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_python_and_rust_exclude_each_other_and_epochs_rise(backend, monkeypatch):
    if not os.path.exists(FENCE_BIN):
        pytest.fail(f"{FENCE_BIN} missing: build the fence binary first (cargo build -p fence-cli)")
    if backend == "file":
        url = "file://" + tempfile.mkdtemp(prefix="fence-interop-")
    else:
        from conftest import s3_url
        url = s3_url(monkeypatch)
    log = os.path.join(tempfile.mkdtemp(), "runs.log")
    procs = [rust_runner(url, log) for _ in range(2)]
    procs += [subprocess.Popen([sys.executable, "-c", PY_RUNNER, url, log, str(RUNS)])
              for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=240) == 0
    lines = [line.split() for line in open(log).read().splitlines()]
    assert len(lines) == 2 * 4 * RUNS
    epochs = []
    for start, end in zip(lines[0::2], lines[1::2]):
        # Every run ends before the next starts: no two holders at once.
        assert start[0] == "start" and end[0] == "end" and start[1:] == end[1:], lines
        epochs.append(int(start[2]))
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs), epochs
    assert {l[1] for l in lines} == {"py", "rs"}
    # A Python holder of a superseded epoch writes again: the store refuses it.
    f = fence.run_lease(url, "jobs")
    oldest = epochs[0]
    with pytest.raises(fence.FencedError) as refused:
        f.write("jobs", oldest, b"stale write from python")
    assert refused.value.commit == "not_committed"
    last = f.read("jobs")
    assert last.epoch == epochs[-1] and last.data != b"stale write from python"
