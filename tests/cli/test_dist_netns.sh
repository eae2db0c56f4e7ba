#!/usr/bin/env bash
# The pipeline across two "hosts" (issue 25): ds4-server coordinates on the
# host side of a veth pair, ds4-worker runs in its own network namespace
# behind the other end (10.77.x.1 <-> 10.77.x.2). Truth: one ds4-server on
# the same model, greedy replies equal. Then the link is taken down in the
# middle of a generation: the request fails within 5 s (503 or a stream
# error naming the stage), the server stays up and /health names the
# missing layers; with the link up again the same worker process rejoins by
# itself and the next reply equals one process again.
# Needs root and `ip netns` (skipped with 77 otherwise).
# Usage: test_dist_netns.sh SERVER_BIN WORKER_BIN MKMODEL_BIN
set -euo pipefail
server=$1
worker_bin=$2
mkmodel=$3
# shellcheck source=netns_processes.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns_processes.sh"
ns="ds4w$$"
net="10.77.$(( $$ % 250 + 1 ))"
host_if="d4h$$"
remove_on_exit "$host_if" "$ns"

ip netns add "$ns" || { echo "cannot make a network namespace here"; exit 77; }
ip link add "$host_if" type veth peer name eth0 netns "$ns"
ip addr add "$net.1/24" dev "$host_if"
ip link set "$host_if" up
ip netns exec "$ns" ip addr add "$net.2/24" dev eth0
ip netns exec "$ns" ip link set eth0 up
ip netns exec "$ns" ip link set lo up

"$mkmodel" --preset tiny --mix f32 --seed 7 --out "$work/tiny.gguf" >/dev/null
"$worker_bin" --gen-key "$work/cluster.key" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

body='{"model":"deepseek-v4-flash","max_tokens":12,"temperature":0,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Name three rivers."}]}'

start single "$server" -m "$work/tiny.gguf" --port 0 -c 2048 -t 1 --cache-ram 0
start coordinator "$server" -m "$work/tiny.gguf" --port 0 -c 2048 -t 1 --cache-ram 0 \
  --dist-listen "$net.1:$port" --dist-key "$work/cluster.key" --layers 0:3
start worker ip netns exec "$ns" "$worker_bin" -m "$work/tiny.gguf" --coordinator "$net.1:$port" \
  --dist-key "$work/cluster.key" --layers 3:output -c 2048 -t 1
single=$(http_port single)
coord=$(http_port coordinator)
wait_health 200 20
grep -q "joined: layers 3:output" "$work/coordinator.log" || fail "the coordinator did not log the worker joining"
want=$(reply "$single")
[ "$(reply "$coord")" = "$want" ] || fail "through the namespace the reply differs from one process"

# A long streamed generation; the link goes down once it is under way.
long='{"model":"deepseek-v4-flash","max_tokens":1800,"temperature":0,"stream":true,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Write a long story."}]}'
curl -sN "http://127.0.0.1:$coord/v1/chat/completions" -H 'Content-Type: application/json' -d "$long" \
  >"$work/stream.txt" 2>/dev/null &
stream_pid=$!
for _ in $(seq 1 100); do [ "$(grep -c '^data: ' "$work/stream.txt" 2>/dev/null)" -ge 5 ] && break; sleep 0.05; done
ip link set "$host_if" down
down_at=$(date +%s%N)
finished=""
for _ in $(seq 1 100); do kill -0 "$stream_pid" 2>/dev/null || { finished=1; break; }; sleep 0.05; done
[ -n "$finished" ] || fail "the stream did not end within 5 s of the link going down"
if grep -q '"finish_reason":"length"' "$work/stream.txt"; then
  echo "note: the generation finished before the link went down" >&2
else
  grep -q "2:output\|3:output" "$work/stream.txt" || fail "the stream's error names no stage: $(tail -c 400 "$work/stream.txt")"
fi
code=$(curl -s -o "$work/after.json" -w '%{http_code}' "http://127.0.0.1:$coord/v1/chat/completions" \
  -H 'Content-Type: application/json' -d "$body")
elapsed=$(( ($(date +%s%N) - down_at) / 1000000 ))
[ "$code" = 503 ] || fail "a request with the link down got $code: $(cat "$work/after.json")"
grep -q "3:output" "$work/after.json" || fail "the 503 names no stage: $(cat "$work/after.json")"
[ "$elapsed" -lt 5000 ] || fail "the error came $elapsed ms after the link went down"
wait_health 503 2
grep -q '"missing":"3:output"' "$work/health.json" || fail "/health: $(cat "$work/health.json")"
kill -0 "${pids[1]}" || fail "the coordinator died"

ip link set "$host_if" up
wait_health 200 20
# Serving again within 5 s of the worker's return (its old connection may
# take a moment to be found gone).
again=""
for _ in $(seq 1 50); do again=$(reply "$coord" 2>/dev/null) && break; again=""; sleep 0.1; done
[ "$again" = "$want" ] || fail "after the link came back the reply differs from one process (got '$again')"
echo "PASS: across a veth pair; link down -> 503 in ${elapsed} ms; the worker rejoined"
