#!/usr/bin/env bash
# `mpirun -n 2 ds4-server --dist mpi --layers 0:2,2:output` (issue 25): rank 0
# serves HTTP and evaluates layers 0:2, rank 1 evaluates 2:output over Open
# MPI. Truth: one ds4-server on the same model; greedy replies must be the
# same text. /health reports the complete route; SIGTERM to mpirun stops
# every rank. With three ranks the middle one hands over to the last
# directly. A --layers list that does not match the ranks is refused.
# Usage: test_dist_mpi.sh SERVER_BIN MKMODEL_BIN
set -euo pipefail
server=$1
mkmodel=$2
command -v mpirun >/dev/null || { echo "mpirun not installed (scripts/install-deps.sh installs openmpi-bin)"; exit 77; }
# shellcheck source=server_processes.sh
source "$(dirname "${BASH_SOURCE[0]}")/server_processes.sh"

"$mkmodel" --preset tiny --mix f32 --seed 5 --out "$work/tiny.gguf" >/dev/null
# As root in CI; --oversubscribe: two ranks on whatever cores there are;
# TCP and shared memory only (no InfiniBand probing).
mpi=(mpirun --allow-run-as-root --oversubscribe -n 2 --mca btl self,vader,tcp --mca pml ob1)

start single "$server" -m "$work/tiny.gguf" --port 0 -c 1024 -t 1 --cache-ram 0
start mpi "${mpi[@]}" "$server" -m "$work/tiny.gguf" --port 0 -c 1024 -t 1 --cache-ram 0 --dist mpi --layers 0:2,2:output
single_port=$(port_of single)
mpi_port=$(port_of mpi)

# Waits up to 10 s for PORT's /health to answer 200 (the route complete), its body in FILE.
route_health() {  # port file
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$1/health" >"$2" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "/health on port $1 did not answer 200 (the route never completed)"
}
route_health "$mpi_port" "$work/health.json"
grep -q '"complete":true' "$work/health.json" || fail "/health: $(cat "$work/health.json")"
grep -q '"layers":"2:output"' "$work/health.json" || fail "/health names no stage 2:output: $(cat "$work/health.json")"

body='{"model":"deepseek-v4-flash","max_tokens":12,"temperature":0,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Count to five."}]}'
a=$(reply "$mpi_port") || fail "the MPI pipeline did not answer"
b=$(reply "$single_port") || fail "the single server did not answer"
[ "$a" = "$b" ] || fail "replies differ: pipeline '$a', one process '$b'"
grep -q "joining MPI rank 0" "$work/mpi.log" || fail "rank 1 did not say it joined over MPI"

kill -TERM "${pids[1]}"
for _ in $(seq 1 100); do kill -0 "${pids[1]}" 2>/dev/null || break; sleep 0.1; done
kill -0 "${pids[1]}" 2>/dev/null && fail "mpirun still runs 10 s after SIGTERM"

# Three ranks: rank 1 hands its hidden states to rank 2 directly (the
# coordinator sends stage 3:output nothing), the same text again.
mpi3=(mpirun --allow-run-as-root --oversubscribe -n 3 --mca btl self,vader,tcp --mca pml ob1)
start mpi3 "${mpi3[@]}" "$server" -m "$work/tiny.gguf" --port 0 -c 1024 -t 1 --cache-ram 0 --dist mpi \
  --layers 0:1,1:3,3:output
mpi3_port=$(port_of mpi3)
route_health "$mpi3_port" "$work/health3.json"
grep -q '"handed_over_at":"rank 2"' "$work/health3.json" || fail "stage 3:output takes no hand-overs: $(cat "$work/health3.json")"
c=$(reply "$mpi3_port") || fail "the 3-rank MPI pipeline did not answer"
[ "$c" = "$b" ] || fail "replies differ: 3 ranks '$c', one process '$b'"
curl -fsS "http://127.0.0.1:$mpi3_port/metrics" >"$work/metrics3.txt"
grep -q '^ds4_dist_stage_sent_bytes_total{layers="3:output"} 0$' "$work/metrics3.txt" ||
  fail "the coordinator sent stage 3:output bytes: $(grep 'stage_sent_bytes' "$work/metrics3.txt")"
grep -Eq '^ds4_dist_stage_received_bytes_total\{layers="3:output"\} [1-9]' "$work/metrics3.txt" ||
  fail "stage 3:output never answered: $(grep 'stage_received_bytes' "$work/metrics3.txt")"
kill -TERM "${pids[2]}"
for _ in $(seq 1 100); do kill -0 "${pids[2]}" 2>/dev/null || break; sleep 0.1; done

# Three ranges for two ranks: refused with the count.
if DS4_LOCK_FILE="$work/bad.lock" "${mpi[@]}" "$server" -m "$work/tiny.gguf" --port 0 -t 1 --dist mpi \
    --layers 0:1,1:3,3:output >"$work/bad.log" 2>&1; then
  fail "a --layers list of 3 ranges for 2 ranks was accepted"
fi
grep -q "lists 3 ranges for 2 MPI ranks" "$work/bad.log" || fail "no clear refusal of 3 ranges for 2 ranks"
echo "PASS: MPI pipeline replies equal one process"
