#!/usr/bin/env bash
# ab.sh — A/B test of two settings or two builds on one benchmark.
#
#   scripts/ab.sh [options] -- COMMAND [ARGS...]
#
# Runs COMMAND as side A (the baseline) and side B (the candidate), interleaved
# (A B, B A, A B, ... so that neither side always goes first), parses
# "Throughput = N ops/s" from each run, and reports both medians, their
# min–max spreads and the delta of B over A in percent.
#
# The runs of one round (A then B, or B then A) are back to back, so the
# round's ratio B/A cancels the slow swings of a shared machine (its speed
# drifts by a fifth over minutes); the median of those ratios and their
# lower quartile are reported too.
#
# Verdict: GO when the delta of the medians and the median paired ratio are
# both at least +1.0 % (--threshold) AND either the spreads are clear of the
# other median (A's max < B's median and B's min > A's median) or B won at
# least three rounds in four (the lower quartile of the ratios is above 1);
# NO-GO otherwise.  A row (date, commit, what, command, medians, delta with
# the paired figures, verdict) is appended to docs/benchmarks/AB_LEDGER.md.
#
# Exit status: 0 the A/B ran (either verdict; with --exit-verdict NO-GO
# exits 3), 1 a run failed (crash, timeout, no result, build failure),
# 2 bad command line.
set -u -o pipefail
export LC_ALL=C

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=ab

usage() {
    cat <<'EOF'
usage: scripts/ab.sh [options] -- COMMAND [ARGS...]

What differs between A (baseline) and B (candidate), any combination of:
  --a-env 'K=V ...'   --b-env 'K=V ...'    extra environment for the side
  --a-lib PATH        --b-lib PATH         LD_PRELOAD for the side
  --a-dir DIR         --b-dir DIR          run COMMAND inside DIR (another
                                           build tree; relative paths in
                                           COMMAND then name its files)
  --a-build 'VARS'    --b-build 'VARS'     copy the working tree to a temporary
                                           directory, 'make lib benches VARS'
                                           there and use it as the side's DIR
                                           (e.g. --b-build 'L2_RING=64')
  --a-rev REV         --b-rev REV          the same from git revision REV
                                           (combine with --X-build for VARS)
  --preload           LD_PRELOAD=<side's DIR>/libhakmem.so on both sides
                      (use with build/bench/NAME_system binaries)

Other options:
  --runs N            runs per side (default 10)
  --threshold PCT     smallest gain that can be GO (default 1.0)
  --what TEXT         what is tested, for the ledger (default: made from the
                      options)
  --ledger FILE       default docs/benchmarks/AB_LEDGER.md
  --no-ledger         do not append to the ledger
  --timeout SEC       limit for one run (default 120)
  --keep              keep the temporary build trees
  --exit-verdict      exit 3 on NO-GO
  -h, --help          this text

Examples:
  scripts/ab.sh --a-env HAKMEM_X=0 --b-env HAKMEM_X=1 -- \
      build/bench/bench_random_mixed_hakmem 2000000 400
  scripts/ab.sh --a-build L2_RING=48 --b-build L2_RING=64 -- \
      build/bench/bench_mid_large_mt_hakmem 2 1000000 128
  scripts/ab.sh --a-rev HEAD~1 --b-rev HEAD --preload -- \
      build/bench/larson_system 1 8 1024 1000 1000 42 2
EOF
}

die_usage() { echo "$PROG: $*" >&2; echo "try: scripts/ab.sh --help" >&2; exit 2; }
say() { echo "$PROG: $*" >&2; }

RUNS=10; THRESH=1.0; WHAT=""; LEDGER="$REPO/docs/benchmarks/AB_LEDGER.md"; USE_LEDGER=1
TIMEOUT=120; KEEP=0; PRELOAD=0; EXIT_VERDICT=0
declare -A ENVS=([A]="" [B]="") LIBS=([A]="" [B]="") DIRS=([A]="" [B]="") BUILDS=([A]="" [B]="") REVS=([A]="" [B]="")
declare -A HASBUILD=([A]=0 [B]=0)

ORIG_CMD="scripts/ab.sh"
for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then ORIG_CMD+=" $a"; else ORIG_CMD+=" '${a//\'/\'\\\'\'}'"; fi
done

need_arg() { [ $# -ge 2 ] || die_usage "option $1 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --a-env|--b-env)     need_arg "$@"; s=${1:2:1}; ENVS[${s^^}]=$2; shift 2 ;;
        --a-lib|--b-lib)     need_arg "$@"; s=${1:2:1}; LIBS[${s^^}]=$2; shift 2 ;;
        --a-dir|--b-dir)     need_arg "$@"; s=${1:2:1}; DIRS[${s^^}]=$2; shift 2 ;;
        --a-build|--b-build) need_arg "$@"; s=${1:2:1}; BUILDS[${s^^}]=$2; HASBUILD[${s^^}]=1; shift 2 ;;
        --a-rev|--b-rev)     need_arg "$@"; s=${1:2:1}; REVS[${s^^}]=$2; HASBUILD[${s^^}]=1; shift 2 ;;
        --preload)     PRELOAD=1; shift ;;
        --runs)        need_arg "$@"; RUNS=$2; shift 2 ;;
        --threshold)   need_arg "$@"; THRESH=$2; shift 2 ;;
        --what)        need_arg "$@"; WHAT=$2; shift 2 ;;
        --ledger)      need_arg "$@"; LEDGER=$2; shift 2 ;;
        --no-ledger)   USE_LEDGER=0; shift ;;
        --timeout)     need_arg "$@"; TIMEOUT=$2; shift 2 ;;
        --keep)        KEEP=1; shift ;;
        --exit-verdict) EXIT_VERDICT=1; shift ;;
        -h|--help)     usage; exit 0 ;;
        --)            shift; break ;;
        -*)            die_usage "unknown option '$1'" ;;
        *)             break ;;
    esac
done
[ $# -gt 0 ] || die_usage "no benchmark command given (put it after --)"
CMD=("$@")
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]]    || die_usage "--runs wants a positive integer, not '$RUNS'"
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die_usage "--timeout wants a positive integer, not '$TIMEOUT'"
[[ "$THRESH" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die_usage "--threshold wants a number, not '$THRESH'"
for s in A B; do
    if [ -n "${DIRS[$s]}" ] && [ "${HASBUILD[$s]}" = 1 ]; then
        die_usage "side $s: --${s,,}-dir and --${s,,}-build/--${s,,}-rev exclude each other"
    fi
    for kv in ${ENVS[$s]}; do
        [[ "$kv" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die_usage "side $s: '$kv' is not NAME=VALUE"
    done
done
if [ "${ENVS[A]}" = "${ENVS[B]}" ] && [ "${LIBS[A]}" = "${LIBS[B]}" ] && [ "${DIRS[A]}" = "${DIRS[B]}" ] \
   && [ "${HASBUILD[A]}" = 0 ] && [ "${HASBUILD[B]}" = 0 ]; then
    say "warning: A and B are the same setting (an A/A run: useful to see the noise)"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-ab.XXXXXX") || { say "mktemp failed"; exit 1; }
cleanup() { if [ $KEEP = 1 ]; then say "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
trap 'echo; say "interrupted"; exit 130' INT TERM

# ---------------------------------------------------------------- builds
# copy_tree DEST [REV]: the working tree (tracked and untracked, not ignored
# files, as they are now) or git revision REV, into DEST.
copy_tree() {
    local dest=$1 rev=${2:-}
    mkdir -p "$dest" || return 1
    if [ -n "$rev" ]; then
        git -C "$REPO" archive --format=tar "$rev" | tar -x -C "$dest"
    else
        (cd "$REPO" && git ls-files -z -co --exclude-standard | \
            while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done | \
            tar --null -T - -cf -) | tar -x -C "$dest"
    fi
}
for s in A B; do
    [ "${HASBUILD[$s]}" = 1 ] || continue
    d="$WORK/tree-$s"
    desc="${REVS[$s]:-working tree}${BUILDS[$s]:+ with ${BUILDS[$s]}}"
    say "side $s: building $desc in $d"
    if ! copy_tree "$d" "${REVS[$s]}"; then
        say "side $s: cannot copy ${REVS[$s]:-the working tree}"; exit 1
    fi
    # shellcheck disable=SC2086
    if ! make -C "$d" -j"$(nproc 2>/dev/null || echo 2)" lib benches ${BUILDS[$s]} > "$d/build.log" 2>&1; then
        say "side $s: build failed ($desc); last lines of $d/build.log:"
        tail -n 15 "$d/build.log" >&2
        KEEP=1
        exit 1
    fi
    DIRS[$s]=$d
done
for s in A B; do
    [ -n "${DIRS[$s]}" ] || DIRS[$s]=$REPO
    [ -d "${DIRS[$s]}" ] || { say "side $s: directory ${DIRS[$s]} does not exist"; exit 1; }
    DIRS[$s]=$(cd "${DIRS[$s]}" && pwd)
    if [ $PRELOAD = 1 ]; then
        [ -n "${LIBS[$s]}" ] && die_usage "side $s: --preload and --${s,,}-lib exclude each other"
        LIBS[$s]="${DIRS[$s]}/libhakmem.so"
    fi
    if [ -n "${LIBS[$s]}" ]; then
        case "${LIBS[$s]}" in /*) ;; *) LIBS[$s]="${DIRS[$s]}/${LIBS[$s]}" ;; esac
        [ -f "${LIBS[$s]}" ] || { say "side $s: preload library ${LIBS[$s]} not found"; exit 1; }
    fi
    prog=${CMD[0]}
    case "$prog" in
        */*) ( cd "${DIRS[$s]}" && [ -x "$prog" ] ) || { say "side $s: benchmark binary $prog not found in ${DIRS[$s]} (run 'make benches'?)"; exit 1; } ;;
        *)   command -v "$prog" >/dev/null 2>&1 || { say "side $s: command $prog not found"; exit 1; } ;;
    esac
done

describe() {   # describe SIDE -> short text
    local s=$1 t=""
    [ -n "${REVS[$s]}" ] && t+="rev ${REVS[$s]} ($(git -C "$REPO" rev-parse --short=10 "${REVS[$s]}^{commit}" 2>/dev/null || echo '?')) "
    [ -n "${BUILDS[$s]}" ] && t+="${BUILDS[$s]} "
    [ "${HASBUILD[$s]}" = 0 ] && [ "${DIRS[$s]}" != "$REPO" ] && t+="dir ${DIRS[$s]} "
    [ -n "${ENVS[$s]}" ] && t+="${ENVS[$s]} "
    [ -n "${LIBS[$s]}" ] && [ $PRELOAD = 0 ] && t+="LD_PRELOAD=${LIBS[$s]} "
    t=${t% }
    echo "${t:-default}"
}
DESC_A=$(describe A); DESC_B=$(describe B)
[ -n "$WHAT" ] || WHAT="$DESC_A -> $DESC_B"

# ---------------------------------------------------------------- runs
RAW="$WORK/runs.tsv"; : > "$RAW"
FAILED=0
run_side() {   # run_side SIDE RUN
    local s=$1 r=$2 log="$WORK/run.$1.$2.log" rc ops t1 t2 secs
    local envp=(env)
    # shellcheck disable=SC2206
    [ -n "${ENVS[$s]}" ] && envp+=(${ENVS[$s]})
    [ -n "${LIBS[$s]}" ] && envp+=("LD_PRELOAD=${LIBS[$s]}")
    printf '[%2d/%d] %s (%s) ' "$r" "$RUNS" "$s" "$(describe "$s")" >&2
    t1=$(date +%s.%N)
    ( cd "${DIRS[$s]}" && timeout -k 5 "$TIMEOUT" "${envp[@]}" "${CMD[@]}" ) > "$log" 2>&1 < /dev/null
    rc=$?
    t2=$(date +%s.%N); secs=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", b - a }')
    ops=$(awk '/Throughput = / { for (f = 2; f < NF; f++) if ($f == "=" && $(f-1) == "Throughput") v = $(f+1) } END { if (v != "") print v }' "$log")
    [[ "$ops" =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || ops=""
    local why=""
    if [ $rc = 124 ] || [ $rc = 137 ]; then why="timed out after ${TIMEOUT}s"
    elif [ $rc -gt 128 ] && [ $rc -lt 160 ]; then why="crashed (SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128))))"
    elif [ $rc -ne 0 ]; then why="exited with status $rc"
    elif [ -z "$ops" ]; then why="printed no 'Throughput = N ops/s' line"
    fi
    if [ -n "$why" ]; then
        echo "FAILED" >&2
        say "side $s run $r: $why; last output: $(tail -n3 "$log" | tr '\n' ' ' | cut -c1-300)"
        say "    command: (cd ${DIRS[$s]} && ${envp[*]} ${CMD[*]})"
        FAILED=1
        return 1
    fi
    printf '%s\t%s\t%s\n' "$s" "$r" "$ops" >> "$RAW"
    awk -v o="$ops" -v t="$secs" 'BEGIN { printf "%.3f M ops/s  %5.2f s\n", o / 1e6, t }' >&2
}
say "$RUNS runs per side, interleaved; A = $DESC_A; B = $DESC_B"
say "command: ${CMD[*]}"
for ((r = 1; r <= RUNS; r++)); do
    if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
    for s in $order; do
        run_side "$s" "$r" || break 2
    done
done
if [ $FAILED = 1 ]; then
    say "A/B aborted: a run failed; no verdict, nothing written to the ledger"
    exit 1
fi

# ---------------------------------------------------------------- verdict
# prints: medA minA maxA medB minB maxB delta pairedDelta pairedLowQuartile verdict
read -r MED_A MIN_A MAX_A MED_B MIN_B MAX_B DELTA PDELTA PLOW VERDICT < <(awk -F'\t' -v th="$THRESH" '
    function stats(s, out,    a, m, i, j, v) {
        m = split(s, a, " ")
        for (i = 2; i <= m; i++) { v = a[i] + 0; j = i - 1; while (j >= 1 && a[j] + 0 > v) { a[j+1] = a[j]; j-- } a[j+1] = v }
        out["min"] = a[1]; out["max"] = a[m]
        out["med"] = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
        out["q1"] = a[int((m + 3) / 4)]
    }
    { v[$1] = v[$1] " " $3; run[$1, $2] = $3; n = $2 > n ? $2 : n }
    END {
        stats(v["A"], A); stats(v["B"], B)
        for (r = 1; r <= n; r++) if ((("A", r) in run) && (("B", r) in run)) ratios = ratios " " run["B", r] / run["A", r]
        stats(ratios, P)
        d = (B["med"] - A["med"]) / A["med"] * 100
        pd = (P["med"] - 1) * 100; pl = (P["q1"] - 1) * 100
        clear = A["max"] < B["med"] && B["min"] > A["med"]
        go = (d >= th && pd >= th && (clear || pl > 0)) ? "GO" : "NO-GO"
        printf "%.0f %.0f %.0f %.0f %.0f %.0f %+.2f %+.2f %+.2f %s\n", A["med"], A["min"], A["max"], B["med"], B["min"], B["max"], d, pd, pl, go
    }' "$RAW")

WHY=""
if [ "$VERDICT" = NO-GO ]; then
    WHY=$(awk -v d="$DELTA" -v pd="$PDELTA" -v pl="$PLOW" -v th="$THRESH" -v ma="$MED_A" -v xa="$MAX_A" -v mb="$MED_B" -v nb="$MIN_B" 'BEGIN {
        w = ""
        if (d + 0 < th + 0) w = sprintf("gain %+.2f%% is below +%.1f%%", d, th)
        if (pd + 0 < th + 0) w = w (w != "" ? "; " : "") sprintf("paired gain %+.2f%% is below +%.1f%%", pd, th)
        if ((xa + 0 >= mb + 0 || nb + 0 <= ma + 0) && pl + 0 <= 0)
            w = w (w != "" ? "; " : "") "spreads overlap and B lost more than a round in four"
        print w }')
fi

COMMIT=$(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo "(no commit)")
if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no -- core Makefile 2>/dev/null)" ]; then COMMIT+="-dirty"; fi
M() { awk -v x="$1" 'BEGIN { printf "%.3f M", x / 1e6 }'; }

echo
printf '%-3s %-40s %14s   %s\n' side setting "median ops/s" "min – max"
printf '%-3s %-40s %14s   %s – %s\n' A "$DESC_A" "$(M "$MED_A")" "$(M "$MIN_A")" "$(M "$MAX_A")"
printf '%-3s %-40s %14s   %s – %s\n' B "$DESC_B" "$(M "$MED_B")" "$(M "$MIN_B")" "$(M "$MAX_B")"
echo
echo "delta B vs A: ${DELTA}% (medians), ${PDELTA}% (median of the rounds' B/A; lower quartile ${PLOW}%)   verdict: $VERDICT${WHY:+ ($WHY)}"

if [ $USE_LEDGER = 1 ]; then
    esc() { printf '%s' "$1" | sed 's/|/\\|/g'; }
    mkdir -p "$(dirname "$LEDGER")"
    if [ ! -s "$LEDGER" ]; then
        {
            echo "# A/B ledger"
            echo
            echo "One row per scripts/ab.sh run (see README.md here). A = baseline, B = candidate;"
            echo "medians of ops/s over interleaved runs; GO = gain of at least +1.0 % in the medians and in the rounds' paired ratio, with spreads clear of the other median or B ahead in three rounds of four."
            echo
            echo "| date | commit | what | command | median A (ops/s) | median B (ops/s) | delta | verdict |"
            echo "|---|---|---|---|---:|---:|---:|---|"
        } > "$LEDGER"
    fi
    printf '| %s | %s | %s | `%s` | %s | %s | %s | %s |\n' \
        "$(date -u '+%Y-%m-%d %H:%M')" "$COMMIT" "$(esc "$WHAT")" "$(esc "$ORIG_CMD")" \
        "$(M "$MED_A")" "$(M "$MED_B")" "$DELTA% (paired $PDELTA%, lower quartile $PLOW%)" "$VERDICT" >> "$LEDGER"
    echo "appended to $LEDGER"
fi
if [ $EXIT_VERDICT = 1 ] && [ "$VERDICT" != GO ]; then exit 3; fi
exit 0
