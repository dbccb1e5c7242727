#!/bin/bash
# stage_scaling.sh DIR: a self-contained folder for the thread-scaling rows
# (bench_compare.sh --threads) on another x86-64 Linux machine, one with
# more CPUs but no build tools, no Debian packages and no ../shared beside
# the repository.  It holds libhakmem.so and the bench/ programs as built
# here, the suite's threaded programs, the peer allocators, /usr/bin/time,
# bench_compare.sh and a runner:
#
#   DIR/run.sh PART OUT [THREADS [RUNS]]
#     PART  a: larson-suite, larson, xmalloc-test, mstress, glibc-thread
#           b: alloc-test, cache-scratch, xthread
#           or any --only list
#     OUT   where scaling_PART.md / .tsv and the machine's description go
#     THREADS default 1,4,8,16; RUNS default 2
#
# With six allocators at 1, 4, 8 and 16 threads and 2 runs, each part takes
# about 6 minutes on 16 CPUs (two parts, so that neither runs 10 minutes).
# glibc is left out (the system allocator of that machine is another one).
# Back here, the two parts make one report, chart and raw table:
#   scripts/bench_compare.sh --threads 1,4,8,16 --seconds 1 \
#       --replay OUT/scaling_a.tsv,OUT/scaling_b.tsv
#
# usage: scripts/stage_scaling.sh DIR [--suite-dir D] [--peers-dir D]
#   --suite-dir  the built mimalloc-bench (default ../shared/mimalloc-bench)
#   --peers-dir  more peers as lib*.so (default ../shared/peers)
# Debian's jemalloc and tcmalloc are staged when installed.  Exit status: 0
# staged; 1 something needed is missing; 2 bad command line.
set -u -o pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "stage_scaling: $*" >&2; exit "${2:-1}"; }

[ $# -ge 1 ] || die "usage: scripts/stage_scaling.sh DIR [--suite-dir D] [--peers-dir D]" 2
DIR=$1; shift
SUITE_DIR=${BENCH_SUITE_DIR:-"$REPO/../shared/mimalloc-bench"}
PEERS_DIR="$REPO/../shared/peers"
while [ $# -gt 0 ]; do
    case "$1" in
        --suite-dir) [ $# -ge 2 ] || die "--suite-dir needs a value" 2; SUITE_DIR=$2; shift 2 ;;
        --peers-dir) [ $# -ge 2 ] || die "--peers-dir needs a value" 2; PEERS_DIR=$2; shift 2 ;;
        *) die "unknown option $1" 2 ;;
    esac
done

make -C "$REPO" -s lib benches >/dev/null || die "make lib benches failed"
# an earlier stage is replaced; anything else is not touched
if [ -e "$DIR" ] && [ ! -e "$DIR/run.sh" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
    die "$DIR exists and is not an earlier stage: give a new or empty folder"
fi
rm -rf "$DIR"
mkdir -p "$DIR"/bench "$DIR"/suite/bin "$DIR"/peers "$DIR"/scripts || die "cannot create $DIR"
cp "$REPO/libhakmem.so" "$DIR/" || exit 1
cp "$REPO"/build/bench/larson_system "$REPO"/build/bench/bench_xthread_system "$DIR/bench/" || exit 1
cp "$REPO"/scripts/bench_compare.sh "$REPO"/scripts/apt.sh "$DIR/scripts/" || exit 1
git -C "$REPO" rev-parse --short=12 HEAD > "$DIR/commit" 2>/dev/null || echo unknown > "$DIR/commit"
if [ -d "$SUITE_DIR/bin" ]; then
    for p in larson xmalloc-test mstress glibc-thread alloc-test cache-scratch; do
        [ -x "$SUITE_DIR/bin/$p" ] && cp "$SUITE_DIR/bin/$p" "$DIR/suite/bin/"
    done
else
    echo "stage_scaling: no suite at $SUITE_DIR/bin: only the bench/ rows will run" >&2
fi
[ -x /usr/bin/time ] && cp /usr/bin/time "$DIR/time"

# peers: NAME=FILE lines, the name with the version where it is known
: > "$DIR/peers.list"
deb_peer() {   # deb_peer NAME PACKAGE SONAME
    local v
    v=$(dpkg-query -W -f='${Version}' "$2" 2>/dev/null) || return 0
    [ -e "/usr/lib/x86_64-linux-gnu/$3" ] || return 0
    cp -L "/usr/lib/x86_64-linux-gnu/$3" "$DIR/peers/" && echo "$1-${v%%-*}=$3" >> "$DIR/peers.list"
}
deb_peer jemalloc libjemalloc2 libjemalloc.so.2
deb_peer tcmalloc libtcmalloc-minimal4 libtcmalloc_minimal.so.4
for f in "$PEERS_DIR"/lib*.so; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .so); n=${n#lib}
    cp -L "$f" "$DIR/peers/" && echo "$n=$(basename "$f")" >> "$DIR/peers.list"
done

cat > "$DIR/run.sh" <<'EOF'
#!/bin/bash
# run.sh PART OUT [THREADS [RUNS]]: see scripts/stage_scaling.sh
set -u
S=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 2 ] || { echo "usage: run.sh a|b|ROWS OUT [THREADS [RUNS]]" >&2; exit 2; }
PART=$1; OUT=$2; mkdir -p "$OUT" || exit 1
case $PART in
    a) ONLY=larson-suite,larson,xmalloc-test,mstress,glibc-thread ;;
    b) ONLY=alloc-test,cache-scratch,xthread ;;
    *) ONLY=$PART; PART=part ;;
esac
# the report's peak RSS needs GNU time at /usr/bin/time
if [ ! -x /usr/bin/time ] && [ -x "$S/time" ] && [ -w /usr/bin ]; then cp "$S/time" /usr/bin/time; fi
{ nproc; uname -a; ldd --version | head -n1; grep -m1 "model name" /proc/cpuinfo; free -g; cat /proc/loadavg; echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } > "$OUT/machine_$PART.txt" 2>&1
extra=""
while IFS='=' read -r name file; do extra+="${extra:+,}$name=$S/peers/$file"; done < "$S/peers.list"
"$S/scripts/bench_compare.sh" --threads "${3:-1,4,8,16}" --runs "${4:-2}" --seconds 1 --timeout 40 \
    --no-install --no-chart --only "$ONLY" --allocators hakmem ${extra:+--extra "$extra"} \
    --bench-dir "$S/bench" --hakmem-lib "$S/libhakmem.so" --suite-dir "$S/suite" \
    --commit "$(cat "$S/commit")" --name "scaling_$PART" --out "$OUT" > "$OUT/log_$PART.txt" 2>&1
rc=$?
tail -n 5 "$OUT/log_$PART.txt"
exit $rc
EOF
chmod +x "$DIR/run.sh"
echo "staged in $DIR ($(du -sh "$DIR" | cut -f1)): $(wc -l < "$DIR/peers.list") peers; run DIR/run.sh a OUT, then DIR/run.sh b OUT;"
echo "back here: scripts/bench_compare.sh --threads 1,4,8,16 --seconds 1 --replay OUT/scaling_a.tsv,OUT/scaling_b.tsv"
