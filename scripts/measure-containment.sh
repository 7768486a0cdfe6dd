#!/usr/bin/env bash
# Measures, for each containment mode of `fence run` (a PID namespace, and the tracked
# fallback), how long after a SIGKILL of `fence run` the last process of its command is gone.
# TTL 2 s and --grace 5s: an orphaned command gets a grace period of TTL/4 = 0.5 s, then
# SIGKILL. The command leaves behind what is hardest to end: a shell and a setsid helper that
# both ignore SIGTERM, a background job, and a process that forks itself again and again.
# Every process carries a mark in its environment; "gone" means no process with the mark is
# left in /proc (a zombie has no environment, so it counts as gone).
#
# Not run by CI. Usage: scripts/measure-containment.sh [TRIALS]   (default 20 per mode)
# FENCE_BIN=path measures another build of fence instead of target/debug/fence.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20}
if [ -z "${FENCE_BIN:-}" ]; then
    cargo build -q -p fence-cli --bin fence
fi
fence=${FENCE_BIN:-$PWD/target/debug/fence}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Processes that carry the mark $1 (host PIDs).
marked() {
    grep -lszx "FENCE_MEASURE_MARK=$1" /proc/[0-9]*/environ 2>/dev/null |
        sed 's,/proc/,,;s,/environ,,' || true
}

# SIGKILLs every process with the mark $1 until none is left (a fork hopper needs several).
kill_marked() {
    local left
    while left=$(marked "$1") && [ -n "$left" ]; do
        # shellcheck disable=SC2086 # one word per PID
        kill -9 $left 2>/dev/null || true
    done
}

cat >"$work/hop.sh" <<EOF
trap '' TERM; sleep 0.02; sh $work/hop.sh & exit 0
EOF

# One trial in mode $1: prints the milliseconds from SIGKILL to the last process's end.
trial() {
    local mode=$1 n=$2 mark="m$$-$1-$2" store="$work/store-$1-$2" up="$work/up-$1-$2"
    mkdir -p "$store"
    local script="trap '' TERM; sleep 1000 & \
        setsid sh -c \"trap '' TERM; while :; do sleep 0.05; done\" & \
        setsid sh $work/hop.sh & echo up > $up; while :; do sleep 0.05; done"
    # Not on our stdout: a process that escapes must not hold the caller's pipe open.
    FENCE_CONTAINMENT=$mode "$fence" run --store "file://$store" --lease m --ttl 2s --grace 5s \
        -- env "FENCE_MEASURE_MARK=$mark" sh -c "$script" </dev/null >/dev/null 2>&1 &
    local pid=$!
    while [ ! -s "$up" ]; do sleep 0.02; done
    sleep 0.3
    local start
    start=$(now_ms)
    kill -9 "$pid"
    wait "$pid" 2>/dev/null || true
    while [ -n "$(marked "$mark")" ]; do
        if [ $(($(now_ms) - start)) -gt 30000 ]; then
            echo "trial $n in $mode: processes left after 30 s: $(marked "$mark" | tr '\n' ' ')" >&2
            kill_marked "$mark"
            echo 30000
            return
        fi
        sleep 0.005
    done
    echo $(($(now_ms) - start))
}

for mode in required fallback; do
    times=()
    for n in $(seq "$trials"); do
        times+=("$(trial "$mode" "$n")")
    done
    sorted=$(printf '%s\n' "${times[@]}" | sort -n)
    worst=$(echo "$sorted" | tail -1)
    median=$(echo "$sorted" | sed -n "$(((trials + 1) / 2))p")
    best=$(echo "$sorted" | head -1)
    name=$([ "$mode" = required ] && echo namespace || echo fallback)
    printf '%-9s  trials %3d  best %5d ms  median %5d ms  worst %5d ms\n' \
        "$name" "$trials" "$best" "$median" "$worst"
done
