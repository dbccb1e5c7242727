# apt_install PKG...: install Debian packages a script needs, best effort and
# quiet (apt-get update once per script run); returns apt-get's status.
# Sourced by the scripts that install what they need; APT_WHO names the
# caller in its messages, which go to standard error.
APT_UPDATED=0
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "${APT_WHO:-hakmem}: apt-get not found; please install: $*" >&2
    return 1
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "${APT_WHO:-hakmem}: not root and no sudo; please install: $*" >&2
      return 1
    fi
    sudo=(sudo -n)
  fi
  if [ "$APT_UPDATED" = 0 ]; then
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 ||
      echo "${APT_WHO:-hakmem}: warning: apt-get update failed" >&2
    APT_UPDATED=1
  fi
  echo "${APT_WHO:-hakmem}: installing $*" >&2
  # Keep the configuration files already there, without asking.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@" >/dev/null 2>&1
}
