#!/usr/bin/env bash
# `mpirun -n 2 ds4-server --dist mpi --layers 0:2,2:output` (issue 25): rank 0
# serves HTTP and evaluates layers 0:2, rank 1 evaluates 2:output over Open
# MPI. Truth: one ds4-server on the same model; greedy replies must be the
# same text. /health reports the complete route; SIGTERM to mpirun stops
# every rank. A --layers list that does not match the ranks is refused.
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

ok=""
for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$mpi_port/health" >"$work/health.json" 2>/dev/null; then ok=1; break; fi
  sleep 0.1
done
[ -n "$ok" ] || fail "/health did not answer 200 (the route never completed)"
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

# Three ranges for two ranks: refused with the count.
if DS4_LOCK_FILE="$work/bad.lock" "${mpi[@]}" "$server" -m "$work/tiny.gguf" --port 0 -t 1 --dist mpi \
    --layers 0:1,1:3,3:output >"$work/bad.log" 2>&1; then
  fail "a --layers list of 3 ranges for 2 ranks was accepted"
fi
grep -q "lists 3 ranges for 2 MPI ranks" "$work/bad.log" || fail "no clear refusal of 3 ranges for 2 ranks"
echo "PASS: MPI pipeline replies equal one process"
