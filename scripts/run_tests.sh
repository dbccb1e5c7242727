#!/usr/bin/env bash
# Run every built test binary, then the real-application checks.
#
#   scripts/run_tests.sh            (from anywhere; works in the repo root)
#
# Runs build/tests/unit/* and build/tests/stress/* (each bounded by
# TEST_TIMEOUT seconds, default 300), then all of them again under each
# non-default setting of every run-time gate (MATRIX_SETTINGS below; each run
# is its own entry, named with the setting in brackets; MATRIX=0 skips this),
# then the same tests linked with the hardened build (build/tests-hardened/),
# sums the cmocka counts of each binary
# ("[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s)"), then runs
# scripts/run_apps.sh ./libhakmem.so, where every app counts as one test,
# then scripts/run_hardened_tests.sh (misuse caught by libhakmem_hardened.so;
# the apps again under it).  A
# binary that crashes or times out counts as failed.  Ends with the line
# "N passed, N failed"; exits 1 if anything failed or nothing ran.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
TMO="${TEST_TIMEOUT:-300}"
LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/hakmem-tests.XXXXXX")" || { echo "run_tests: mktemp failed" >&2; exit 1; }
trap 'rm -rf "$LOGDIR"' EXIT
export CMOCKA_MESSAGE_OUTPUT=stdout   # the format parsed below

TOTAL_PASS=0
TOTAL_FAIL=0

describe_rc() {
    local rc=$1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "timed out after ${TMO}s"
    elif [ "$rc" -gt 128 ]; then echo "killed by signal $((rc - 128))$( [ $((rc - 128)) -eq 6 ] && echo ' (abort)'; [ $((rc - 128)) -eq 11 ] && echo ' (segfault)')"
    else echo "exit status $rc"; fi
}

# run_binary BIN [SETTING]: run one test binary, optionally with extra
# environment settings (SETTING: "VAR=VALUE ..."; then named "NAME [SETTING]").
run_binary() {
    local bin="$1" setting="${2:-}" name log rc start end secs passed failed planned extra note
    name="${bin#build/tests/}"
    case "$bin" in build/tests-hardened/*) name="${bin#build/tests-hardened/} [hardened]" ;; esac
    [ -n "$setting" ] && name="$name [$setting]"
    log="$LOGDIR/$(echo "$name" | tr '/ []=' '_____').log"
    start=$(date +%s.%N)
    if [ -n "$setting" ]; then
        local envs
        read -ra envs <<<"$setting"
        timeout -k 10 "$TMO" env "${envs[@]}" "$bin" >"$log" 2>&1
    else
        timeout -k 10 "$TMO" "$bin" >"$log" 2>&1
    fi
    rc=$?
    end=$(date +%s.%N)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')

    passed=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\..*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    failed=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    planned=$(sed -n 's/^\[==========\] Running \([0-9][0-9]*\) test(s)\..*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')

    note=""
    if [ "$rc" -ne 0 ] && ! grep -q '^\[  PASSED  \]\|^\[  FAILED  \] [0-9]' "$log"; then
        # Died before its summary: count the tests that finished "OK".
        passed=$(grep -c '^\[       OK \]' "$log")
    fi
    if [ "$rc" -ne 0 ]; then
        # A crash or timeout: every test that did not report success failed
        # (at least one).
        extra=$((planned - passed - failed))
        [ "$extra" -lt 1 ] && [ "$failed" -eq 0 ] && extra=1
        [ "$extra" -lt 0 ] && extra=0
        failed=$((failed + extra))
        note=" - $(describe_rc "$rc")"
    elif [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
        passed=1   # not a cmocka program (or no summary): judged by its exit status
    fi

    TOTAL_PASS=$((TOTAL_PASS + passed))
    TOTAL_FAIL=$((TOTAL_FAIL + failed))
    if [ "$failed" -eq 0 ]; then
        printf 'PASS %-56s %3d passed (%ss)\n' "$name" "$passed" "$secs"
    else
        printf 'FAIL %-56s %3d passed, %d failed (%ss)%s\n' "$name" "$passed" "$failed" "$secs" "$note"
        echo "----- last lines of $name:"
        tail -n 40 "$log"
        echo "-----"
    fi
}

shopt -s nullglob
BINS=()
for b in build/tests/unit/* build/tests/stress/*; do
    [ -f "$b" ] && [ -x "$b" ] && BINS+=("$b")
done
shopt -u nullglob

if [ "${#BINS[@]}" -eq 0 ]; then
    echo "run_tests: no test binaries under build/tests (run 'make tests' first)" >&2
fi
for b in "${BINS[@]}"; do
    run_binary "$b"
done

# The gate matrix: every unit and stress test again under each non-default
# setting of every run-time gate (docs/ENV_VARS.md; numeric gates at the ends
# of their ranges).  MATRIX=0 skips it for a quick run.
MATRIX_SETTINGS=(
    HAKMEM_STATS=1
    HAKMEM_BATCH_TIER_SIZE=1
    HAKMEM_BATCH_TIER_SIZE=256
    HAKMEM_L2_RING_CAP=1
    HAKMEM_L25_RING_CAP=1
    HAKMEM_TINY_C2_LOCAL_CACHE=1
    HAKMEM_MID_INUSE_DEFERRED=1
    HAKMEM_SS_LOOKUP_KIND=radix
    HAKMEM_PURGE_DELAY_MS=0
    HAKMEM_PURGE_DELAY_MS=3600000
)
if [ "${MATRIX:-1}" != 0 ]; then
    for setting in "${MATRIX_SETTINGS[@]}"; do
        for b in "${BINS[@]}"; do
            run_binary "$b" "$setting"
        done
    done
fi

# The same tests on the hardened build, by default and with the radix
# lookup (its free path has the check of its own).
HBINS=()
shopt -s nullglob
for b in build/tests-hardened/unit/* build/tests-hardened/stress/*; do
    [ -f "$b" ] && [ -x "$b" ] && HBINS+=("$b")
done
shopt -u nullglob
[ "${#HBINS[@]}" -eq 0 ] && { echo "FAIL hardened tests (build/tests-hardened missing: make tests)"; TOTAL_FAIL=$((TOTAL_FAIL + 1)); }
for setting in "" HAKMEM_SS_LOOKUP_KIND=radix; do
    [ -n "$setting" ] && [ "${MATRIX:-1}" = 0 ] && continue
    for b in "${HBINS[@]}"; do
        run_binary "$b" "$setting"
    done
done

# Real applications, one test each.
APPS_LOG="$LOGDIR/apps.log"
if [ -x scripts/run_apps.sh ]; then
    scripts/run_apps.sh ./libhakmem.so >"$APPS_LOG" 2>"$LOGDIR/apps.err"
    apps_rc=$?
    cat "$APPS_LOG"
    app_pass=$(grep -c '^PASS ' "$APPS_LOG")
    app_fail=$(grep -c '^FAIL ' "$APPS_LOG")
    if [ "$app_fail" -gt 0 ] || [ "$apps_rc" -ne 0 ]; then
        [ -s "$LOGDIR/apps.err" ] && { echo "----- run_apps.sh stderr:"; tail -n 40 "$LOGDIR/apps.err"; echo "-----"; }
        # A failure that printed no FAIL line still counts once.
        [ "$app_fail" -eq 0 ] && app_fail=1
    fi
    TOTAL_PASS=$((TOTAL_PASS + app_pass))
    TOTAL_FAIL=$((TOTAL_FAIL + app_fail))
else
    echo "FAIL apps (scripts/run_apps.sh missing)"
    TOTAL_FAIL=$((TOTAL_FAIL + 1))
fi

# The hardened build: each misuse caught, real programs under it.
if [ -x scripts/run_hardened_tests.sh ]; then
    HARD_LOG="$LOGDIR/hardened.log"
    scripts/run_hardened_tests.sh >"$HARD_LOG" 2>&1
    hard_rc=$?
    grep -v ' passed, .* failed$' "$HARD_LOG"
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$HARD_LOG" | tail -n 1)
    hard_pass=$(echo "$summary" | awk '{ print $1 + 0 }')
    hard_fail=$(echo "$summary" | awk '{ print $3 + 0 }')
    [ "$hard_rc" -ne 0 ] && [ "$hard_fail" -eq 0 ] && hard_fail=1
    TOTAL_PASS=$((TOTAL_PASS + hard_pass))
    TOTAL_FAIL=$((TOTAL_FAIL + hard_fail))
fi

echo "${TOTAL_PASS} passed, ${TOTAL_FAIL} failed"
if [ "$TOTAL_FAIL" -ne 0 ] || [ $((TOTAL_PASS + TOTAL_FAIL)) -eq 0 ]; then
    exit 1
fi
exit 0
