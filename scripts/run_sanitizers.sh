#!/usr/bin/env bash
# The unit tests under UndefinedBehaviorSanitizer and ThreadSanitizer.
#
#   scripts/run_sanitizers.sh            (from anywhere)
#
# For each sanitizer (SAN_KINDS, default "ubsan tsan ubsan-hardened
# tsan-hardened"; a -hardened kind builds the hardened flavour,
# -DHAK_HARDENED=1, tests included) builds hakmem as a
# plain library (core/*.c and core/profile/*.c with -DHAK_NO_INTERPOSE: only
# the hak_* names) and
# every tests/unit/*.c with -DHAK_TEST_HAK_ONLY (tier_common.h: the API_STD
# variants and the tests about the libc names are skipped, since malloc & co.
# are the sanitizer's here), all with the sanitizer's flags, into
# build/san-ubsan/ and build/san-tsan/, then runs every test binary:
#   ubsan  -fsanitize=undefined -fno-sanitize-recover=all (any UB aborts)
#   tsan   -fsanitize=thread (every data race is reported, and fails the binary)
# A binary fails when a test fails, when it crashes or times out
# (SAN_TIMEOUT seconds, default 300), or when the sanitizer reports anything;
# the reports are printed and kept in build/san-*/logs/.  TSan binaries run
# under "setarch -R" when the kernel's address-space layout makes TSan stop
# with "unexpected memory mapping".  SAN_CC picks the compiler (default clang,
# else gcc; gcc's libtsan resolves hak_usable_size's RTLD_NEXT lookup of
# malloc_usable_size to its own, which fails test_owner_lookup); SAN_JOBS the
# binaries run at once (default: the number of CPUs); SAN_CFLAGS adds flags
# to the hakmem build (e.g. -DPOOL_L2_RING_CAP=4; for the hardened flavour
# use the -hardened kinds, which also build the tests with it).
#
# SAN_STRESS=1 also builds and runs tests/stress/*.c, which call only the
# standard names: a generated header, force-included (-include), spells them
# hak_* (build/san-*/hak_names.h; tests/stress is not edited).  These are the
# tests with real concurrency, so the ones where TSan can find races.
# Skipped: test_oom (it calls the libc names through function pointers and
# limits RLIMIT_AS, which sanitizer runtimes cannot live with) and, under
# TSan, test_fork (TSan does not support threads started after a
# multi-threaded fork).  Longer: about a minute more on 2 CPUs.
#
# Ends with "N passed, N failed" (cmocka tests; each binary with a sanitizer
# report counts one more failure); exits 1 if anything failed or nothing ran.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
export DEBIAN_FRONTEND=noninteractive
TMO="${SAN_TIMEOUT:-300}"
KINDS="${SAN_KINDS:-ubsan tsan ubsan-hardened tsan-hardened}"
JOBS="${SAN_JOBS:-$(nproc 2>/dev/null || echo 2)}"
export CMOCKA_MESSAGE_OUTPUT=stdout

if [ -n "${SAN_CC:-}" ]; then CC="$SAN_CC"
elif command -v clang >/dev/null 2>&1; then CC=clang
else CC=gcc; fi

# cmocka and the compiler (scripts/install_deps.sh test is idempotent).
if ! printf '#include <stdarg.h>\n#include <stddef.h>\n#include <setjmp.h>\n#include <cmocka.h>\n' |
     "$CC" -x c -fsyntax-only - >/dev/null 2>&1; then
  scripts/install_deps.sh test || { echo "run_sanitizers: cannot install the test dependencies" >&2; exit 1; }
fi

APT_WHO=run_sanitizers
. scripts/apt.sh

# The sanitizer of a kind: ubsan-hardened is ubsan on the hardened flavour.
san_of() { echo "${1%-hardened}"; }

san_flags() {
  local hardened=""
  [ "$1" != "$(san_of "$1")" ] && hardened=" -DHAK_HARDENED=1"
  case "$(san_of "$1")" in
    ubsan) echo "-fsanitize=undefined -fno-sanitize-recover=all$hardened" ;;
    tsan)  echo "-fsanitize=thread$hardened" ;;
    *) echo "run_sanitizers: unknown sanitizer '$1' (ubsan, tsan, ubsan-hardened, tsan-hardened)" >&2; return 1 ;;
  esac
}

# A trivial threaded program built with the sanitizer: does the runtime link
# and start?  Installs the runtime package when it does not link.
RUNNER=()
probe() {
  local kind="$1" dir="build/san-$1" flags
  flags="$(san_flags "$kind")" || return 1
  mkdir -p "$dir"
  printf '#include <pthread.h>\nstatic void *f(void *a) { return a; }\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\n' \
    >"$dir/probe.c"
  # shellcheck disable=SC2086
  if ! "$CC" $flags -pthread "$dir/probe.c" -o "$dir/probe" >"$dir/probe.log" 2>&1; then
    local pkgs=()
    case "$CC" in
      *clang*) pkgs=("libclang-rt-$("$CC" -dumpversion | cut -d. -f1)-dev") ;;
      *) [ "$(san_of "$kind")" = tsan ] && pkgs=(libtsan2) || pkgs=(libubsan1) ;;
    esac
    apt_install "${pkgs[@]}" || true
    # shellcheck disable=SC2086
    "$CC" $flags -pthread "$dir/probe.c" -o "$dir/probe" >"$dir/probe.log" 2>&1 || {
      echo "run_sanitizers: $CC $flags does not work:" >&2; tail -n 20 "$dir/probe.log" >&2; return 1; }
  fi
  if [ "$(san_of "$kind")" = tsan ]; then
    if ! "$dir/probe" >>"$dir/probe.log" 2>&1; then
      if grep -q "unexpected memory mapping" "$dir/probe.log" && command -v setarch >/dev/null 2>&1 &&
         setarch "$(uname -m)" -R "$dir/probe" >>"$dir/probe.log" 2>&1; then
        RUNNER=(setarch "$(uname -m)" -R)
        echo "run_sanitizers: tsan needs setarch -R on this kernel (address-space layout)"
      else
        echo "run_sanitizers: a trivial TSan program does not run:" >&2; tail -n 20 "$dir/probe.log" >&2; return 1
      fi
    fi
  fi
  return 0
}

# SAN_STRESS=1: stress tests that cannot run under sanitizer KIND (prints why).
stress_skip() {
  case "$(san_of "$1")/$2" in
    */test_oom) echo "libc names through function pointers, and RLIMIT_AS" ;;
    tsan/test_fork) echo "TSan does not support threads started after a multi-threaded fork" ;;
    */test_purge) echo "its checks are resident sizes, which the sanitizer's shadow memory distorts; forks a multi-threaded process" ;;
    *) return 1 ;;
  esac
}

# ---- build: build/san-KIND/{obj,libhakmem.a,tests/unit/*,tests/stress/*} ---------
BASE="-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -pthread"
build_kind() {
  local kind="$1" dir="build/san-$1" flags log
  flags="$(san_flags "$kind")" || return 1
  log="$dir/build.log"
  mkdir -p "$dir/obj" "$dir/tests/unit" "$dir/logs"
  rm -f "$dir"/obj/*.o "$dir/libhakmem.a" "$dir"/tests/unit/* "$dir"/logs/*
  : >"$log"
  local stress=()
  [ "${SAN_STRESS:-0}" = 1 ] && stress=(tests/stress/*.c)
  mkdir -p "$dir/tests/stress"
  rm -f "$dir"/tests/stress/*
  local lib_flags="$BASE $flags -DHAK_NO_INTERPOSE -fvisibility=hidden -ftls-model=initial-exec -Icore -w ${SAN_CFLAGS:-}"
  local test_flags="$BASE $flags -DHAK_TEST_HAK_ONLY -Wall -Wextra -Icore -Itests"
  # shellcheck disable=SC2016
  # core/profile/sample.c -> obj/profile_sample.o
  if ! printf '%s\n' core/*.c core/profile/*.c | xargs -P "$JOBS" -I{} sh -c \
       'n="${1#core/}"; o="$2/obj/$(echo "${n%.c}" | tr / _).o"; $3 $4 -c "$1" -o "$o" >>"$2/build.log" 2>&1 || { echo "FAILED: $1" >>"$2/build.log"; exit 1; }' \
       sh {} "$dir" "$CC" "$lib_flags"; then
    echo "run_sanitizers: [$kind] building hakmem failed:" >&2; tail -n 40 "$log" >&2; return 1
  fi
  ar rcs "$dir/libhakmem.a" "$dir"/obj/*.o >>"$log" 2>&1 || return 1
  # The stress tests use the standard names: spell them hak_* (SAN_STRESS=1).
  cat >"$dir/hak_names.h" <<'EOF_NAMES'
/* Generated by scripts/run_sanitizers.sh, force-included into tests/stress
 * (-include): the malloc family spelt hak_*, hakmem being linked without
 * the libc names (-DHAK_NO_INTERPOSE). */
#include <stdlib.h>
#include <malloc.h>
#include "hakmem.h"
#define malloc(n) hak_malloc(n)
#define free(p) hak_free(p)
#define calloc(n, s) hak_calloc(n, s)
#define realloc(p, n) hak_realloc(p, n)
#define reallocarray(p, n, s) hak_reallocarray(p, n, s)
#define posix_memalign(o, a, n) hak_posix_memalign(o, a, n)
#define aligned_alloc(a, n) hak_aligned_alloc(a, n)
#define memalign(a, n) hak_memalign(a, n)
#define valloc(n) hak_valloc(n)
#define pvalloc(n) hak_pvalloc(n)
#define malloc_usable_size(p) hak_usable_size(p)
#define malloc_trim(pad) hak_trim(pad)
EOF_NAMES
  # shellcheck disable=SC2016
  if ! { printf '%s unit\n' tests/unit/*.c
         for t in "${stress[@]}"; do
           stress_skip "$kind" "$(basename "$t" .c)" >/dev/null || printf '%s stress\n' "$t"
         done; } | xargs -P "$JOBS" -L1 sh -c \
       'dir="$1" cc="$2" flags="$3" src="$4" sub="$5"
        if [ "$sub" = stress ]; then inc="-include $dir/hak_names.h"; else inc=""; fi
        $cc $flags $inc "$src" -o "$dir/tests/$sub/$(basename "$src" .c)" "$dir/libhakmem.a" -lcmocka -ldl \
          >>"$dir/build.log" 2>&1 || { echo "FAILED: $src" >>"$dir/build.log"; exit 1; }' \
       sh "$dir" "$CC" "$test_flags"; then
    echo "run_sanitizers: [$kind] building the tests failed:" >&2; grep -B5 -A5 "error\|FAILED" "$log" | tail -n 40 >&2; return 1
  fi
  return 0
}

# ---- run ------------------------------------------------------------------------
# run_one KIND BIN: writes the log and a result line "kind name rc secs" to
# LOG.res.
# die_after_fork=0: a forked child may start hakmem's purger thread (memory
# it frees goes back by time); TSan does not model threads started after a
# multi-threaded fork and would otherwise kill the child.
TSAN_OPTS="halt_on_error=0:second_deadlock_stack=1:exitcode=66:die_after_fork=0"
run_one() {
  local kind="$1" bin="$2" name log start end rc
  name="$(basename "$(dirname "$bin")")/$(basename "$bin")"     # unit/test_x
  log="build/san-$kind/logs/${name//\//_}.log"
  start=$(date +%s.%N)
  env UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
      TSAN_OPTIONS="$TSAN_OPTS" \
      timeout -k 10 "$TMO" "${RUNNER[@]}" "$bin" >"$log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && [ "${kind%-hardened}" = tsan ] && [ "${#RUNNER[@]}" -eq 0 ] &&
     grep -q "unexpected memory mapping" "$log" && command -v setarch >/dev/null 2>&1; then
    timeout -k 10 "$TMO" setarch "$(uname -m)" -R env TSAN_OPTIONS="$TSAN_OPTS" \
      "$bin" >"$log" 2>&1
    rc=$?
  fi
  end=$(date +%s.%N)
  echo "$kind $name $rc $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')" >"$log.res"
}
export -f run_one
export TMO TSAN_OPTS

TOTAL_PASS=0
TOTAL_FAIL=0
TOTAL_SKIP=0
REPORTS=0
t_all=$(date +%s)

# Build every kind, then run all their binaries in one pool, so no CPU
# idles while the last binary of a kind finishes: the TSan kinds and the
# stress tests (SAN_STRESS=1) first, they take longest.
BUILT=()
RUNS="build/san-runs.txt"      # "kind|binary|runner" lines
: >"$RUNS"
for kind in $KINDS; do
  t0=$(date +%s)
  if ! probe "$kind" || ! build_kind "$kind"; then
    echo "FAIL [$kind] build"
    TOTAL_FAIL=$((TOTAL_FAIL + 1))
    continue
  fi
  t1=$(date +%s)
  BUILT+=("$kind")
  BINS=$(ls build/san-"$kind"/tests/stress/* build/san-"$kind"/tests/unit/* 2>/dev/null)
  echo "[$kind] built with $CC in $((t1 - t0))s; $(echo "$BINS" | wc -l) binaries"
  if [ "${SAN_STRESS:-0}" = 1 ]; then
    for t in tests/stress/*.c; do
      t="$(basename "$t" .c)"
      why="$(stress_skip "$kind" "$t")" && echo "SKIP [$kind] stress/$t ($why)"
    done
  fi
  for b in $BINS; do echo "$kind|$b|${RUNNER[*]:-}"; done >>"$RUNS"
done
t1=$(date +%s)
echo "running $(grep -c . "$RUNS") binaries ($JOBS at a time)"
# shellcheck disable=SC2016
{ grep '^tsan' "$RUNS" | grep '/stress/'; grep -v '^tsan' "$RUNS" | grep '/stress/'
  grep '^tsan' "$RUNS" | grep -v '/stress/'; grep -v '^tsan' "$RUNS" | grep -v '/stress/'; } |
  xargs -P "$JOBS" -I{} bash -c 'IFS="|" read -r kind bin runner <<<"$1"; RUNNER=($runner); run_one "$kind" "$bin"' _ {}
echo "ran them in $(( $(date +%s) - t1 ))s"

for kind in "${BUILT[@]}"; do
  for res in build/san-"$kind"/logs/*.log.res; do
    read -r _ name rc secs <"$res"
    log="${res%.res}"
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\..*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    failed=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    planned=$(sed -n 's/^\[==========\] Running \([0-9][0-9]*\) test(s)\..*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    nrep=$(grep -c -E 'runtime error:|WARNING: ThreadSanitizer:|ERROR: ThreadSanitizer|ERROR: UndefinedBehaviorSanitizer' "$log")
    note=""
    if [ "$rc" -ne 0 ] && ! grep -q '^\[  PASSED  \]\|^\[  FAILED  \] [0-9]' "$log"; then
      passed=$(grep -c '^\[       OK \]' "$log")        # died before its summary
    fi
    if [ "$rc" -ne 0 ] && [ "$nrep" -eq 0 ]; then
      extra=$((planned - passed - failed - skipped))
      [ "$extra" -lt 1 ] && [ "$failed" -eq 0 ] && extra=1
      [ "$extra" -lt 0 ] && extra=0
      failed=$((failed + extra))
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then note=" - timed out after ${TMO}s"
      elif [ "$rc" -gt 128 ]; then note=" - killed by signal $((rc - 128))"
      else note=" - exit status $rc"; fi
    fi
    if [ "$nrep" -gt 0 ]; then
      failed=$((failed + 1))
      REPORTS=$((REPORTS + nrep))
      note="$note - $nrep sanitizer report(s)"
    fi
    TOTAL_PASS=$((TOTAL_PASS + passed))
    TOTAL_FAIL=$((TOTAL_FAIL + failed))
    TOTAL_SKIP=$((TOTAL_SKIP + skipped))
    if [ "$failed" -eq 0 ]; then
      printf 'PASS [%s] %-24s %3d passed, %2d skipped (%ss)\n' "$kind" "$name" "$passed" "$skipped" "$secs"
    else
      printf 'FAIL [%s] %-24s %3d passed, %d failed (%ss)%s\n' "$kind" "$name" "$passed" "$failed" "$secs" "$note"
      echo "----- $log:"
      if [ "$nrep" -gt 0 ]; then
        # The distinct reports: each from its first line to its SUMMARY line.
        awk '/WARNING: ThreadSanitizer:|ERROR: ThreadSanitizer|runtime error:/ { on = 1 }
             on { print; n++ } /^SUMMARY:/ && on { on = 0; print "" }
             n > 150 { exit }' "$log"
        grep '^SUMMARY:' "$log" | sort | uniq -c | sort -rn | head -n 20
      else
        grep -E '^\[  (ERROR|FAILED) \]|^\[  FAILED  \]' "$log" | head -n 20
        tail -n 30 "$log"
      fi
      echo "-----"
    fi
  done
done

echo "sanitizers: $TOTAL_SKIP skipped (API_STD variants and libc-name tests), $REPORTS sanitizer report(s), $(( $(date +%s) - t_all ))s"
echo "${TOTAL_PASS} passed, ${TOTAL_FAIL} failed"
if [ "$TOTAL_FAIL" -ne 0 ] || [ "$TOTAL_PASS" -eq 0 ]; then
  exit 1
fi
exit 0
