# Sourced by the tests that run ds4-server processes (under mpirun or not):
#   $work         a temporary folder, removed on exit
#   fail MSG      prints MSG and every $work/*.log, exits 1
#   start NAME CMD...  runs CMD in the background (its own process, so a kill
#                 reaches it: never a shell function), log in $work/NAME.log,
#                 DS4_LOCK_FILE=$work/NAME.lock (a server writes its pid there)
#   port_of NAME  the HTTP port NAME's log says it listens on (waits up to 60 s)
#   reply PORT    the content of the reply to the chat request $body, JSON-quoted
# On exit every started process gets SIGTERM, then SIGKILL a second later.
work=$(mktemp -d)
pids=()
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; sed 's/^/  | /' "$f" >&2; done; exit 1; }
cleanup() {
  local status=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
start() {
  local name=$1
  shift
  DS4_LOCK_FILE="$work/$name.lock" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
}
port_of() {
  local p=""
  for _ in $(seq 1 300); do
    p=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/$1.log" | head -n 1)
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.2
  done
  fail "$1: no 'listening on' line after 60 s"
}
reply() { curl -fsS "http://127.0.0.1:$1/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" |
  python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["message"]["content"]))'; }
