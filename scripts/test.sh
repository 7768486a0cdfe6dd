#!/usr/bin/env bash
# The test command of fence (README): starts every server the tests need on 127.0.0.1
# (installed from the package registries, versions pinned), runs the whole workspace's tests
# against them, and stops the servers afterwards — also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
export FENCE_SERVERS_DIR="${FENCE_SERVERS_DIR:-$CARGO_TARGET_DIR/servers}"
mkdir -p "$FENCE_SERVERS_DIR"
section() { echo "== [test.sh $((SECONDS / 60))m$((SECONDS % 60))s] $*"; }

tests=(--workspace --lib --bins --tests --examples)
# Build first, so the servers are not left idle (or timing out) during a long compile.
section "building tests"
cargo test "${tests[@]}" --no-run
cargo test -p fence-testkit --features sabotage --test sim --no-run
cargo test -p fence-testkit --features sabotage --test model --no-run
# The Python package (crates/fence-py): built by maturin from the same workspace, target dir
# and dev profile as the tests above, into a venv under target/ with pinned tools.
py_venv="$CARGO_TARGET_DIR/py-venv"
if [ ! -x "$py_venv/bin/maturin" ] || [ ! -x "$py_venv/bin/pytest" ]; then
  python3 -m venv "$py_venv"
  "$py_venv/bin/pip" install --quiet --disable-pip-version-check "maturin==1.16.0" "pytest==9.0.2"
fi
section "building the Python package"
VIRTUAL_ENV="$py_venv" PATH="$py_venv/bin:$PATH" maturin develop --quiet -m crates/fence-py/Cargo.toml

started=()
stop_all() {
  for s in "${started[@]}"; do bash "$s" stop || true; done
}
trap stop_all EXIT INT TERM

# Each scripts/servers/<name>.sh installs (pinned), starts and health-checks its servers,
# and writes the variables the tests need to $FENCE_SERVERS_DIR/<name>.env.
for s in scripts/servers/*.sh; do
  [ -e "$s" ] || continue
  section "starting servers: $s"
  started+=("$s")
  bash "$s" start
  # shellcheck disable=SC1090
  set -a; . "$FENCE_SERVERS_DIR/$(basename "$s" .sh).env"; set +a
done

# Live-server tests fail (instead of skipping) when their server is missing.
export FENCE_REQUIRE_SERVERS=1
section "cargo test"
status=0
cargo test "${tests[@]}" --no-fail-fast -- --show-output || status=$?
section "simulation: every sabotage switch inside the real core must be caught"
# A separate build: only the testkit's `sabotage` feature compiles the switches into
# fence-core, so no other build (not even this script's workspace run) contains them.
cargo test -p fence-testkit --features sabotage --test sim --no-fail-fast -- --show-output \
  every_sabotage_switch_is_caught || status=$?
section "model check: every sabotage switch must give a counterexample"
# (The clean model check, tests/model.rs, ran in the workspace pass above and printed
# `model check <scope>: N states, exhaustive, 0 violations`.)
cargo test -p fence-testkit --features sabotage --test model --no-fail-fast -- --show-output \
  every_sabotage_switch_is_caught_by_the_model_check || status=$?
section "python tests (pytest: local files, SeaweedFS, and Python against \`fence run\`)"
t0=$SECONDS
FENCE_BIN="$CARGO_TARGET_DIR/debug/fence" "$py_venv/bin/pytest" -q -p no:cacheprovider \
  crates/fence-py/tests || status=$?
echo "python tests took $((SECONDS - t0)) s"
section "doc tests"
cargo test --workspace --doc || status=$?
section "done (status $status)"
exit "$status"
