"""Stores for the tests: local files always, the S3 test server (SeaweedFS) when
scripts/servers/s3.sh has started it and moto's DynamoDB when scripts/servers/dynamodb.sh has
(required when FENCE_REQUIRE_SERVERS=1)."""

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


def _server_env(need):
    if all(os.environ.get(v) for v in need):
        return {v: os.environ[v] for v in need}
    if os.environ.get("FENCE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{need} missing but FENCE_REQUIRE_SERVERS=1")
    return None


def _s3_env():
    return _server_env(["FENCE_S3_SEAWEED_ENDPOINT", "FENCE_S3_BUCKET",
                        "FENCE_S3_ACCESS_KEY_ID", "FENCE_S3_SECRET_ACCESS_KEY"])


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


def dynamodb_url(monkeypatch):
    """A fresh dynamodb:// URL on moto, configured from AWS_* variables as the fence command
    is (AWS_ENDPOINT_URL_DYNAMODB names DynamoDB's endpoint)."""
    env = _server_env(["FENCE_DYNAMODB_ENDPOINT", "FENCE_DYNAMODB_TABLE",
                       "FENCE_DYNAMODB_ACCESS_KEY_ID", "FENCE_DYNAMODB_SECRET_ACCESS_KEY"])
    if env is None:
        pytest.skip("no DynamoDB test server (run scripts/servers/dynamodb.sh start)")
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", env["FENCE_DYNAMODB_ENDPOINT"])
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", env["FENCE_DYNAMODB_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env["FENCE_DYNAMODB_SECRET_ACCESS_KEY"])
    return f"dynamodb://{env['FENCE_DYNAMODB_TABLE']}/fence-py-{uuid.uuid4().hex}"


@pytest.fixture(params=["file", "s3", "dynamodb"])
def url(request, monkeypatch):
    if request.param == "file":
        return "file://" + tempfile.mkdtemp(prefix="fence-py-")
    if request.param == "dynamodb":
        return dynamodb_url(monkeypatch)
    return s3_url(monkeypatch)


@pytest.fixture
def file_url():
    return "file://" + tempfile.mkdtemp(prefix="fence-py-")
