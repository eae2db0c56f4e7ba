#!/usr/bin/env bash
# Installs the JavaScript clients the ds4-server tests drive (tests/server:
# openai and @anthropic-ai/sdk at the exact versions package.json pins, the
# whole tree fixed by package-lock.json) with scripts/npm-ci.sh (idempotent:
# a changed lock file reinstalls), after checking Node is new enough for them.
#
# Usage: scripts/server-test-setup.sh
set -euo pipefail

die() { echo "server-test-setup: $*" >&2; exit 1; }
say() { echo "server-test-setup: $*"; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
test_dir="$repo_root/tests/server"
readonly LOCK="$test_dir/package-lock.json"

for tool in node npm; do
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

"$repo_root/scripts/npm-ci.sh" tests/server || die "npm ci failed in tests/server"
versions="$(cd "$test_dir" && node -p "['openai', '@anthropic-ai/sdk'].map((p) =>
  p + '@' + JSON.parse(require('fs').readFileSync('node_modules/' + p + '/package.json', 'utf8')).version).join(', ')")"
say "installed $versions"
