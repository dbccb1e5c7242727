#!/usr/bin/env bash
# bench_compare.sh — hakmem against glibc, mimalloc, jemalloc and tcmalloc.
#
#   scripts/bench_compare.sh [--runs N] [--allocators LIST] [--extra LIST]
#                            [--quick] [--out DIR] [--callgrind] [more: --help]
#
# Every benchmark is the build/bench/NAME_system binary (plain libc malloc);
# each allocator is put under it with LD_PRELOAD.  Runs are interleaved across
# allocators (A B C, B C A, C A B, ...) so that machine drift hits all of them alike.
# The report gives per benchmark and allocator the median throughput, the
# min–max spread, hakmem's ratio to it, the page faults and the peak RSS, as a
# Markdown table on stdout and in OUT/latest.md, then hakmem against the best
# other allocator of each benchmark, plus a chart of the ratios in
# OUT/latest.png.  Any other allocator can be added as NAME=/path/lib.so.
#
# --suite mimalloc-bench runs the programs of mimalloc-bench (found at
# ../shared/mimalloc-bench, never needed to build or test: without it the
# mode says so and exits 0) with the suite's own arguments at P = nproc,
# written to OUT/suite.md and .tsv.  --threads 1,4,8,16 runs the threaded
# rows at each thread count into OUT/scaling.md, .tsv and .png.
#
# Exit status: 0 all went well; 1 something failed (unknown allocator, missing
# binary or library, a run that crashed, timed out or printed no result);
# 2 bad command line.  A peer allocator that is not installed (and cannot be
# installed) is skipped with a note and is not a failure.
set -u -o pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=bench_compare

usage() {
    cat <<EOF
usage: scripts/bench_compare.sh [options]

  --runs N            runs per benchmark and allocator (default: 5, --quick: 3)
  --allocators LIST   comma- or space-separated, in report order
                      (default: system,hakmem,mimalloc,jemalloc,tcmalloc).
                      Known: system hakmem mimalloc jemalloc tcmalloc, and
                      hakmem-static (the statically linked NAME_hakmem binary).
                      NAME=/path/lib.so adds any allocator: that library is
                      preloaded and named NAME in the report, e.g.
                      mimalloc-3.4.3=../shared/peers/libmimalloc-3.4.3.so
  --extra LIST        allocators appended to --allocators' list (same
                      forms), e.g. to add NAME=/path/lib.so to the default
  --quick             smaller sizes, 3 runs, no package installs: only the
                      peers already installed are used (this is 'make bench')
  --out DIR           where latest.md / latest.png / latest.tsv go
                      (default: docs/benchmarks; --quick: build/bench-results)
  --name NAME         write NAME.md / NAME.png / NAME.tsv instead of latest.*
  --callgrind         instead of timing, count instructions per operation of
                      bench_random_mixed (ws 400 and 8192) with valgrind's
                      callgrind; writes OUT/callgrind.md
  --cycles N          cycles for --callgrind (default 200000)
  --only LIST         only these benchmark ids (see below)
  --timeout SEC       limit for one run (default: 120, --quick: 30,
                      --callgrind: 600)
  --bench-dir DIR     where the NAME_system binaries are (default: build/bench)
  --hakmem-lib PATH   the hakmem library to preload (default: ./libhakmem.so)
  --commit TEXT       the commit to name in the report (default: the tree's
                      HEAD, with -dirty when core/ or the Makefile have
                      uncommitted changes); for a library built elsewhere
  --no-install        never install missing packages
  --no-chart          do not draw the chart (latest.png, scaling.png)
  -h, --help          this text

Other rows (same allocators, interleaving, medians and paired column):
  --suite mimalloc-bench
                      the mimalloc-bench programs with the suite's own
                      arguments at P = nproc (rows: cfrac espresso barnes
                      larsonN larsonN-sized alloc-test1 alloc-testN
                      xmalloc-testN cache-scratch1 cache-scratchN
                      cache-thrash1 cache-thrashN mstressN rptestN
                      glibc-simple glibc-thread malloc-large mleak10
                      mleak100; a program missing from bin/ is skipped with
                      a note).  Writes OUT/suite.md and OUT/suite.tsv.
                      Without the suite: one line, exit 0.
  --suite-dir DIR     where the suite is (default: ../shared/mimalloc-bench
                      beside the repository, or \$BENCH_SUITE_DIR)
  --threads LIST      thread scaling, e.g. 1,4,8,16: at each count the
                      suite's larson, xmalloc-test, mstress, glibc-thread,
                      alloc-test (at most 16), cache-scratch (skipped
                      without the suite) and bench/larson.  Writes
                      OUT/scaling.md, .tsv and .png (gnuplot).
  --replay LIST       with --threads: run nothing, and write the report,
                      chart and raw table from the raw runs (.tsv) of
                      earlier --threads runs, comma-separated: the parts
                      of a run on another machine (scripts/stage_scaling.sh).
                      Their rows, thread counts, --seconds, date, commit,
                      machine, peers, problems and notes are the recorded
                      ones (the .md beside each .tsv); parts that differ in
                      commit, peers or machine are noted
  --seconds S         --suite / --threads: seconds of the fixed-time
                      programs (suite larson and xmalloc-test: default 5,
                      the suite's; bench/larson: 2; --quick: 1 for all)
  Timed rows (wall seconds, lower is better) and rate rows (larson's
  Throughput, xmalloc-test's free/sec, glibc-thread's iterations: higher is
  better) both get speed ratios: above 1, hakmem is faster (for times:
  other's seconds / hakmem's).  Peak RSS and minor faults are the whole
  process's (/usr/bin/time %M, %R).  --only takes these row names (for
  --threads: larson-suite larson xmalloc-test mstress glibc-thread
  alloc-test cache-scratch xthread).

Benchmark ids (docs/benchmarks/README.md describes each):
  random_mixed_ws400 random_mixed_ws8192 random_mixed_ws65536
  random_mixed_ws262144 mid_large_mt_t1 mid_large_mt_t2 churn_t2 larson_t1 larson_t2
  larson_mb_t2 larson_short_t1 larson_short_t2 xthread xthread_large
  transfer_t2 many_threads large_reuse large_reuse_calloc large_reuse_long
  bulk_forward bulk_random evict append python_threads rss
(rss only when bench_rss_system exists).  Sizes can be overridden with the
environment variables BENCH_RM_CYCLES, BENCH_MID_CYCLES,
BENCH_LARSON_SECONDS (every larson row), BENCH_XTHREAD_SECONDS,
BENCH_TRANSFER_ROUNDS, BENCH_THREADS_WAVES, BENCH_LARGE_REPS,
BENCH_BULK_ROUNDS (bulk rows: 10; --quick: 3), BENCH_CHURN_CYCLES (churn_t2:
1000000; --quick: 250000), BENCH_EVICT_OPS (evict: 20000000; --quick:
5000000), BENCH_APPEND_ROUNDS (append: 10; --quick: 3),
BENCH_PY_ROUNDS (python_threads: 30; --quick: 10) and
BENCH_RSS_ARGS (bench_rss arguments: default none = 512 MiB; --quick: 256).
EOF
}

die_usage() { echo "$PROG: $*" >&2; echo "try: scripts/bench_compare.sh --help" >&2; exit 2; }
say()  { echo "$PROG: $*" >&2; }

# ---------------------------------------------------------------- options
RUNS=""; ALLOC_LIST="system,hakmem,mimalloc,jemalloc,tcmalloc"; EXTRA_LIST=""; QUICK=0; OUT=""
CALLGRIND=0; CG_CYCLES=200000; ONLY=""; TIMEOUT=""; BENCH_DIR="$REPO/build/bench"
HAKMEM_LIB="$REPO/libhakmem.so"; INSTALL=1; CHART=1; COMMIT_LABEL=""; NAME=""
SUITE=""; SUITE_DIR=${BENCH_SUITE_DIR:-"$REPO/../shared/mimalloc-bench"}; THREADS=""; XSECONDS=""
REPLAY=""
ORIG_CMD="scripts/bench_compare.sh"
for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then ORIG_CMD+=" $a"; else ORIG_CMD+=" '${a//\'/\'\\\'\'}'"; fi
done

need_arg() { [ $# -ge 2 ] && [ -n "$2" ] || die_usage "option $1 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --runs)        need_arg "$@"; RUNS=$2; shift 2 ;;
        --runs=*)      RUNS=${1#*=}; shift ;;
        --allocators)  need_arg "$@"; ALLOC_LIST=$2; shift 2 ;;
        --allocators=*) ALLOC_LIST=${1#*=}; shift ;;
        --extra)       need_arg "$@"; EXTRA_LIST+=" $2"; shift 2 ;;
        --extra=*)     EXTRA_LIST+=" ${1#*=}"; shift ;;
        --quick)       QUICK=1; shift ;;
        --out)         need_arg "$@"; OUT=$2; shift 2 ;;
        --out=*)       OUT=${1#*=}; shift ;;
        --name)        need_arg "$@"; NAME=$2; shift 2 ;;
        --name=*)      NAME=${1#*=}; shift ;;
        --callgrind)   CALLGRIND=1; shift ;;
        --cycles)      need_arg "$@"; CG_CYCLES=$2; shift 2 ;;
        --cycles=*)    CG_CYCLES=${1#*=}; shift ;;
        --only)        need_arg "$@"; ONLY=$2; shift 2 ;;
        --only=*)      ONLY=${1#*=}; shift ;;
        --timeout)     need_arg "$@"; TIMEOUT=$2; shift 2 ;;
        --timeout=*)   TIMEOUT=${1#*=}; shift ;;
        --bench-dir)   need_arg "$@"; BENCH_DIR=$2; shift 2 ;;
        --bench-dir=*) BENCH_DIR=${1#*=}; shift ;;
        --hakmem-lib)  need_arg "$@"; HAKMEM_LIB=$2; shift 2 ;;
        --hakmem-lib=*) HAKMEM_LIB=${1#*=}; shift ;;
        --commit)      need_arg "$@"; COMMIT_LABEL=$2; shift 2 ;;
        --commit=*)    COMMIT_LABEL=${1#*=}; shift ;;
        --suite)       need_arg "$@"; SUITE=$2; shift 2 ;;
        --suite=*)     SUITE=${1#*=}; shift ;;
        --suite-dir)   need_arg "$@"; SUITE_DIR=$2; shift 2 ;;
        --suite-dir=*) SUITE_DIR=${1#*=}; shift ;;
        --threads)     need_arg "$@"; THREADS=$2; shift 2 ;;
        --threads=*)   THREADS=${1#*=}; shift ;;
        --replay)      need_arg "$@"; REPLAY=$2; shift 2 ;;
        --replay=*)    REPLAY=${1#*=}; shift ;;
        --seconds)     need_arg "$@"; XSECONDS=$2; shift 2 ;;
        --seconds=*)   XSECONDS=${1#*=}; shift ;;
        --no-install)  INSTALL=0; shift ;;
        --no-chart)    CHART=0; shift ;;
        -h|--help)     usage; exit 0 ;;
        *)             die_usage "unknown option '$1'" ;;
    esac
done

is_posint() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
[ -z "$RUNS" ] && { [ $QUICK = 1 ] && RUNS=3 || RUNS=5; }
is_posint "$RUNS"      || die_usage "--runs wants a positive integer, not '$RUNS'"
is_posint "$CG_CYCLES" || die_usage "--cycles wants a positive integer, not '$CG_CYCLES'"
if [ -z "$TIMEOUT" ]; then
    if [ $CALLGRIND = 1 ]; then TIMEOUT=600; elif [ $QUICK = 1 ]; then TIMEOUT=30; else TIMEOUT=120; fi
fi
is_posint "$TIMEOUT"   || die_usage "--timeout wants a positive number of seconds, not '$TIMEOUT'"
case "$SUITE" in ""|mimalloc-bench) ;; *) die_usage "--suite knows only mimalloc-bench, not '$SUITE'" ;; esac
[ -n "$SUITE" ] && [ -n "$THREADS" ] && die_usage "--suite and --threads are separate runs: give one of them"
{ [ -n "$SUITE" ] || [ -n "$THREADS" ]; } && [ $CALLGRIND = 1 ] && die_usage "--callgrind does not go with --suite or --threads"
if [ -n "$THREADS" ]; then
    THREADS=$(echo "$THREADS" | tr ',' ' ' | xargs)
    [ -n "$THREADS" ] || die_usage "--threads wants a list of thread counts, e.g. 1,4,8,16"
    for t in $THREADS; do is_posint "$t" || die_usage "--threads wants positive integers, not '$t'"; done
fi
[ -z "$XSECONDS" ] || is_posint "$XSECONDS" || die_usage "--seconds wants a positive integer, not '$XSECONDS'"
# --replay: the recorded runs' raw tables (absolute paths), each with its report
REPLAY_TSV=()
if [ -n "$REPLAY" ]; then
    [ -n "$THREADS" ] || die_usage "--replay goes with --threads"
    IFS=',' read -r -a replay_list <<< "$REPLAY"
    for f in "${replay_list[@]}"; do
        [ -n "$f" ] || continue
        [ -f "$f" ] || die_usage "--replay: no file $f"
        [ -f "${f%.tsv}.md" ] || die_usage "--replay: no report ${f%.tsv}.md beside $f"
        f="$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
        for g in "${REPLAY_TSV[@]}"; do [ "$g" = "$f" ] && die_usage "--replay: $f given twice"; done
        REPLAY_TSV+=("$f")
    done
    [ ${#REPLAY_TSV[@]} -gt 0 ] || die_usage "--replay wants one or more .tsv files"
    INSTALL=0
fi
if [ -z "$NAME" ]; then
    if [ -n "$SUITE" ]; then NAME=suite; elif [ -n "$THREADS" ]; then NAME=scaling; else NAME=latest; fi
fi
[[ "$NAME" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die_usage "--name wants a file name stem (letters, digits, . _ -), not '$NAME'"
[ $QUICK = 1 ] && INSTALL=0
if [ -z "$OUT" ]; then
    if [ $QUICK = 1 ]; then OUT="$REPO/build/bench-results"; else OUT="$REPO/docs/benchmarks"; fi
fi
case "$BENCH_DIR" in /*) ;; *) BENCH_DIR="$PWD/$BENCH_DIR" ;; esac
case "$HAKMEM_LIB" in /*) ;; *) HAKMEM_LIB="$PWD/$HAKMEM_LIB" ;; esac
# The suite is a measuring tool beside the project, never a requirement:
# without it --suite says so and skips (exit 0); --threads runs its own rows.
case "$SUITE_DIR" in /*) ;; *) SUITE_DIR="$PWD/$SUITE_DIR" ;; esac
HAVE_SUITE=0
[ -d "$SUITE_DIR/bin" ] && HAVE_SUITE=1 && SUITE_DIR=$(cd "$SUITE_DIR" && pwd)
if [ -n "$SUITE" ] && [ $HAVE_SUITE = 0 ]; then
    echo "$PROG: --suite mimalloc-bench skipped: no suite at $SUITE_DIR/bin (--suite-dir DIR or BENCH_SUITE_DIR)"
    exit 0
fi
mkdir -p "$OUT" || { say "cannot create output directory $OUT"; exit 1; }
OUT=$(cd "$OUT" && pwd)

FAILED=0                 # becomes 1 on any failure; decides the exit status
PROBLEMS=()              # lines for the report
NOTES=()
fail() { FAILED=1; PROBLEMS+=("$*"); say "FAILED: $*"; }
note() { NOTES+=("$*"); say "note: $*"; }
# The end of every mode: its notes, its failures, the exit status.
finish() {
    local p
    if [ ${#NOTES[@]} -gt 0 ]; then for p in "${NOTES[@]}"; do echo "note: $p"; done; fi
    if [ "$FAILED" != 0 ]; then
        echo
        echo "FAILURES:"
        for p in "${PROBLEMS[@]}"; do echo "  - $p"; done
    fi
    exit "$FAILED"
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench_compare.XXXXXX") || { say "mktemp failed"; exit 1; }
trap 'rm -rf "$WORK"' EXIT
trap 'echo; say "interrupted"; exit 130' INT TERM

# ---------------------------------------------------------------- packages
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

APT_WHO=$PROG
. "$REPO/scripts/apt.sh"

# ---------------------------------------------------------------- allocators
# name -> Debian package and the soname to preload
peer_pkg() {
    case "$1" in
        mimalloc) echo "libmimalloc2.0 libmimalloc.so.2" ;;
        jemalloc) echo "libjemalloc2 libjemalloc.so.2" ;;
        tcmalloc) echo "libtcmalloc-minimal4 libtcmalloc_minimal.so.4" ;;
        *) return 1 ;;
    esac
}
find_peer_lib() {   # find_peer_lib PKG SONAME -> path on stdout
    local pkg=$1 so=$2 p
    p=$(dpkg -L "$pkg" 2>/dev/null | grep -E "/$so\$" | head -n1)
    if [ -z "$p" ] && command -v ldconfig >/dev/null 2>&1; then
        p=$(ldconfig -p 2>/dev/null | awk -v so="$so" '$1 == so && /x86-64|x86_64|64/ { print $NF; exit }')
        [ -z "$p" ] && p=$(ldconfig -p 2>/dev/null | awk -v so="$so" '$1 == so { print $NF; exit }')
    fi
    if [ -z "$p" ]; then
        for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib; do
            [ -e "$d/$so" ] && { p="$d/$so"; break; }
        done
    fi
    [ -n "$p" ] && [ -e "$p" ] && { echo "$p"; return 0; }
    return 1
}
# Does the dynamic loader accept LIB as a preload, and does a trivial program survive it?
preload_ok() {
    local lib=$1 out
    out=$(LD_PRELOAD="$lib" /bin/true 2>&1); local rc=$?
    if [ $rc -ne 0 ] || printf '%s' "$out" | grep -qiE 'cannot be preloaded|ld\.so'; then
        PRELOAD_ERR="LD_PRELOAD=$lib /bin/true: $(printf '%s' "$out" | head -n2 | tr '\n' ' ') (exit $rc)"
        return 1
    fi
    return 0
}

declare -A LIB=()        # allocator -> preload path ('' for none)
declare -A BINSUFFIX=()  # allocator -> _system or _hakmem
ALLOCS=()
REQ=$(echo "$ALLOC_LIST $EXTRA_LIST" | tr ',' ' ')
if [ ${#REPLAY_TSV[@]} -gt 0 ]; then
    # the recorded runs name their allocators, in their order; nothing runs here
    REQ=""
    mapfile -t ALLOCS < <(awk -F'\t' '$4 != "" && !seen[$4]++ { print $4 }' "${REPLAY_TSV[@]}")
    for a in "${ALLOCS[@]}"; do LIB[$a]=""; BINSUFFIX[$a]=_system; done
    # the thread counts the parts ran, and the seconds their commands gave
    THREADS=$(awk -F'\t' '{ t = $1; sub(/.*@/, "", t); if (t ~ /^[0-9]+$/ && !seen[t]++) print t }' \
              "${REPLAY_TSV[@]}" | sort -n | xargs)
    [ -n "$THREADS" ] || die_usage "--replay: no thread-scaling runs in ${REPLAY_TSV[*]}"
    rec_seconds=$(sed -n 's/^- command: .*--seconds[ =]\([0-9]*\).*/\1/p' "${REPLAY_TSV[0]%.tsv}.md" | head -n1)
    XSECONDS=${rec_seconds:-}
else
    [ -n "${REQ// /}" ] || die_usage "--allocators is empty"
fi
declare -A EXTRA_PATH=()   # NAME=/path/lib.so allocators: name -> path as given

# Install missing peers first (full runs only), in one go.
if [ $INSTALL = 1 ]; then
    missing=()
    for a in $REQ; do
        [[ "$a" == *=* ]] && continue
        pp=$(peer_pkg "$a") || continue
        # shellcheck disable=SC2086
        set -- $pp
        find_peer_lib "$1" "$2" >/dev/null || missing+=("$1")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        for p in "${missing[@]}"; do
            apt_install "$p" || say "could not install $p"
        done
    fi
fi

declare -A SEEN=()
for a in $REQ; do
    if [[ "$a" == *=* ]]; then
        # NAME=/path/lib.so: any allocator, preloaded from that path
        name=${a%%=*}; path=${a#*=}
        if ! [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*$ ]]; then
            fail "allocator '$a': the name must be letters, digits and . _ + - ; ignored"; continue
        fi
        case "$name" in system|hakmem|hakmem-static|mimalloc|jemalloc|tcmalloc)
            fail "allocator '$a': $name is a built-in name, choose another; ignored"; continue ;;
        esac
        [ -n "${SEEN[$name]:-}" ] && { fail "allocator name '$name' given twice; the second is ignored"; continue; }
        SEEN[$name]=1
        case "$path" in /*) ;; *) path="$PWD/$path" ;; esac
        if [ ! -f "$path" ]; then
            fail "$name: library $path not found; $name skipped"
        elif ! preload_ok "$path"; then
            fail "$name: cannot preload the library: $PRELOAD_ERR; $name skipped"
        else
            LIB[$name]="$path"; BINSUFFIX[$name]=_system; ALLOCS+=("$name"); EXTRA_PATH[$name]="$path"
        fi
        continue
    fi
    [ -n "${SEEN[$a]:-}" ] && continue
    SEEN[$a]=1
    case "$a" in
        system)
            LIB[$a]=""; BINSUFFIX[$a]=_system; ALLOCS+=("$a") ;;
        hakmem)
            if [ ! -f "$HAKMEM_LIB" ]; then
                fail "hakmem: library $HAKMEM_LIB not found (run 'make lib'); hakmem skipped"
            elif ! preload_ok "$HAKMEM_LIB"; then
                fail "hakmem: cannot preload the library: $PRELOAD_ERR; hakmem skipped"
            else
                LIB[$a]="$HAKMEM_LIB"; BINSUFFIX[$a]=_system; ALLOCS+=("$a")
            fi ;;
        hakmem-static)
            LIB[$a]=""; BINSUFFIX[$a]=_hakmem; ALLOCS+=("$a") ;;
        mimalloc|jemalloc|tcmalloc)
            # shellcheck disable=SC2046  # two words: package and soname
            set -- $(peer_pkg "$a")
            if ! lib=$(find_peer_lib "$1" "$2"); then
                if [ $QUICK = 1 ]; then
                    note "$a skipped: not installed (package $1; 'make bench-full' or scripts/install_deps.sh bench installs it)"
                else
                    note "$a skipped: package $1 is not installed and could not be installed"
                fi
            elif ! preload_ok "$lib"; then
                note "$a skipped: $PRELOAD_ERR"
            else
                LIB[$a]="$lib"; BINSUFFIX[$a]=_system; ALLOCS+=("$a")
            fi ;;
        *)
            fail "unknown allocator '$a' (known: system hakmem mimalloc jemalloc tcmalloc hakmem-static, or NAME=/path/lib.so); ignored" ;;
    esac
done
if [ ${#ALLOCS[@]} -eq 0 ]; then
    say "no usable allocator left; nothing to run"
    exit 1
fi
HAVE_HAKMEM=0
for a in "${ALLOCS[@]}"; do [ "$a" = hakmem ] && HAVE_HAKMEM=1; done
REF=hakmem                       # the allocator the ratios are taken from
[ $HAVE_HAKMEM = 0 ] && for a in "${ALLOCS[@]}"; do [ "$a" = hakmem-static ] && REF=hakmem-static; done

# ---------------------------------------------------------------- tools
TIME_BIN=""
if [ ${#REPLAY_TSV[@]} -gt 0 ]; then
    # the recorded runs: timed by GNU time where they have a peak RSS
    awk -F'\t' '$9 != "" { f = 1 } END { exit !f }' "${REPLAY_TSV[@]}" && TIME_BIN=/usr/bin/time
elif [ -x /usr/bin/time ] && /usr/bin/time -f %M -o /dev/null true 2>/dev/null; then
    TIME_BIN=/usr/bin/time
elif [ $CALLGRIND = 0 ] && apt_install time 2>/dev/null && [ -x /usr/bin/time ]; then
    TIME_BIN=/usr/bin/time
elif [ $CALLGRIND = 0 ]; then
    note "/usr/bin/time is missing (package 'time'): peak RSS is not measured"
fi
command -v timeout >/dev/null 2>&1 || { say "'timeout' (coreutils) is required"; exit 1; }

# ---------------------------------------------------------------- machine
commit_id() {
    local c
    c=$(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null) || { echo "(no commit)"; return; }
    if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no -- core Makefile 2>/dev/null)" ]; then
        c+="-dirty"
    fi
    echo "$c"
}
COMMIT=${COMMIT_LABEL:-$(commit_id)}
CPU=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
NCPU=$(nproc 2>/dev/null || echo "?")
MEM=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null)
LOAD=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
KERNEL=$(uname -sr)
GLIBC=$(ldd --version 2>/dev/null | head -n1 | sed 's/^ldd //')
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
peer_versions() {
    local a out=""
    for a in "${ALLOCS[@]}"; do
        case "$a" in mimalloc|jemalloc|tcmalloc)
            # shellcheck disable=SC2046  # two words: package and soname
            set -- $(peer_pkg "$a")
            out+="$a $(dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo '?'), " ;;
        esac
        [ -n "${EXTRA_PATH[$a]:-}" ] && out+="$a = ${EXTRA_PATH[$a]}, "
    done
    echo "${out%, }"
}
PEERS_V=$(peer_versions)
# --replay: the recorded runs' own date, commit, machine and peers, from the
# "- NAME: ..." lines of their reports
REPLAY_MACHINE=""; RECORDED=""
md_field() { sed -n "s/^- $2: //p" "$1" | head -n1; }
if [ ${#REPLAY_TSV[@]} -gt 0 ]; then
    md0="${REPLAY_TSV[0]%.tsv}.md"
    DATE=""
    for f in "${REPLAY_TSV[@]}"; do
        DATE+="${DATE:+ and }$(md_field "${f%.tsv}.md" date)"
        RECORDED+="${RECORDED:+, then }$(md_field "${f%.tsv}.md" command)"
    done
    COMMIT=${COMMIT_LABEL:-$(md_field "$md0" commit)}
    PEERS_V=$(md_field "$md0" peers)
    REPLAY_MACHINE=$(md_field "$md0" machine); REPLAY_MACHINE=${REPLAY_MACHINE%%; load average*}
    for f in "${REPLAY_TSV[@]}"; do
        md="${f%.tsv}.md"
        [ "$md" = "$OUT/$NAME.md" ] && die_usage "--replay: the report would overwrite $md (--out or --name)"
        for k in commit peers; do
            [ "$(md_field "$md" $k)" = "$(md_field "$md0" $k)" ] || note "the parts differ in their $k: $(basename "$md0") and $(basename "$md")"
        done
        m=$(md_field "$md" machine)
        [ "${m%%; load average*}" = "$REPLAY_MACHINE" ] || note "the parts ran on different machines: $(basename "$md0") and $(basename "$md")"
        # what each part reported as problems or notes
        while IFS= read -r line; do
            note "recorded in $(basename "$md"): ${line#- }"
        done < <(awk '/^## (Problems|Notes)$/ { on = 1; next } /^## / { on = 0 } on && /^- / { print }' "$md")
        awk -F'\t' '$6 == "fail" { exit 1 }' "$f" || fail "$(basename "$f") holds failed runs (FAILED in the tables)"
    done
    NCPU=$(echo "$REPLAY_MACHINE" | grep -o '[0-9]* CPUs' | head -n1 | cut -d' ' -f1)
fi
# latest.md carries the suite's summary: hakmem against the best peer of each
# row, with the date, commit and machine of that run, taken from OUT/suite.md
# (`make bench-full` runs the suite first).
suite_summary() {
    local f="$OUT/suite.md"
    [ "$NAME" = latest ] && [ -f "$f" ] || return 0
    echo
    echo "## The mimalloc-bench suite"
    echo
    echo "From [suite.md](suite.md), its own run (\`--suite mimalloc-bench\`): the suite's programs with their own arguments; every allocator's figures and the method are there."
    echo
    grep -E '^- (date|commit|machine|peers):' "$f"
    echo
    awk '/^## .* against the best of the others/ { on = 1; next }
         on && /^\|/ { print; seen = 1; next }
         on && seen { exit }' "$f"
}

# The lines every chart's gnuplot script starts with: WIDTH x HEIGHT, into
# OUT/NAME.png, tab-separated data with "-" for a missing value (pngcairo
# where this gnuplot has it).
chart_head() {
    local term="pngcairo size $1,$2 font 'sans,10'"
    gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 </dev/null || term="png size $1,$2"
    echo "set terminal $term"
    echo "set termoption noenhanced"
    echo "set output '$OUT/$NAME.png'"
    echo "set datafile separator \"\\t\""
    echo "set datafile missing \"-\""
}

fmt_dur() { awk -v s="$1" 'BEGIN { printf "%d:%02d", s / 60, s % 60 }'; }

# Why a run failed, from its exit status and seconds; empty if it did not
# (the caller adds its own "printed no result" case).
run_failure() {   # run_failure RC SECS
    local rc=$1 secs=$2
    if [ "$rc" = 124 ] || { [ "$rc" = 137 ] && awk -v s="$secs" -v t="$TIMEOUT" 'BEGIN { exit !(s >= t) }'; }; then
        echo "timed out after ${TIMEOUT}s"
    elif [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
        echo "crashed (SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128))))"
    elif [ "$rc" -ne 0 ]; then
        echo "exited with status $rc"
    fi
}

# Every row RUNS times under every allocator, interleaved: each round
# starts one allocator further on, so that none always runs right after the
# same one (caches, page reclaim, frequency).  A pair that failed is
# skipped from then on (GAVEUP[id|alloc]).  Uses k, total and T0.
interleave() {   # interleave IDS_ARRAY LABELS_ARRAY RUN_FUNCTION
    local -n ids=$1 labels=$2
    local runner=$3 i r j a el
    for i in "${!ids[@]}"; do
        for ((r = 1; r <= RUNS; r++)); do
            for ((j = 0; j < ${#ALLOCS[@]}; j++)); do
                a=${ALLOCS[$(( (j + r - 1) % ${#ALLOCS[@]} ))]}
                k=$((k + 1))
                el=$(( $(date +%s) - T0 ))
                if [ -n "${GAVEUP[${ids[$i]}|$a]:-}" ]; then
                    printf '[%3d/%d %s] %-28s %-14s run %d/%d  skipped (failed before)\n' \
                        "$k" "$total" "$(fmt_dur $el)" "${labels[$i]}" "$a" "$r" "$RUNS" >&2
                    continue
                fi
                printf '[%3d/%d %s] %-28s %-14s run %d/%d ' \
                    "$k" "$total" "$(fmt_dur $el)" "${labels[$i]}" "$a" "$r" "$RUNS" >&2
                "$runner" "$i" "$a" "$r"
            done
        done
    done
}

# The 1-minute load average read before each run (column COL of FILE):
# median and range.
load_runs() {   # load_runs FILE COL
    awk -F'\t' -v c="$2" '$c != "" { v[++n] = $c + 0 }
        END { if (!n) exit
              for (i = 2; i <= n; i++) { x = v[i]; j = i - 1; while (j >= 1 && v[j] > x) { v[j+1] = v[j]; j-- } v[j+1] = x }
              printf "%.2f (%.2f–%.2f)", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, v[1], v[n] }' "$1"
}

# ================================================================ suite and scaling modes
# --suite mimalloc-bench: the suite's programs with its own arguments at
# P = nproc.  --threads LIST: the threaded rows at each thread count.  Same
# allocators, interleaving and medians as the rows below, but each row says
# whether it is timed (seconds, lower is better) or prints a rate (higher is
# better); every ratio here is a speed ratio: above 1, hakmem is faster.
if [ -n "$SUITE" ] || [ -n "$THREADS" ]; then
    if [ $HAVE_HAKMEM = 0 ] && [ "$REF" = hakmem-static ]; then REF=hakmem; fi
    XALLOCS=()
    for a in "${ALLOCS[@]}"; do
        if [ "$a" = hakmem-static ]; then
            note "hakmem-static left out: the suite's programs cannot be relinked, so --suite and --threads preload only"
            continue
        fi
        XALLOCS+=("$a")
    done
    [ ${#XALLOCS[@]} -gt 0 ] || { say "no usable allocator left; nothing to run"; exit 1; }
    ALLOCS=("${XALLOCS[@]}")
    SUITE_BIN="$SUITE_DIR/bin"
    P=$(nproc 2>/dev/null || echo 1)
    if [ $QUICK = 1 ]; then S_SUITE=${XSECONDS:-1}; S_OWN=${XSECONDS:-1}; else S_SUITE=${XSECONDS:-5}; S_OWN=${XSECONDS:-2}; fi
    # rows: id | group | threads | kind (suite: bin/PROG in the suite, run
    # from bin/; own: build/bench/PROG_system) | program | arguments |
    # metric (time: wall seconds; tput: 'Throughput = N'; xmalloc: 'free/sec:
    # N M'; iter: 'N iterations') | stdin | label
    XTABLE=""
    xrow() { XTABLE+="$1"$'\n'; }
    if [ -n "$SUITE" ]; then
        AT=$(( P < 16 ? P : 16 ))
        xrow "cfrac|cfrac|1|suite|cfrac|17545186520507317056371138836327483792789528|time||cfrac"
        xrow "espresso|espresso|1|suite|espresso|../input/largest.espresso|time||espresso"
        xrow "barnes|barnes|1|suite|barnes||time|../input/barnes.input|barnes"
        xrow "larsonN|larsonN|$P|suite|larson|$S_SUITE 8 1000 5000 100 4141 $P|tput||larsonN"
        xrow "larsonN-sized|larsonN-sized|$P|suite|larson-sized|$S_SUITE 8 1000 5000 100 4141 $P|tput||larsonN-sized"
        xrow "alloc-test1|alloc-test1|1|suite|alloc-test|1|time||alloc-test1"
        xrow "alloc-testN|alloc-testN|$AT|suite|alloc-test|$AT|time||alloc-testN"
        xrow "xmalloc-testN|xmalloc-testN|$P|suite|xmalloc-test|-w $P -t $S_SUITE -s 64|xmalloc||xmalloc-testN"
        xrow "cache-scratch1|cache-scratch1|1|suite|cache-scratch|1 1000 1 2000000 $P|time||cache-scratch1"
        xrow "cache-scratchN|cache-scratchN|$P|suite|cache-scratch|$P 1000 1 2000000 $P|time||cache-scratchN"
        xrow "cache-thrash1|cache-thrash1|1|suite|cache-thrash|1 1000 1 2000000 $P|time||cache-thrash1"
        xrow "cache-thrashN|cache-thrashN|$P|suite|cache-thrash|$P 1000 1 2000000 $P|time||cache-thrashN"
        xrow "mstressN|mstressN|$P|suite|mstress|$P 50 25|time||mstressN"
        xrow "rptestN|rptestN|$P|suite|rptest|$P 0 1 2 500 1000 100 8 16000|time||rptestN"
        xrow "glibc-simple|glibc-simple|1|suite|glibc-simple||time||glibc-simple"
        xrow "glibc-thread|glibc-thread|$P|suite|glibc-thread|$P|iter||glibc-thread"
        xrow "malloc-large|malloc-large|1|suite|malloc-large||time||malloc-large"
        xrow "mleak10|mleak10|10|suite|mleak|5|time||mleak10"
        xrow "mleak100|mleak100|10|suite|mleak|50|time||mleak100"
    else
        # group by group, each at every thread count, so that one row's
        # table is measured in one stretch of time
        for t in $THREADS; do xrow "larson-suite@$t|larson-suite|$t|suite|larson|$S_SUITE 8 1000 5000 100 4141 $t|tput||larson (suite) $t threads"; done
        for t in $THREADS; do xrow "larson@$t|larson|$t|own|larson|$S_OWN 8 1000 1000 10 42 $t|tput||larson (bench/) $t chains"; done
        for t in $THREADS; do xrow "xmalloc-test@$t|xmalloc-test|$t|suite|xmalloc-test|-w $t -t $S_SUITE -s 64|xmalloc||xmalloc-test $t threads"; done
        for t in $THREADS; do xrow "mstress@$t|mstress|$t|suite|mstress|$t 50 25|time||mstress $t threads"; done
        for t in $THREADS; do xrow "glibc-thread@$t|glibc-thread|$t|suite|glibc-thread|$t|iter||glibc-thread $t threads"; done
        for t in $THREADS; do
            at=$(( t < 16 ? t : 16 ))
            xrow "alloc-test@$t|alloc-test|$at|suite|alloc-test|$at|time||alloc-test $at threads"
        done
        for t in $THREADS; do xrow "cache-scratch@$t|cache-scratch|$t|suite|cache-scratch|$t 1000 1 2000000 $t|time||cache-scratch $t threads"; done
        # bench_xthread: producer/consumer pairs, 2 threads a pair (1 thread: one pair)
        for t in $THREADS; do
            pr=$(( t < 2 ? 1 : t / 2 ))
            xrow "xthread@$t|xthread|$t|own|bench_xthread|$S_OWN 16 2048 256 42 $pr|tput||xthread $pr pairs ($(( 2 * pr )) threads)"
        done
        [ $HAVE_SUITE = 0 ] && [ ${#REPLAY_TSV[@]} -eq 0 ] && note "the mimalloc-bench rows are skipped: no suite at $SUITE_DIR/bin (--suite-dir DIR or BENCH_SUITE_DIR); only the bench/ rows run"
    fi
    X_ID=(); X_GROUP=(); X_T=(); X_KIND=(); X_BIN=(); X_ARGS=(); X_METRIC=(); X_IN=(); X_LABEL=()
    declare -A KNOWN_X=() SKIPPED_X=()
    while IFS='|' read -r id grp thr kind bin args metric stdin label; do
        [ -n "$id" ] || continue
        KNOWN_X[$grp]=1; KNOWN_X[$id]=1
        if [ -n "$ONLY" ] && ! [[ " $(echo "$ONLY" | tr ',' ' ') " == *" $grp "* || " $(echo "$ONLY" | tr ',' ' ') " == *" $id "* ]]; then continue; fi
        if [ ${#REPLAY_TSV[@]} -gt 0 ]; then
            cut -f1 "${REPLAY_TSV[@]}" | grep -qxF -- "$id" || continue   # the rows recorded
        elif [ "$kind" = suite ]; then
            [ $HAVE_SUITE = 1 ] || continue
            if [ ! -x "$SUITE_BIN/$bin" ]; then
                [ -n "${SKIPPED_X[$bin]:-}" ] || note "$grp skipped: $SUITE_BIN/$bin does not exist"
                SKIPPED_X[$bin]=1; continue
            fi
        elif [ ! -x "$BENCH_DIR/${bin}_system" ]; then
            fail "$id: missing binary: $BENCH_DIR/${bin}_system (run 'make benches'); benchmark skipped"; continue
        fi
        X_ID+=("$id"); X_GROUP+=("$grp"); X_T+=("$thr"); X_KIND+=("$kind"); X_BIN+=("$bin")
        X_ARGS+=("$args"); X_METRIC+=("$metric"); X_IN+=("$stdin"); X_LABEL+=("$label")
    done <<< "$XTABLE"
    if [ -n "$ONLY" ]; then
        for id in $(echo "$ONLY" | tr ',' ' '); do
            [ -n "${KNOWN_X[$id]:-}" ] || fail "unknown benchmark id '$id' in --only; ignored"
        done
    fi
    if [ ${#X_ID[@]} -eq 0 ]; then say "no benchmark to run"; exit $FAILED; fi

    declare -A SHOWLIB=()      # what the report shows each command preloading
    if [ ${#REPLAY_TSV[@]} -eq 0 ]; then
        # snapshot of libhakmem.so and of the bench/ binaries (the suite's are not rebuilt)
        SNAP="$WORK/snap"; mkdir -p "$SNAP"
        for a in "${ALLOCS[@]}"; do SHOWLIB[$a]=${LIB[$a]}; done
        for i in "${!X_ID[@]}"; do
            [ "${X_KIND[$i]}" = own ] || continue
            f="${X_BIN[$i]}_system"
            [ -e "$SNAP/$f" ] || cp -p "$BENCH_DIR/$f" "$SNAP/$f" || { say "cannot copy $BENCH_DIR/$f"; exit 1; }
        done
        if [ $HAVE_HAKMEM = 1 ]; then
            cp -p "$HAKMEM_LIB" "$SNAP/libhakmem.so" || { say "cannot copy $HAKMEM_LIB"; exit 1; }
            LIB[hakmem]="$SNAP/libhakmem.so"
        fi
        if [ "$HAKMEM_LIB" = "$REPO/libhakmem.so" ] && command -v make >/dev/null 2>&1; then
            # build/bench only matters to the rows of our own programs
            targets=(lib)
            for i in "${!X_ID[@]}"; do [ "${X_KIND[$i]}" = own ] && { targets+=(benches); break; }; done
            make -C "$REPO" -q "${targets[@]}" >/dev/null 2>&1
            [ $? = 1 ] && note "the build is older than the sources (run 'make ${targets[*]}'): these results are for the binaries as built"
        fi
        if awk -v l="${LOAD%% *}" -v n="$NCPU" 'BEGIN { exit !(n+0 > 0 && l+0 > n * 0.5) }'; then
            note "load average is $LOAD on $NCPU CPUs: other work may disturb the numbers"
        fi
        if [ -n "$THREADS" ]; then
            for t in $THREADS; do
                [ "$t" -gt "$P" ] && { note "$t threads on $P CPUs: the threads share CPUs (oversubscribed)"; }
            done
        fi
    fi

    XRAW="$WORK/xruns.tsv"   # id group threads alloc run status value metric rss_kb seconds minflt load1
    : > "$XRAW"
    declare -A GAVEUP=()
    # the command line of row I under allocator A, for messages and the report
    xcmd() {
        local i=$1 a=$2 c
        if [ "${X_KIND[$i]}" = suite ]; then c="./${X_BIN[$i]}"; else c="build/bench/${X_BIN[$i]}_system"; fi
        [ -n "${X_ARGS[$i]}" ] && c+=" ${X_ARGS[$i]}"
        [ -n "${X_IN[$i]}" ] && c+=" < ${X_IN[$i]}"
        [ -n "$a" ] && [ -n "${SHOWLIB[$a]}" ] && c="LD_PRELOAD=${SHOWLIB[$a]} $c"
        echo "$c"
    }
    run_x() {   # run_x IDX ALLOC RUN
        local i=$1 a=$2 r=$3 log tf rc val secs rss minf load1 why t1 t2 prog cwd in
        log="$WORK/x.$i.$a.$r.log"; tf="$WORK/x.$i.$a.$r.time"
        local envp=(env); [ -n "${LIB[$a]}" ] && envp=(env "LD_PRELOAD=${LIB[$a]}")
        local timep=(); [ -n "$TIME_BIN" ] && timep=("$TIME_BIN" -f '%e %M %R' -o "$tf")
        if [ "${X_KIND[$i]}" = suite ]; then cwd=$SUITE_BIN; prog="./${X_BIN[$i]}"; else cwd=$WORK; prog="$SNAP/${X_BIN[$i]}_system"; fi
        in=${X_IN[$i]:-/dev/null}
        load1=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null)
        t1=$(date +%s.%N)
        # shellcheck disable=SC2086
        ( cd "$cwd" && "${timep[@]}" timeout -k 5 "$TIMEOUT" "${envp[@]}" "$prog" ${X_ARGS[$i]} >"$log" 2>&1 <"$in" )
        rc=$?
        t2=$(date +%s.%N)
        secs=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.3f", b - a }')
        case "${X_METRIC[$i]}" in
            time)    val=$secs ;;
            tput)    val=$(awk '/Throughput = / { for (f = 1; f < NF; f++) if ($f == "=" && $(f-1) == "Throughput") v = $(f+1) } END { if (v != "") print v }' "$log") ;;
            xmalloc) val=$(awk '{ for (f = 1; f < NF; f++) if ($f == "free/sec:") { v = $(f+1); u = $(f+2) } }
                         END { if (v != "") { m = (u == "M") ? 1e6 : (u == "K" || u == "k") ? 1e3 : (u == "G") ? 1e9 : 1; printf "%.0f", v * m } }' "$log") ;;
            iter)    val=$(awk '$2 == "iterations" && $1 ~ /^[0-9]+$/ { v = $1 } END { if (v != "") print v }' "$log") ;;
        esac
        [[ "$val" =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || val=""
        rss=""; minf=""
        if [ -s "$tf" ]; then
            read -r _ rss minf < <(tail -n1 "$tf")
            [[ "$rss" =~ ^[0-9]+$ ]] || rss=""
            [[ "$minf" =~ ^[0-9]+$ ]] || minf=""
        fi
        why=$(run_failure "$rc" "$secs")
        if [ -z "$why" ] && [ -z "$val" ]; then
            case "${X_METRIC[$i]}" in
                tput) why="printed no 'Throughput = N' line" ;;
                xmalloc) why="printed no 'free/sec: N M' line" ;;
                iter) why="printed no 'N iterations' line" ;;
            esac
        fi
        if [ -n "$why" ]; then
            printf '%s\t%s\t%s\t%s\t%s\tfail\t\t%s\t%s\t%s\t\t%s\n' "${X_ID[$i]}" "${X_GROUP[$i]}" "${X_T[$i]}" "$a" "$r" "${X_METRIC[$i]}" "$rss" "$secs" "$load1" >> "$XRAW"
            echo "FAILED" >&2
            local last; last=$(tail -n3 "$log" | tr '\n' ' ' | cut -c1-300)
            fail "${X_LABEL[$i]} under $a (run $r): $why${last:+; last output: $last}; remaining runs of this pair skipped"
            echo "    command: $(xcmd "$i" "$a")" >&2
            GAVEUP["${X_ID[$i]}|$a"]=1
            return 1
        fi
        printf '%s\t%s\t%s\t%s\t%s\tok\t%s\t%s\t%s\t%s\t%s\t%s\n' "${X_ID[$i]}" "${X_GROUP[$i]}" "${X_T[$i]}" "$a" "$r" "$val" "${X_METRIC[$i]}" "$rss" "$secs" "$minf" "$load1" >> "$XRAW"
        awk -v v="$val" -v m="${X_METRIC[$i]}" -v k="$rss" -v f="$minf" -v s="$secs" 'BEGIN {
            if (m == "time") printf "%10.3f s      ", v
            else if (m == "iter") printf "%10.3f M it   ", v / 1e6
            else if (v >= 1e5) printf "%10.3f M/s    ", v / 1e6
            else printf "%10.3f K/s    ", v / 1e3
            if (k != "") printf "   RSS %7.1f MiB", k / 1024
            if (f != "") printf "   %8d minflt", f
            printf "   %6.2f s\n", s }' >&2
    }

    if [ ${#REPLAY_TSV[@]} -gt 0 ]; then
        # the recorded runs as they are; their time in all from their reports
        cat "${REPLAY_TSV[@]}" > "$XRAW"
        RUNS=$(awk -F'\t' '$5 + 0 > m { m = $5 + 0 } END { print m + 0 }' "$XRAW")
        ELAPSED=0
        for f in "${REPLAY_TSV[@]}"; do
            t=$(grep -o 'Total time [0-9]*:[0-9]*' "${f%.tsv}.md" | head -n1 | awk '{ split($3, m, ":"); print m[1] * 60 + m[2] }')
            ELAPSED=$(( ELAPSED + ${t:-0} ))
        done
        say "${#X_ID[@]} rows x ${#ALLOCS[@]} allocators (${ALLOCS[*]}) x $RUNS runs, replayed from ${#REPLAY_TSV[@]} file(s)"
    else
        total=$(( ${#X_ID[@]} * ${#ALLOCS[@]} * RUNS )); k=0; T0=$(date +%s)
        say "${#X_ID[@]} rows x ${#ALLOCS[@]} allocators (${ALLOCS[*]}) x $RUNS runs, interleaved; timeout ${TIMEOUT}s per run"
        interleave X_ID X_LABEL run_x
        ELAPSED=$(( $(date +%s) - T0 ))
    fi
    LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
    LOAD_RUNS=$(load_runs "$XRAW" 12)

    # XSUM, one line per row and allocator: id alloc status nok median min max
    # rss_max_kb minflt_median speed_ratio(REF/this) metric
    # XBEST, one line per row: id best_other its_median ref/best paired (wins/rounds)
    # (speed ratios: for timed rows this/REF seconds, for rates REF/this:
    # above 1, REF is faster either way)
    XSUM="$WORK/xsum.tsv"; XBEST="$WORK/xbest.tsv"
    awk -F'\t' -v order="${ALLOCS[*]}" -v ids="${X_ID[*]}" -v metrics="${X_METRIC[*]}" -v ref="$REF" -v xsum="$XSUM" -v xbest="$XBEST" '
        function sort(a, m,    i, j, x) { for (i = 2; i <= m; i++) { x = a[i] + 0; j = i - 1; while (j >= 1 && a[j] + 0 > x) { a[j+1] = a[j]; j-- } a[j+1] = x } }
        function median(s,    a, m) {
            m = split(s, a, " "); if (m == 0) return ""
            sort(a, m); lo = a[1]; hi = a[m]
            return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
        }
        # speed of x against y: above 1 when x is better
        function speed(x, y, low) { if (x + 0 <= 0 || y + 0 <= 0) return ""; return low ? y / x : x / y }
        {
            key = $1 SUBSEP $4
            if ($6 == "ok") { vals[key] = vals[key] " " $7; nok[key]++; val[key SUBSEP $5] = $7; if ($4 == ref) runs[$1] = runs[$1] " " $5 }
            else nfail[key]++
            if ($6 == "ok" && $9 != "" && $9 + 0 > rss[key] + 0) rss[key] = $9
            if ($6 == "ok" && $11 != "") flt[key] = flt[key] " " $11
        }
        END {
            na = split(order, al, " "); nb = split(ids, bi, " "); split(metrics, me, " ")
            for (b = 1; b <= nb; b++) {
                id = bi[b]; low = (me[b] == "time"); best = ""; bn = ""
                for (j = 1; j <= na; j++) {
                    key = id SUBSEP al[j]
                    med[key] = ""; mn = ""; mx = ""
                    if (vals[key] != "") { med[key] = median(vals[key]); mn = lo; mx = hi }
                    fm = (flt[key] != "") ? median(flt[key]) : ""
                    if (al[j] != ref && al[j] != "hakmem" && med[key] != "" && (best == "" || (low ? med[key] + 0 < best + 0 : med[key] + 0 > best + 0))) { best = med[key]; bn = al[j] }
                    line[j] = id "\t" al[j] "\t" ((nfail[key] > 0) ? "fail" : "ok") "\t" (nok[key] + 0) "\t" med[key] "\t" mn "\t" mx "\t" rss[key] "\t" fm
                }
                rm = med[id SUBSEP ref]
                for (j = 1; j <= na; j++) print line[j] "\t" ((rm != "") ? speed(rm, med[id SUBSEP al[j]], low) : "") "\t" me[b] > xsum
                if (bn == "") continue
                # per round: REF against the best, the two runs of one round close in time
                n = split(runs[id], rr, " "); m = 0; w = 0
                for (i = 1; i <= n; i++) {
                    x = val[id SUBSEP ref SUBSEP rr[i]]; y = val[id SUBSEP bn SUBSEP rr[i]]
                    if (x == "" || y == "") continue
                    s = speed(x, y, low); if (s == "") continue
                    v[++m] = s; if (s > 1) w++
                }
                pr = ""
                if (m > 0) { sort(v, m); pr = sprintf("%.2f (%d/%d)", (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2, w, m) }
                print id "\t" bn "\t" best "\t" ((rm != "") ? speed(rm, best, low) : "") "\t" pr > xbest
            }
        }' "$XRAW"
    touch "$XBEST"

    # value formatting shared by the tables
    FMT_AWK='
        function fv(x, m) {
            if (x == "") return ""
            if (m == "time") return sprintf("%.3f s", x)
            if (x >= 1e9) return sprintf("%.2f G", x / 1e9)
            if (x >= 1e6) return sprintf("%.2f M", x / 1e6)
            if (x >= 1e3) return sprintf("%.1f K", x / 1e3)
            return sprintf("%.0f", x)
        }
        function unit(m) { return (m == "time") ? "seconds (lower is better)" : (m == "iter") ? "iterations in 2 s (higher is better)" : "ops/s (higher is better)" }'
    LABELS=$(printf '%s|' "${X_LABEL[@]}")
    machine_line="$CPU, $NCPU CPUs, $MEM; $KERNEL; $GLIBC; load average at start $LOAD, at the end $LOAD_END${LOAD_RUNS:+; 1-minute load before each run: median $LOAD_RUNS}"
    [ -n "$REPLAY_MACHINE" ] && machine_line="$REPLAY_MACHINE${LOAD_RUNS:+; 1-minute load before each run: median $LOAD_RUNS}"
    METHOD="$RUNS runs per row and allocator, interleaved across allocators (each round starting one allocator further on); the allocator is put under each program with LD_PRELOAD (system: none); suite programs run from inside the suite's bin/; median and min–max over the runs. Each row is either timed (wall seconds of the whole process, lower is better) or read from the program's own output (larson: \`Throughput = N operations per second\`, xmalloc-test: \`free/sec: N M\`, glibc-thread: \`N iterations\` in its fixed 2 s; higher is better). Every ratio is a speed ratio, so above 1 means $REF is faster whatever the row's unit: for a rate $REF / other, for a time other's seconds / $REF's seconds. Peak RSS = largest max-RSS of the runs, minor faults = median of the whole process's minor page faults ($( [ -n "$TIME_BIN" ] && echo "/usr/bin/time %M and %R" || echo "/usr/bin/time missing: not measured")). Total time $(fmt_dur $ELAPSED)."
    ARGTABLE=$( echo "| row | command | metric |"; echo "|---|---|---|"
        for i in "${!X_ID[@]}"; do
            case "${X_METRIC[$i]}" in time) mt="wall seconds" ;; tput) mt="Throughput line" ;; xmalloc) mt="free/sec" ;; iter) mt="iterations" ;; esac
            echo "| ${X_LABEL[$i]} | \`$(xcmd "$i" "")\` | $mt |"
        done )
    report_tail() {
        if [ ${#PROBLEMS[@]} -gt 0 ]; then echo; echo "## Problems"; echo; for p in "${PROBLEMS[@]}"; do echo "- $p"; done; fi
        if [ ${#NOTES[@]} -gt 0 ]; then echo; echo "## Notes"; echo; for p in "${NOTES[@]}"; do echo "- $p"; done; fi
        echo
        echo "Raw runs: $NAME.tsv (row, group, threads, allocator, run, status, value, metric, max RSS KiB, seconds, minor faults, 1-minute load average before the run)."
    }
    PNG_OK=0
    if [ -n "$SUITE" ]; then
        # ------------------------------------------------ suite report
        TABLE=$(awk -F'\t' -v ids="${X_ID[*]}" -v labels="$LABELS" -v ref="$REF" "$FMT_AWK"'
            BEGIN { nb = split(ids, bi, " "); split(labels, lb, "|"); for (b = 1; b <= nb; b++) label[bi[b]] = lb[b]
                    print "| benchmark | allocator | median | min–max | " ref "/this (speed) | minor faults | peak RSS MiB |"
                    print "|---|---|---:|---:|---:|---:|---:|" }
            {
                med = fv($5, $11); rng = ($6 != "") ? fv($6, $11) " – " fv($7, $11) : ""
                if ($3 == "fail" && $4 == 0) { med = "FAILED"; rng = "" } else if ($3 == "fail") med = med " (" $4 " ok)"
                printf "| %s | %s | %s | %s | %s | %s | %s |\n", label[$1], $2, med, rng, ($10 != "" ? sprintf("%.2f", $10) : ""),
                       ($9 != "" ? sprintf("%.0f", $9) : ""), ($8 != "" ? sprintf("%.1f", $8 / 1024) : "")
            }' "$XSUM")
        BESTTABLE=""
        if [ ${#ALLOCS[@]} -gt 1 ]; then
            BESTTABLE=$(awk -F'\t' -v ids="${X_ID[*]}" -v labels="$LABELS" -v ref="$REF" -v xbest="$XBEST" "$FMT_AWK"'
                FILENAME == xbest { bn[$1] = $2; bm[$1] = $3; br[$1] = $4; bp[$1] = $5; next }
                { key = $1 SUBSEP $2; med[key] = $5; rss[key] = $8; flt[key] = $9; me[$1] = $11 }
                END {
                    nb = split(ids, bi, " "); split(labels, lb, "|")
                    print "| benchmark | unit | " ref " | best other | its median | " ref "/best (speed) | paired (wins) | " ref " peak RSS MiB | best'"'"'s peak RSS MiB | " ref " minor faults | best'"'"'s minor faults |"
                    print "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
                    for (b = 1; b <= nb; b++) {
                        id = bi[b]; rk = id SUBSEP ref; bk = id SUBSEP bn[id]
                        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lb[b], (me[id] == "time" ? "s, lower better" : me[id] == "iter" ? "iterations in 2 s, higher better" : "per s, higher better"),
                            fv(med[rk], me[id]), bn[id], fv(bm[id], me[id]), (br[id] != "" ? sprintf("%.2f", br[id]) : ""), bp[id],
                            (rss[rk] != "" ? sprintf("%.1f", rss[rk] / 1024) : ""), (bn[id] != "" && rss[bk] != "" ? sprintf("%.1f", rss[bk] / 1024) : ""),
                            (flt[rk] != "" ? sprintf("%.0f", flt[rk]) : ""), (bn[id] != "" && flt[bk] != "" ? sprintf("%.0f", flt[bk]) : "")
                    }
                }' "$XBEST" "$XSUM")
        fi
        cp "$XRAW" "$OUT/$NAME.tsv"
        {
            echo "# hakmem on the mimalloc-bench suite"
            echo
            echo "- date: $DATE"
            echo "- commit: $COMMIT"
            echo "- command: \`$ORIG_CMD\`"
            echo "- machine: $machine_line"
            [ $HAVE_HAKMEM = 1 ] && echo "- hakmem: ${HAKMEM_LIB#"$REPO"/}"
            [ -n "$PEERS_V" ] && echo "- peers: $PEERS_V"
            echo "- suite: $SUITE_DIR ($(head -n 8 "$SUITE_DIR/README.md" 2>/dev/null | grep -o 'commit [0-9a-f]*' | head -n1 || true)), P = $P (nproc)"
            echo "- method: $METHOD"
            echo
            echo "$ARGTABLE"
            echo
            echo "$TABLE"
            if [ -n "$BESTTABLE" ]; then
                echo
                echo "## $REF against the best of the others"
                echo
                echo "Per row: the other allocator with the best median (the lowest time or the highest rate); $REF/best is a speed ratio (above 1: $REF is faster; for timed rows best's seconds / $REF's seconds); paired: the median of the per-round speed ratios $REF/best (the runs of one round follow each other, so the machine's drift cancels) and in how many rounds $REF was faster."
                echo
                echo "$BESTTABLE"
            fi
            report_tail
        } > "$OUT/$NAME.md"
        echo
        echo "$TABLE"
        if [ -n "$BESTTABLE" ]; then echo; echo "$REF against the best of the others (speed ratios, above 1: $REF faster):"; echo; echo "$BESTTABLE"; fi
        echo
        echo "commit $COMMIT, $RUNS run$( [ "$RUNS" = 1 ] || echo s) each, interleaved, $(fmt_dur $ELAPSED) in all"
        echo "written: $OUT/$NAME.md and $OUT/$NAME.tsv"
    else
        # ------------------------------------------------ scaling report
        GROUPS_ORDER=()
        declare -A GSEEN=()
        for i in "${!X_ID[@]}"; do
            g=${X_GROUP[$i]}; [ -n "${GSEEN[$g]:-}" ] && continue
            GSEEN[$g]=1; GROUPS_ORDER+=("$g")
        done
        GCMD=$(for i in "${!X_ID[@]}"; do printf '%s\t%s\t%s\t%s\n' "${X_GROUP[$i]}" "${X_T[$i]}" "$(xcmd "$i" "")" "${X_METRIC[$i]}"; done)
        SCTABLES=$(printf '%s\n' "$GCMD" | awk -F'\t' -v groups="${GROUPS_ORDER[*]}" -v order="${ALLOCS[*]}" -v ref="$REF" -v xbest="$XBEST" -v xsum="$XSUM" "$FMT_AWK"'
            FILENAME == xbest { bn[$1] = $2; bm[$1] = $3; br[$1] = $4; bp[$1] = $5; next }
            FILENAME == xsum { med[$1 SUBSEP $2] = $5; st[$1 SUBSEP $2] = $3; nk[$1 SUBSEP $2] = $4; next }
            { g = $1; nt[g]++; tt[g, nt[g]] = $2; cm[g, nt[g]] = $3; me[g] = $4 }
            END {
                ng = split(groups, gr, " "); na = split(order, al, " ")
                for (q = 1; q <= ng; q++) {
                    g = gr[q]
                    printf "### %s\n\n", g
                    for (t = 1; t <= nt[g]; t++) printf "%s`%s`", (t == 1 ? "" : ", "), cm[g, t]
                    printf "; %s\n\n", unit(me[g])
                    printf "| threads |"; for (j = 1; j <= na; j++) printf " %s |", al[j]; print " best other | " ref "/best (speed) | paired (wins) |"
                    printf "|---:|"; for (j = 1; j <= na; j++) printf "---:|"; print "---|---:|---:|"
                    for (t = 1; t <= nt[g]; t++) {
                        id = g "@" tt[g, t]
                        printf "| %s |", tt[g, t]
                        for (j = 1; j <= na; j++) {
                            k = id SUBSEP al[j]; v = fv(med[k], me[g])
                            if (st[k] == "fail") v = (nk[k] + 0 == 0) ? "FAILED" : v " (" nk[k] " ok)"
                            printf " %s |", v
                        }
                        printf " %s | %s | %s |\n", bn[id], (br[id] != "" ? sprintf("%.2f", br[id]) : ""), bp[id]
                    }
                    print ""
                }
            }' "$XBEST" "$XSUM" -)
        # the chart: REF/best (speed) against the thread count, one line per row
        PNG_NOTE=""
        if [ $CHART = 1 ]; then
            if ! command -v gnuplot >/dev/null 2>&1 && [ $INSTALL = 1 ]; then apt_install gnuplot-nox || true; fi
            if ! command -v gnuplot >/dev/null 2>&1; then
                PNG_NOTE="gnuplot is not installed (package gnuplot-nox): no chart"
            elif [ ${#ALLOCS[@]} -lt 2 ] || [ ! -s "$XBEST" ]; then
                PNG_NOTE="nothing to draw (no peer to compare with)"
            else
                dat="$WORK/scaling.dat"
                awk -F'\t' -v groups="${GROUPS_ORDER[*]}" -v threads="$THREADS" '
                    { br[$1] = $4 }
                    END {
                        ng = split(groups, gr, " "); nt = split(threads, th, " ")
                        printf "threads"; for (q = 1; q <= ng; q++) printf "\t\"%s\"", gr[q]; printf "\n"
                        for (t = 1; t <= nt; t++) {
                            printf "%s", th[t]
                            for (q = 1; q <= ng; q++) { v = br[gr[q] "@" th[t]]; printf "\t%s", (v != "" ? v : "-") }
                            printf "\n"
                        }
                    }' "$XBEST" > "$dat"
                ng=${#GROUPS_ORDER[@]}
                plot="plot '$dat' using 1:(lg(\$2)) with linespoints lw 2 title columnheader(2)"
                for ((c = 3; c <= ng + 1; c++)); do plot+=", '' using 1:(lg(\$$c)) with linespoints lw 2 title columnheader($c)"; done
                {
                    chart_head 1000 560
                    echo "set title \"$REF speed / best other allocator's, by thread count (above 1 = $REF faster)\\ncommit $COMMIT, $DATE, $NCPU CPUs, median of $RUNS interleaved run$( [ "$RUNS" = 1 ] || echo s)\""
                    echo "set xlabel \"threads\""
                    echo "set ylabel \"speed ratio (log scale)\""
                    echo "lg(x) = log(x) / log(2)"
                    echo "set logscale x 2"
                    echo "set xtics ($(echo "$THREADS" | tr ' ' ','))"
                    echo "set xrange [$(echo "$THREADS" | tr ' ' '\n' | sort -n | head -n1) / 1.3 : $(echo "$THREADS" | tr ' ' '\n' | sort -n | tail -n1) * 1.3]"
                    echo "set ytics (\"1/8\" -3, \"1/4\" -2, \"1/2\" -1, \"0.75\" lg(0.75), \"1\" 0, \"1.25\" lg(1.25), \"1.5\" lg(1.5), \"2\" 1, \"4\" 2, \"8\" 3)"
                    echo "set offsets 0, 0, 0.3, 0.3"
                    echo "set grid ytics"
                    echo "set key outside right"
                    echo "set arrow 1 from graph 0, first 0 to graph 1, first 0 nohead lw 2 dt 2 lc rgb 'black' back"
                    echo "$plot"
                } > "$WORK/scaling.gp"
                if gnuplot "$WORK/scaling.gp" > "$WORK/gnuplot.log" 2>&1 </dev/null; then PNG_OK=1
                else PNG_NOTE="gnuplot failed: $(tail -n2 "$WORK/gnuplot.log" | tr '\n' ' ')"; fi
            fi
            [ -n "$PNG_NOTE" ] && note "$PNG_NOTE"
        fi
        maxt=$(echo "$THREADS" | tr ' ' '\n' | sort -n | tail -n1)
        cp "$XRAW" "$OUT/$NAME.tsv"
        {
            echo "# hakmem thread scaling"
            echo
            echo "- date: $DATE"
            echo "- commit: $COMMIT"
            echo "- command: \`$ORIG_CMD\`"
            [ -n "$RECORDED" ] && echo "- recorded by: $RECORDED"
            echo "- machine: $machine_line"
            if [ "$NCPU" -lt 16 ] 2>/dev/null || [ "$maxt" -lt 16 ]; then
                echo "- scope: measured on $NCPU CPUs at ${THREADS// /, } thread$( [ "$THREADS" = 1 ] || echo s) only; the 16-CPU figures (\`--threads 1,4,8,16\` on a 16-CPU machine) are still to be measured"
            fi
            [ $HAVE_HAKMEM = 1 ] && echo "- hakmem: ${HAKMEM_LIB#"$REPO"/}"
            [ -n "$PEERS_V" ] && echo "- peers: $PEERS_V"
            if [ -n "$RECORDED" ]; then
                r=$(md_field "${REPLAY_TSV[0]%.tsv}.md" suite); [ -n "$r" ] && echo "- suite: $r"
            elif [ $HAVE_SUITE = 1 ]; then
                echo "- suite: $SUITE_DIR"
            fi
            echo "- method: $METHOD Per row and thread count: the other allocator with the best median, $REF/best (speed), and paired: the median of the per-round speed ratios $REF/best and in how many rounds $REF was faster."
            echo
            echo "$SCTABLES"
            if [ $PNG_OK = 1 ]; then echo; echo "![scaling]($NAME.png)"; fi
            report_tail
        } > "$OUT/$NAME.md"
        echo
        echo "$SCTABLES"
        echo "commit $COMMIT, $RUNS run$( [ "$RUNS" = 1 ] || echo s) each, interleaved, $(fmt_dur $ELAPSED) in all"
        echo "written: $OUT/$NAME.md$( [ $PNG_OK = 1 ] && echo " and $OUT/$NAME.png") and $OUT/$NAME.tsv"
    fi
    finish
fi

# ---------------------------------------------------------------- benchmarks
if [ $QUICK = 1 ]; then
    RM_CYC=${BENCH_RM_CYCLES:-2000000};  MID_CYC=${BENCH_MID_CYCLES:-1000000}
    LARSON_S=${BENCH_LARSON_SECONDS:-1}; LARSON_MB_S=${BENCH_LARSON_SECONDS:-1}
    XT_S=${BENCH_XTHREAD_SECONDS:-1};    TR_ROUNDS=${BENCH_TRANSFER_ROUNDS:-10}
    MT_WAVES=${BENCH_THREADS_WAVES:-3};  LR_REPS=${BENCH_LARGE_REPS:-20}
    PY_ROUNDS=${BENCH_PY_ROUNDS:-10};    RSS_ARGS=${BENCH_RSS_ARGS-256}
    BULK_ROUNDS=${BENCH_BULK_ROUNDS:-3}; CHURN_CYC=${BENCH_CHURN_CYCLES:-250000}
    APPEND_ROUNDS=${BENCH_APPEND_ROUNDS:-3}; EVICT_OPS=${BENCH_EVICT_OPS:-5000000}
else
    RM_CYC=${BENCH_RM_CYCLES:-10000000}; MID_CYC=${BENCH_MID_CYCLES:-8000000}
    LARSON_S=${BENCH_LARSON_SECONDS:-2}; LARSON_MB_S=${BENCH_LARSON_SECONDS:-5}
    XT_S=${BENCH_XTHREAD_SECONDS:-2};    TR_ROUNDS=${BENCH_TRANSFER_ROUNDS:-25}
    MT_WAVES=${BENCH_THREADS_WAVES:-10}; LR_REPS=${BENCH_LARGE_REPS:-100}
    PY_ROUNDS=${BENCH_PY_ROUNDS:-30};    RSS_ARGS=${BENCH_RSS_ARGS-}
    BULK_ROUNDS=${BENCH_BULK_ROUNDS:-10}; CHURN_CYC=${BENCH_CHURN_CYCLES:-1000000}
    APPEND_ROUNDS=${BENCH_APPEND_ROUNDS:-10}; EVICT_OPS=${BENCH_EVICT_OPS:-20000000}
fi
# id | binary | arguments | label
BENCH_TABLE="random_mixed_ws400|bench_random_mixed|$RM_CYC 400|bench_random_mixed ws=400
random_mixed_ws8192|bench_random_mixed|$RM_CYC 8192|bench_random_mixed ws=8192
random_mixed_ws65536|bench_random_mixed|$RM_CYC 65536|bench_random_mixed ws=65536
random_mixed_ws262144|bench_random_mixed|$RM_CYC 262144|bench_random_mixed ws=262144
mid_large_mt_t1|bench_mid_large_mt|1 $MID_CYC 128|bench_mid_large_mt 1 thread
mid_large_mt_t2|bench_mid_large_mt|2 $MID_CYC 128|bench_mid_large_mt 2 threads
churn_t2|bench_churn|2 $CHURN_CYC 64 65536 262144|churn 64-256 KiB 2 threads
larson_t1|larson|$LARSON_S 8 1000 1000 10 42 1|larson 1 chain
larson_t2|larson|$LARSON_S 8 1000 1000 10 42 2|larson 2 chains
larson_mb_t2|larson|$LARSON_MB_S 8 1000 5000 100 4141 2|larson mimalloc-bench 2 chains
larson_short_t1|larson|$LARSON_S 8 1000 100 1 42 1|larson short threads 1 chain
larson_short_t2|larson|$LARSON_S 8 1000 100 1 42 2|larson short threads 2 chains
xthread|bench_xthread|$XT_S 16 2048 256 42|xthread 16-2048 B
xthread_large|bench_xthread|$XT_S 16 262144 8 42|xthread 16 B-256 KiB
transfer_t2|bench_transfer|2 50 $TR_ROUNDS|transfer (mstress) 2 threads
many_threads|bench_many_threads|600 $MT_WAVES|600 threads one block each
large_reuse|bench_large_reuse|$LR_REPS 20 5 25 memset|large reuse 5-25 MiB memset
large_reuse_calloc|bench_large_reuse|$LR_REPS 20 5 25 calloc|large reuse 5-25 MiB calloc
large_reuse_long|bench_large_reuse|$((LR_REPS * 10)) 20 5 25 memset|large reuse 5-25 MiB memset, long
bulk_forward|bench_bulk|$BULK_ROUNDS 1000000 16 256 forward|1M blocks built, freed in order
bulk_random|bench_bulk|$BULK_ROUNDS 1000000 16 256 random|1M blocks built, freed at random
evict|bench_evict|$EVICT_OPS 262144 8 71|short strings replaced unread, 262144 slots
append|bench_append|$APPEND_ROUNDS 100 65536 1048576 1024|100 buffers grown to 64 KiB-1 MiB by 1 KiB
python_threads|bench_py_threads|8 $PY_ROUNDS 42|python3 8 threads, strings and bytearrays
rss|bench_rss|$RSS_ARGS|bench_rss (memory)"
if [ $CALLGRIND = 1 ]; then
    BENCH_TABLE="random_mixed_ws400|bench_random_mixed|$CG_CYCLES 400|bench_random_mixed ws=400
random_mixed_ws8192|bench_random_mixed|$CG_CYCLES 8192|bench_random_mixed ws=8192"
fi

B_ID=(); B_BIN=(); B_ARGS=(); B_LABEL=()
declare -A KNOWN_ID=()
while IFS='|' read -r id bin args label; do
    KNOWN_ID[$id]=1
    if [ -n "$ONLY" ] && ! [[ " $(echo "$ONLY" | tr ',' ' ') " == *" $id "* ]]; then continue; fi
    if [ "$id" = python_threads ] && ! command -v python3 >/dev/null 2>&1; then
        [ $INSTALL = 1 ] && apt_install python3
        if ! command -v python3 >/dev/null 2>&1; then
            note "python_threads skipped: python3 is not installed"
            continue
        fi
    fi
    if [ "$id" = rss ] && [ ! -e "$BENCH_DIR/bench_rss_system" ]; then
        [ -n "$ONLY" ] && fail "rss: $BENCH_DIR/bench_rss_system does not exist"
        continue
    fi
    # every allocator needs its binary; a missing one is a failure for that benchmark
    missing_bin=""
    for a in "${ALLOCS[@]}"; do
        f="$BENCH_DIR/${bin}${BINSUFFIX[$a]}"
        [ -x "$f" ] || missing_bin+=" $f"
    done
    if [ -n "$missing_bin" ]; then
        fail "$id: missing binary:$missing_bin (run 'make benches'); benchmark skipped"
        continue
    fi
    B_ID+=("$id"); B_BIN+=("$bin"); B_ARGS+=("$args"); B_LABEL+=("$label")
done <<< "$BENCH_TABLE"
if [ -n "$ONLY" ]; then
    for id in $(echo "$ONLY" | tr ',' ' '); do
        [ -n "${KNOWN_ID[$id]:-}" ] || fail "unknown benchmark id '$id' in --only; ignored"
    done
fi
if [ ${#B_ID[@]} -eq 0 ]; then
    say "no benchmark to run"
    exit 1
fi

# ---------------------------------------------------------------- snapshot
# Run copies of the binaries and of libhakmem.so, taken now: a rebuild of the
# tree while this runs (make in another shell) must not mix two versions in
# one table.  Messages still name the original paths.
declare -A SHOWLIB=()
for a in "${ALLOCS[@]}"; do SHOWLIB[$a]=${LIB[$a]}; done
SNAP="$WORK/snap"; mkdir -p "$SNAP"
for i in "${!B_ID[@]}"; do
    for a in "${ALLOCS[@]}"; do
        f="${B_BIN[$i]}${BINSUFFIX[$a]}"
        [ -e "$SNAP/$f" ] || cp -p "$BENCH_DIR/$f" "$SNAP/$f" || { say "cannot copy $BENCH_DIR/$f"; exit 1; }
    done
done
if [ $HAVE_HAKMEM = 1 ]; then
    cp -p "$HAKMEM_LIB" "$SNAP/libhakmem.so" || { say "cannot copy $HAKMEM_LIB"; exit 1; }
    LIB[hakmem]="$SNAP/libhakmem.so"
fi
if [ "$HAKMEM_LIB" = "$REPO/libhakmem.so" ] && [ "$BENCH_DIR" = "$REPO/build/bench" ] && command -v make >/dev/null 2>&1; then
    make -C "$REPO" -q lib benches >/dev/null 2>&1
    [ $? = 1 ] && note "the build is older than the sources (run 'make lib benches'): these results are for the binaries as built"
fi

# ---------------------------------------------------------------- machine
if [ $CALLGRIND = 0 ] && awk -v l="${LOAD%% *}" -v n="$NCPU" 'BEGIN { exit !(n+0 > 0 && l+0 > n * 0.5) }'; then
    note "load average is $LOAD on $NCPU CPUs: other work may disturb the numbers"
fi


# ================================================================ callgrind mode
if [ $CALLGRIND = 1 ]; then
    if ! command -v valgrind >/dev/null 2>&1; then
        [ $INSTALL = 1 ] && apt_install valgrind
        command -v valgrind >/dev/null 2>&1 || { say "valgrind is not installed (apt-get install valgrind)"; exit 1; }
    fi
    CG_TSV="$WORK/callgrind.tsv"; : > "$CG_TSV"
    total=$(( ${#B_ID[@]} * ${#ALLOCS[@]} )); k=0; T0=$(date +%s)
    for i in "${!B_ID[@]}"; do
        for a in "${ALLOCS[@]}"; do
            k=$((k + 1))
            bin="$SNAP/${B_BIN[$i]}${BINSUFFIX[$a]}"
            printf '[%d/%d] callgrind  %-28s %-14s ' "$k" "$total" "${B_LABEL[$i]}" "$a" >&2
            envp=(env); [ -n "${LIB[$a]}" ] && envp=(env "LD_PRELOAD=${LIB[$a]}")
            outp="$WORK/cg.${B_ID[$i]}.$a"
            # shellcheck disable=SC2086
            timeout -k 5 "$TIMEOUT" valgrind --tool=callgrind --trace-children=yes \
                --callgrind-out-file="$outp.%p" "${envp[@]}" "$bin" ${B_ARGS[$i]} \
                >"$outp.log" 2>&1 </dev/null
            rc=$?
            ir=$(cat "$outp".[0-9]* 2>/dev/null | awk '/^totals:/ { s += $2; n++ } END { if (n) printf "%.0f", s }')
            if [ $rc -ne 0 ] || [ -z "$ir" ]; then
                if [ $rc = 124 ] || [ $rc = 137 ]; then why="timed out after ${TIMEOUT}s"
                elif [ $rc -gt 128 ]; then why="crashed (signal $((rc - 128)))"
                elif [ $rc -ne 0 ]; then why="exited with status $rc"
                else why="no callgrind totals"; fi
                echo "FAILED" >&2
                fail "callgrind ${B_LABEL[$i]} under $a: $why; last output: $(grep -v '^==' "$outp.log" | tail -n2 | tr '\n' ' ')"
                printf '%s\t%s\tfail\t\n' "${B_ID[$i]}" "$a" >> "$CG_TSV"
            else
                printf '%s\t%s\tok\t%s\n' "${B_ID[$i]}" "$a" "$ir" >> "$CG_TSV"
                awk -v ir="$ir" -v c="$CG_CYCLES" 'BEGIN { printf "%.1f Ir/op\n", ir / c }' >&2
            fi
        done
    done
    TABLE=$(awk -F'\t' -v cyc="$CG_CYCLES" -v ref="$REF" -v order="${ALLOCS[*]}" -v ids="${B_ID[*]}" -v labels="$(printf '%s|' "${B_LABEL[@]}")" '
        { st[$1 SUBSEP $2] = $3; ir[$1 SUBSEP $2] = $4 }
        END {
            na = split(order, al, " "); nb = split(ids, bi, " "); split(labels, lb, "|")
            print "| benchmark | allocator | total Ir | Ir per op | ratio " ref "/this |"
            print "|---|---|---:|---:|---:|"
            for (b = 1; b <= nb; b++) for (j = 1; j <= na; j++) {
                key = bi[b] SUBSEP al[j]
                if (st[key] != "ok") { printf "| %s | %s | FAILED | | |\n", lb[b], al[j]; continue }
                r = ""; rk = bi[b] SUBSEP ref
                if (st[rk] == "ok" && ir[key] > 0) r = sprintf("%.2f", ir[rk] / ir[key])
                printf "| %s | %s | %.0f | %.1f | %s |\n", lb[b], al[j], ir[key], ir[key] / cyc, r
            }
        }' "$CG_TSV")
    {
        echo "# hakmem instruction counts (callgrind)"
        echo
        echo "- date: $DATE"
        echo "- commit: $COMMIT"
        echo "- command: \`$ORIG_CMD\`"
        echo "- machine: $CPU, $NCPU CPUs, $MEM; $KERNEL; $GLIBC"
        [ $HAVE_HAKMEM = 1 ] && echo "- hakmem: ${HAKMEM_LIB#"$REPO"/}"
        [ -n "$PEERS_V" ] && echo "- peers: $PEERS_V"
        echo "- method: \`valgrind --tool=callgrind\` on bench_random_mixed $CG_CYCLES WS; Ir per op = total Ir / $CG_CYCLES (start-up and exit included, so small counts are slightly inflated); ratio < 1: hakmem executes fewer instructions"
        echo
        echo "$TABLE"
        if [ ${#PROBLEMS[@]} -gt 0 ]; then echo; echo "## Problems"; echo; for p in "${PROBLEMS[@]}"; do echo "- $p"; done; fi
        if [ ${#NOTES[@]} -gt 0 ]; then echo; echo "## Notes"; echo; for p in "${NOTES[@]}"; do echo "- $p"; done; fi
    } > "$OUT/callgrind.md"
    echo
    echo "$TABLE"
    echo
    echo "written: $OUT/callgrind.md ($(fmt_dur $(( $(date +%s) - T0 ))))"
    [ $FAILED = 0 ] || say "some steps failed (see above)"
    exit $FAILED
fi

# ================================================================ timing mode
RAW="$WORK/runs.tsv"      # id alloc run status ops rss_kb seconds minflt majflt load1 [bench_rss: peak_mib rss90_mib ratio90 above_base_mib]
: > "$RAW"
declare -A GAVEUP=()      # id|alloc -> 1 after a failure: its remaining runs are skipped
total=$(( ${#B_ID[@]} * ${#ALLOCS[@]} * RUNS )); k=0; T0=$(date +%s)
say "${#B_ID[@]} benchmarks x ${#ALLOCS[@]} allocators (${ALLOCS[*]}) x $RUNS runs, interleaved; timeout ${TIMEOUT}s per run"

run_one() {   # run_one IDX ALLOC RUN
    local i=$1 a=$2 r=$3 bin log rssf rc ops rss why t1 t2 secs minf majf load1
    bin="$SNAP/${B_BIN[$i]}${BINSUFFIX[$a]}"
    log="$WORK/${B_ID[$i]}.$a.$r.log"; rssf="$WORK/${B_ID[$i]}.$a.$r.rss"
    local envp=(env)
    [ -n "${LIB[$a]}" ] && envp=(env "LD_PRELOAD=${LIB[$a]}")
    local timep=()
    [ -n "$TIME_BIN" ] && timep=("$TIME_BIN" -f %M -o "$rssf")
    load1=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null)
    t1=$(date +%s.%N)
    # shellcheck disable=SC2086
    "${timep[@]}" timeout -k 5 "$TIMEOUT" "${envp[@]}" "$bin" ${B_ARGS[$i]} >"$log" 2>&1 </dev/null
    rc=$?
    t2=$(date +%s.%N)
    secs=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", b - a }')
    ops=$(awk '/Throughput = / { for (f = 1; f < NF; f++) if ($f == "=" && $(f-1) == "Throughput") v = $(f+1) } END { if (v != "") print v }' "$log")
    [[ "$ops" =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || ops=""
    # page faults of the timed region, from the same line (minflt=A, majflt=B)
    read -r minf majf < <(awk '/Throughput = / {
            mi = ""; ma = ""
            for (f = 1; f <= NF; f++) {
                t = $f; gsub(/[,()]/, "", t)
                if (index(t, "minflt=") == 1) mi = substr(t, 8)
                if (index(t, "majflt=") == 1) ma = substr(t, 8)
            }
        } END { printf "%s %s\n", (mi == "" ? "-" : mi), (ma == "" ? "-" : ma) }' "$log")
    [[ "$minf" =~ ^[0-9]+$ ]] || minf=""
    [[ "$majf" =~ ^[0-9]+$ ]] || majf=""
    rss=""
    [ -s "$rssf" ] && rss=$(tail -n1 "$rssf" | awk '$1 ~ /^[0-9]+$/ { print $1 }')
    why=$(run_failure "$rc" "$secs")
    if [ -z "$why" ] && [ -z "$ops" ] && [ "${B_ID[$i]}" != rss ]; then
        why="printed no 'Throughput = N ops/s' line"
    fi
    if [ -n "$why" ]; then
        printf '%s\t%s\t%s\tfail\t\t%s\t%s\t\t\t%s\n' "${B_ID[$i]}" "$a" "$r" "$rss" "$secs" "$load1" >> "$RAW"
        echo "FAILED" >&2
        local last; last=$(grep -v '^Command ' "$log" | tail -n3 | tr '\n' ' ' | cut -c1-300)
        fail "${B_LABEL[$i]} under $a (run $r): $why${last:+; last output: $last}; remaining runs of this pair skipped"
        echo "    command: env ${SHOWLIB[$a]:+LD_PRELOAD=${SHOWLIB[$a]} }$BENCH_DIR/${B_BIN[$i]}${BINSUFFIX[$a]} ${B_ARGS[$i]}" >&2
        GAVEUP["${B_ID[$i]}|$a"]=1
        return 1
    fi
    # bench_rss also reports what the allocator gives back: keep those figures
    local mem=""
    [ "${B_ID[$i]}" = rss ] && mem=$(awk '
        function val(k,    f) { for (f = 1; f <= NF; f++) if (index($f, k "=") == 1) return substr($f, length(k) + 2); return "" }
        /^baseline_rss_mib=/ { pk = val("peak_rss_mib") }
        /^after_free90:/     { r90 = val("rss_mib"); q90 = val("ratio") }
        /^after_free_all:/   { ab = val("above_baseline_mib") }
        END { printf "\t%s\t%s\t%s\t%s", pk, r90, q90, ab }' "$log")
    printf '%s\t%s\t%s\tok\t%s\t%s\t%s\t%s\t%s\t%s%s\n' "${B_ID[$i]}" "$a" "$r" "$ops" "$rss" "$secs" "$minf" "$majf" "$load1" "$mem" >> "$RAW"
    awk -v o="$ops" -v m="$rss" -v s="$secs" -v f="$minf" 'BEGIN {
        if (o == "") printf "%17s", "-"
        else if (o >= 1e5) printf "%10.3f M ops/s", o / 1e6
        else printf "%10.3f K ops/s", o / 1e3
        if (m != "") printf "   RSS %7.1f MiB", m / 1024
        if (f != "") printf "   %8d faults", f
        printf "   %5.2f s\n", s }' >&2
}

interleave B_ID B_LABEL run_one
ELAPSED=$(( $(date +%s) - T0 ))
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
LOAD_RUNS=$(load_runs "$RAW" 10)

# ---------------------------------------------------------------- aggregate
# SUMMARY: id alloc status nok median min max rss_max_kb ratio minflt_median majflt_median
# (one line per pair, in order)
SUMMARY="$WORK/summary.tsv"
awk -F'\t' -v order="${ALLOCS[*]}" -v ids="${B_ID[*]}" -v ref="$REF" '
    function median(s,    a, m, i, j, v) {
        m = split(s, a, " "); if (m == 0) return ""
        # insertion sort, n is small
        for (i = 2; i <= m; i++) { v = a[i] + 0; j = i - 1; while (j >= 1 && a[j] + 0 > v) { a[j+1] = a[j]; j-- } a[j+1] = v }
        lo = a[1]; hi = a[m]
        if (m % 2) return a[(m + 1) / 2]
        return (a[m / 2] + a[m / 2 + 1]) / 2
    }
    {
        key = $1 SUBSEP $2
        if ($4 == "ok") { if ($5 != "") { vals[key] = vals[key] " " $5; nok[key]++ } else nrss[key]++ }
        else nfail[key]++
        if ($4 == "ok" && $6 != "" && $6 + 0 > rss[key] + 0) rss[key] = $6
        if ($4 == "ok" && $8 != "") fmin[key] = fmin[key] " " $8
        if ($4 == "ok" && $9 != "") fmaj[key] = fmaj[key] " " $9
    }
    END {
        na = split(order, al, " "); nb = split(ids, bi, " ")
        for (b = 1; b <= nb; b++) for (j = 1; j <= na; j++) {
            key = bi[b] SUBSEP al[j]
            if (vals[key] != "") { med[key] = median(vals[key]); mn[key] = lo; mx[key] = hi }
            if (fmin[key] != "") fmed[key] = median(fmin[key])
            if (fmaj[key] != "") jmed[key] = median(fmaj[key])
        }
        for (b = 1; b <= nb; b++) for (j = 1; j <= na; j++) {
            key = bi[b] SUBSEP al[j]; rk = bi[b] SUBSEP ref
            ratio = ""
            if (med[key] != "" && med[rk] != "" && med[key] > 0) ratio = med[rk] / med[key]
            st = (nfail[key] > 0) ? "fail" : "ok"
            printf "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", bi[b], al[j], st, nok[key], med[key], mn[key], mx[key], rss[key], ratio, fmed[key], jmed[key]
        }
    }' "$RAW" > "$SUMMARY"

# Markdown table, columns padded so that it also reads well in a terminal.
make_table() {
    awk -F'\t' -v ids="${B_ID[*]}" -v labels="$(printf '%s|' "${B_LABEL[@]}")" -v ref="$REF" '
        function fm(x) {   # ops/s, human
            if (x == "") return ""
            if (x >= 1e9) return sprintf("%.2f G", x / 1e9)
            if (x >= 1e6) return sprintf("%.2f M", x / 1e6)
            if (x >= 1e3) return sprintf("%.1f K", x / 1e3)
            return sprintf("%.0f", x)
        }
        function fr(x) {   # min–max with one unit
            return fm(x)
        }
        BEGIN { nb = split(ids, bi, " "); split(labels, lb, "|"); for (b = 1; b <= nb; b++) label[bi[b]] = lb[b]
                n = 0
                row[++n] = "benchmark\tallocator\tmedian ops/s\tmin–max\tratio " ref "/this\tpage faults\tpeak RSS MiB" }
        {
            med = fm($5); rng = ($6 != "") ? fm($6) " – " fm($7) : ""
            if ($3 == "fail" && $4 == 0) { med = "FAILED"; rng = "" }
            else if ($3 == "fail") { med = med " (" $4 " ok)"; }
            else if ($5 == "" && $1 == "rss") { med = "-" }
            ratio = ($9 != "") ? sprintf("%.2f", $9) : ""
            rss = ($8 != "") ? sprintf("%.1f", $8 / 1024) : ""
            flt = ($10 != "") ? sprintf("%.0f", $10) : ""
            if ($11 != "" && $11 + 0 > 0) flt = flt " + " sprintf("%.0f", $11) " major"
            row[++n] = label[$1] "\t" $2 "\t" med "\t" rng "\t" ratio "\t" flt "\t" rss
        }
        END {
            for (i = 1; i <= n; i++) { m = split(row[i], c, "\t"); for (j = 1; j <= m; j++) { l = length(c[j]); if (c[j] ~ /–/) l -= 2; if (l > w[j]) w[j] = l } }
            for (i = 1; i <= n; i++) {
                m = split(row[i], c, "\t"); line = "|"
                for (j = 1; j <= m; j++) {
                    pad = w[j] - length(c[j]) + ((c[j] ~ /–/) ? 2 : 0)
                    if (j <= 2 || i == 1) line = line " " c[j] sprintf("%" (pad > 0 ? pad : 0) "s", "") " |"
                    else line = line " " sprintf("%" (pad > 0 ? pad : 0) "s", "") c[j] " |"
                }
                print line
                if (i == 1) {
                    line = "|"
                    for (j = 1; j <= m; j++) { d = ""; for (x = 0; x < w[j]; x++) d = d "-"; line = line (j <= 2 ? " " d " |" : " " substr(d, 2) ": |") }
                    print line
                }
            }
        }' "$SUMMARY"
}
TABLE=$(make_table)

# The reference allocator against the best of the others, per benchmark:
# throughput (highest median) and page faults (lowest median).  bench_rss is
# left out (its throughput is memset bandwidth; its memory table follows).
BESTTABLE=""
if [ ${#ALLOCS[@]} -gt 1 ]; then
    # The ratio within each round (the runs of one round follow each other
    # closely, so drift of the machine cancels), against the allocator with
    # the best median: the median of those ratios and how many rounds the
    # reference won.  PAIRED: id, "median (wins/rounds)".
    PAIRED="$WORK/paired.tsv"
    awk -F'\t' -v ref="$REF" '
        FILENAME == summary {
            if ($2 != ref && $2 != "hakmem" && $2 != "hakmem-static" && $5 != "" && (bm[$1] == "" || $5 + 0 > bm[$1] + 0)) { bm[$1] = $5; bn[$1] = $2 }
            next
        }
        $4 == "ok" && $5 != "" { ops[$1 SUBSEP $2 SUBSEP $3] = $5; if ($2 == ref) runs[$1] = runs[$1] " " $3 }
        END {
            for (id in bn) {
                n = split(runs[id], rr, " "); m = 0; w = 0
                for (i = 1; i <= n; i++) {
                    a = ops[id SUBSEP ref SUBSEP rr[i]]; b = ops[id SUBSEP bn[id] SUBSEP rr[i]]
                    if (b == "" || b + 0 <= 0) continue
                    v[++m] = a / b; if (a / b > 1) w++
                }
                if (m == 0) continue
                for (i = 2; i <= m; i++) { x = v[i]; j = i - 1; while (j >= 1 && v[j] > x) { v[j+1] = v[j]; j-- } v[j+1] = x }
                printf "%s\t%.2f (%d/%d)\n", id, (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2, w, m
            }
        }' summary="$SUMMARY" "$SUMMARY" "$RAW" > "$PAIRED"
    BESTTABLE=$(awk -F'\t' -v ids="${B_ID[*]}" -v labels="$(printf '%s|' "${B_LABEL[@]}")" -v ref="$REF" '
        function fm(x) {
            if (x == "") return ""
            if (x >= 1e9) return sprintf("%.2f G", x / 1e9)
            if (x >= 1e6) return sprintf("%.2f M", x / 1e6)
            if (x >= 1e3) return sprintf("%.1f K", x / 1e3)
            return sprintf("%.0f", x)
        }
        FILENAME != summary { paired[$1] = $2; next }
        $2 == ref { rm[$1] = $5; rf[$1] = $10; next }
        $2 == "hakmem" || $2 == "hakmem-static" { next }
        $5 != "" && (bm[$1] == "" || $5 + 0 > bm[$1] + 0) { bm[$1] = $5; bn[$1] = $2 }
        $10 != "" && (bf[$1] == "" || $10 + 0 < bf[$1] + 0) { bf[$1] = $10; bfn[$1] = $2 }
        END {
            nb = split(ids, bi, " "); split(labels, lb, "|")
            print "| benchmark | " ref " ops/s | best other | its ops/s | " ref "/best | paired (wins) | " ref " faults | fewest faults (who) | " ref "/fewest |"
            print "|---|---:|---|---:|---:|---:|---:|---:|---:|"
            for (b = 1; b <= nb; b++) {
                id = bi[b]; if (id == "rss") continue
                r = (rm[id] != "" && bm[id] + 0 > 0) ? sprintf("%.2f", rm[id] / bm[id]) : ""
                fr = ""
                if (rf[id] != "" && bf[id] != "") fr = (bf[id] + 0 > 0) ? sprintf("%.1f", rf[id] / bf[id]) : (rf[id] + 0 == 0 ? "1.0" : "inf")
                printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", lb[b], fm(rm[id]), bn[id], fm(bm[id]), r, paired[id],
                       (rf[id] != "" ? sprintf("%.0f", rf[id]) : ""), (bf[id] != "" ? sprintf("%.0f (%s)", bf[id], bfn[id]) : ""), fr
            }
        }' summary="$SUMMARY" "$PAIRED" "$SUMMARY")
fi

# bench_rss: medians of what each allocator keeps after the frees.
MEMTABLE=""
if awk -F'\t' '$1 == "rss" && $4 == "ok" && $12 != "" { found = 1 } END { exit !found }' "$RAW"; then
    MEMTABLE=$(awk -F'\t' -v order="${ALLOCS[*]}" '
        function median(s,    a, m, i, j, v) {
            m = split(s, a, " "); if (m == 0) return ""
            for (i = 2; i <= m; i++) { v = a[i] + 0; j = i - 1; while (j >= 1 && a[j] + 0 > v) { a[j+1] = a[j]; j-- } a[j+1] = v }
            return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
        }
        $1 == "rss" && $4 == "ok" && $12 != "" { k = $2; pk[k] = pk[k] " " $11; r9[k] = r9[k] " " $12; q9[k] = q9[k] " " $13; ab[k] = ab[k] " " $14 }
        END {
            print "| allocator | peak RSS MiB | RSS after freeing 90% (MiB) | RSS / live bytes then | above baseline after freeing all (MiB) |"
            print "| --- | ---: | ---: | ---: | ---: |"
            na = split(order, al, " ")
            for (j = 1; j <= na; j++) {
                k = al[j]; if (r9[k] == "") continue
                printf "| %s | %.1f | %.1f | %.2f | %.1f |\n", k, median(pk[k]), median(r9[k]), median(q9[k]), median(ab[k])
            }
        }' "$RAW")
fi

# ---------------------------------------------------------------- chart
PNG_NOTE=""
draw_chart() {
    local dat="$WORK/ratios.dat" mem="$WORK/mem.dat" peers=() a
    for a in "${ALLOCS[@]}"; do [ "$a" != "$REF" ] && peers+=("$a"); done
    # rows: benchmark label (quoted), one ratio column per peer ('-' when missing);
    # bench_rss is left out here (its throughput is mostly memset bandwidth)
    awk -F'\t' -v peers="${peers[*]}" -v ids="${B_ID[*]}" -v labels="$(printf '%s|' "${B_LABEL[@]}")" '
        { r[$1 SUBSEP $2] = $9 }
        END {
            np = split(peers, p, " "); nb = split(ids, bi, " "); split(labels, lb, "|")
            printf "benchmark"; for (j = 1; j <= np; j++) printf "\t\"%s\"", p[j]; printf "\n"
            for (b = 1; b <= nb; b++) {
                if (bi[b] == "rss") continue
                any = 0; line = "\"" lb[b] "\""
                for (j = 1; j <= np; j++) { v = r[bi[b] SUBSEP p[j]]; if (v != "") any = 1; line = line "\t" (v != "" ? v : "-") }
                if (any) print line
            }
        }' "$SUMMARY" > "$dat"
    local have_ratios=0 have_mem=0
    [ ${#peers[@]} -gt 0 ] && [ "$(wc -l < "$dat")" -gt 1 ] && have_ratios=1
    if [ -n "$MEMTABLE" ]; then
        # allocator, RSS after freeing 90 %, above baseline after freeing all (MiB)
        printf '%s\n' "$MEMTABLE" | awk -F'|' 'NR > 2 { gsub(/ /, "", $2); printf "\"%s\"\t%s\t%s\n", $2, $4 + 0, $6 + 0 }' > "$mem"
        [ -s "$mem" ] && have_mem=1
    fi
    [ $have_ratios = 1 ] || [ $have_mem = 1 ] || { PNG_NOTE="nothing to draw (no peer to compare with)"; return 1; }
    # wide enough for one group of bars per benchmark
    local w=$(( 300 + 70 * ($(wc -l < "$dat") - 1) )); [ $w -lt 1100 ] && w=1100
    [ $have_ratios = 1 ] && [ $have_mem = 1 ] && w=$(( w + 400 ))
    # bars of log2(ratio), so that 2x faster and 2x slower are the same height
    # up and down from the 1.0 line (the numbers are in the table)
    local np=${#peers[@]} c p1
    p1="plot '$dat' using (lg(\$2)):xtic(1) title columnheader(2)"
    for ((c = 3; c <= np + 1; c++)); do p1+=", '' using (lg(\$$c)) title columnheader($c)"; done
    {
        chart_head "$w" 580
        echo "set style data histograms"
        echo "set style histogram clustered gap 1"
        echo "set style fill solid 0.85 border -1"
        echo "set boxwidth 0.9"
        echo "set grid ytics"
        echo "set yrange [0:*]"
        echo "set xtics rotate by -15 nomirror"
        local sub
        sub="\\ncommit $COMMIT, $DATE, median of $RUNS interleaved run$( [ "$RUNS" = 1 ] || echo s)"
        if [ $have_ratios = 1 ] && [ $have_mem = 1 ]; then
            sub=""
            echo "set multiplot title \"hakmem benchmarks, commit $COMMIT, $DATE, median of $RUNS interleaved run$( [ "$RUNS" = 1 ] || echo s)\""
            echo "set size 0.68,0.94; set origin 0,0"
        fi
        if [ $have_ratios = 1 ]; then
            echo "set title \"$REF throughput / each allocator's (above 1 = $REF faster)$sub\""
            echo "set ylabel \"ratio of median ops/s (log scale)\""
            echo "lg(x) = log(x) / log(2)"
            echo "set ytics (\"1/64\" -6, \"1/32\" -5, \"1/16\" -4, \"1/8\" -3, \"1/4\" -2, \"1/2\" -1, \"0.75\" lg(0.75), \"1\" 0, \"1.25\" lg(1.25), \"1.5\" lg(1.5), \"2\" 1, \"3\" lg(3), \"4\" 2, \"8\" 3, \"16\" 4, \"32\" 5, \"64\" 6)"
            echo "set yrange [*:*]"
            echo "set offsets 0, 0, 0.3, 0.3"
            echo "set key top right"
            echo "set xrange [-0.6:$(( $(wc -l < "$dat") - 2 )).6]"
            echo "set arrow 1 from graph 0, first 0 to graph 1, first 0 nohead lw 2 dt 2 lc rgb 'black' front"
            echo "$p1"
            echo "unset arrow 1"
            echo "set ytics autofreq; set offsets 0, 0, 0, 0; set yrange [0:*]"
        fi
        if [ $have_mem = 1 ]; then
            [ $have_ratios = 1 ] && echo "set size 0.32,0.94; set origin 0.68,0"
            echo "set title \"bench_rss: memory kept (lower is better)$sub\""
            echo "set ylabel \"MiB\""
            echo "set key top left"
            echo "set xrange [-0.6:$(( $(wc -l < "$mem") - 1 )).6]"
            echo "plot '$mem' using 2:xtic(1) title 'RSS after freeing 90%', '' using 3 title 'above baseline after freeing all'"
        fi
        [ $have_ratios = 1 ] && [ $have_mem = 1 ] && echo "unset multiplot"
    } > "$WORK/chart.gp"
    if ! gnuplot "$WORK/chart.gp" > "$WORK/gnuplot.log" 2>&1 </dev/null; then
        PNG_NOTE="gnuplot failed: $(tail -n2 "$WORK/gnuplot.log" | tr '\n' ' ')"; return 1
    fi
    return 0
}
PNG_OK=0
if [ $CHART = 1 ]; then
    if ! command -v gnuplot >/dev/null 2>&1 && [ $INSTALL = 1 ]; then apt_install gnuplot-nox || true; fi
    if ! command -v gnuplot >/dev/null 2>&1; then
        PNG_NOTE="gnuplot is not installed (package gnuplot-nox): no chart"
    elif draw_chart; then
        PNG_OK=1
    fi
    [ -n "$PNG_NOTE" ] && note "$PNG_NOTE"
fi

# ---------------------------------------------------------------- report
cp "$RAW" "$OUT/$NAME.tsv"
{
    echo "# hakmem benchmark comparison"
    echo
    echo "- date: $DATE"
    echo "- commit: $COMMIT"
    echo "- command: \`$ORIG_CMD\`"
    echo "- machine: $CPU, $NCPU CPUs, $MEM; $KERNEL; $GLIBC; load average at start $LOAD, at the end $LOAD_END${LOAD_RUNS:+; 1-minute load before each run: median $LOAD_RUNS}"
    [ $HAVE_HAKMEM = 1 ] && echo "- hakmem: ${HAKMEM_LIB#"$REPO"/}"
    [ -n "$PEERS_V" ] && echo "- peers: $PEERS_V"
    echo "- method: $RUNS runs per benchmark and allocator, interleaved across allocators (each round starting one allocator further on); each run is \`build/bench/NAME_system\` with the allocator in LD_PRELOAD (system: none); median and min–max of the reported ops/s; ratio = $REF median / this median (above 1: $REF is faster); peak RSS = largest max-RSS of the runs ($( [ -n "$TIME_BIN" ] && echo "/usr/bin/time %M" || echo "not measured")); total time $(fmt_dur $ELAPSED)"
    echo
    echo "| benchmark | arguments |"
    echo "|---|---|"
    for i in "${!B_ID[@]}"; do echo "| ${B_LABEL[$i]} | \`${B_BIN[$i]}${B_ARGS[$i]:+ ${B_ARGS[$i]}}\` |"; done
    echo
    echo "$TABLE"
    echo
    echo "page faults: median over the runs of the minor (and, when any, major) page faults the benchmark counted in its timed region (getrusage)."
    if [ -n "$BESTTABLE" ]; then
        echo
        echo "## $REF against the best of the others"
        echo
        echo "Per benchmark: the other allocator with the highest median throughput, and the one with the fewest page faults (medians; $REF/best above 1: $REF is faster; paired: the median of the per-round ratios $REF/best, rounds being the interleaved runs of one benchmark, and in how many rounds $REF was faster; $REF/fewest: how many times their faults $REF takes)."
        echo
        echo "$BESTTABLE"
    fi
    if [ -n "$MEMTABLE" ]; then
        echo
        echo "Memory given back (bench_rss, medians; the benchmark's own figures: RSS minus its pointer table, polled for a while after the frees; lower is better):"
        echo
        echo "$MEMTABLE"
    fi
    if [ $PNG_OK = 1 ]; then echo; echo "![ratios]($NAME.png)"; fi
    suite_summary
    if [ ${#PROBLEMS[@]} -gt 0 ]; then echo; echo "## Problems"; echo; for p in "${PROBLEMS[@]}"; do echo "- $p"; done; fi
    if [ ${#NOTES[@]} -gt 0 ]; then echo; echo "## Notes"; echo; for p in "${NOTES[@]}"; do echo "- $p"; done; fi
    echo
    echo "Raw runs: $NAME.tsv (benchmark, allocator, run, status, ops/s, max RSS KiB, seconds, minor faults, major faults, 1-minute load average before the run; for bench_rss also its peak, after-90% RSS and ratio, and above-baseline MiB)."
} > "$OUT/$NAME.md"

echo
echo "$TABLE"
if [ -n "$BESTTABLE" ]; then echo; echo "$REF against the best of the others:"; echo; echo "$BESTTABLE"; fi
if [ -n "$MEMTABLE" ]; then echo; echo "bench_rss, memory given back (medians, lower is better):"; echo; echo "$MEMTABLE"; fi
echo
echo "commit $COMMIT, $RUNS run$( [ "$RUNS" = 1 ] || echo s) each, interleaved, $(fmt_dur $ELAPSED) in all"
echo "written: $OUT/$NAME.md$( [ $PNG_OK = 1 ] && echo " and $OUT/$NAME.png")"
finish
