#!/usr/bin/env bash
# Run the test binaries over the gate matrix, two at a time, beside the real
# programs and the hardened checks; ends with "N passed, N failed (elapsed
# XmYYs)".
#
#   scripts/run_tests.sh           what `make test` runs: every row of the gate
#                                  matrix below with its tests, STRESS_SCALE=1
#                                  (a row's own STRESS_SCALE=N instead)
#   scripts/run_tests.sh --quick   `make check`: the unit and stress tests once
#                                  (no setting), STRESS_SCALE=0.5, the real
#                                  programs with libhakmem.so
#   scripts/run_tests.sh --soak    `make soak`: every row runs every test,
#                                  STRESS_SCALE=16 (at least the sizes the stress
#                                  tests had before they were scaled)
#
# Test binaries are build/tests/{unit,stress}/* (build/tests-hardened/ for the
# rows of the hardened build).  Each run is one entry, named with its row in
# brackets ("stress/test_fork [HAKMEM_STATS=1]"), bounded by TEST_TIMEOUT
# seconds (default 300 x STRESS_SCALE, at least 300); a binary that crashes or
# times out counts as failed.  The cmocka counts of each binary are summed
# ("[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s)"); every app of
# scripts/run_apps.sh ./libhakmem.so ./libhakmem_hardened.so counts as one
# test per library, and so does every misuse case of
# scripts/run_hardened_tests.sh and every check of scripts/test_install.sh
# (make install in a staged tree: the launcher, the CMake package, make
# uninstall; not in --quick).
#
# TEST_JOBS jobs run at once (default: the number of CPUs): the apps and the
# misuse cases first, then the rows' binaries, each with its own log.  The
# entries are printed in that order, whatever order they finish in, with
# the wall and CPU seconds of each, and the CPU seconds of every row at the
# end.  A failed entry prints the end of its log.
#
# STRESS_SCALE (tests/stress/stress_common.h) sizes the stress tests; a value
# in the environment wins over the mode's and over the rows' own.  MATRIX=0 runs only the first row
# (no setting).  MATRIX_ROWS=REGEX runs only the rows whose build and setting
# match (e.g. MATRIX_ROWS=PURGE, MATRIX_ROWS='^hardened'), without the apps.
# TEST_START=EPOCH (set by `make test`) is when the elapsed time starts.
# HAKMEM_* settings of the caller's environment are dropped: each row says
# what it sets.
#
# The matrix is checked before anything runs: every option of the options
# table (the "HAKMEM_..." names in options[] of core/hakmem_options.c) must
# have a row here, and every HAKMEM_* name a row sets must be in that table;
# each miss counts as a failure.  So does a run in which hakmem rejected the
# row's setting (its "is outside" / "is not one of" / "unknown setting" line).
#
# Exits 1 if anything failed or nothing ran.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
START="${TEST_START:-$(date +%s)}"

MODE=test
case "${1:-}" in
    '') ;;
    --quick) MODE=quick ;;
    --soak) MODE=soak ;;
    *) echo "usage: $0 [--quick|--soak]" >&2; exit 2 ;;
esac
SCALE_FIXED="${STRESS_SCALE:+1}"   # set by the caller: it wins over a row's
case "$MODE" in
    quick) SCALE="${STRESS_SCALE:-0.5}" ;;
    soak)  SCALE="${STRESS_SCALE:-16}" ;;
    *)     SCALE="${STRESS_SCALE:-1}" ;;
esac
export STRESS_SCALE="$SCALE"
timeout_for() {   # SCALE -> seconds a binary may run
    echo "${TEST_TIMEOUT:-$(awk -v s="$1" 'BEGIN { t = 300 * s; if (t < 300) t = 300; printf "%d", t }')}"
}
TMO=$(timeout_for "$SCALE")
JOBS="${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}"
[ "$JOBS" -ge 1 ] 2>/dev/null || JOBS=2
export CMOCKA_MESSAGE_OUTPUT=stdout   # the format parsed below
export HAK_TEST_REQUIRE_PPROF=1       # install_deps provides google-pprof: test_profile fails without it

for v in $(compgen -e | grep '^HAKMEM_'); do
    echo "run_tests: $v=${!v} from the environment dropped (the matrix sets the settings)"
    unset "$v"
done

LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/hakmem-tests.XXXXXX")" || { echo "run_tests: mktemp failed" >&2; exit 1; }
trap 'rm -rf "$LOGDIR"' EXIT
# Interrupted: stop the running jobs (each job's shell and what it started:
# timeout passes the signal on to its test).
stop_jobs() {
    local p
    for p in $(jobs -p); do
        pkill -TERM -P "$p" 2>/dev/null
        kill -TERM "$p" 2>/dev/null
    done
}
trap 'stop_jobs; exit 130' INT TERM

TOTAL_PASS=0
TOTAL_FAIL=0

# ---- the gate matrix --------------------------------------------------------
# One row per setting: the build (default: build/tests/, hardened:
# build/tests-hardened/), the setting (VAR=VALUE, several joined by commas;
# "-" for none), and the stress tests that drive the code the setting
# switches (stress/test_NAME; "all" for every one; "-" for none).  Every row
# also runs every unit test.  NAME:A,B runs only the tests test_NAME_A and
# test_NAME_B of that program (STRESS_TESTS, stress_common.h).  `make soak`
# runs every test in every row.
#
# STRESS_SCALE=N among a row's settings (it is not a HAKMEM_ setting) is
# that row's scale in `make test`, in place of 1; --quick and --soak, and a
# STRESS_SCALE from the caller, ignore it.  The two rows that run the most
# stress tests, the default row and the plain hardened row, run at 8: there
# each stress test does about the work every row did before the matrix was
# cut (72 forks against 70, 1024 churned threads against 1000, 24 000 mixed
# operations per thread against 30 000), for 35 to 40 CPU seconds more per
# row; the other rows stay at 1.
#
# The stress tests and the mechanisms they drive:
#   tiers         SuperSlab states HOT -> DRAINING -> FREE, give-back, trim
#   remote_free   remote frees under contention; remotely freed memory reused
#   mt_stress     every tier and the aligned calls across 8 threads, most
#                 frees remote; realloc ping-pong across tiers and threads
#   thread_exit   heaps abandoned with blocks out, adopted, swept, given back
#   thread_churn  thousands of short threads, key destructors, detached threads
#   fork          fork() from the main thread and from a busy thread
#   giveback      memory given back where the program does not ask: a
#                 daemon's child that frees and idles, 5000 threads that
#                 exit together, malloc_trim with threads idle
#   purge         memory given back by time: hand-offs without join, reuse
#                 within the delay, malloc_trim of another live thread's
#                 memory, large-block reuse, fork while a purge is due
#   atfork        fork handlers of a library loaded first, which allocate and
#                 free (a thread's first allocation, a large block) while
#                 hakmem holds its locks for fork()
#   oom           out of memory in every tier through every entry point;
#                 oom:core is its tests of the tiers themselves (each tier
#                 filled until NULL and refilled, memory freed by one tier
#                 serving another, a thread's first allocation); the aligned
#                 calls, valloc, pvalloc and huge requests differ from malloc
#                 only above the tiers, in code that no setting and not the
#                 hardened build changes.  realloc, reallocarray, realloc_grow
#                 and calloc do differ in the hardened build: the ranges a
#                 large block is moved out of (realloc growing it, calloc
#                 gathering cached pieces: move_range, core/hakmem_large.c)
#                 stay reserved as dead space (hak_chunk_retire_moved), which
#                 running out of memory must give back (hak_chunk_release_dead)
#
# Why each setting runs what it runs (it changes the code these drive):
#   none           everything, at STRESS_SCALE=8; the hardened build:
#                  everything at 8 (OOM: the tiers and the entry points
#                  that move large blocks: realloc, reallocarray,
#                  realloc_grow, calloc)
#   VERBOSE=1      prints the settings at start-up: the unit tests
#   STATS=1        every call takes a slow path that counts it, and a thread
#                  reaches its heap through its owner pointer: everything
#   BATCH_TIER_SIZE=1, =256   how soon a refill sees its SuperSlab DRAINING:
#                  tier changes, remote frees, adoption; at 1 slabs are parked
#                  at once, also when memory runs out
#   L2_RING_CAP=1, L25_RING_CAP=1   ring refills and flushes: remote frees,
#                  flushes at thread exit, L2.5 blocks decommitted on leaving
#                  the ring, tier changes
#   TINY_C2_LOCAL_CACHE=0     the 32-byte class without a cache: every malloc
#                  and free of it takes the slow path to its slab: the tiers,
#                  remote frees, thread exit
#   MID_INUSE_DEFERRED=1      slabs' in-use counts applied per L2 flush: slabs
#                  emptied and released, remote frees, thread exit
#   PURGE_DELAY_MS=0          free memory goes back to the OS at once (as
#                  before the delay existed): every give-back path, decommits
#                  under remote frees, thread exit and fork, OOM's make_room
#   PURGE_THREAD=0            no purger thread: the slow paths give back
#                  by time, and free memory kept is bounded (the bounded
#                  passes, large blocks cached within the bound): tier
#                  changes, exited heaps settled at exit, fork (and other
#                  libraries' fork handlers that allocate), give-back
#                  (the purge tests assume a purger that gives back by time
#                  while the program idles)
#   PURGE_DELAY_MS=3600000    nothing goes back by time: the caches and
#                  stamps only grow, so trim, OOM and exit must still work
#   SS_LOOKUP_KIND=radix      how free() finds a chunk, with a lock and
#                  metadata of its own (held across fork, mapped as memory
#                  runs out, large blocks registered as they grow): everything
#   hardened, radix           the hardened free-path check through the radix
#                  lookup, its locks across fork: everything; of OOM only
#                  realloc_grow (large blocks registered in the radix table
#                  as they grow and move, their old ranges retired as dead
#                  space); the radix row and the hardened row have the rest
#   PROFILE=path   sampled blocks live in the profiler's own heap and their
#                  free goes through the chunk map's cold path; the fast
#                  paths count down to each sample: every tier, remote frees
#                  of sampled blocks, exited threads' countdowns, fork with
#                  the profiler's lock, trim of the profiler's heap, OOM
#   PROFILE_RATE=4096         most blocks above 4 KiB sampled, many stacks
#                  and records (1, the end of the range, samples every
#                  allocation and would take hours): the tiers, remote frees
#   PROFILE_LEAKS=1           sampling without a profile file, the leak report
#                  at every exit: threads that exit with blocks out, fork
#   PROFILE_UNWINDER=libgcc   parsed, changes nothing (both values walk
#                  with libgcc since libunwind was dropped): the unit tests
#   PROFILE_SIGNAL=12         the handler installed; test_profile sends it:
#                  the unit tests
#   hardened, PROFILE         sampled blocks under the hardened free check
#                  and its dead ranges: the tiers, remote frees, fork
# ($LOGDIR in a row is the run's log directory; profiles are written there.)
#
# A setting with no row fails the run.  A new row costs about 10 CPU seconds
# for the unit tests plus 3-15 per stress test (40 for all of test_oom, 15 for
# oom:core); the seconds of every row are printed at the end.  `make test`
# must stay under 10 minutes on 2 CPUs (the budget: docs/RELIABILITY.md,
# "The test-time budget").
MATRIX_SETTINGS='
# build    setting                          stress tests
default    STRESS_SCALE=8                   all
default    HAKMEM_VERBOSE=1                 -
default    HAKMEM_STATS=1                   tiers remote_free mt_stress thread_exit thread_churn fork atfork oom:core
default    HAKMEM_BATCH_TIER_SIZE=1         tiers remote_free mt_stress thread_exit oom:core
default    HAKMEM_BATCH_TIER_SIZE=256       tiers remote_free mt_stress thread_exit
default    HAKMEM_L2_RING_CAP=1             tiers remote_free mt_stress thread_exit thread_churn
default    HAKMEM_L25_RING_CAP=1            tiers remote_free mt_stress thread_exit thread_churn
default    HAKMEM_MID_INUSE_DEFERRED=1      tiers remote_free mt_stress thread_exit
default    HAKMEM_TINY_C2_LOCAL_CACHE=0     tiers remote_free mt_stress thread_exit
default    HAKMEM_SS_LOOKUP_KIND=radix      tiers remote_free mt_stress thread_exit thread_churn fork atfork oom:core,realloc_grow
default    HAKMEM_PURGE_DELAY_MS=0          tiers remote_free mt_stress thread_exit thread_churn fork purge oom:core
default    HAKMEM_PURGE_DELAY_MS=3600000    tiers remote_free thread_exit fork purge oom:core
default    HAKMEM_PURGE_THREAD=0           tiers thread_exit fork atfork giveback
hardened   STRESS_SCALE=8                   tiers remote_free mt_stress thread_exit thread_churn fork atfork purge giveback oom:core,realloc,reallocarray,realloc_grow,calloc
default    HAKMEM_PROFILE=$LOGDIR/prof.%p   tiers remote_free mt_stress thread_exit thread_churn fork atfork purge oom:core
default    HAKMEM_PROFILE=$LOGDIR/prof.%p,HAKMEM_PROFILE_RATE=4096   tiers remote_free
default    HAKMEM_PROFILE_LEAKS=1           thread_exit fork
default    HAKMEM_PROFILE=$LOGDIR/prof.%p,HAKMEM_PROFILE_UNWINDER=libgcc   -
default    HAKMEM_PROFILE=$LOGDIR/prof.%p,HAKMEM_PROFILE_SIGNAL=12   -
hardened   HAKMEM_SS_LOOKUP_KIND=radix      tiers remote_free mt_stress thread_exit thread_churn fork atfork oom:realloc_grow
hardened   HAKMEM_PROFILE=$LOGDIR/prof.%p   tiers remote_free fork
'

# NAME:A,B -> test_NAME_A,test_NAME_B; oom:core is the OOM tests of the tiers.
subset_tests() {   # NAME SUBSET -> comma-separated cmocka test names
    local t out=""
    for t in ${2//,/ }; do
        case "$1:$t" in
            oom:core) t="malloc,test_oom_cross_tier,test_oom_new_thread" ;;
        esac
        out="${out:+$out,}test_${1}_$t"
    done
    echo "$out"
}

# ---- the binaries ------------------------------------------------------------
shopt -s nullglob
UNIT=() STRESS=()
for b in build/tests/unit/*; do [ -f "$b" ] && [ -x "$b" ] && UNIT+=("${b##*/}"); done
for b in build/tests/stress/*; do [ -f "$b" ] && [ -x "$b" ] && STRESS+=("${b##*/}"); done
shopt -u nullglob
if [ "${#UNIT[@]}" -eq 0 ] && [ "${#STRESS[@]}" -eq 0 ]; then
    echo "run_tests: no test binaries under build/tests (run 'make tests' first)" >&2
fi

fail_setup() {   # MESSAGE: a problem of the matrix itself, one failure
    echo "FAIL $1"
    TOTAL_FAIL=$((TOTAL_FAIL + 1))
}

# ---- every option has a row, every row's option exists -----------------------
OPTIONS_FILE=core/hakmem_options.c
OPTIONS=()
if [ -f "$OPTIONS_FILE" ]; then
    # Every quoted HAKMEM_ name between "options[] = {" and its "};", however
    # an entry is laid out over lines.
    mapfile -t OPTIONS < <(sed -n '/options\[\] *= *{/,/^ *};/p' "$OPTIONS_FILE" |
                           grep -o '"HAKMEM_[A-Z0-9_]*"' | tr -d '"' | sort -u)
fi
[ "${#OPTIONS[@]}" -eq 0 ] && fail_setup "gate matrix: no options found in $OPTIONS_FILE (the \"HAKMEM_...\" names of its options[] table)"
ROW_NAMES=$(echo "$MATRIX_SETTINGS" | grep -v '^ *#' | awk 'NF >= 2 { print $2 }' | tr ',' '\n' |
            sed -n 's/^\(HAKMEM_[A-Z0-9_]*\)=.*/\1/p' | sort -u)
for o in "${OPTIONS[@]}"; do
    grep -qx "$o" <<<"$ROW_NAMES" ||
        fail_setup "gate matrix: $o (in $OPTIONS_FILE) has no row in MATRIX_SETTINGS of scripts/run_tests.sh; add one naming the tests that drive what it switches"
done
for n in $ROW_NAMES; do
    printf '%s\n' "${OPTIONS[@]}" | grep -qx "$n" ||
        fail_setup "gate matrix: a row sets $n, which is not in the options table ($OPTIONS_FILE)"
done

# ---- the job list ----------------------------------------------------------------
# Job i: J_NAME[i] (the entry's name), J_KIND[i] (bin, apps, hardened, or
# summary: a script whose last line is "N passed, N failed", as hardened's),
# J_BIN[i], J_ENV[i] (space-separated VAR=VALUE), J_ROW[i] (index of its row),
# J_TMO[i] (its timeout in seconds).
J_NAME=() J_KIND=() J_BIN=() J_ENV=() J_ROW=() J_TMO=()
ROW_LABEL=() ROW_CPU=()
add_job() {   # NAME KIND BIN ENV ROW [TIMEOUT]
    J_NAME+=("$1"); J_KIND+=("$2"); J_BIN+=("$3"); J_ENV+=("$4"); J_ROW+=("$5"); J_TMO+=("${6:-$TMO}")
}

# The real programs first: they run on one CPU for a minute or two, beside
# the test binaries; one reference run of each app serves both libraries.
# MATRIX_ROWS leaves them out.
APP_ROW=${#ROW_LABEL[@]}
ROW_LABEL+=("apps"); ROW_CPU+=(0)
APP_LIBS="./libhakmem.so ./libhakmem_hardened.so"
[ "$MODE" = quick ] && APP_LIBS="./libhakmem.so"
if [ -n "${MATRIX_ROWS:-}" ]; then
    :
elif [ -x scripts/run_apps.sh ]; then
    add_job "apps ($APP_LIBS)" apps scripts/run_apps.sh "$APP_LIBS" "$APP_ROW"
else
    fail_setup "apps (scripts/run_apps.sh missing)"
fi
if [ "$MODE" != quick ] && [ -z "${MATRIX_ROWS:-}" ]; then
    if [ -x scripts/run_hardened_tests.sh ]; then
        add_job "hardened checks (misuse cases)" hardened scripts/run_hardened_tests.sh "HARDENED_APPS=0" "$APP_ROW"
    else
        fail_setup "hardened checks (scripts/run_hardened_tests.sh missing)"
    fi
    # A few seconds; it prints "N passed, N failed" as the misuse cases do.
    if [ -x scripts/test_install.sh ]; then
        ROW_LABEL+=("install"); ROW_CPU+=(0)
        add_job "install (launcher, CMake package, uninstall)" summary scripts/test_install.sh "" "$((${#ROW_LABEL[@]} - 1))"
    else
        fail_setup "install (scripts/test_install.sh missing)"
    fi
fi

have_stress() { local s; for s in "${STRESS[@]}"; do [ "$s" = "test_$1" ] && return 0; done; return 1; }

nrow=0
while read -r build setting tests; do
    case "$build" in ''|'#'*) continue ;; esac
    nrow=$((nrow + 1))
    if [ "$MODE" = quick ] || [ "${MATRIX:-1}" = 0 ]; then
        [ "$nrow" -gt 1 ] && continue
    fi
    if [ -n "${MATRIX_ROWS:-}" ] && ! grep -qE -- "$MATRIX_ROWS" <<<"$build $setting"; then
        continue
    fi
    case "$build" in
        default)  dir=build/tests ;;
        hardened) dir=build/tests-hardened ;;
        *) fail_setup "gate matrix: row '$build $setting': the build is default or hardened"; continue ;;
    esac
    env="" rscale="$SCALE"
    [ "$setting" != - ] && env="${setting//,/ }"
    env="${env//'$LOGDIR'/$LOGDIR}"
    # The row's own scale: a job setting, not a hakmem one.
    case " $env " in
        *" STRESS_SCALE="*)
            v=" $env "; v="${v#* STRESS_SCALE=}"; v="${v%% *}"
            env=$(tr ' ' '\n' <<<"$env" | grep -v '^STRESS_SCALE=' | paste -sd ' ')
            setting=$(tr ',' '\n' <<<"$setting" | grep -v '^STRESS_SCALE=' | paste -sd ',')
            [ "$MODE" = test ] && [ -z "$SCALE_FIXED" ] && rscale="$v" ;;
    esac
    label="$build${env:+ $setting}"
    [ "$rscale" != "$SCALE" ] && label="$label (STRESS_SCALE=$rscale)"
    row=${#ROW_LABEL[@]}
    ROW_LABEL+=("$label"); ROW_CPU+=(0)
    suffix=""
    [ "$build" = hardened ] && suffix=" [hardened]"
    [ -n "$env" ] && suffix="$suffix [${env}]"
    rtmo=$(timeout_for "$rscale")
    [ "$rscale" != "$SCALE" ] && suffix="$suffix [STRESS_SCALE=$rscale]"
    # The stress tests of the row: "all", "-", or names (NAME or NAME:SUBSET).
    [ -z "$tests" ] && { fail_setup "gate matrix: row '$label' names no tests ('-' for the unit tests alone)"; continue; }
    [ "$MODE" = soak ] && tests=all
    list=()
    case "$tests" in
        all) for s in "${STRESS[@]}"; do list+=("${s#test_}"); done ;;
        -) ;;
        *) read -ra list <<<"$tests" ;;
    esac
    if [ ! -d "$dir" ]; then
        fail_setup "$label: $dir missing (make tests)"
        continue
    fi
    # The stress tests first (the longest jobs start early), then the unit tests.
    for t in "${list[@]}"; do
        name="${t%%:*}" sub=""
        [ "$name" != "$t" ] && sub="${t#*:}"
        if ! have_stress "$name"; then
            fail_setup "gate matrix: row '$label' names stress/test_$name, which was not built"
            continue
        fi
        jenv="${env:+$env }STRESS_SCALE=$rscale"
        if [ -n "$sub" ]; then
            jenv="$jenv STRESS_TESTS=$(subset_tests "$name" "$sub")"
            add_job "stress/test_$name:$sub$suffix" bin "$dir/stress/test_$name" "$jenv" "$row" "$rtmo"
        else
            add_job "stress/test_$name$suffix" bin "$dir/stress/test_$name" "$jenv" "$row" "$rtmo"
        fi
    done
    for u in "${UNIT[@]}"; do
        add_job "unit/$u$suffix" bin "$dir/unit/$u" "$env" "$row" "$TMO"
    done
done <<<"$MATRIX_SETTINGS"

# ---- running -----------------------------------------------------------------------
# A job writes LOGDIR/i.log and, when done, LOGDIR/i.res: "rc wall_seconds cpu_seconds".
cpu_of_children() {   # FILE written by `times`: the children's user + system seconds
    tail -n 1 "$1" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] } printf "%.1f", s }'
}

run_job() {   # INDEX
    local i=$1 log="$LOGDIR/$1.log" start end rc envs=()
    start=$(date +%s.%N)
    case "${J_KIND[$i]}" in
        bin)
            read -ra envs <<<"${J_ENV[$i]}"
            timeout -k 10 "${J_TMO[$i]}" env "${envs[@]}" "${J_BIN[$i]}" >"$log" 2>&1 ;;
        apps)
            read -ra envs <<<"${J_ENV[$i]}"      # here: the libraries
            "${J_BIN[$i]}" "${envs[@]}" >"$log" 2>"$LOGDIR/$i.err" ;;
        hardened|summary)
            read -ra envs <<<"${J_ENV[$i]}"
            env "${envs[@]}" "${J_BIN[$i]}" >"$log" 2>"$LOGDIR/$i.err" ;;
    esac
    rc=$?
    # In this shell, not in a pipe or $(...): a new process has no children.
    times >"$LOGDIR/$i.times"
    end=$(date +%s.%N)
    echo "$rc $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') $(cpu_of_children "$LOGDIR/$i.times")" >"$LOGDIR/$i.tmp"
    mv "$LOGDIR/$i.tmp" "$LOGDIR/$i.res"
}

describe_rc() {   # RC TIMEOUT
    local rc=$1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "timed out after ${2}s"
    elif [ "$rc" -gt 128 ]; then echo "killed by signal $((rc - 128))$( [ $((rc - 128)) -eq 6 ] && echo ' (abort)'; [ $((rc - 128)) -eq 11 ] && echo ' (segfault)')"
    else echo "exit status $rc"; fi
}

count() {   # REGEX FILE: the sum of the first capture of sed's REGEX
    sed -n "s/$1/\\1/p" "$2" | awk '{ s += $1 } END { print s + 0 }'
}

SUM_CPU=0
report_bin() {   # INDEX RC SECS CPU
    local i=$1 rc=$2 secs=$3 cpu=$4 log="$LOGDIR/$1.log" name="${J_NAME[$1]}" passed failed planned extra note=""
    passed=$(count '^\[  PASSED  \] \([0-9][0-9]*\) test(s)\..*' "$log")
    failed=$(count '^\[  FAILED  \] \([0-9][0-9]*\) test(s).*' "$log")
    planned=$(count '^\[==========\] Running \([0-9][0-9]*\) test(s)\..*' "$log")
    if [ "$rc" -ne 0 ] && ! grep -q '^\[  PASSED  \]\|^\[  FAILED  \] [0-9]' "$log"; then
        passed=$(grep -c '^\[       OK \]' "$log")   # died before its summary
    fi
    if [ "$rc" -ne 0 ]; then
        # A crash or timeout: every test that did not report success failed
        # (at least one).
        extra=$((planned - passed - failed))
        [ "$extra" -lt 1 ] && [ "$failed" -eq 0 ] && extra=1
        [ "$extra" -lt 0 ] && extra=0
        failed=$((failed + extra))
        note=" - $(describe_rc "$rc" "${J_TMO[$i]}")"
    elif [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
        passed=1   # not a cmocka program (or no summary): judged by its exit status
    fi
    # A setting hakmem rejected: the run tested the default instead.
    if grep -qE '^hakmem: (unknown setting |HAKMEM_[A-Z0-9_]+=.* (is outside|is not a number|is not one of))' "$log"; then
        failed=$((failed + 1))
        note="$note - hakmem rejected the setting: $(grep -m1 -E '^hakmem: (unknown setting|HAKMEM_)' "$log")"
    fi
    TOTAL_PASS=$((TOTAL_PASS + passed))
    TOTAL_FAIL=$((TOTAL_FAIL + failed))
    if [ "$failed" -eq 0 ]; then
        printf 'PASS %-60s %3d passed (%ss, cpu %ss)\n' "$name" "$passed" "$secs" "$cpu"
    else
        printf 'FAIL %-60s %3d passed, %d failed (%ss, cpu %ss)%s\n' "$name" "$passed" "$failed" "$secs" "$cpu" "$note"
        echo "----- last lines of $name:"
        tail -n 40 "$log"
        echo "-----"
    fi
}

report_apps() {   # INDEX RC SECS CPU
    local i=$1 rc=$2 log="$LOGDIR/$1.log" app_pass app_fail
    cat "$log"
    app_pass=$(grep -c '^PASS ' "$log")
    app_fail=$(grep -c '^FAIL ' "$log")
    if [ "$app_fail" -gt 0 ] || [ "$rc" -ne 0 ]; then
        [ -s "$LOGDIR/$i.err" ] && { echo "----- run_apps.sh stderr:"; tail -n 40 "$LOGDIR/$i.err"; echo "-----"; }
        # A failure that printed no FAIL line still counts once.
        [ "$app_fail" -eq 0 ] && app_fail=1
    fi
    TOTAL_PASS=$((TOTAL_PASS + app_pass))
    TOTAL_FAIL=$((TOTAL_FAIL + app_fail))
    printf '     %-60s (%ss, cpu %ss)\n' "${J_NAME[$i]}" "$3" "$4"
}

report_hardened() {   # INDEX RC SECS CPU
    local i=$1 rc=$2 log="$LOGDIR/$1.log" summary hard_pass hard_fail
    grep -v ' passed, .* failed$' "$log"
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    hard_pass=$(echo "$summary" | awk '{ print $1 + 0 }')
    hard_fail=$(echo "$summary" | awk '{ print $3 + 0 }')
    [ "$rc" -ne 0 ] && [ "$hard_fail" -eq 0 ] && hard_fail=1
    if [ "$hard_fail" -gt 0 ] && [ -s "$LOGDIR/$i.err" ]; then
        echo "----- ${J_BIN[$i]##*/} stderr:"; tail -n 40 "$LOGDIR/$i.err"; echo "-----"
    fi
    TOTAL_PASS=$((TOTAL_PASS + hard_pass))
    TOTAL_FAIL=$((TOTAL_FAIL + hard_fail))
    printf '     %-60s (%ss, cpu %ss)\n' "${J_NAME[$i]}" "$3" "$4"
}

NEXT=0
report_ready() {   # print the finished jobs, in order, up to the first unfinished one
    local rc secs cpu r
    while [ "$NEXT" -lt "${#J_NAME[@]}" ] && [ -f "$LOGDIR/$NEXT.res" ]; do
        read -r rc secs cpu <"$LOGDIR/$NEXT.res"
        case "${J_KIND[$NEXT]}" in
            bin) report_bin "$NEXT" "$rc" "$secs" "$cpu" ;;
            apps) report_apps "$NEXT" "$rc" "$secs" "$cpu" ;;
            hardened|summary) report_hardened "$NEXT" "$rc" "$secs" "$cpu" ;;
        esac
        r=${J_ROW[$NEXT]}
        ROW_CPU[r]=$(awk -v a="${ROW_CPU[$r]}" -v b="$cpu" 'BEGIN { printf "%.1f", a + b }')
        SUM_CPU=$(awk -v a="$SUM_CPU" -v b="$cpu" 'BEGIN { printf "%.1f", a + b }')
        NEXT=$((NEXT + 1))
    done
}

echo "run_tests: $MODE, ${#J_NAME[@]} runs, $JOBS at a time, STRESS_SCALE=$SCALE (rows may set their own), timeout ${TMO}s each (longer in a row of a larger scale)"
for i in "${!J_NAME[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
        wait -n
        report_ready
    done
    run_job "$i" &
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
    wait -n
    report_ready
done
wait
report_ready

# What each row cost: the budget of a new row is measured against these.
line="" r=0
for r in "${!ROW_LABEL[@]}"; do
    line="$line${line:+, }${ROW_LABEL[$r]} ${ROW_CPU[$r]}"
done
echo "cpu seconds by row: $line"
elapsed=$(( $(date +%s) - START ))
echo "cpu seconds in all: $SUM_CPU on $JOBS CPUs; $(uptime | sed 's/.*load average/load average/')"
echo "${TOTAL_PASS} passed, ${TOTAL_FAIL} failed (elapsed $((elapsed / 60))m$(printf '%02d' $((elapsed % 60)))s)"
if [ "$TOTAL_FAIL" -ne 0 ] || [ $((TOTAL_PASS + TOTAL_FAIL)) -eq 0 ]; then
    exit 1
fi
exit 0
