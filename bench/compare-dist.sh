#!/usr/bin/env bash
# Pipeline parallel against one process (issue 25 targets): the same model
# and prompt through ds4-bench alone with T threads, and through ds4-bench
# as the coordinator of layers 0:N (T threads) with one ds4-worker serving
# N:output (T threads) over ZeroMQ/CURVE on 127.0.0.1, in alternating runs.
# Reported: prefill and decode tokens/s of each (median and every run),
# their ratios, and the hop's per-token decode telemetry (the worker's
# evaluation, and the rest of the round trip: encode, transfer, queueing),
# which is the decode overhead of the hop. With --pin, the coordinator (and
# the single process) run on CPU 0 and the worker on CPU 1.
# Usage: bench/compare-dist.sh -m MODEL --layers N [--prompt 512] [--gen 32] [--runs 5] [--threads 1]
#        [--build DIR] [--pin] [--chunk C] [--window W] [--head-here L] [--bits 16]
#        [--stages A:B,B:C,...] [--no-forward] [--no-warmup]
# --head-here L: the worker serves N:L (L = the model's layer count) and the
# coordinator computes the output head (64 KiB back per decode step instead
# of the logits). --bits 16: hidden states as f16 on the wire
# (--dist-activation-bits 16; half the bytes, results no longer identical).
# --stages A:B,B:output: one worker per range instead of one for N:output
# (pinned alternately to CPU 1 and 0); --no-forward: the coordinator gets
# every stage's hidden states back and sends them on (--dist-no-forward)
# instead of the workers handing them to each other. --no-warmup: no untimed
# prefill of the prompt before the timed one (halves a long prompt's run).
# Not part of `make test`.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "compare-dist: $*" >&2; exit 1; }

build="$repo_root/build" model="" split="" prompt=512 gen=32 runs=5 threads=1 pin=0 chunk="" window="" bits="" worker_end=output
stages="" no_forward=0 warmup=(--warmup)
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m) model="$2"; shift 2 ;;
    --layers) split="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --pin) pin=1; shift ;;
    --chunk) chunk="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --head-here) worker_end="$2"; shift 2 ;;
    --bits) bits="$2"; shift 2 ;;
    --stages) stages="$2"; shift 2 ;;
    --no-forward) no_forward=1; shift ;;
    --no-warmup) warmup=(); shift ;;
    -h|--help) sed -n 2,23p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ -f "$model" ]] || die "-m MODEL is required"
[[ -n "$split" ]] || die "--layers N (the coordinator keeps 0:N) is required"
bench="$build/bin/ds4-bench" worker_bin="$build/bin/ds4-worker"
[[ -x "$bench" && -x "$worker_bin" ]] || die "build ds4-bench and ds4-worker first (ninja -C $build ds4-bench ds4-worker)"

work=$(mktemp -d)
worker_pid=""
cleanup() { [[ -n "$worker_pid" ]] && kill $worker_pid 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
python3 -c "import json,sys; print(json.dumps([(i*7919+13)%1000 for i in range(int(sys.argv[1]))]))" "$prompt" >"$work/tokens.json"
"$worker_bin" --gen-key "$work/key" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
on_cpu() { if [[ $pin == 1 ]]; then taskset -c "$1" "${@:2}"; else "${@:2}"; fi; }
dist_args=(--dist-listen "127.0.0.1:$port" --dist-key "$work/key" --layers "0:$split")
[[ -n "$chunk" ]] && dist_args+=(--dist-prefill-chunk "$chunk")
[[ -n "$window" ]] && dist_args+=(--dist-prefill-window "$window")
[[ -n "$bits" ]] && dist_args+=(--dist-activation-bits "$bits")
[[ $no_forward == 1 ]] && dist_args+=(--dist-no-forward)
common=(-m "$model" --tokens-file "$work/tokens.json" --ctx-start "$prompt" --ctx-max "$prompt" -n "$gen" -t "$threads"
  "${warmup[@]}")

cat "$model" >/dev/null  # page cache
# The worker as its own background process (taskset execs it), not through
# on_cpu: a function in the background is a subshell, and killing that at the
# end would leave the worker running.
[[ -n "$stages" ]] || stages="$split:$worker_end"
IFS=, read -r -a stage_list <<<"$stages"
worker_pids=()
for ((i = 0; i < ${#stage_list[@]}; i++)); do
  worker_cmd=("$worker_bin" -m "$model" --coordinator "127.0.0.1:$port" --dist-key "$work/key" --layers "${stage_list[$i]}"
    -t "$threads" -c $((prompt + gen + 8)))
  # Pinned: the first worker on CPU 1, the next on CPU 0, ... (a decode step
  # runs one stage at a time).
  [[ $pin == 1 ]] && worker_cmd=(taskset -c $(( (i + 1) % 2 )) "${worker_cmd[@]}")
  "${worker_cmd[@]}" >/dev/null 2>"$work/worker$i.log" &
  worker_pids+=($!)
done
worker_pid="${worker_pids[*]}"

results="$work/results.tsv"
for ((r = 1; r <= runs; r++)); do
  on_cpu 0 "$bench" "${common[@]}" >"$work/one.csv" 2>"$work/one.err" || { cat "$work/one.err" >&2; die "single run $r failed"; }
  printf 'one\t%s\n' "$(tail -n 1 "$work/one.csv")" >>"$results"
  on_cpu 0 "$bench" "${common[@]}" "${dist_args[@]}" >"$work/dist.csv" 2>"$work/dist.err" ||
    { cat "$work/dist.err" "$work"/worker*.log >&2; die "distributed run $r failed"; }
  printf 'dist\t%s\n' "$(tail -n 1 "$work/dist.csv")" >>"$results"
  echo "compare-dist: run $r: one $(tail -n 1 "$work/one.csv"); dist $(tail -n 1 "$work/dist.csv")" >&2
done
head -n 1 "$work/dist.csv" >"$work/header"
python3 "$repo_root/bench/ab_summary.py" "$results" "$work/header" one "one process" dist pipeline
