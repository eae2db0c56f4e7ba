#!/usr/bin/env bash
# CTest runner for one tests/server/*.test.mjs file: `node --test FILE`, or exit
# 77 (CTest SKIP_RETURN_CODE) when Node 20+ or the pinned SDKs are missing —
# scripts/server-test-setup.sh installs them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v node >/dev/null 2>&1; then
  echo "server tests skipped: node is not installed (run scripts/install-deps.sh)"
  exit 77
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if (( major < 20 )); then
  echo "server tests skipped: node $(node --version) is older than 20"
  exit 77
fi
if [[ ! -f "$here/node_modules/openai/package.json" || ! -f "$here/node_modules/@anthropic-ai/sdk/package.json" ]]; then
  echo "server tests skipped: tests/server/node_modules is missing (run scripts/server-test-setup.sh)"
  exit 77
fi
exec node --test "$@"
