#!/usr/bin/env bash
# Installs the JavaScript clients the ds4-server tests drive (tests/server:
# openai and @anthropic-ai/sdk at the exact versions package.json pins, the
# whole tree fixed by package-lock.json) with `npm ci`. Idempotent: when
# node_modules was installed from the current package-lock.json (stamp holds
# its sha256) it exits at once; a changed lock file reinstalls.
#
# Usage: scripts/server-test-setup.sh
set -euo pipefail

die() { echo "server-test-setup: $*" >&2; exit 1; }
say() { echo "server-test-setup: $*"; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
test_dir="$repo_root/tests/server"
readonly LOCK="$test_dir/package-lock.json"
readonly STAMP="$test_dir/node_modules/.ds4-installed"

for tool in node npm sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed (run scripts/install-deps.sh)"
done
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if (( node_major < 20 )); then
  # Debian 12's own nodejs is 18: the SDK tests are then skipped (CTest shows
  # them as skipped), everything else still runs.
  echo "server-test-setup: WARNING: node $(node --version) is too old for the pinned SDKs (Node 20 or newer);" \
       "the server SDK tests will be skipped" >&2
  exit 0
fi
[[ -f "$LOCK" ]] || die "$LOCK is missing"

want="$(sha256sum "$LOCK" | cut -d' ' -f1) node-$node_major"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" &&
      -f "$test_dir/node_modules/openai/package.json" &&
      -f "$test_dir/node_modules/@anthropic-ai/sdk/package.json" ]]; then
  say "server test clients already installed in tests/server/node_modules"
  exit 0
fi

registry="$(npm config get registry 2>/dev/null || echo "the npm registry")"
say "installing the server test clients from $registry (npm ci)"
if ! npm_log="$(cd "$test_dir" && npm ci --no-audit --no-fund --ignore-scripts \
      --fetch-retries=2 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 \
      --fetch-timeout=60000 --loglevel=error 2>&1)"; then
  echo "$npm_log" | tail -n 5 >&2
  die "npm ci failed in tests/server; check network access to $registry (or npm's registry/proxy config) and rerun"
fi
echo "$want" > "$STAMP"
versions="$(cd "$test_dir" && node -p "['openai', '@anthropic-ai/sdk'].map((p) =>
  p + '@' + JSON.parse(require('fs').readFileSync('node_modules/' + p + '/package.json', 'utf8')).version).join(', ')")"
say "installed $versions"
