#!/usr/bin/env bash
# Workers handing hidden states to each other across "hosts" (issue 25): a
# LAN of three network namespaces' worth (a bridge in its own namespace),
# ds4-server coordinating layers 0:1 on the host side (10.78.x.1), worker A
# (1:3) in one namespace (.2), worker B (3:output) in another (.3), both with
# their default forward address (every interface, any port). Truth: one
# ds4-server on the same model, greedy replies equal.
#  1. A hands over to B at the address the coordinator sees B at (/health
#     names it; the coordinator sends B nothing: /metrics).
#  2. B's link goes down in the middle of a generation: the request fails
#     within 5 s naming 3:output, the server stays up; with the link back B
#     rejoins by itself and the replies equal one process again.
#  3. A can no longer reach B (a blackhole route in A's namespace) while
#     both still reach the coordinator: A's connection to B goes silent and
#     breaks, the request in flight fails within 8 s naming both stages
#     instead of hanging, and the next requests go to B through the
#     coordinator and equal one process.
# Needs root and `ip netns` with bridges (skipped with 77 otherwise).
# Usage: test_dist_netns_handover.sh SERVER_BIN WORKER_BIN MKMODEL_BIN
set -euo pipefail
server=$1
worker_bin=$2
mkmodel=$3
# shellcheck source=netns_processes.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns_processes.sh"
lan="d4lan$$"
nsa="d4a$$"
nsb="d4b$$"
net="10.78.$(( $$ % 250 + 1 ))"
host_if="d4l$$"
remove_on_exit "$host_if" "$nsa" "$nsb" "$lan"

ip netns add "$lan" || { echo "cannot make a network namespace here"; exit 77; }
ip -n "$lan" link add br0 type bridge 2>/dev/null || { echo "no bridge support"; exit 77; }
ip -n "$lan" link set br0 up
ip link add "$host_if" type veth peer name port0 netns "$lan"
ip -n "$lan" link set port0 master br0 up
ip addr add "$net.1/24" dev "$host_if"
ip link set "$host_if" up
plug() {  # namespace port address
  ip netns add "$1"
  ip -n "$1" link add eth0 type veth peer name "$2" netns "$lan"
  ip -n "$lan" link set "$2" master br0 up
  ip -n "$1" addr add "$3/24" dev eth0
  ip -n "$1" link set eth0 up
  ip -n "$1" link set lo up
}
plug "$nsa" porta "$net.2"
plug "$nsb" portb "$net.3"

"$mkmodel" --preset tiny --mix f32 --seed 9 --out "$work/tiny.gguf" >/dev/null
"$worker_bin" --gen-key "$work/cluster.key" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

sent_to_b() {
  curl -fsS "http://127.0.0.1:$coord/metrics" | sed -n 's/^ds4_dist_stage_sent_bytes_total{layers="3:output"} //p'
}
body='{"model":"deepseek-v4-flash","max_tokens":12,"temperature":0,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Name three rivers."}]}'
# A long streamed generation in the background (its output in $work/$1).
long_stream() {
  local long='{"model":"deepseek-v4-flash","max_tokens":1800,"temperature":0,"stream":true,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Write a long story."}]}'
  curl -sN "http://127.0.0.1:$coord/v1/chat/completions" -H 'Content-Type: application/json' -d "$long" \
    >"$work/$1" 2>/dev/null &
  stream_pid=$!
  for _ in $(seq 1 100); do [ "$(grep -c '^data: ' "$work/$1" 2>/dev/null)" -ge 5 ] && break; sleep 0.05; done
}
# Waits at most $2 deciseconds for the stream to end; fails naming $1 otherwise.
stream_ends() {
  for _ in $(seq 1 "$2"); do kill -0 "$stream_pid" 2>/dev/null || return 0; sleep 0.1; done
  fail "the stream did not end within $(( $2 / 10 )) s of $1"
}

start single "$server" -m "$work/tiny.gguf" --port 0 -c 2048 -t 1 --cache-ram 0
start coordinator "$server" -m "$work/tiny.gguf" --port 0 -c 2048 -t 1 --cache-ram 0 \
  --dist-listen "$net.1:$port" --dist-key "$work/cluster.key" --layers 0:1
start workerA ip netns exec "$nsa" "$worker_bin" -m "$work/tiny.gguf" --coordinator "$net.1:$port" \
  --dist-key "$work/cluster.key" --layers 1:3 -c 2048 -t 1
start workerB ip netns exec "$nsb" "$worker_bin" -m "$work/tiny.gguf" --coordinator "$net.1:$port" \
  --dist-key "$work/cluster.key" --layers 3:output -c 2048 -t 1
single=$(http_port single)
coord=$(http_port coordinator)
want=$(reply "$single")

# 1. Hand-overs between the namespaces.
wait_health 200 20
grep -q "\"handed_over_at\":\"tcp://$net.3:" "$work/health.json" ||
  fail "stage 3:output does not take hand-overs at its namespace's address: $(cat "$work/health.json")"
[ "$(reply "$coord")" = "$want" ] || fail "with A handing over to B the reply differs from one process"
[ "$(sent_to_b)" = 0 ] || fail "the coordinator sent stage 3:output $(sent_to_b) bytes"

# 2. B's link down mid-generation, then back.
long_stream stream1.txt
ip -n "$nsb" link set eth0 down
down_at=$(date +%s%N)
stream_ends "B's link going down" 50
if ! grep -q '"finish_reason":"length"' "$work/stream1.txt"; then
  grep -q "3:output" "$work/stream1.txt" || fail "the stream's error names no stage: $(tail -c 400 "$work/stream1.txt")"
fi
code=$(curl -s -o "$work/after.json" -w '%{http_code}' "http://127.0.0.1:$coord/v1/chat/completions" \
  -H 'Content-Type: application/json' -d "$body")
elapsed=$(( ($(date +%s%N) - down_at) / 1000000 ))
[ "$code" = 503 ] || fail "a request with B's link down got $code: $(cat "$work/after.json")"
grep -q "3:output" "$work/after.json" || fail "the 503 names no stage: $(cat "$work/after.json")"
[ "$elapsed" -lt 5000 ] || fail "the error came $elapsed ms after B's link went down"
# Down long enough for both ends' ZMTP heartbeats (3 s) to close B's old
# connections, so B comes back on new ones and nothing of the old route
# lingers into part 3.
while [ $(( ($(date +%s%N) - down_at) / 1000000 )) -lt 4000 ]; do sleep 0.1; done
ip -n "$nsb" link set eth0 up
wait_health 200 20
again=""
for _ in $(seq 1 50); do again=$(reply "$coord" 2>/dev/null) && break; again=""; sleep 0.1; done
[ "$again" = "$want" ] || fail "after B came back the reply differs from one process (got '$again')"

# 3. A loses its way to B; both still reach the coordinator.
long_stream stream2.txt
ip -n "$nsa" route add blackhole "$net.3/32"
cut_at=$(date +%s%N)
stream_ends "A losing its route to B" 80
cut_ms=$(( ($(date +%s%N) - cut_at) / 1000000 ))
if ! grep -q '"finish_reason":"length"' "$work/stream2.txt"; then
  grep -q "lost its hand-overs to stage 3:output" "$work/stream2.txt" ||
    fail "the stream's error does not name the lost hand-over: $(tail -c 400 "$work/stream2.txt")"
fi
grep -q "stage 1:3 (worker .*) lost its hand-overs to stage 3:output" "$work/coordinator.log" ||
  fail "the coordinator did not log the lost hand-overs"
before=$(sent_to_b)
[ "$(reply "$coord")" = "$want" ] || fail "through the coordinator to B the reply differs from one process"
[ "$(sent_to_b)" -gt "$before" ] || fail "the coordinator did not send stage 3:output its input"
kill -0 "${pids[1]}" || fail "the coordinator died"
echo "PASS: hand-overs across namespaces; B's link down -> 503 in ${elapsed} ms; A cut off from B -> failed in ${cut_ms} ms, then through the coordinator"
