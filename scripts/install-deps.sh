#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, only those missing,
# plus any packages named as arguments (`make web-test-deps` adds chromium
# for the chat page's browser test). Safe to run repeatedly; does nothing
# when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates lld
  clang libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev libssl-dev
  libcpp-httplib-dev libedit-dev liburing-dev
  libzmq3-dev cppzmq-dev libopenmpi-dev openmpi-bin
  nodejs npm python3 tmux
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # nodejs/npm may come from outside Debian (e.g. a preinstalled Node); accept a working binary.
    case "$p" in
      nodejs) command -v node >/dev/null 2>&1 && continue ;;
      npm) command -v npm >/dev/null 2>&1 && continue ;;
      python3) command -v python3 >/dev/null 2>&1 && continue ;;
    esac
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
