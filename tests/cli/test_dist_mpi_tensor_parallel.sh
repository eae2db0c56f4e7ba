#!/usr/bin/env bash
# Tensor parallel over Open MPI (issue 25). 1) mpi_tensor_parallel_check under
# `mpirun -n 3`: the MPI collective against known answers, then the logits of
# rank 0's tensor parallel backend against one process's (each row within
# 1e-3 of its range) and a second pass bit-identical. 2) `mpirun -n 2
# ds4-server --dist mpi --tensor-parallel`: /health answers, rank 1 follows,
# two separate groups give the same greedy reply (the ranks' parts are added
# in rank order: deterministic), SIGTERM to rank 0 stops every rank. 3) Refusals:
# --layers with --tensor-parallel, --tensor-parallel without --dist mpi, one rank.
# Usage: test_dist_mpi_tensor_parallel.sh SERVER_BIN MKMODEL_BIN CHECK_BIN
set -euo pipefail
server=$1
mkmodel=$2
check=$3
command -v mpirun >/dev/null || { echo "mpirun not installed (scripts/install-deps.sh installs openmpi-bin)"; exit 77; }
# shellcheck source=server_processes.sh
source "$(dirname "${BASH_SOURCE[0]}")/server_processes.sh"

"$mkmodel" --preset tiny --mix f32 --seed 7 --out "$work/tiny.gguf" >/dev/null
# An array, not a function: a background job started from a function would be
# a subshell, and killing it would leave mpirun and its ranks running.
mpi=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp --mca pml ob1)

"${mpi[@]}" -n 3 "$check" "$work/tiny.gguf" >"$work/check.log" 2>&1 || fail "mpi_tensor_parallel_check under 3 ranks"
grep -q "^PASS: 3 ranks" "$work/check.log" || fail "mpi_tensor_parallel_check did not pass"

body='{"model":"deepseek-v4-flash","max_tokens":12,"temperature":0,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Count to five."}]}'

args=(-m "$work/tiny.gguf" --port 0 -c 1024 -t 1 --cache-ram 0 --dist mpi --tensor-parallel)
start tp1 "${mpi[@]}" -n 2 "$server" "${args[@]}"
start tp2 "${mpi[@]}" -n 2 "$server" "${args[@]}"
port1=$(port_of tp1)
port2=$(port_of tp2)
curl -fsS "http://127.0.0.1:$port1/health" >/dev/null || fail "/health of the tensor parallel server"
a=$(reply "$port1") || fail "the first tensor parallel group did not answer"
b=$(reply "$port2") || fail "the second tensor parallel group did not answer"
[ -n "$a" ] && [ "$a" != '""' ] || fail "empty reply"
[ "$a" = "$b" ] || fail "two tensor parallel groups differ: '$a' and '$b'"
c=$(reply "$port1") || fail "the first group did not answer twice"
[ "$a" = "$c" ] || fail "the same group answered '$a', then '$c'"
grep -q "tensor parallel over 2 MPI ranks" "$work/tp1.log" || fail "rank 0 did not say it runs tensor parallel"
grep -q "rank 1: tensor parallel, 2 ranks; following rank 0" "$work/tp1.log" || fail "rank 1 did not say it follows"

# SIGTERM to rank 0 (the pid in its instance lock): it shuts down, tells
# rank 1 to stop, and mpirun ends with both.
rank0=$(cat "$work/tp1.lock")
kill -TERM "$rank0"
for _ in $(seq 1 100); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
kill -0 "${pids[0]}" 2>/dev/null && fail "mpirun still runs 10 s after SIGTERM to rank 0"
wait "${pids[0]}" || fail "mpirun ended with status $? after rank 0 stopped"
grep -q "rank 1: stopped" "$work/tp1.log" || fail "rank 1 did not stop with rank 0"
grep -q "ds4-server: stopped" "$work/tp1.log" || fail "rank 0 did not stop cleanly"

refused() {  # message args...
  local want=$1
  shift
  if DS4_LOCK_FILE="$work/bad.lock" "$@" >"$work/bad.log" 2>&1; then fail "accepted: $*"; fi
  grep -q "$want" "$work/bad.log" || fail "no clear refusal ('$want') of: $*"
}
refused "takes no --layers" "${mpi[@]}" -n 2 "$server" "${args[@]}" --layers 0:2,2:output
refused "needs --dist mpi" "$server" -m "$work/tiny.gguf" --port 0 --tensor-parallel
refused "needs 2 or more MPI ranks" "${mpi[@]}" -n 1 "$server" "${args[@]}"
echo "PASS: tensor parallel over MPI"
