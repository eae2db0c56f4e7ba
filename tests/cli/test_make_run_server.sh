#!/usr/bin/env bash
# `make run MODE=server` as a person uses it: with no model it generates the
# demo model, starts ds4-server, prints the address and a curl example; the
# curl example's endpoint answers (plain and streamed), /health and /metrics
# answer, and SIGTERM shuts it down cleanly (make exits 0).
# Usage: test_make_run_server.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
fail() { echo "FAIL: $*" >&2; [ -f "${log:-}" ] && sed 's/^/  | /' "$log" >&2; exit 1; }

work=$(mktemp -d)
log="$work/make.log"
make_pid=""
cleanup() {
  local status=$?
  if [ -n "$make_pid" ] && kill -0 "$make_pid" 2>/dev/null; then
    pkill -TERM -f "ds4-server -m $work/" 2>/dev/null || true
    sleep 1
    kill -KILL "$make_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

export DS4_LOCK_FILE="$work/ds4.lock"
(cd "$src" && exec make run MODE=server BUILD="$build" MODEL="$work/none.gguf" DEMO_DIR="$work/demo" \
  ARGS="--port 0 -c 512 -t 1") >"$log" 2>&1 &
make_pid=$!

port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -n 1)
  [ -n "$port" ] && break
  kill -0 "$make_pid" 2>/dev/null || fail "make run MODE=server exited before listening"
  sleep 0.2
done
[ -n "$port" ] || fail "no 'listening on' line after 120 s"
grep -q "DEMO model with RANDOM" "$log" || fail "no demo-model banner"
grep -q "this server serves" "$log" || fail "the banner does not say it is the server"
grep -q "try: curl http://127.0.0.1:$port/v1/chat/completions" "$log" || fail "no curl example"

base="http://127.0.0.1:$port"
[ "$(curl -s "$base/health")" = '{"status":"ok"}' ] || fail "/health"
body='{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"Hello"}],"max_tokens":3,"think":false}'
reply=$(curl -s "$base/v1/chat/completions" -H 'Content-Type: application/json' -d "$body")
python3 - "$reply" <<'PY' || fail "chat completion: $reply"
import json, sys
r = json.loads(sys.argv[1])
assert r["object"] == "chat.completion", r
assert r["choices"][0]["finish_reason"] in ("stop", "length"), r
assert r["usage"]["completion_tokens"] <= 3, r
PY
stream=$(curl -s -N "$base/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "${body%\}},\"stream\":true}")
grep -q '^data: \[DONE\]$' <<<"$stream" || fail "stream did not end with [DONE]: $stream"
# Read whole before matching: `curl | grep -q` under pipefail fails when grep
# stops reading at the match and curl is still writing (SIGPIPE).
metrics=$(curl -s "$base/metrics")
grep -q '^ds4_requests_total{api="chat",status="200"} 2$' <<<"$metrics" || fail "/metrics does not count 2 chats"

pkill -TERM -f "ds4-server -m $work/" || fail "no ds4-server process to stop"
status=0
wait "$make_pid" || status=$?
make_pid=""
[ "$status" -eq 0 ] || fail "make exited with $status after SIGTERM"
grep -q "ds4-server: stopped" "$log" || fail "no clean shutdown line"
echo "make run MODE=server: all checks passed"
