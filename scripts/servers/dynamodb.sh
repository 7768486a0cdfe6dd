#!/usr/bin/env bash
# moto's DynamoDB for fence-dynamodb's live tests, on 127.0.0.1.
#   start: install moto[server] (pinned, PyPI) into scripts/servers/s3.sh's venv under
#          $FENCE_SERVERS_DIR (unless there already), run it on a free port one request at a time, wait until it answers,
#          create the test table (fence's key schema, on demand), write
#          $FENCE_SERVERS_DIR/dynamodb.env.
#   stop:  kill the server by its PID (SIGTERM, wait, SIGKILL).
# Its own moto process, not the S3 tests' one: moto serves one request at a time (below), and the S3
# and DynamoDB suites would otherwise queue behind each other.
set -euo pipefail

MOTO_VERSION="5.2.5"  # the same as scripts/servers/s3.sh's: they share one install
READY_TIMEOUT_S="${FENCE_SERVER_READY_TIMEOUT_S:-60}"
TABLE="fence-test"
REGION="us-east-1"
# moto checks no signature, but fence signs every request: fixed dummy credentials.
ACCESS_KEY="fence-test-access"
SECRET_KEY="fence-test-secret-0123456789"
# moto's threaded server evaluates a condition and writes without a lock between them (two
# of eight racing S3 creates won in one round of forty); served one request at a time it is
# linearizable. Run moto_server's own main with werkzeug's threading off.
MOTO_SERIAL='import sys, moto.server as m
serve = m.run_simple
m.run_simple = lambda *a, **k: serve(*a, **{**k, "threaded": False})
m.main(sys.argv[1:])'

dir="${FENCE_SERVERS_DIR:?FENCE_SERVERS_DIR must be set}/dynamodb"
mkdir -p "$dir"
env_file="$FENCE_SERVERS_DIR/dynamodb.env"
# moto is installed once: into the venv of scripts/servers/s3.sh, which pins the same version
# (a second install took 65 s on CI's machine); each script skips what is already there.
venv="$FENCE_SERVERS_DIR/venv-s3"

log() { echo "[dynamodb.sh] $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

install() {
  if [ ! -x "$venv/bin/moto_server" ]; then
    local t0=$SECONDS
    log "installing moto[server]==$MOTO_VERSION into $venv"
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
    log "install step took $((SECONDS - t0)) s"
  fi
}

# One DynamoDB call with curl: OPERATION JSON.
call() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST \
    -H "X-Amz-Target: DynamoDB_20120810.$1" -H 'Content-Type: application/x-amz-json-1.0' \
    -H "Authorization: AWS4-HMAC-SHA256 Credential=$ACCESS_KEY/20260101/$REGION/dynamodb/aws4_request, SignedHeaders=host, Signature=0" \
    -d "$2" "$url/"
}

ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/moto-api/")" = 200 ]; }

start() {
  stop 2>/dev/null || true
  install
  local port; port=$(free_port)
  url="http://127.0.0.1:$port"
  (cd "$dir" && exec "$venv/bin/python" -c "$MOTO_SERIAL" -H 127.0.0.1 -p "$port" \
    >"$dir/moto.log" 2>&1) &
  echo $! >"$dir/moto.pid"
  local deadline=$((SECONDS + READY_TIMEOUT_S))
  until ready; do
    if [ $SECONDS -ge $deadline ]; then
      log "moto not ready after ${READY_TIMEOUT_S}s; log tail:"
      tail -n 30 "$dir/moto.log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
  local status; status=$(call CreateTable "{\"TableName\":\"$TABLE\",\
\"AttributeDefinitions\":[{\"AttributeName\":\"pk\",\"AttributeType\":\"S\"},\
{\"AttributeName\":\"sk\",\"AttributeType\":\"S\"}],\
\"KeySchema\":[{\"AttributeName\":\"pk\",\"KeyType\":\"HASH\"},\
{\"AttributeName\":\"sk\",\"KeyType\":\"RANGE\"}],\"BillingMode\":\"PAY_PER_REQUEST\"}")
  if [ "$status" != 200 ]; then
    log "creating table $TABLE answered $status"
    return 1
  fi
  {
    echo "FENCE_DYNAMODB_ENDPOINT=$url"
    echo "FENCE_DYNAMODB_TABLE=$TABLE"
    echo "FENCE_DYNAMODB_REGION=$REGION"
    echo "FENCE_DYNAMODB_ACCESS_KEY_ID=$ACCESS_KEY"
    echo "FENCE_DYNAMODB_SECRET_ACCESS_KEY=$SECRET_KEY"
  } >"$env_file"
  log "moto (DynamoDB) ready at $url; wrote $env_file"
}

stop() {
  local file="$dir/moto.pid"
  [ -f "$file" ] || return 0
  local pid; pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
