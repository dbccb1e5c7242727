#!/usr/bin/env bash
# The misuse checks: each misuse of tests/hardened/misuse.c, in each tier,
# must stop the process (SIGABRT) with one stderr line that starts with
# "hakmem:", names the problem and gives the address: under the hardened
# library every case, under the default library the cases it promises to
# catch (docs/RELIABILITY.md section 3).
# Then the real programs of scripts/run_apps.sh run under
# libhakmem_hardened.so (HARDENED_APPS=0 leaves them out: scripts/run_tests.sh
# runs them beside libhakmem.so's, against one reference run).
#
#   scripts/run_hardened_tests.sh      (after `make lib`; prints "N passed, N failed")
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
LIB="$PWD/libhakmem_hardened.so"
DEFAULT_LIB="$PWD/libhakmem.so"
[ -f "$LIB" ] || { echo "run_hardened_tests: $LIB missing (make lib)"; exit 1; }
BIN=build/tests/hardened/misuse
mkdir -p "$(dirname "$BIN")"
# the misuse is deliberate: silence the compiler about it
${CC:-cc} -std=c11 -O1 -g -Wall -Wextra -Wno-use-after-free -Wno-free-nonheap-object \
    tests/hardened/misuse.c -o "$BIN" || exit 1

pass=0; fail=0
check() {   # CASE SIZE WORDS
    local case=$1 size=$2 words=$3 out err rc addr
    out=$(mktemp); err=$(mktemp)
    ( LD_PRELOAD="$LIB" exec timeout 20 "$BIN" "$case" "$size" >"$out" 2>"$err" ) 2>/dev/null
    rc=$?
    addr=$(head -n 1 "$out" | sed 's/^0x//')
    if [ "$rc" -eq 134 ] && [ "$(grep -c . "$err")" -eq 1 ] && grep -q "^hakmem: .*$words" "$err" &&
       [ -n "$addr" ] && grep -qi "$addr" "$err"; then
        printf 'PASS %-8s %-14s %8s B  %s\n' "$FLAVOUR" "$case" "$size" "$(cat "$err")"
        pass=$((pass + 1))
    else
        printf 'FAIL %-8s %-14s %8s B  exit %s; stderr: %s\n' "$FLAVOUR" "$case" "$size" "$rc" "$(head -c 300 "$err")"
        fail=$((fail + 1))
    fi
    rm -f "$out" "$err"
}
# Sizes: Tiny, L2 (one page), L2 (a multi-page span), L2.5, large.
SLAB_SIZES="48 3000 40000 300000"
LARGE=5000000

# What both libraries catch (docs/RELIABILITY.md section 3).
both() {
    for size in $SLAB_SIZES; do
        check double "$size" "double free"
        check later-double "$size" "double free"
        check interior "$size" "middle of a block"
        check realloc-freed "$size" "not a live block"
        check realloc-interior "$size" "not a live block"
        check no-slab "$size" "not a live block"
    done
    # never-used: the last block of a 48-byte slab, and the block after the
    # only one handed out of a 3000- and a 40000-byte slab.  At 300000 the
    # address after a block lies between blocks and is not caught
    # (docs/RELIABILITY.md section 12).
    for size in 48 3000 40000; do
        check never-used "$size" "never allocated"
    done
    # A Tiny SuperSlab's header is a slab header; the first page of an L2 or
    # L2.5 SuperSlab holds no slab.
    check slab-header 48 "slab header"
    for size in 3000 40000 300000; do
        check slab-header "$size" "not a live block"
    done
    check double "$LARGE" "already freed large block"
    check later-double "$LARGE" "already freed large block"
    check interior "$LARGE" "invalid or already freed large block"
    check realloc-freed "$LARGE" "invalid pointer"
    check realloc-interior "$LARGE" "invalid pointer"
    check realloc-moved "$LARGE" "realloc(): block already given back to the OS"
    # A slab block whose memory went back: its SuperSlab unmapped (tagged
    # dead), kept mapped with the span retired (no live block there), or
    # the span taken by another class since.
    for size in $SLAB_SIZES; do
        check given-back "$size" "\(given back to the OS\|not a live block\|middle of a block\)"
    done
    check given-back "$LARGE" "given back to the OS"
    check moved-double "$LARGE" "given back to the OS"
}

FLAVOUR=hardened
both
# What only the hardened library catches (section 4).
for size in $SLAB_SIZES; do
    check uaf-write "$size" "use after free"
done
check corrupt-link 48 "free list corrupted"

if [ -f "$DEFAULT_LIB" ]; then
    FLAVOUR=default LIB="$DEFAULT_LIB"
    both
    LIB="$PWD/libhakmem_hardened.so"
else
    echo "run_hardened_tests: $DEFAULT_LIB missing (make HARDENED=1 builds only the hardened library): default-build cases skipped"
fi

if [ "${HARDENED_APPS:-1}" != 0 ] && [ -x scripts/run_apps.sh ]; then
    apps=$(scripts/run_apps.sh "$LIB" 2>/dev/null)
    echo "$apps" | sed 's/^/hardened /'
    pass=$((pass + $(echo "$apps" | grep -c '^PASS ')))
    fail=$((fail + $(echo "$apps" | grep -c '^FAIL ')))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
