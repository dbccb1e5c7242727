#!/usr/bin/env bash
# Fuzz the hak_* API with libFuzzer (tests/fuzz/fuzz_api.c).
#
#   scripts/run_fuzz.sh [SECONDS]        (default 60; from anywhere)
#
# Installs clang and its libFuzzer runtime with apt-get when missing, builds
# hakmem as a plain library (-DHAK_NO_INTERPOSE) with coverage and UBSan,
# plus the harness, into build/fuzz/ (build/fuzz-hardened/ for
# FUZZ_FLAVOUR=hardened; below, build/fuzz stands for either; rebuilt only
# when a source or the flags changed), and fuzzes for SECONDS starting from
# build/fuzz/corpus: a copy of
# the committed seeds in tests/fuzz/corpus/ plus whatever earlier runs found
# there (the committed corpus is never written).  FUZZ_FRESH=1 starts the
# working corpus over from the seeds; FUZZ_ARGS adds libFuzzer options;
# FUZZ_CFLAGS adds flags to the hakmem build; FUZZ_FLAVOUR=hardened fuzzes
# the hardened flavour (-DHAK_HARDENED=1, in build/fuzz-hardened/ with a
# corpus of its own); HAKMEM_* settings in the environment apply as usual.
#
# A crash, UBSan report, timeout or failed check stops the run: the input is
# saved in build/fuzz/artifacts/ and the script exits 1.  The last line is
#   fuzz: N runs, 0 crashes (...)
# or "fuzz: N runs, 1 crash: <artifact>".
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
DUR="${1:-60}"
case "$DUR" in
  ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac

OUT=build/fuzz
FLAVOUR_FLAGS=""
case "${FUZZ_FLAVOUR:-default}" in
  default) ;;
  hardened) OUT=build/fuzz-hardened; FLAVOUR_FLAGS="-DHAK_HARDENED=1" ;;
  *) echo "run_fuzz: FUZZ_FLAVOUR is default or hardened" >&2; exit 2 ;;
esac
export DEBIAN_FRONTEND=noninteractive

# ---- toolchain ------------------------------------------------------------
APT_WHO=run_fuzz
. scripts/apt.sh

find_clang() {
  CLANG="${FUZZ_CC:-}"
  [ -n "$CLANG" ] && return 0
  for c in clang clang-14 clang-15 clang-16 clang-13; do
    command -v "$c" >/dev/null 2>&1 && { CLANG="$c"; return 0; }
  done
  return 1
}

if ! find_clang; then
  apt_install clang || true
  find_clang || { echo "run_fuzz: no clang (apt-get install clang)" >&2; exit 1; }
fi

PROBE_DIR="$OUT/probe"
mkdir -p "$PROBE_DIR"
fuzzer_works() {
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
    >"$PROBE_DIR/probe.c"
  "$CLANG" -fsanitize=fuzzer,undefined "$PROBE_DIR/probe.c" -o "$PROBE_DIR/probe" >"$PROBE_DIR/probe.log" 2>&1 &&
    "$PROBE_DIR/probe" -runs=1 >>"$PROBE_DIR/probe.log" 2>&1
}
if ! fuzzer_works; then
  # Debian 12 ships the libFuzzer runtime in libclang-rt-N-dev; older
  # releases and Ubuntu in libclang-common-N-dev.
  V="$("$CLANG" -dumpversion 2>/dev/null | cut -d. -f1)"
  apt_install "libclang-rt-$V-dev" || apt_install "libclang-common-$V-dev" || true
  if ! fuzzer_works; then
    echo "run_fuzz: $CLANG -fsanitize=fuzzer does not work:" >&2
    tail -n 20 "$PROBE_DIR/probe.log" >&2
    exit 1
  fi
fi

# ---- build ------------------------------------------------------------------
SAN="-fsanitize=undefined -fno-sanitize-recover=all"
BASE="-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -pthread -Icore"
LIB_FLAGS="$BASE -DHAK_NO_INTERPOSE -fsanitize=fuzzer-no-link $SAN -w $FLAVOUR_FLAGS ${FUZZ_CFLAGS:-}"
HARNESS_FLAGS="$BASE -Wall -Wextra -fsanitize=fuzzer $SAN"
BIN="$OUT/fuzz_api"
STAMP="$OUT/.flags"
mkdir -p "$OUT/obj" "$OUT/artifacts"

flags_now="$CLANG | $LIB_FLAGS | $HARNESS_FLAGS | $(ls core/*.c core/profile/*.c | tr '\n' ' ')"
need_build=0
if [ ! -x "$BIN" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$flags_now" ] ||
   [ -n "$(find core tests/fuzz/fuzz_api.c -newer "$BIN" \( -name '*.c' -o -name '*.h' \) 2>/dev/null | head -n 1)" ]; then
  need_build=1
fi
if [ "$need_build" = 1 ]; then
  t0=$(date +%s.%N)
  rm -f "$OUT"/obj/*.o "$BIN"
  BUILD_LOG="$OUT/build.log"
  : >"$BUILD_LOG"
  jobs=$(nproc 2>/dev/null || echo 2)
  # shellcheck disable=SC2086
  # core/profile/sample.c -> obj/profile_sample.o
  if ! printf '%s\n' core/*.c core/profile/*.c | xargs -P "$jobs" -I{} sh -c \
       'f="$1"; n="${f#core/}"; o="$2/obj/$(echo "${n%.c}" | tr / _).o"; $3 $4 -c "$f" -o "$o" >>"$2/build.log" 2>&1 || { echo "FAILED: $f" >>"$2/build.log"; exit 1; }' \
       sh {} "$OUT" "$CLANG" "$LIB_FLAGS"; then
    echo "run_fuzz: building hakmem failed:" >&2
    tail -n 40 "$BUILD_LOG" >&2
    echo "fuzz: 0 runs, build failed"
    exit 1
  fi
  # shellcheck disable=SC2086
  if ! "$CLANG" $HARNESS_FLAGS tests/fuzz/fuzz_api.c "$OUT"/obj/*.o -o "$BIN" -ldl >>"$BUILD_LOG" 2>&1; then
    echo "run_fuzz: building the harness failed:" >&2
    tail -n 40 "$BUILD_LOG" >&2
    echo "fuzz: 0 runs, build failed"
    exit 1
  fi
  echo "$flags_now" >"$STAMP"
  t1=$(date +%s.%N)
  echo "run_fuzz: built $BIN ($(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')s)"
fi

# ---- run ------------------------------------------------------------------
CORPUS="$OUT/corpus"
[ "${FUZZ_FRESH:-0}" = 1 ] && rm -rf "$CORPUS"
mkdir -p "$CORPUS"
cp tests/fuzz/corpus/* "$CORPUS"/ 2>/dev/null
LOG="$OUT/last_run.log"
echo "run_fuzz: fuzzing for ${DUR}s (corpus $CORPUS: $(ls "$CORPUS" | wc -l) inputs; log $LOG)"
before=$(ls "$OUT/artifacts" | wc -l)
# shellcheck disable=SC2086
"$BIN" -max_total_time="$DUR" -timeout=30 -rss_limit_mb=2560 -max_len=4096 \
       -print_final_stats=1 -artifact_prefix="$OUT/artifacts/" ${FUZZ_ARGS:-} "$CORPUS" >"$LOG" 2>&1
rc=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$LOG" | tail -n 1)
[ -z "$runs" ] && runs=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$LOG" | tail -n 1)
[ -z "$runs" ] && runs=0
cov=$(grep -o 'cov: [0-9]*' "$LOG" | tail -n 1 | cut -d' ' -f2)
artifact=$(sed -n "s/.*Test unit written to \(.*\)$/\1/p" "$LOG" | tail -n 1)
after=$(ls "$OUT/artifacts" | wc -l)

if [ "$rc" -eq 0 ] && [ -z "$artifact" ] && [ "$after" -eq "$before" ]; then
  echo "fuzz: $runs runs, 0 crashes (${DUR}s, coverage ${cov:-?}, corpus $(ls "$CORPUS" | wc -l) inputs)"
  exit 0
fi

echo "----- what went wrong (from $LOG):"
grep -E '^fuzz_api: operation|runtime error|ERROR: libFuzzer|SUMMARY|hakmem:' "$LOG" | head -n 20
echo "----- last lines:"
tail -n 25 "$LOG"
echo "-----"
if [ -n "$artifact" ]; then
  echo "reproduce: $BIN $artifact    (FUZZ_API_TRACE=1 lists the operations;"
  echo "           hakmem keeps state between inputs, so a crash may need the inputs before it:"
  echo "           rerun with -seed=<the seed in $LOG> on the same corpus)"
  echo "fuzz: $runs runs, 1 crash: $artifact"
else
  echo "fuzz: $runs runs, 1 crash (libFuzzer exit status $rc)"
fi
exit 1
