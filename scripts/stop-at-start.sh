#!/usr/bin/env bash
# A `fence run` stopped (SIGSTOP) a moment after its start, for 3 s, while a waiter takes the
# lease and holds it, then continued: how did the stopped run end? Counts its exit codes and
# the runs that ended on an unsettled ambiguity ("no evidence settled it").
#
# Usage: scripts/stop-at-start.sh [TRIES]     (default 50; about 4 s a try)
# Env:   FENCE (the binary, default target/debug/fence), STORE_URL (a store URL under which each
#        try takes a fresh prefix; default a fresh local directory per try), STOP_MIN_MS and
#        STOP_SPAN_MS (the stop comes STOP_MIN_MS + [0, STOP_SPAN_MS) ms after the start:
#        default 55 + [0, 35), where a debug build on a 2-core machine is claiming its cell),
#        TTL (default 1s), WAITER_HOLDS (how long the waiter's command runs, default 3).
set -u
cd "$(dirname "$0")/.."
fence=${FENCE:-target/debug/fence}
tries=${1:-50}
ttl=${TTL:-1s}
declare -A codes=()
unsettled=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$tries"); do
    if [[ -n "${STORE_URL:-}" ]]; then
        url="$STORE_URL/stop-at-start-$$-$i"
    else
        mkdir "$out/store$i"
        url="file://$out/store$i"
    fi
    "$fence" run --store "$url" --lease l --ttl "$ttl" -- sleep 1 2>"$out/a" &
    a=$!
    stop_ms=$(( ${STOP_MIN_MS:-55} + RANDOM % ${STOP_SPAN_MS:-35} ))
    sleep "$(printf '0.%03d' "$stop_ms")"
    kill -STOP "$a"
    "$fence" run --store "$url" --lease l --ttl "$ttl" --timeout 20s -- sleep "${WAITER_HOLDS:-3}" \
        2>"$out/b" &
    b=$!
    sleep 3
    kill -CONT "$a"
    wait "$a"
    code=$?
    wait "$b"
    codes[$code]=$(( ${codes[$code]:-0} + 1 ))
    if grep -q "no evidence settled it" "$out/a"; then
        unsettled=$((unsettled + 1))
        echo "try $i (stopped at ${stop_ms} ms): $(cat "$out/a")"
    fi
done
for code in "${!codes[@]}"; do
    echo "exit $code: ${codes[$code]}"
done | sort
echo "unsettled ambiguity: $unsettled of $tries"
