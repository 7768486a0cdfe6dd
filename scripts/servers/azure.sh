#!/usr/bin/env bash
# Azurite (the Azure Storage emulator, blob service only) for fence-azure's live tests.
#   start: install the pinned npm package azurite@3.35.0 (3.36+ needs Node 22) and the pinned
#          PyPI azure-storage-blob (to create the container with a signed request) under
#          $FENCE_SERVERS_DIR (reused when present), run `azurite-blob` on 127.0.0.1 on a free
#          port with its data in a fresh directory (wiped at every start), wait until it
#          answers, create the test container, write $FENCE_SERVERS_DIR/azure.env.
#   stop:  kill the server by its PID (SIGTERM, wait, SIGKILL).
#
# Why not --inMemoryPersistence: in memory, every write is an extent of its own, and Azurite's
# garbage collector (every 10 minutes) removes each unreferenced extent with a linear scan of
# the extent table. After one run of the fence-azure tests (~20k writes) that froze Azurite
# for about 90 s, ten minutes after start; later requests timed out. On disk, writes share
# extent files, so the collector has a handful of extents to look at.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
dir="${FENCE_SERVERS_DIR:-${CARGO_TARGET_DIR:-$root/target}/servers}"
mkdir -p "$dir/azure"
npm_dir="$dir/npm-azure"
venv="$dir/venv-azure"
pidfile="$dir/azure.pid"
logfile="$dir/azure.log"
envfile="$dir/azure.env"
container="${FENCE_AZURE_TEST_CONTAINER:-fence-test}"
# How long a started server may take to answer, in seconds.
ready_timeout="${FENCE_SERVER_READY_TIMEOUT_S:-60}"
azurite_version="3.35.0"
blob_sdk="azure-storage-blob==12.31.1"
# Azurite's well-known development account and its published key (not a secret).
account="devstoreaccount1"
account_key="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

log() { echo "azure.sh: $*" >&2; }

install() {
  local t0=$SECONDS
  local bin="$npm_dir/node_modules/.bin/azurite-blob"
  if [ ! -x "$bin" ] || ! grep -q "\"version\": \"$azurite_version\"" \
      "$npm_dir/node_modules/azurite/package.json" 2>/dev/null; then
    log "installing azurite@$azurite_version into $npm_dir"
    mkdir -p "$npm_dir"
    npm install --silent --no-audit --no-fund --prefix "$npm_dir" \
      "azurite@$azurite_version" >/dev/null
  fi
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  local have
  have=$("$venv/bin/python" -c \
    'import importlib.metadata as m; print(m.version("azure-storage-blob"))' 2>/dev/null || true)
  if [ "$have" != "${blob_sdk#*==}" ]; then
    log "installing $blob_sdk into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$blob_sdk"
  fi
  log "install step took $((SECONDS - t0)) s"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

answers() { # url -> success once the server answers HTTP at all (Azurite: 400 on GET /)
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$1")" != "000" ]
}

create_container() { # endpoint name
  "$venv/bin/python" - "$1" "$2" "$account" "$account_key" <<'PY'
import sys
from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient
endpoint, name, account, key = sys.argv[1:5]
conn = (
    "DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s/%s;"
    % (account, key, endpoint, account)
)
try:
    BlobServiceClient.from_connection_string(conn).create_container(name)
except ResourceExistsError:
    pass
PY
}

start() {
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    log "already running (pid $(cat "$pidfile"))"
    return 0
  fi
  install
  local port endpoint pid t0=$SECONDS
  port=$(free_port)
  endpoint="http://127.0.0.1:$port"
  local data="$dir/azure/data"
  rm -rf "$data"; mkdir -p "$data"
  (cd "$dir/azure" && exec "$npm_dir/node_modules/.bin/azurite-blob" \
    --blobHost 127.0.0.1 --blobPort "$port" --location "$data" --skipApiVersionCheck \
    --silent >"$logfile" 2>&1) &
  pid=$!
  echo "$pid" >"$pidfile"
  # A deadline in wall time, not a count of tries: beside the test builds on two cores a
  # try can take seconds, and a start once took 16 s here.
  local deadline=$((SECONDS + ready_timeout))
  while [ $SECONDS -lt $deadline ]; do
    if answers "$endpoint/"; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "azurite exited; log follows"; cat "$logfile" >&2; rm -f "$pidfile"; return 1
    fi
    sleep 0.1
  done
  if ! answers "$endpoint/"; then
    log "azurite not answering after ${ready_timeout} s"; stop; return 1
  fi
  create_container "$endpoint" "$container"
  {
    echo "FENCE_AZURE_ENDPOINT=$endpoint"
    echo "FENCE_AZURE_ACCOUNT=$account"
    echo "FENCE_AZURE_CONTAINER=$container"
  } >"$envfile"
  log "azurite $azurite_version pid $pid at $endpoint, container $container, ready in $((SECONDS - t0)) s"
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
      if kill -0 "$pid" 2>/dev/null; then
        log "azurite ignored SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
      fi
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
