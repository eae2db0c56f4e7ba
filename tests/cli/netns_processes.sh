# Sourced by the tests that run ds4-server and ds4-worker across network
# namespaces. Sourcing it exits 77 (skipped) without root or iproute2, makes
# $work (a temporary folder) and pids=(); the caller sets $coord once the
# coordinator's HTTP port is known.
#   remove_on_exit HOST_IF NS...  on exit: every started process and every
#                      process in the namespaces killed, the host-side veth
#                      HOST_IF and the namespaces deleted, $work removed
#   fail MSG           prints MSG and every $work/*.log, exits 1
#   start NAME CMD...  runs CMD in the background, disowned (no job-control
#                      notices when cleanup kills it), log in $work/NAME.log
#   http_port NAME     the HTTP port NAME's log says it listens on
#   health             /health of $coord: prints the status code, the body
#                      in $work/health.json
#   wait_health CODE S waits up to S seconds for /health to answer CODE
#   reply PORT         the content of the reply to the chat request $body
[ "$(id -u)" = 0 ] || { echo "not root: network namespaces need root"; exit 77; }
command -v ip >/dev/null || { echo "no ip command (iproute2)"; exit 77; }
work=$(mktemp -d)
pids=()
netns_host_if=""
netns_names=()
netns_teardown() {
  local status=$?
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for ns in "${netns_names[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true; done
  [ -n "$netns_host_if" ] && { ip link del "$netns_host_if" 2>/dev/null || true; }
  for ns in "${netns_names[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$work"
  exit "$status"
}
remove_on_exit() {  # host_if ns...
  netns_host_if=$1
  shift
  netns_names=("$@")
  trap netns_teardown EXIT
}
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; sed 's/^/  | /' "$f" >&2; done; exit 1; }
start() {  # name args...
  local name=$1
  shift
  DS4_LOCK_FILE="$work/$name.lock" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  disown $!
}
http_port() {
  for _ in $(seq 1 300); do
    local p
    p=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/$1.log" | head -n 1)
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.2
  done
  fail "$1: no 'listening on' line"
}
health() { curl -s -o "$work/health.json" -w '%{http_code}' "http://127.0.0.1:$coord/health"; }
wait_health() {  # code seconds
  for _ in $(seq 1 $(( $2 * 10 ))); do [ "$(health)" = "$1" ] && return 0; sleep 0.1; done
  fail "/health did not answer $1 within $2 s: $(cat "$work/health.json")"
}
reply() { curl -fsS "http://127.0.0.1:$1/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" |
  python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["message"]["content"]))'; }
