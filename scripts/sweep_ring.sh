#!/usr/bin/env bash
# sweep_ring.sh — throughput of hakmem per L2 ring capacity (make L2_RING=N).
#
#   scripts/sweep_ring.sh [--rings "16 24 32 48 64 96 128"] [--runs N] [--quick]
#                         [--static] [--rev REV] [--out FILE] [--keep]
#
# For every ring size the working tree (as it is now, tracked and untracked
# files, ignored ones left out) is copied to a temporary directory and built
# there with 'make lib benches L2_RING=N', so the tree itself and its build are
# left exactly as they were.  Then bench_mid_large_mt (1 and 2 threads) and
# bench_random_mixed (ws 400 and 8192) run under every build, interleaved
# across ring sizes, and a table of median throughput per ring size is printed
# (each cell also gives the change against the Makefile's default ring).
#
# Exit status: 0 all went well, 1 a build or a run failed, 2 bad command line.
set -u -o pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=sweep_ring

usage() {
    cat <<'EOF'
usage: scripts/sweep_ring.sh [options]

  --rings "LIST"   ring capacities to try (default "16 24 32 48 64 96 128")
  --runs N         runs per benchmark and ring size (default 3)
  --quick          smaller benchmark sizes (about 4x less work per run)
  --static         run the statically linked NAME_hakmem binaries instead of
                   NAME_system with the build's libhakmem.so preloaded
  --timeout SEC    limit for one run (default 120)
  --out FILE       also write the table (Markdown) to FILE
  --rev REV        build git revision REV instead of the working tree
  --keep           keep the temporary build trees
  -h, --help       this text
EOF
}
die_usage() { echo "$PROG: $*" >&2; echo "try: scripts/sweep_ring.sh --help" >&2; exit 2; }
say() { echo "$PROG: $*" >&2; }

RINGS="16 24 32 48 64 96 128"; REV=""; RUNS=3; QUICK=0; STATIC=0; TIMEOUT=120; OUTFILE=""; KEEP=0
need_arg() { [ $# -ge 2 ] && [ -n "$2" ] || die_usage "option $1 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rings)   need_arg "$@"; RINGS=$(echo "$2" | tr ',' ' '); shift 2 ;;
        --runs)    need_arg "$@"; RUNS=$2; shift 2 ;;
        --quick)   QUICK=1; shift ;;
        --static)  STATIC=1; shift ;;
        --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
        --out)     need_arg "$@"; OUTFILE=$2; shift 2 ;;
        --rev)     need_arg "$@"; REV=$2; shift 2 ;;
        --keep)    KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *)         die_usage "unknown option '$1'" ;;
    esac
done
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]]    || die_usage "--runs wants a positive integer, not '$RUNS'"
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die_usage "--timeout wants a positive integer, not '$TIMEOUT'"
for n in $RINGS; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die_usage "ring size '$n' is not a positive integer"; done
[ -n "${RINGS// /}" ] || die_usage "--rings is empty"

DEFAULT_RING=$(awk -F'[?:]?=' '/^L2_RING[ \t]*[?:]?=/ { gsub(/[ \t]/, "", $2); print $2; exit }' "$REPO/Makefile" 2>/dev/null)
[ -n "$DEFAULT_RING" ] || DEFAULT_RING=48

if [ $QUICK = 1 ]; then RM_CYC=2500000; MID_CYC=1000000; else RM_CYC=10000000; MID_CYC=4000000; fi
# id | binary | args | column title
BENCHES="mid_t1|bench_mid_large_mt|1 $MID_CYC 128|mid_large_mt 1T
mid_t2|bench_mid_large_mt|2 $MID_CYC 128|mid_large_mt 2T
rm_400|bench_random_mixed|$RM_CYC 400|random_mixed ws400
rm_8192|bench_random_mixed|$RM_CYC 8192|random_mixed ws8192"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-sweep.XXXXXX") || { say "mktemp failed"; exit 1; }
cleanup() { if [ $KEEP = 1 ]; then say "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
trap 'echo; say "interrupted"; exit 130' INT TERM
FAILED=0

# ---------------------------------------------------------------- builds
SRC="$WORK/src"
mkdir -p "$SRC"
# The working tree as it is now (tracked + untracked, not ignored), or --rev.
if [ -n "$REV" ]; then
    git -C "$REPO" archive --format=tar "$REV" | tar -x -C "$SRC" || { say "cannot export revision $REV"; exit 1; }
elif ! (cd "$REPO" && git ls-files -z -co --exclude-standard | \
        while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done | \
        tar --null -T - -cf -) | tar -x -C "$SRC"; then
    say "cannot copy the working tree"; exit 1
fi
JOBS=$(nproc 2>/dev/null || echo 2)
OK_RINGS=()
for n in $RINGS; do
    d="$WORK/ring$n"
    cp -a "$SRC" "$d"
    say "building L2_RING=$n in $d"
    if make -C "$d" -j"$JOBS" lib benches L2_RING="$n" > "$d/build.log" 2>&1; then
        OK_RINGS+=("$n")
    else
        say "FAILED: build with L2_RING=$n; last lines of its log:"
        tail -n 10 "$d/build.log" >&2
        FAILED=1
    fi
done
[ ${#OK_RINGS[@]} -gt 0 ] || { say "no build succeeded"; KEEP=1; exit 1; }

# ---------------------------------------------------------------- runs
RAW="$WORK/runs.tsv"; : > "$RAW"
nb=$(echo "$BENCHES" | wc -l)
total=$(( nb * RUNS * ${#OK_RINGS[@]} )); k=0
declare -A GAVEUP=()
while IFS='|' read -r id bin args title; do
    for ((r = 1; r <= RUNS; r++)); do
        for n in "${OK_RINGS[@]}"; do
            k=$((k + 1))
            d="$WORK/ring$n"
            printf '[%3d/%d] %-20s L2_RING=%-4s run %d/%d ' "$k" "$total" "$title" "$n" "$r" "$RUNS" >&2
            if [ -n "${GAVEUP[$id|$n]:-}" ]; then echo "skipped (failed before)" >&2; continue; fi
            if [ $STATIC = 1 ]; then envp=(env); exe="$d/build/bench/${bin}_hakmem"
            else envp=(env "LD_PRELOAD=$d/libhakmem.so"); exe="$d/build/bench/${bin}_system"; fi
            log="$WORK/$id.$n.$r.log"
            # shellcheck disable=SC2086
            timeout -k 5 "$TIMEOUT" "${envp[@]}" "$exe" $args > "$log" 2>&1 < /dev/null
            rc=$?
            ops=$(awk '/Throughput = / { for (f = 2; f < NF; f++) if ($f == "=" && $(f-1) == "Throughput") v = $(f+1) } END { if (v != "") print v }' "$log")
            [[ "$ops" =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || ops=""
            why=""
            if [ $rc = 124 ] || [ $rc = 137 ]; then why="timed out after ${TIMEOUT}s"
            elif [ $rc -gt 128 ] && [ $rc -lt 160 ]; then why="crashed (SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128))))"
            elif [ $rc -ne 0 ]; then why="exited with status $rc"
            elif [ -z "$ops" ]; then why="printed no 'Throughput = N ops/s' line"; fi
            if [ -n "$why" ]; then
                echo "FAILED" >&2
                say "FAILED: $title with L2_RING=$n: $why; last output: $(tail -n3 "$log" | tr '\n' ' ' | cut -c1-300)"
                GAVEUP[$id|$n]=1; FAILED=1
                continue
            fi
            printf '%s\t%s\t%s\n' "$id" "$n" "$ops" >> "$RAW"
            awk -v o="$ops" 'BEGIN { printf "%.3f M ops/s\n", o / 1e6 }' >&2
        done
    done
done <<< "$BENCHES"

# ---------------------------------------------------------------- table
TABLE=$(awk -F'\t' -v rings="${OK_RINGS[*]}" -v def="$DEFAULT_RING" -v benches="$BENCHES" '
    function median(s,    a, m, i, j, v) {
        m = split(s, a, " "); if (m == 0) return ""
        for (i = 2; i <= m; i++) { v = a[i] + 0; j = i - 1; while (j >= 1 && a[j] + 0 > v) { a[j+1] = a[j]; j-- } a[j+1] = v }
        return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    { v[$1 SUBSEP $2] = v[$1 SUBSEP $2] " " $3 }
    END {
        nr = split(rings, R, " "); nb = split(benches, L, "\n")
        for (b = 1; b <= nb; b++) { split(L[b], f, "|"); id[b] = f[1]; title[b] = f[4] }
        for (b = 1; b <= nb; b++) {
            best[b] = 0
            for (i = 1; i <= nr; i++) { m = median(v[id[b] SUBSEP R[i]]); med[b, i] = m; if (m != "" && m > best[b]) best[b] = m }
            base[b] = ""
            for (i = 1; i <= nr; i++) if (R[i] == def) base[b] = med[b, i]
        }
        h = "| L2_RING |"; s = "|---:|"
        for (b = 1; b <= nb; b++) { h = h " " title[b] " (M ops/s) |"; s = s "---:|" }
        print h; print s
        for (i = 1; i <= nr; i++) {
            line = "| " R[i] (R[i] == def ? " (default)" : "") " |"
            for (b = 1; b <= nb; b++) {
                m = med[b, i]
                if (m == "") { line = line " FAILED |"; continue }
                c = sprintf("%.2f", m / 1e6)
                if (base[b] != "" && R[i] != def) c = c sprintf(" (%+.1f%%)", (m - base[b]) / base[b] * 100)
                if (m == best[b]) c = c " *"
                line = line " " c " |"
            }
            print line
        }
    }' "$RAW")

COMMIT=$(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo "(no commit)")
HEAD_LINE="L2_RING sweep, commit $COMMIT, $(date -u '+%Y-%m-%d %H:%M UTC'), median of $RUNS interleaved run$( [ "$RUNS" = 1 ] || echo s), $( [ $STATIC = 1 ] && echo "static NAME_hakmem binaries" || echo "NAME_system + LD_PRELOAD"); * = best per column; (+x%) = change against the default ring $DEFAULT_RING"
echo
echo "$HEAD_LINE"
echo
echo "$TABLE"
if [ -n "$OUTFILE" ]; then
    mkdir -p "$(dirname "$OUTFILE")" && { echo "# $HEAD_LINE"; echo; echo "$TABLE"; } > "$OUTFILE" && echo "written: $OUTFILE"
fi
[ $FAILED = 0 ] || { echo; say "some builds or runs failed (see above)"; }
exit $FAILED
