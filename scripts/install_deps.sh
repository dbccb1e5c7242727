#!/usr/bin/env bash
# Install what hakmem needs on a Debian/Ubuntu machine.
#   scripts/install_deps.sh test    build + test dependencies (errors are fatal)
#   scripts/install_deps.sh bench   peer allocators + gnuplot (failures are warnings)
# Idempotent: prints nothing and touches nothing when everything is present.
set -euo pipefail

MODE="${1:-test}"
export DEBIAN_FRONTEND=noninteractive

case "$MODE" in
  # g++ builds the C++ test (tests/unit/test_cxx_new.cc: operator new);
  # sqlite3, redis-server and redis-tools are driven by scripts/run_apps.sh;
  # google-perftools (google-pprof) and binutils (addr2line, nm, which
  # google-pprof runs) read the heap profiles in tests/unit/test_profile.c
  # and in scripts/test_install.sh (hakmem prof), where cmake builds a
  # project against the installed CMake package.
  test)  PKGS=(gcc g++ make libc6-dev libcmocka-dev python3 git perl coreutils diffutils mawk
               sqlite3 redis-server redis-tools google-perftools graphviz binutils cmake) ;;
  bench) PKGS=(libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 gnuplot-nox python3) ;;
  *) echo "usage: $0 test|bench" >&2; exit 2 ;;
esac

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

MISSING=()
for p in "${PKGS[@]}"; do
  installed "$p" || MISSING+=("$p")
done
[ "${#MISSING[@]}" -eq 0 ] && exit 0

APT_WHO=install_deps
. "$(dirname "$0")/apt.sh"

if [ "$MODE" = test ]; then
  apt_install "${MISSING[@]}" || true
  still=()
  for p in "${MISSING[@]}"; do installed "$p" || still+=("$p"); done
  if [ "${#still[@]}" -ne 0 ]; then
    echo "install_deps: failed to install: ${still[*]}" >&2
    exit 1
  fi
else
  # Peers are optional: install one by one so one unavailable package does not block the rest.
  for p in "${MISSING[@]}"; do
    apt_install "$p" || echo "install_deps: warning: could not install $p (benchmarks will skip it)" >&2
  done
fi
exit 0
