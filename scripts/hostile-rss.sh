#!/usr/bin/env bash
# Peak memory of one `fence` command against hostile answers, per backend (s3, gs, az).
#
# A canned server on 127.0.0.1 (crates/fence-wire/examples/hostile_answers.rs) answers every
# request with 2 GiB (`record`; `unannounced`: without a Content-Length), a 500 of 1 GiB
# (`error`), listing pages that never end (`listing`), or 404 (`absent`, the baseline). Each command runs under /usr/bin/time -v, whose
# "Maximum resident set size" is the peak RSS; the table gives it and its excess over the
# baseline (`fence get` of an absent key on the same backend). Needs no test server and no
# network beyond loopback. Usage: scripts/hostile-rss.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/.."

profile=debug
cargo_flags=()
if [[ "${1:-}" == "--release" ]]; then
    profile=release
    cargo_flags=(--release)
fi
cargo build -q "${cargo_flags[@]}" -p fence-cli --bin fence
cargo build -q "${cargo_flags[@]}" -p fence-wire --example hostile_answers
fence="target/$profile/fence"
server_bin="target/$profile/examples/hostile_answers"

server_pid=
stop_server() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=
    fi
}
trap stop_server EXIT

# Starts the server in mode $1; sets $endpoint.
start_server() {
    local out
    out=$(mktemp)
    "$server_bin" "$1" >"$out" &
    server_pid=$!
    for _ in $(seq 100); do
        endpoint=$(head -n1 "$out")
        [[ -n "$endpoint" ]] && break
        sleep 0.1
    done
    rm -f "$out"
    [[ -n "$endpoint" ]] || { echo "the hostile server did not start" >&2; exit 1; }
}

# Runs `fence ARGS...` against backend $1 at $endpoint; prints "peak_kib seconds exit".
measure() {
    local backend=$1
    shift
    local env=(env -u AWS_PROFILE -u GOOGLE_APPLICATION_CREDENTIALS
        FENCE_GCS_ENDPOINT= STORAGE_EMULATOR_HOST=)
    case "$backend" in
        s3) env+=(AWS_ENDPOINT="$endpoint" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1
                AWS_ACCESS_KEY_ID=hostile AWS_SECRET_ACCESS_KEY=hostile-secret) ;;
        gs) env+=(FENCE_GCS_ENDPOINT="$endpoint") ;;
        az) env+=(AZURE_STORAGE_USE_EMULATOR=true AZURITE_BLOB_STORAGE_URL="$endpoint") ;;
    esac
    local report status start end
    report=$(mktemp)
    start=$(date +%s.%N)
    set +e
    "${env[@]}" /usr/bin/time -v -o "$report" timeout 300 "$fence" "$@" >/dev/null 2>&1
    status=$?
    set -e
    end=$(date +%s.%N)
    local peak
    peak=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$report")
    rm -f "$report"
    awk -v p="$peak" -v s="$start" -v e="$end" -v x="$status" 'BEGIN { printf "%s %.1f %s\n", p, e - s, x }'
}

declare -A store=([s3]="s3://b/fleet" [gs]="gs://fence-test/x" [az]="az://fence-test/fleet")
declare -A baseline

start_server absent
for b in s3 gs az; do
    read -r peak _ _ < <(measure "$b" get --store "${store[$b]}" --lease job k)
    baseline[$b]=$peak
done
stop_server

printf '%-8s %-34s %10s %10s %8s %5s\n' backend "command against" "peak KiB" "over base" seconds exit
for b in s3 gs az; do
    printf '%-8s %-34s %10s %10s %8s %5s\n' "$b" "baseline: get, 404" "${baseline[$b]}" 0 - -
done
run_case() {
    local mode=$1 label=$2
    shift 2
    start_server "$mode"
    for b in s3 gs az; do
        local args=("$@")
        args=("${args[@]/STORE/${store[$b]}}")
        read -r peak secs status < <(measure "$b" "${args[@]}")
        printf '%-8s %-34s %10s %10s %8s %5s\n' "$b" "$label" "$peak" \
            "$((peak - baseline[$b]))" "$secs" "$status"
    done
    stop_server
}
run_case record "get, 200 of 2 GiB" get --store STORE --lease job k
run_case unannounced "get, 200 of 2 GiB, no length" get --store STORE --lease job k
run_case error "get, 500 of 1 GiB" get --store STORE --lease job k
run_case error "run, 500 of 1 GiB" run --store STORE --lease job --ttl 3s -- true
run_case listing "status, listing without end" status --store STORE
