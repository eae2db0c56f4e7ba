#!/usr/bin/env bash
# Installs a folder's npm packages exactly as its package-lock.json pins them
# (`npm ci`, no install scripts). Idempotent: when node_modules was installed
# from the current lock file (a stamp holds its sha256) it exits at once; a
# changed lock file reinstalls. Used for web/ (the libraries the chat page
# embeds; run by the build, cmake/Ds4ChatPage.cmake) and tests/web
# (playwright-core for the page's browser test).
#
# Usage: scripts/npm-ci.sh FOLDER   (relative to the checkout, or absolute)
set -euo pipefail

die() { echo "npm-ci: $*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -eq 1 ]] || die "usage: scripts/npm-ci.sh FOLDER"
case $1 in
  /*) dir=$1 ;;
  *) dir="$repo_root/$1" ;;
esac
lock="$dir/package-lock.json"
stamp="$dir/node_modules/.ds4-installed"

for tool in npm sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed (run scripts/install-deps.sh)"
done
[[ -f "$lock" ]] || die "$lock is missing"
want="$(sha256sum "$lock" | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
registry="$(npm config get registry 2>/dev/null || echo "the npm registry")"
echo "npm-ci: installing the packages of $1 from $registry"
if ! npm_log="$(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts \
      --fetch-retries=2 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 \
      --fetch-timeout=60000 --loglevel=error 2>&1)"; then
  echo "$npm_log" | tail -n 5 >&2
  die "npm ci failed in $1; check network access to $registry and rerun"
fi
echo "$want" > "$stamp"
