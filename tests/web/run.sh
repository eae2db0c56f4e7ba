#!/usr/bin/env bash
# CTest runner for the chat page's browser test: `node --test` on
# chat_page.test.mjs, or exit 77 (CTest SKIP_RETURN_CODE) naming what is
# missing: Node 20+, playwright-core (scripts/npm-ci.sh tests/web) or
# Chromium (scripts/install-deps.sh chromium). `make test` installs both.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
skip() { echo "chat page test skipped: $*"; exit 77; }
command -v node >/dev/null 2>&1 || skip "node is not installed"
(( $(node -p 'process.versions.node.split(".")[0]') >= 20 )) || skip "node $(node --version) is older than 20"
[[ -f "$here/node_modules/playwright-core/package.json" ]] || skip "tests/web/node_modules is missing (make web-test-deps)"
[[ -x "${DS4_CHROMIUM:-/usr/bin/chromium}" ]] || skip "Chromium is not installed (make web-test-deps)"
exec node --test "$here/chat_page.test.mjs"
