"""Stores for the tests: local files always, the S3 test server (SeaweedFS) when
scripts/servers/s3.sh has started it (required when FENCE_REQUIRE_SERVERS=1)."""

import os
import pathlib
import subprocess
import tempfile
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
FENCE_BIN = os.environ.get("FENCE_BIN", str(ROOT / "target" / "debug" / "fence"))


def pytest_configure(config):
    """In CI (FENCE_PY_INSTALLED=1) the tests must run against the wheel installed into the
    test venv, never against the source tree."""
    if os.environ.get("FENCE_PY_INSTALLED") == "1":
        import fence

        where = pathlib.Path(fence.__file__).resolve()
        source = ROOT / "crates" / "fence-py" / "python"
        if "site-packages" not in where.parts or source in where.parents:
            raise pytest.UsageError(f"fence imported from {where}, not from an installed wheel")


def fence_cli(*args, env=None, timeout=60):
    """Runs the `fence` command (FENCE_BIN) and returns the finished process."""
    if not os.path.exists(FENCE_BIN):
        pytest.fail(f"{FENCE_BIN} missing: build the fence binary first (cargo build -p fence-cli)")
    return subprocess.run([FENCE_BIN, *args], capture_output=True, timeout=timeout,
                          env=env if env is not None else os.environ)


def _s3_env():
    need = ["FENCE_S3_SEAWEED_ENDPOINT", "FENCE_S3_BUCKET", "FENCE_S3_ACCESS_KEY_ID",
            "FENCE_S3_SECRET_ACCESS_KEY"]
    if all(os.environ.get(v) for v in need):
        return {v: os.environ[v] for v in need}
    if os.environ.get("FENCE_REQUIRE_SERVERS") == "1":
        pytest.fail("FENCE_S3_* variables missing but FENCE_REQUIRE_SERVERS=1")
    return None


def s3_url(monkeypatch):
    """A fresh s3:// URL on SeaweedFS, its credentials in this process's environment (the
    store is opened from AWS_* variables exactly as the fence command opens it)."""
    env = _s3_env()
    if env is None:
        pytest.skip("no S3 test server (run scripts/servers/s3.sh start)")
    monkeypatch.setenv("AWS_ENDPOINT", env["FENCE_S3_SEAWEED_ENDPOINT"])
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", env["FENCE_S3_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env["FENCE_S3_SECRET_ACCESS_KEY"])
    return f"s3://{env['FENCE_S3_BUCKET']}/fence-py-{uuid.uuid4().hex}"


@pytest.fixture(params=["file", "s3"])
def url(request, monkeypatch):
    if request.param == "file":
        return "file://" + tempfile.mkdtemp(prefix="fence-py-")
    return s3_url(monkeypatch)


@pytest.fixture
def file_url():
    return "file://" + tempfile.mkdtemp(prefix="fence-py-")
