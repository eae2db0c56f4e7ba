#!/usr/bin/env bash
# ds4-quantize against llama.cpp's llama_model_quantize (issue 26 target): one
# bench-preset model (Flash widths: 256 experts of 2048 x 4096) with --layers
# N in the converter's layout (BF16 / Q8_0 / MXFP4) and a random imatrix,
# quantized with one of llama-quantize's presets (IQ2_XXS by default: IQ2_XXS
# gate/up, its down type, its attention types) by llama.cpp, and by
# ds4-quantize given the same per-tensor types (--types-from llama.cpp's file)
# and the same imatrix, in alternating runs with the same thread count.
# Embedding and head are put in the preset's types beforehand (once, not
# timed), so both tools copy them and the time is the layers'.
# Reported: seconds per run and their median for each, the ratio, the
# seconds per layer, peak anonymous memory (RssAnon, sampled) and peak RSS of
# each, and whether the two outputs' tensors are byte-identical.
# Usage: bench/compare-quantize.sh [--layers 1] [--threads 2] [--runs 3] [--preset IQ2_XXS] [--dir DIR]
#        [--build DIR]
# Needs `make reference` (the runner) and ~15 GB of disk in DIR per layer. Not part of `make test`.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "compare-quantize: $*" >&2; exit 1; }

build="$repo_root/build" layers=1 threads=2 runs=3 preset=IQ2_XXS dir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --layers) layers="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --preset) preset="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
bin="$build/bin"
runner="$build/bin/ds4-ref-runner"
[[ -x "$runner" ]] || runner="$(find "$build" -name ds4-ref-runner -type f -perm -u+x | head -n 1)"
for p in "$bin/ds4-mkmodel" "$bin/ds4-quantize" "$bin/ds4-gguf" "$runner"; do
  [[ -x "$p" ]] || die "missing $p (make build; make reference)"
done
[[ -n "$dir" ]] || dir="$(mktemp -d /tmp/ds4-compare-quantize.XXXXXX)"
mkdir -p "$dir"

src0="$dir/bench${layers}-convert.gguf" src="$dir/bench${layers}-src.gguf" imatrix="$dir/bench${layers}-imatrix.gguf"
if [[ ! -f "$src" ]]; then
  echo "making the source: bench preset, $layers layer(s), converter layout, random imatrix" >&2
  "$bin/ds4-mkmodel" --preset bench --layers "$layers" --mix llama-convert --seed 1 --threads "$threads" \
    --out "$src0" --imatrix-out "$imatrix" >/dev/null
  # llama-quantize's IQ1/IQ2/Q2_K-family presets put token_embd in Q2_K and output in Q5_K on these
  # shapes (checked below against its output); both tools then copy them.
  "$bin/ds4-quantize" -q --types-from "$src0" --tensor-type 'token_embd=q2_K' --tensor-type '^output\.weight$=q5_K' \
    -t "$threads" "$src0" "$src"
  rm -f "$src0"
fi

# Runs `$@`, sampling its peak RssAnon; prints "seconds peak_anon_kib peak_rss_kib".
measure() {
  local start end pid peak_anon=0 anon
  start=$(date +%s.%N)
  "$@" >/dev/null 2>"$dir/last.err" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [[ -n "$anon" && "$anon" -gt "$peak_anon" ]] && peak_anon=$anon
    sleep 0.2
  done
  wait "$pid" || { cat "$dir/last.err" >&2; die "failed: $*"; }
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc) $peak_anon"
}

theirs="$dir/llama-$preset.gguf" ours="$dir/ds4-$preset.gguf"
llama_times=() ds4_times=() llama_anon=0 ds4_anon=0
for ((r = 1; r <= runs; r++)); do
  rm -f "$theirs"
  read -r t a < <(measure "$runner" model-quantize -m "$src" --out "$theirs" --ftype "$preset" --allow-requantize \
    --imatrix-file "$imatrix" --threads "$threads")
  llama_times+=("$t"); ((a > llama_anon)) && llama_anon=$a
  echo "run $r: llama.cpp $t s (peak anon $((a / 1024)) MiB)" >&2
  rm -f "$ours"
  read -r t a < <(measure "$bin/ds4-quantize" -q --restart --types-from "$theirs" --imatrix "$imatrix" -t "$threads" \
    "$src" "$ours")
  ds4_times+=("$t"); ((a > ds4_anon)) && ds4_anon=$a
  echo "run $r: ds4-quantize $t s (peak anon $((a / 1024)) MiB)" >&2
done

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
ml=$(median "${llama_times[@]}") md=$(median "${ds4_times[@]}")
# The same per-tensor types, shapes and sizes? (llama.cpp writes its tensors in its own order, and each
# tool records its own metadata keys, so the files' bytes are not compared.)
table() { "$bin/ds4-gguf" info "$1" | awk '/^tensors:$/ {on = 1; next} on && NF >= 6 && $1 ~ /^[0-9]+$/ {print $2, $3, $(NF - 1)}' | sort; }
cmp_note="per-tensor types $([[ "$(table "$theirs")" == "$(table "$ours")" ]] && echo equal || echo DIFFER)"
if "$bin/ds4-gguf" info "$theirs" | grep -qE ' token_embd\.weight +q2_K ' &&
  "$bin/ds4-gguf" info "$theirs" | grep -qE ' output\.weight +q5_K '; then
  head_note="embedding and head copied by both"
else
  head_note="WARNING: llama.cpp re-typed the embedding or head (the times include them)"
fi
echo "preset $preset, $layers layer(s), $threads threads, $runs runs; $cmp_note; $head_note"
echo "llama.cpp:    ${llama_times[*]} s; median $ml s ($(echo "scale=1; $ml / $layers" | bc) s per layer); peak anon $((llama_anon / 1024)) MiB"
echo "ds4-quantize: ${ds4_times[*]} s; median $md s ($(echo "scale=1; $md / $layers" | bc) s per layer); peak anon $((ds4_anon / 1024)) MiB"
echo "ratio llama.cpp / ds4-quantize: $(echo "scale=2; $ml / $md" | bc)"
