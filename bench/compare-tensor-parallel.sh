#!/usr/bin/env bash
# Tensor parallel against one process (issue 25): the same model and prompt
# through ds4-bench alone with T threads, and through `mpirun -n K ds4-bench
# --tensor-parallel` (K ranks of T threads each, shared memory between them),
# in alternating runs. Reported: prefill and decode tokens/s of each (median
# and every run) and the ratios. With --pin, the single process runs on CPU
# 0 and rank r on CPU r (one thread each: --threads 1).
# Usage: bench/compare-tensor-parallel.sh -m MODEL [--ranks 2] [--prompt 512] [--gen 32] [--runs 5]
#        [--threads 1] [--build DIR] [--pin]
# Not part of `make test`.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "compare-tensor-parallel: $*" >&2; exit 1; }

build="$repo_root/build" model="" ranks=2 prompt=512 gen=32 runs=5 threads=1 pin=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m) model="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --pin) pin=1; shift ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ -f "$model" ]] || die "-m MODEL is required"
bench="$build/bin/ds4-bench"
[[ -x "$bench" ]] || die "build ds4-bench first (ninja -C $build ds4-bench)"
command -v mpirun >/dev/null || die "mpirun not installed (scripts/install-deps.sh installs openmpi-bin)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c "import json,sys; print(json.dumps([(i*7919+13)%1000 for i in range(int(sys.argv[1]))]))" "$prompt" >"$work/tokens.json"
common=(-m "$model" --tokens-file "$work/tokens.json" --ctx-start "$prompt" --ctx-max "$prompt" -n "$gen" -t "$threads" --warmup)
mpi=(mpirun --allow-run-as-root --oversubscribe -n "$ranks" --mca btl self,vader,tcp --mca pml ob1)
if [[ $pin == 1 ]]; then
  mpi+=(--bind-to core --map-by core)
  one=(taskset -c 0 "$bench")
else
  mpi+=(--bind-to none)
  one=("$bench")
fi

cat "$model" >/dev/null  # page cache
results="$work/results.tsv"
for ((r = 1; r <= runs; r++)); do
  "${one[@]}" "${common[@]}" >"$work/one.csv" 2>"$work/one.err" || { cat "$work/one.err" >&2; die "single run $r failed"; }
  printf 'one\t%s\n' "$(tail -n 1 "$work/one.csv")" >>"$results"
  "${mpi[@]}" "$bench" "${common[@]}" --tensor-parallel >"$work/tp.csv" 2>"$work/tp.err" ||
    { cat "$work/tp.err" >&2; die "tensor parallel run $r failed"; }
  printf 'tp\t%s\n' "$(grep -v '^ctx' "$work/tp.csv" | tail -n 1)" >>"$results"
  echo "compare-tensor-parallel: run $r: one $(tail -n 1 "$work/one.csv"); tp $(tail -n 1 "$work/tp.csv")" >&2
done
head -n 1 "$work/one.csv" >"$work/header"
python3 "$repo_root/bench/ab_summary.py" "$results" "$work/header" one "one process" tp "$ranks ranks"
