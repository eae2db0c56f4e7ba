#!/usr/bin/env bash
# The pipeline hop per transport (issue 25): ds4-server coordinating layers
# 0:N with one worker serving N:L, over ZeroMQ/CURVE (ds4-worker) and over
# Open MPI (mpirun -n 2 ds4-server --dist mpi), the same model, 1 thread
# each, the coordinator on CPU 0 and the worker on CPU 1. Each serves R
# greedy chat requests of up to G tokens (short prompt: nearly every
# evaluation is one decode step); from /metrics before and after each
# request: the hop's wait per evaluation (ds4_dist_stage_wait_seconds_total
# over ds4_dist_stage_requests_total: the round trip beyond the worker's
# evaluation, i.e. two transfers of one hidden state each with L = the
# layer count, the head on the coordinator) and the worker's evaluation.
# Usage: bench/compare-dist-transports.sh -m MODEL --layers N --last L [--gen 64] [--runs 5] [--build DIR]
#        [--bits 16]
# Not part of `make test`.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "compare-dist-transports: $*" >&2; exit 1; }

build="$repo_root/build" model="" split="" last="" gen=64 runs=5 bits=32
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m) model="$2"; shift 2 ;;
    --layers) split="$2"; shift 2 ;;
    --last) last="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --bits) bits="$2"; shift 2 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ -f "$model" ]] || die "-m MODEL is required"
[[ -n "$split" && -n "$last" ]] || die "--layers N and --last L are required"
server="$build/bin/ds4-server" worker_bin="$build/bin/ds4-worker"
[[ -x "$server" && -x "$worker_bin" ]] || die "build ds4-server and ds4-worker first"
command -v mpirun >/dev/null || die "mpirun not installed (scripts/install-deps.sh installs openmpi-bin)"

work=$(mktemp -d)
pids=()
# Each started process is disowned (no job-control notices); SIGTERM, then
# SIGKILL what is left after 5 s.
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() { stop_all; rm -rf "$work"; }
trap cleanup EXIT
cat "$model" >/dev/null  # page cache

http_port() {
  for _ in $(seq 1 600); do
    local p
    p=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/$1.log" | head -n 1)
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.2
  done
  cat "$work/$1.log" >&2
  die "$1: no 'listening on' line"
}
wait_route() {
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ] && return
    sleep 0.2
  done
  die "the route never completed"
}
stage_metric() {  # port name
  curl -fsS "http://127.0.0.1:$1/metrics" | sed -n "s/^ds4_dist_stage_$2{layers=\"$split:$last\"} //p"
}
body=$(python3 -c 'import json,sys; print(json.dumps({"model":"deepseek-v4-flash","max_tokens":int(sys.argv[1]),"temperature":0,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Tell me about rivers."}]}))' "$gen")
# One request; prints "evaluations wait_ms_per_evaluation eval_ms_per_evaluation".
measure() {  # port
  local r0 w0 e0 r1 w1 e1
  r0=$(stage_metric "$1" requests_total) w0=$(stage_metric "$1" wait_seconds_total) e0=$(stage_metric "$1" eval_seconds_total)
  curl -fsS "http://127.0.0.1:$1/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" >/dev/null
  r1=$(stage_metric "$1" requests_total) w1=$(stage_metric "$1" wait_seconds_total) e1=$(stage_metric "$1" eval_seconds_total)
  python3 -c 'import sys; r0,w0,e0,r1,w1,e1=map(float,sys.argv[1:]); n=r1-r0; print(int(n), 1e3*(w1-w0)/n, 1e3*(e1-e0)/n)' \
    "$r0" "$w0" "$e0" "$r1" "$w1" "$e1"
}
common=(-m "$model" --port 0 -c 2048 -t 1 --cache-ram 0 --dist-activation-bits "$bits")
results="$work/results.tsv"

# ZeroMQ with CURVE.
"$worker_bin" --gen-key "$work/key" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DS4_LOCK_FILE="$work/zmq.lock" taskset -c 0 "$server" "${common[@]}" --dist-listen "127.0.0.1:$port" \
  --dist-key "$work/key" --layers "0:$split" >"$work/zmq.log" 2>&1 &
pids+=($!)
disown $!
taskset -c 1 "$worker_bin" -m "$model" --coordinator "127.0.0.1:$port" --dist-key "$work/key" \
  --layers "$split:$last" -t 1 -c 2048 >"$work/worker.log" 2>&1 &
pids+=($!)
disown $!
zport=$(http_port zmq)
wait_route "$zport"
measure "$zport" >/dev/null  # warm-up
for ((r = 1; r <= runs; r++)); do printf 'zmq\t%s\n' "$(measure "$zport")" | tee -a "$results" >&2; done
stop_all

# Open MPI (shared memory or TCP between the two ranks, as Open MPI picks on one host).
DS4_LOCK_FILE="$work/mpi.lock" mpirun --allow-run-as-root -n 2 --bind-to core --map-by core \
  "$server" "${common[@]}" --dist mpi --layers "0:$split,$split:$last" >"$work/mpi.log" 2>&1 &
pids+=($!)
disown $!
mport=$(http_port mpi)
wait_route "$mport"
measure "$mport" >/dev/null
for ((r = 1; r <= runs; r++)); do printf 'mpi\t%s\n' "$(measure "$mport")" | tee -a "$results" >&2; done
stop_all

python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t, n, wait, ev = line.split()
    rows.setdefault(t, []).append((int(n), float(wait), float(ev)))
for t, rs in rows.items():
    waits = [r[1] for r in rs]
    print(f"{t}: hop wait per evaluation median {statistics.median(waits):.3f} ms "
          f"({', '.join(f'{w:.3f}' for w in waits)}); worker evaluation {statistics.median(r[2] for r in rs):.3f} ms; "
          f"{rs[0][0]} evaluations a request")
EOF
