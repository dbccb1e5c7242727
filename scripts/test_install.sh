#!/usr/bin/env bash
# What `make install` gives a user, used as a user would, in a staged tree
# (make install DESTDIR=TMP PREFIX=/usr/local):
#   - the hakmem launcher: runs programs (status, LD_PRELOAD, settings
#     refused before the program starts, --hardened, --stats, --leaks),
#     writes a profile with --profile and renders it with `hakmem prof`
#     (google-pprof, and the folded stacks with the flame-graph helper);
#   - the CMake package: a small project builds against hakmem::hakmem,
#     hakmem::hakmem-static and hakmem::hardened, and its programs run on
#     hakmem; find_package's version check;
#   - ./hakmem of the build tree;
#   - make uninstall leaves no file behind.
# Each check prints PASS or FAIL; the last line is "N passed, N failed".
#
#   scripts/test_install.sh      (after `make lib`; a few seconds)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

pass=0 fail=0
ok() { printf 'PASS %s\n' "$1"; pass=$((pass + 1)); }
no() {   # NAME [DETAILS]
    printf 'FAIL %s\n' "$1"
    [ -n "${2:-}" ] && printf '%s\n' "$2" | head -n 20 | sed 's/^/    /'
    fail=$((fail + 1))
}
summary() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

T=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-install.XXXXXX") || { no "mktemp"; summary; }
trap 'rm -rf "$T"' EXIT
PREFIX=/usr/local
DEST=$T/dest
P=$DEST$PREFIX
H=$P/bin/hakmem
VERSION=$(sed -n 's/^VERSION *:= *//p' Makefile)
# A make of its own: not the jobserver of a `make test` this runs under.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory "$@"; }
# The HAKMEM_* settings of the caller would reach every run below.
for v in $(compgen -e | grep '^HAKMEM_'); do unset "$v"; done
unset LD_PRELOAD

# ---- install ------------------------------------------------------------------
if out=$(mk install DESTDIR="$DEST" PREFIX="$PREFIX" 2>&1); then
    ok "make install DESTDIR=\$TMP PREFIX=$PREFIX"
else
    no "make install DESTDIR=\$TMP PREFIX=$PREFIX" "$out"
    summary
fi
missing=""
for f in bin/hakmem lib/libhakmem.so lib/libhakmem_hardened.so lib/libhakmem.a include/hakmem.h \
         lib/pkgconfig/hakmem.pc lib/cmake/hakmem/hakmem-config.cmake \
         lib/cmake/hakmem/hakmem-config-version.cmake libexec/hakmem/heap_flamegraph.py; do
    [ -f "$P/$f" ] || missing="$missing $f"
done
[ -x "$H" ] || missing="$missing (bin/hakmem not executable)"
[ -z "$missing" ] && ok "installed files" || no "installed files: missing$missing"
grep -qx "Version: $VERSION" "$P/lib/pkgconfig/hakmem.pc" && grep -qx "prefix=$PREFIX" "$P/lib/pkgconfig/hakmem.pc" &&
    ok "hakmem.pc: Version $VERSION, prefix $PREFIX" || no "hakmem.pc" "$(cat "$P/lib/pkgconfig/hakmem.pc")"

# ---- the launcher: POSIX sh -----------------------------------------------------
out=$(sh -n "$H" 2>&1) && ok "sh -n hakmem" || no "sh -n hakmem" "$out"
if command -v dash >/dev/null 2>&1; then
    out=$(dash -n "$H" 2>&1) && ok "dash -n hakmem" || no "dash -n hakmem" "$out"
fi
if command -v shellcheck >/dev/null 2>&1; then
    out=$(shellcheck -s sh "$H" 2>&1) && ok "shellcheck -s sh hakmem" || no "shellcheck -s sh hakmem" "$out"
fi
out=$("$H" --version 2>&1)
[ "$out" = "hakmem $VERSION" ] && ok "hakmem --version: $out" || no "hakmem --version (want hakmem $VERSION)" "$out"
out=$("$H" --help 2>&1) && grep -q '^usage: hakmem' <<<"$out" && ok "hakmem --help" || no "hakmem --help" "$out"

# ---- running programs -----------------------------------------------------------
run() {   # ARGS...: the launcher's stdout in OUT, stderr in ERR, status in RC
    "$H" "$@" >"$T/out" 2>"$T/err"
    RC=$?
    OUT=$(cat "$T/out") ERR=$(cat "$T/err")
}
run -- sh -c 'echo ok'
[ "$RC" -eq 0 ] && [ "$OUT" = ok ] && [ -z "$ERR" ] && ok "hakmem -- sh -c 'echo ok'" ||
    no "hakmem -- sh -c 'echo ok': status $RC" "$OUT$ERR"
run -- false
[ "$RC" -eq 1 ] && ok "hakmem -- false: status 1" || no "hakmem -- false: status $RC, not 1" "$ERR"
run sh -c 'exit 7'
[ "$RC" -eq 7 ] && ok "hakmem sh -c 'exit 7': status 7" || no "hakmem sh -c 'exit 7': status $RC" "$ERR"
run -- "$T/no-such-program"
[ "$RC" -eq 127 ] && ok "a missing program: status 127" || no "a missing program: status $RC, not 127" "$ERR"

# The library of the install is preloaded (in the child's maps), and an
# LD_PRELOAD already set stays, with its library loaded too.
libdir=$(cd "$P/lib" && pwd -P)
echo 'int hakmem_test_mark;' | ${CC:-cc} -shared -fPIC -x c - -o "$T/libmark.so" 2>"$T/err" ||
    no "cc -shared libmark.so" "$(cat "$T/err")"
LD_PRELOAD=$T/libmark.so run -- sh -c 'echo "$LD_PRELOAD"; cat /proc/$$/maps'
if [ "$RC" -eq 0 ] && [ "$(head -n 1 <<<"$OUT")" = "$libdir/libhakmem.so:$T/libmark.so" ] &&
   grep -q " $libdir/libhakmem.so\$" <<<"$OUT" && grep -q " $T/libmark.so\$" <<<"$OUT"; then
    ok "LD_PRELOAD already set is kept (hakmem's library first)"
else
    no "LD_PRELOAD already set is kept: status $RC" "$(head -n 1 <<<"$OUT")$ERR"
fi
run --hardened -- sh -c 'cat /proc/$$/maps'
[ "$RC" -eq 0 ] && grep -q " $libdir/libhakmem_hardened.so\$" <<<"$OUT" && ! grep -q 'libhakmem\.so$' <<<"$OUT" &&
    ok "--hardened preloads libhakmem_hardened.so" || no "--hardened: status $RC" "$ERR"
# (true, not sh: dash leaves with _exit, which runs no exit report)
run --stats -- true
[ "$RC" -eq 0 ] && grep -q '^hakmem stats' <<<"$ERR" && ok "--stats: the exit report" ||
    no "--stats: status $RC" "$ERR"

# Settings: a wrong name or value stops the launcher before the program,
# with the library's own line; a right one passes.
refused() {   # SETTING WORDS: --set SETTING must be refused with WORDS
    rm -f "$T/ran"
    run --set "$1" -- sh -c "touch '$T/ran'"
    if [ "$RC" -eq 125 ] && [ ! -e "$T/ran" ] && grep -q "^hakmem: .*$2" <<<"$ERR"; then
        ok "--set $1 refused: $(head -n 1 <<<"$ERR")"
    else
        no "--set $1: status $RC, program ran: $([ -e "$T/ran" ] && echo yes || echo no)" "$ERR"
    fi
}
refused HAKMEM_NOPE=1 "unknown setting HAKMEM_NOPE"
refused HAKMEM_L2_RING_CAP=100000 "HAKMEM_L2_RING_CAP=100000 is outside"
refused HAKMEM_SS_LOOKUP_KIND=tree "HAKMEM_SS_LOOKUP_KIND=tree is not one of"
refused HAKMEM_VERBOSE=2 "HAKMEM_VERBOSE=2 is outside"
run --set HAKMEM_PURGE_DELAY_MS=0 --set SS_LOOKUP_KIND=radix -- sh -c 'echo "$HAKMEM_PURGE_DELAY_MS $HAKMEM_SS_LOOKUP_KIND"'
[ "$RC" -eq 0 ] && [ "$OUT" = "0 radix" ] && [ -z "$ERR" ] && ok "--set of valid settings (HAKMEM_ may be left out)" ||
    no "--set of valid settings: status $RC" "$OUT$ERR"
run --set HAKMEM_VERBOSE=1 -- sh -c 'echo ok'
[ "$RC" -eq 0 ] && [ "$OUT" = ok ] && grep -q '^hakmem: HAKMEM_VERBOSE=1 ' <<<"$ERR" &&
    ok "--set HAKMEM_VERBOSE=1 passes (the library lists the settings)" || no "--set HAKMEM_VERBOSE=1: status $RC" "$ERR"

# ---- profiles -------------------------------------------------------------------
# The interpreter itself, not a wrapper script (pyenv's would write
# profiles of its own shells); ctypes' malloc keeps 30 MB live at exit.
PY=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)
ALLOC='import ctypes; m = ctypes.CDLL(None).malloc; m.restype = ctypes.c_void_p; keep = [m(100000) for _ in range(300)]'
if [ -z "$PY" ]; then
    no "python3 not found (scripts/install_deps.sh test installs it)"
else
    ( cd "$T" && exec "$H" --profile p.%p -- "$PY" -c "$ALLOC" ) >"$T/out" 2>"$T/err"
    RC=$?
    profiles=""
    for f in "$T"/p.*; do
        case $f in *.folded|"$T/p.*") ;; *) profiles="$profiles${profiles:+ }${f##*/}" ;; esac
    done
    prof=$T/$profiles
    if [ "$RC" -eq 0 ] && [ "$(wc -w <<<"$profiles")" -eq 1 ] && head -n 1 "$prof" | grep -q '^heap profile:' &&
       [ -s "$prof.folded" ]; then
        ok "--profile (relative, %p) writes $profiles and $profiles.folded"
    else
        no "--profile: status $RC, files: $(ls "$T")" "$(cat "$T/err")"
        prof=""
    fi
    if [ -n "$prof" ]; then
        # A frame named in the folded stacks (dladdr: exported names) must be
        # named by the text too.
        names=$(tr ';' '\n' <"$prof.folded" | sed 's/ [0-9.]*$//' | grep -E '^[A-Za-z_][A-Za-z0-9_]*$' | sort -u)
        named() { awk '{ print $NF }' | grep -Fx -m 1 -f <(printf '%s\n' "$names"); }   # the first one
        if ! command -v google-pprof >/dev/null 2>&1; then
            no "google-pprof is not installed (scripts/install_deps.sh test installs google-perftools)"
        fi
        out=$("$H" prof "$prof" 2>"$T/err")
        RC=$?
        frame=$(named <<<"$out")
        if [ "$RC" -eq 0 ] && grep -q '^Total: ' <<<"$out" && ! grep -q 'named by dladdr' <<<"$out" && [ -n "$frame" ]; then
            ok "hakmem prof FILE: google-pprof's text names a frame ($frame)"
        else
            no "hakmem prof FILE: status $RC" "$(head -n 5 <<<"$out")$(cat "$T/err")"
        fi
        out=$("$H" prof "$prof" --folded 2>"$T/err")
        RC=$?
        frame=$(named <<<"$out")
        [ "$RC" -eq 0 ] && grep -q 'named by dladdr' <<<"$out" && [ -n "$frame" ] &&
            ok "hakmem prof FILE --folded: the folded stacks' text names a frame ($frame)" ||
            no "hakmem prof FILE --folded: status $RC" "$(head -n 5 <<<"$out")$(cat "$T/err")"
        for mode in svg flame; do
            out=$("$H" prof "$prof" --$mode "$T/$mode.svg" 2>&1)
            RC=$?
            [ "$RC" -eq 0 ] && grep -q '<svg' "$T/$mode.svg" 2>/dev/null && ok "hakmem prof FILE --$mode OUT: $(tail -n 1 <<<"$out")" ||
                no "hakmem prof FILE --$mode OUT: status $RC" "$out"
        done
    fi
    run --leaks -- "$PY" -c "$ALLOC"
    [ "$RC" -eq 0 ] && grep -q '^hakmem: leak report' <<<"$ERR" && ok "--leaks: the leak report" ||
        no "--leaks: status $RC" "$ERR"
fi

# ---- the CMake package ------------------------------------------------------------
if ! command -v cmake >/dev/null 2>&1; then
    no "cmake is not installed (scripts/install_deps.sh test installs it)"
else
    mkdir -p "$T/proj"
    cat >"$T/proj/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(use_hakmem C)
find_package(hakmem 0.1 REQUIRED)
foreach(t hakmem hakmem-static hardened)
  add_executable(prog-${t} prog.c)
  target_link_libraries(prog-${t} PRIVATE hakmem::${t})
endforeach()
EOF
    # hakmem.h from the package's include directory; malloc must be hakmem's.
    cat >"$T/proj/prog.c" <<'EOF'
#include <hakmem.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    void *p = malloc(100);
    int ours = hak_tier_of(p) != HAK_TIER_NONE;
    free(p);
    puts(ours ? "malloc is hakmem's" : "malloc is not hakmem's");
    return !ours;
}
EOF
    if out=$(cmake -S "$T/proj" -B "$T/proj/build" -DCMAKE_PREFIX_PATH="$P" 2>&1 &&
             cmake --build "$T/proj/build" 2>&1); then
        ok "a CMake project configures and builds against find_package(hakmem 0.1)"
        for t in hakmem hakmem-static hardened; do
            bin=$T/proj/build/prog-$t
            needed=$(readelf -d "$bin" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep hakmem)
            case $t in
                hakmem) want=libhakmem.so ;;
                hardened) want=libhakmem_hardened.so ;;
                *) want="" ;;
            esac
            out=$("$bin" 2>&1)
            RC=$?
            [ "$RC" -eq 0 ] && [ "$needed" = "$want" ] && ok "hakmem::$t: the program runs on hakmem (needs: ${needed:-no libhakmem})" ||
                no "hakmem::$t: status $RC, needs '$needed' (want '$want')" "$out"
        done
    else
        no "a CMake project against the package" "$out"
    fi
    # Versions: 0.x accepts its own minor version only; no other major.
    mkdir -p "$T/ver"
    cat >"$T/ver/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(ver NONE)
foreach(v 0 0.1 ${HAK_VERSION} 0.99 1 99.0)
  unset(hakmem_FOUND)
  find_package(hakmem ${v} QUIET)
  list(APPEND found "${v}:${hakmem_FOUND}")
endforeach()
message(STATUS "found ${found}")
EOF
    out=$(cmake -S "$T/ver" -B "$T/ver/build" -DCMAKE_PREFIX_PATH="$P" -DHAK_VERSION="$VERSION" 2>&1)
    want="found 0:1;0.1:1;$VERSION:1;0.99:0;1:0;99.0:0"
    grep -qF -- "-- $want" <<<"$out" && ok "hakmem-config-version.cmake ($want)" ||
        no "hakmem-config-version.cmake (want $want)" "$(grep -- '-- found' <<<"$out")"
fi

# ---- the build tree's ./hakmem ---------------------------------------------------------
if [ -x ./hakmem ]; then
    out=$(./hakmem -- sh -c 'echo "ok $LD_PRELOAD"' 2>&1)
    [ "$out" = "ok $(pwd -P)/libhakmem.so" ] && ok "./hakmem of the build tree preloads ./libhakmem.so" ||
        no "./hakmem of the build tree" "$out"
else
    no "./hakmem missing (make lib writes it)"
fi

# ---- uninstall --------------------------------------------------------------------
out=$(mk uninstall DESTDIR="$DEST" PREFIX="$PREFIX" 2>&1) || no "make uninstall" "$out"
left=$(find "$DEST" ! -type d)
[ -z "$left" ] && ok "make uninstall leaves no file" || no "make uninstall left files" "$left"

cd "$ROOT" || exit 1
summary
