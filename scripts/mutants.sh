#!/usr/bin/env bash
# The mutation gate (on demand, not in CI): applies each mutation of scripts/mutants.txt to
# fence-core's decide/ and runtime/ in turn, runs the checks CI runs against it — fence-core's
# unit tests (then its integration tests, if those missed), the model check's CI scopes, the
# simulation's CI seeds — and prints a table of
# which caught it. A mutation no check catches is a hole in the tests (docs/testkit.md, "The
# mutation gate").
#
#   scripts/mutants.sh                 # every mutation
#   scripts/mutants.sh ID...           # only these
#   MUTANTS_ALL=1 scripts/mutants.sh   # also run the simulation for mutations caught already
#
# It mutates the working tree in place (each file restored after its run, also on Ctrl-C),
# so it refuses to start unless crates/fence-core is unchanged from HEAD. CPU-heavy: every
# mutation rebuilds fence-core and the test binaries; runs at low priority (nice). The model
# check's two largest scopes (`ci()`, `ci_two_faults()`) run only for a mutation the smaller
# CI scopes missed; the simulation only for one the unit tests and the model check both missed
# (or with MUTANTS_ALL).
set -euo pipefail

cd "$(dirname "$0")/.."
LIST=scripts/mutants.txt
SRC=crates/fence-core/src
OUT=${MUTANTS_OUT:-target/mutants}
mkdir -p "$OUT"
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}

if ! git diff --quiet HEAD -- crates/fence-core; then
    echo "crates/fence-core has uncommitted changes; commit or stash them first" >&2
    exit 2
fi

NICE="nice -n ${MUTANTS_NICE:-15}"
# The model check's CI scopes (tests/model.rs, as filters): the smaller ones together, then
# the two largest one at a time.
SMALL_SCOPES="quick_scope release_scope collection_scopes mixed_ttl_scope log_scopes resume_scopes two_cell_scope clock_slow_within canonical_form admitted_exception"
LARGE_SCOPES="every_state_of_the_ci_scope every_state_of_the_two_fault_scope"

restore=""
cleanup() {
    if [[ -n $restore ]]; then
        git checkout -q HEAD -- "$restore"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Applies mutation $2 -> $3 (literal, "\n" a line break) to $1, exactly once.
apply() {
    python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3].replace("\\n", "\n")
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: the text to mutate occurs {text.count(old)} times, not once")
open(path, "w").write(text.replace(old, new))
PY
}

# The test binaries' paths, from cargo's build of them.
binary() {
    grep -F "$1 (" "$OUT/build.log" | grep -o '([^)]*)' | tr -d '()' | tail -1
}

build() {
    $NICE cargo test -p fence-core --lib --no-run >"$OUT/build.log" 2>&1 &&
        $NICE cargo test -p fence-testkit --test model --test sim --no-run >>"$OUT/build.log" 2>&1
}

# Runs test binary $1 with filters $2... ; prints the failed tests' names (empty: all passed).
failed_tests() {
    local bin=$1
    shift
    local log="$OUT/run.log"
    timeout --foreground "${MUTANTS_TIMEOUT:-1200}" $NICE "$bin" "$@" >"$log" 2>&1
    local rc=$?
    if ((rc == 124)); then
        echo "timeout"
    elif ((rc != 0)); then
        # Test names shortened: `every_state_of_the_quick_scope_holds_every_property` -> `quick_scope`.
        grep -aE '^test .* \.\.\. FAILED' "$log" |
            sed -E 's/^test (.*) \.\.\. FAILED/\1/; s/^every_state_(of_the_|with_a_)//; s/_holds_every_property$//; s/.*:://' |
            tr '\n' ' '
        grep -qaE '^test .* \.\.\. FAILED' "$log" || echo "exit $rc"
    fi
}

# Runs fence-core's integration tests (tests/*.rs); prints the failed tests' names.
integration_failures() {
    local log="$OUT/integration.log"
    timeout --foreground "${MUTANTS_TIMEOUT:-1200}" $NICE cargo test -p fence-core --tests \
        --no-fail-fast >"$log" 2>&1
    local rc=$?
    if ((rc == 124)); then
        echo "timeout"
    elif ((rc != 0)); then
        grep -aE '^test .* \.\.\. FAILED' "$log" |
            sed -E 's/^test (.*) \.\.\. FAILED/\1/; s/.*:://' | tr '\n' ' '
        grep -qaE '^test .* \.\.\. FAILED' "$log" || echo "exit $rc"
    fi
}

declare -a ROWS
caught=0
missed=0
while IFS= read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    IFS=$'\x1f' read -r id file old new what < <(sed 's/ ||| /\x1f/g' <<<"$line")
    if (($# > 0)) && [[ " $* " != *" $id "* ]]; then
        continue
    fi
    echo "== $id ($file): $what"
    restore="$SRC/$file"
    apply "$SRC/$file" "$old" "$new"
    started=$SECONDS
    unit="-" model="-" sim="not run"
    if ! build; then
        unit="does not build" model="does not build" sim="does not build"
    else
        set +e
        lib=$(binary src/lib.rs)
        m=$(binary tests/model.rs)
        s=$(binary tests/sim.rs)
        u=$(failed_tests "$lib")
        if [[ -z $u ]]; then
            # fence-core's integration tests (tests/*.rs), which CI runs too.
            u=$(integration_failures)
        fi
        unit=${u:-missed}
        # shellcheck disable=SC2086 # the scopes are filters, one word each
        mf=$(failed_tests "$m" $SMALL_SCOPES)
        if [[ -z $mf ]]; then
            for scope in $LARGE_SCOPES; do
                mf=$(failed_tests "$m" "$scope")
                [[ -n $mf ]] && break
            done
        fi
        model=${mf:-missed}
        if [[ ($unit == missed && $model == missed) || -n ${MUTANTS_ALL:-} ]]; then
            sf=$(failed_tests "$s" every_property_holds safety_and_exclusion)
            sim=${sf:-missed}
        fi
        set -e
    fi
    git checkout -q HEAD -- "$SRC/$file"
    restore=""
    verdict=caught
    if [[ $unit == missed && $model == missed && ($sim == missed || $sim == "not run") ]]; then
        verdict=MISSED
        missed=$((missed + 1))
    else
        caught=$((caught + 1))
    fi
    row="| \`$id\` | $file | ${unit% } | ${model% } | ${sim% } | $verdict | $((SECONDS - started)) s |"
    echo "$row"
    ROWS+=("$row")
done <"$LIST"

echo
echo "| mutation | file | fence-core unit tests | model check (failing CI scopes) | simulation (CI seeds) | verdict | time |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "$caught caught, $missed missed"
