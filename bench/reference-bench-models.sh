#!/usr/bin/env bash
# Load check of DeepSeek-V4-Flash-wide models under llama.cpp: ds4-mkmodel's `bench`
# preset with 1 and 2 layers, mixes ds4-q2, ds4-q4 and mxfp4, plus one layer of the
# q8_0 and f16 mixes and of f32 with 32 experts (all 256 f32 experts would be a
# 26 GB layer), each run once through
# ds4-ref-runner on a short token list. Reports file size, load and decode time and
# whether every logit was finite. Not part of `make test`: the files are several GB
# each; they go to a temporary folder and are deleted one by one.
#
# Usage: bench/reference-bench-models.sh [BUILD_DIR] [TMP_PARENT]
#   BUILD_DIR   build folder holding bin/ds4-mkmodel and bin/ds4-ref-runner (default: build)
#   TMP_PARENT  where the temporary folder goes (default: $TMPDIR or /tmp)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$repo_root/build}"
mkmodel="$build/bin/ds4-mkmodel"
runner="$build/bin/ds4-ref-runner"
threads="${DS4_BENCH_THREADS:-2}"
n_tokens=16

for exe in "$mkmodel" "$runner"; do
  [[ -x "$exe" ]] || { echo "reference-bench-models: $exe not built (make build; make reference)" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "reference-bench-models: python3 is needed to check the logits" >&2; exit 1; }

work="$(mktemp -d "${2:-${TMPDIR:-/tmp}}/ds4-bench-models.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Token ids well below any vocabulary size the preset may have.
python3 -c "import json; print(json.dumps([(i * 7919 + 11) % 1000 for i in range($n_tokens)]))" > "$work/tokens.json"

printf '%-7s %-8s %10s %9s %9s %9s  %s\n' layers mix "size GB" "gen s" "load s" "decode s" "logits"
failed=0
# Each case: layers, mix, extra ds4-mkmodel arguments (comma-separated).
cases=(
  "1 ds4-q2 -" "1 ds4-q4 -" "1 mxfp4 -"
  "2 ds4-q2 -" "2 ds4-q4 -" "2 mxfp4 -"
  "1 q8_0 -" "1 f16 -" "1 f32 --experts,32"
)
for case in "${cases[@]}"; do
    read -r layers mix extra <<<"$case"
    extra_args=()
    [[ "$extra" == "-" ]] || IFS=, read -r -a extra_args <<<"$extra"
    model="$work/bench-$layers-$mix.gguf"
    t0=$(date +%s.%N)
    if ! "$mkmodel" --preset bench --layers "$layers" --mix "$mix" "${extra_args[@]}" --seed 1 --out "$model" > "$work/mkmodel.log" 2>&1; then
      echo "ds4-mkmodel --preset bench --layers $layers --mix $mix failed:" >&2
      tail -n 3 "$work/mkmodel.log" >&2
      failed=1
      continue
    fi
    gen_s=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
    size_gb=$(python3 -c "import os, sys; print(f'{os.path.getsize(sys.argv[1]) / 1e9:.2f}')" "$model")
    if timing=$("$runner" logits -m "$model" --tokens "$work/tokens.json" --out "$work/logits.bin" \
                 --threads "$threads" --timings 2> "$work/runner.err"); then
      verdict=$(python3 - "$work/logits.bin" "$n_tokens" <<'EOF'
import array, math, sys
a = array.array("f")
with open(sys.argv[1], "rb") as f:
    a.frombytes(f.read())
n = int(sys.argv[2])
bad = sum(1 for v in a if not math.isfinite(v))
print(f"{'all finite' if bad == 0 else f'{bad} NOT FINITE'} ({len(a) // n} per row)")
EOF
)
      load_s=$(python3 -c "import json, sys; print(f\"{json.loads(sys.argv[1])['load_s']:.2f}\")" "$timing")
      decode_s=$(python3 -c "import json, sys; print(f\"{json.loads(sys.argv[1])['decode_s']:.2f}\")" "$timing")
      [[ "$verdict" == all\ finite* ]] || failed=1
    else
      load_s="-"; decode_s="-"; verdict="FAILED: $(tail -n 1 "$work/runner.err")"; failed=1
    fi
    printf '%-7s %-8s %10s %9s %9s %9s  %s\n' "$layers" "$mix${extra_args[*]:+ ${extra_args[*]}}" "$size_gb" "$gen_s" "$load_s" "$decode_s" "$verdict"
    rm -f "$model" "$work/logits.bin"
done
exit $failed
