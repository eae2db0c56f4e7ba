#!/usr/bin/env bash
# ds4-agent's /switch against prefilling the same conversation again
# (issue 27's target: a saved 4,096-token session restores >= 20x faster).
# Each run: one agent process prefills a message that brings the
# conversation to about TOKENS tokens (its step line gives the prefill time)
# and saves it; a second process /switches to it (its line gives the restore
# time, file reading and checks included). Prints every run and the median
# ratio.
# Usage: bench/agent-switch.sh [--model FILE] [--tokens 4096] [--runs 5] [--threads N] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
model=""
tokens=4096
runs=5
threads=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
agent=$build/bin/ds4-agent
[ -x "$agent" ] || { echo "no $agent: build it first (cmake --build $build --target ds4-agent)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$model" ]; then
  model=$work/tiny.gguf
  "$build/bin/ds4-mkmodel" --out "$model" --seed 5 >/dev/null
fi
mkdir -p "$work/project"
common=(-m "$model" -c $((tokens * 2)) -n 1 --max-steps 1 --nothink --temp 0 -t "$threads"
        --session-dir "$work/sessions" --chdir "$work/project" --no-color)

prefill_tokens() {  # the first step's prompt tokens for message $1
  printf '%s\n' "$1" | "$agent" "${common[@]}" 2>&1 | grep -oE 'prefill: [0-9]+ tokens' | head -n 1 | grep -oE '[0-9]+'
}
# The system prompt's size and a word's, then a message filling the rest.
words() { python3 -c "print(' '.join(['word'] * $1))"; }
system_tokens=$(prefill_tokens x)
per_100=$(( $(prefill_tokens "$(words 100)") - system_tokens ))
fill=$(( (tokens - system_tokens) * 100 / per_100 ))
[ "$fill" -gt 0 ] || { echo "the system prompt alone has $system_tokens tokens" >&2; exit 1; }
message=$(words "$fill")

ratios=()
for r in $(seq 1 "$runs"); do
  out=$(printf '%s\n/save s\n' "$message" | "$agent" "${common[@]}" 2>&1)
  line=$(grep -oE 'prefill: [0-9]+ tokens, [0-9.]+ t/s' <<<"$out" | head -n 1)
  n=$(awk '{print $2}' <<<"$line")
  tps=$(awk '{print $4}' <<<"$line")
  prefill_s=$(python3 -c "print(round($n / $tps, 3))")
  out=$(printf '/switch s\n' | "$agent" "${common[@]}" 2>&1)
  restore_s=$(grep -oE 'restored in [0-9.]+ s' <<<"$out" | awk '{print $3}')
  ratio=$(python3 -c "print(round($prefill_s / $restore_s, 1))")
  echo "run $r: prefill $n tokens in ${prefill_s} s, /switch in ${restore_s} s: ${ratio}x"
  ratios+=("$ratio")
done
python3 -c "import statistics, sys; print('median ratio:', statistics.median(float(x) for x in sys.argv[1:]))" "${ratios[@]}"
