#!/usr/bin/env bash
# Prefill and decode speed of the ds4 CLI on one model: RUNS runs (default 5) of
#   ds4 -m MODEL --tokens-file <P ids> --greedy G [extra ds4 options]
# each reading the "prefill: ... tokens/s" and "decode: ... tokens/s" lines ds4
# prints on stderr; reports the median and every run. Prefill = evaluating the
# P prompt tokens; decode = the G greedy ids (G - 1 of them evaluated). Not
# part of `make test`.
#
# Usage: bench/bench-forward.sh MODEL [P] [G] [-- extra ds4 options, e.g. --threads 8 --quality]
#   MODEL  a deepseek4 GGUF (e.g. ds4-mkmodel --preset bench --out bench.gguf)
#   P      prompt tokens (default 512)
#   G      generated tokens (default 32)
# Environment:
#   DS4_BUILD      build folder holding bin/ds4 (default: build)
#   DS4_BENCH_RUNS runs per measurement (default 5)
#   DS4_TOKEN_MOD  prompt ids are (i * 7919 + 13) mod this (default 500: below every preset's vocabulary)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -ge 1 ]] || { sed -n '2,17p' "${BASH_SOURCE[0]}" >&2; exit 1; }
model="$1"; shift
prompt=512
gen=32
if [[ $# -ge 1 && "$1" != "--" ]]; then prompt="$1"; shift; fi
if [[ $# -ge 1 && "$1" != "--" ]]; then gen="$1"; shift; fi
if [[ $# -ge 1 && "$1" == "--" ]]; then shift; fi
extra=("$@")
build="${DS4_BUILD:-$repo_root/build}"
ds4="$build/bin/ds4"
runs="${DS4_BENCH_RUNS:-5}"
mod="${DS4_TOKEN_MOD:-500}"

[[ -x "$ds4" ]] || { echo "bench-forward: $ds4 not built (make build)" >&2; exit 1; }
[[ -r "$model" ]] || { echo "bench-forward: cannot read $model" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/ds4-bench-forward.XXXXXX")"
trap 'rm -rf "$work"' EXIT

awk -v n="$prompt" -v m="$mod" 'BEGIN { printf "["; for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), (i * 7919 + 13) % m; print "]" }' \
  >"$work/tokens.json"

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

: >"$work/prefill"; : >"$work/decode"
for ((r = 1; r <= runs; r++)); do
  if ! "$ds4" -m "$model" --tokens-file "$work/tokens.json" --greedy "$gen" "${extra[@]}" >/dev/null 2>"$work/err"; then
    cat "$work/err" >&2
    exit 1
  fi
  [[ $r -eq 1 ]] && grep -E '^(  |memory:|threads )' "$work/err" >&2 || true
  sed -nE 's/^prefill: .* ([0-9.]+) tokens\/s$/\1/p' "$work/err" >>"$work/prefill"
  sed -nE 's/^decode: .* ([0-9.]+) tokens\/s$/\1/p' "$work/err" >>"$work/decode"
done

echo "model $model, prompt $prompt tokens, $gen generated, $runs runs${extra:+, options ${extra[*]}}"
echo "prefill tokens/s: median $(median <"$work/prefill")  (runs: $(paste -sd' ' "$work/prefill"))"
echo "decode  tokens/s: median $(median <"$work/decode")  (runs: $(paste -sd' ' "$work/decode"))"
