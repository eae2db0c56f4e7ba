#!/usr/bin/env bash
# The CUDA backend's checks on a machine with an NVIDIA GPU, as one short
# script (docs/cuda.md): the whole model against the CPU backend
# (tests/cuda/test_cuda_backend), the stateful layer pieces (test_cuda_layers),
# the small ops (test_cuda_ops), every kernel against the CPU's scalar
# references (test_cuda_kernels), the device tests; then a 2-layer real-width
# bench model through ds4-bench --backend cuda (prefill's quantized products
# on the int8 tensor cores, then through cuBLAS f16: --gpu-prefill; and once
# profiled: DS4_CUDA_PROFILE), the kernels' speeds (ds4-bench-cuda) and
# compute-sanitizer's memcheck over the kernels that index the most. With
# llama/ in the bundle (scripts/gpu-bundle.sh after scripts/build-llama-cuda.sh),
# llama.cpp's deepseek4 on the same GPU and file: the logits of 128 tokens
# against ours in --quality (scripts/compare-logits.py) and prefill/decode speed.
#
# The programs are built elsewhere and carried over as one bundle
# (scripts/gpu-bundle.sh; a build folder works too): the GPU machine needs only
# its driver and cuBLAS 13 (the toolkit's or the pip wheel's). Our programs get
# the bundle's lib/ first on their library path (the machine's image is not
# the one they were built on).
#
# OUT receives few files (the device tool brings back at most 8): summary.json
# (the issue's figures: decode's share of the HBM roofline, prefill over
# llama.cpp's, the logits against llama.cpp's), logs.tgz (every step's log,
# speed.csv) and gpu-check.txt (what this script printed).
#
# Usage: scripts/gpu-check.sh BUNDLE.tar.xz|BUILD_DIR [OUT_DIR]   (default OUT_DIR: $OUT or ./gpu-check)
# DS4_GPU_CHECK_SECONDS: the whole check's time (default 500; give the device
# run's command a timeout some 40 s longer).
set -u
build=${1:?usage: scripts/gpu-check.sh BUNDLE.tar.xz|BUILD_DIR [OUT_DIR]}
out=${2:-${OUT:-gpu-check}}
mkdir -p "$out"
exec > >(tee "$out/gpu-check.txt") 2>&1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -f "$build" ]; then  # a bundle from scripts/gpu-bundle.sh
  unpacked=${TMPDIR:-/tmp}/ds4-gpu-bundle
  rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -C "$unpacked" -xJf "$build" || { echo "gpu-check: cannot unpack $build"; exit 1; }
  build=$unpacked
fi
logs=${TMPDIR:-/tmp}/ds4-gpu-check-logs
rm -rf "$logs" && mkdir -p "$logs"

# cuBLAS 13: the toolkit's, else the pip wheel's.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
  if [ -e "$dir/libcublas.so.13" ]; then
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    break
  fi
done
ours=(env LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

status=0
# The whole check keeps within DS4_GPU_CHECK_SECONDS (default 500: a device
# run's command is cut off at its timeout, and then summary.json and
# logs.tgz, written last, would be lost): each step's limit is cut to what
# is left, less 20 s for the summary, and a step with under 10 s left is
# skipped (counted as a failure: it said nothing).
budget=${DS4_GPU_CHECK_SECONDS:-500}
# step NAME TIMEOUT COMMAND...: runs it, its output to LOGS/NAME.log and the end of it here.
run_step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - SECONDS - 20))
  if [ "$left" -lt 10 ]; then
    echo "== $name: skipped (the check's $budget s are spent)"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  tail -n 12 "$logs/$name.log"
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  return $rc
}
step() { run_step "$@" || status=1; }
# The sanitizer refuses some machines' GPUs (gVisor: "Device not supported"):
# that is the machine, not the program, and says nothing either way.
sanitizer_step() {
  run_step "$@" && return
  if grep -q "Device not supported\|LibraryNotLoaded" "$logs/$1.log" 2>/dev/null; then
    echo "== $1: compute-sanitizer cannot run on this machine (not counted)"
  else
    status=1
  fi
}

# A library the carried programs cannot find here, named before anything runs.
for exe in "$build"/tests/* "$build"/bench/* "$build"/bin/*; do
  [ -x "$exe" ] || continue
  missing=$("${ours[@]}" ldd "$exe" 2>&1 | grep -i "not found") && { echo "gpu-check: $exe: $missing"; status=1; }
done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 | tee "$logs/nvidia-smi.log"
export DS4_REQUIRE_GPU=1
# Most telling first: a device run is short and may be cut off, so the whole
# model and its layers come before the per-kernel sweep, the speeds and the
# sanitizer (the slowest).
step devices 60 "${ours[@]}" "$build/tests/test_cuda_devices"
step backend 180 "${ours[@]}" "$build/tests/test_cuda_backend"
step layers 120 "${ours[@]}" "$build/tests/test_cuda_layers"
step ops 120 "${ours[@]}" "$build/tests/test_cuda_ops"
step kernels 300 "${ours[@]}" "$build/tests/test_cuda_kernels"
# The whole model's speed: a 2-layer bench model in ds4-q2 (made here in
# about 30 s), a 4096-token prefill and 64 decoded tokens with --backend cuda,
# then where the time goes (DS4_CUDA_PROFILE: every phase waited for, so
# slower; one line "cuda profile: ...") for 2048 + 16.
models=${TMPDIR:-/tmp}/ds4-gpu-check
model="$models/bench-2-ds4-q2.gguf"
if [ -x "$build/bin/ds4-bench" ] && [ -x "$build/bin/ds4-mkmodel" ]; then
  mkdir -p "$models"
  python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 1000 for i in range(4096)]))' >"$models/tokens.json"
  python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 129280 for i in range(128)]))' >"$models/tokens-128.json"
  step mkmodel 300 "${ours[@]}" "$build/bin/ds4-mkmodel" --preset bench --layers 2 --mix ds4-q2 --seed 1 --out "$model"
  step speed 300 "${ours[@]}" "$build/bin/ds4-bench" -m "$model" --backend cuda --gpu-ctx 8192 \
    --tokens-file "$models/tokens.json" --ctx-start 4096 --ctx-max 4096 -n 64 --warmup --csv "$logs/speed.csv"
  # Prefill's quantized products through cuBLAS on f16 instead of the int8
  # tensor cores: which is faster on this GPU.
  step speed-f16 300 "${ours[@]}" "$build/bin/ds4-bench" -m "$model" --backend cuda --gpu-ctx 8192 --gpu-prefill f16 \
    --tokens-file "$models/tokens.json" --ctx-start 4096 --ctx-max 4096 -n 16 --warmup --csv "$logs/speed-f16.csv"
  step profile 300 "${ours[@]}" DS4_CUDA_PROFILE=1 "$build/bin/ds4-bench" -m "$model" --backend cuda --gpu-ctx 4096 \
    --tokens-file "$models/tokens.json" --ctx-start 2048 --ctx-max 2048 -n 16
fi
# llama.cpp's CUDA build on the same file and GPU (when the bundle has it).
if [ -x "$build/llama/ds4-ref-runner" ] && [ -e "$build/llama/libggml-cuda.so" ] && [ -f "$model" ]; then
  llama=(env DS4_REF_BINS="$build/llama" LD_LIBRARY_PATH="$build/llama:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "$build/llama/ds4-ref-runner" --gpu-backend "$build/llama/libggml-cuda.so")
  step logits-llama 300 "${llama[@]}" logits -m "$model" --tokens "$models/tokens-128.json" --out "$models/llama.bin"
  if [ -x "$build/bin/ds4" ]; then
    step logits-ours 300 "${ours[@]}" "$build/bin/ds4" -m "$model" --backend cuda --quality --gpu-ctx 4096 \
      --tokens-file "$models/tokens-128.json" --dump-logits "$models/ours.bin"
    step logits-compare 300 python3 "$here/compare-logits.py" "$models/ours.bin" "$models/llama.bin" 129280 \
      --min-top1 0.9
  fi
  step speed-llama 300 "${llama[@]}" bench -m "$model" --tokens "$models/tokens.json" --gen 64 --warmup
fi
step bench 300 "${ours[@]}" "$build/bench/ds4-bench-cuda"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$sanitizer" ]; then
  sanitizer_step memcheck-layers 180 "${ours[@]}" "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$build/tests/test_cuda_layers"
  sanitizer_step memcheck-ops 120 "${ours[@]}" "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$build/tests/test_cuda_ops" --gtest_filter='CudaOps.Compressor*:CudaOps.Indexer*:CudaOps.Qat*:CudaOps.Attention*'
  sanitizer_step memcheck 240 "${ours[@]}" "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$build/tests/test_cuda_kernels" --gtest_filter='CudaMatvec.FastOrder*:CudaDequantize.F32*:CudaActivationQuant.*:CudaGemm.*:CudaInt8Products.*'
fi
# The issue's figures from the logs: decode's share of the HBM roofline
# (tokens/s x weight bytes per token / the device's copy read rate) and
# prefill over llama.cpp's.
python3 - "$logs" >"$out/summary.json" 2>"$logs/summary.err" <<'PY'
import csv, json, os, re, sys
logs = sys.argv[1]
def text(name):
    p = os.path.join(logs, name)
    return open(p).read() if os.path.exists(p) else ""
r = {}
speed = os.path.join(logs, "speed.csv")
rows = list(csv.DictReader(open(speed))) if os.path.exists(speed) else []
if rows:
    r["ours_prefill_tps"] = float(rows[-1]["prefill_tps"])
    r["ours_gen_tps"] = float(rows[-1]["gen_tps"])
speed_f16 = os.path.join(logs, "speed-f16.csv")
rows_f16 = list(csv.DictReader(open(speed_f16))) if os.path.exists(speed_f16) else []
if rows_f16:
    r["ours_prefill_tps_f16"] = float(rows_f16[-1]["prefill_tps"])
    if "ours_prefill_tps" in r:
        r["prefill_int8_over_f16"] = r["ours_prefill_tps"] / r["ours_prefill_tps_f16"]
m = re.search(r"decode weight bytes/token: *([0-9]+)", text("speed.log"))
if m:
    r["decode_weight_bytes"] = int(m.group(1))
for line in text("bench.log").splitlines():
    if line.startswith("{") and "copy_read_gbps" in line:
        r["copy_read_gbps"] = json.loads(line)["copy_read_gbps"]
if all(k in r for k in ("ours_gen_tps", "decode_weight_bytes", "copy_read_gbps")):
    r["decode_share_of_roofline"] = r["ours_gen_tps"] * r["decode_weight_bytes"] / (r["copy_read_gbps"] * 1e9)
for line in text("speed-llama.log").splitlines():
    if line.startswith("{") and "prefill_tps" in line:
        j = json.loads(line)
        r["llama_prefill_tps"], r["llama_gen_tps"] = j["prefill_tps"], j.get("gen_tps")
if "ours_prefill_tps" in r and r.get("llama_prefill_tps"):
    r["prefill_over_llama"] = r["ours_prefill_tps"] / r["llama_prefill_tps"]
for line in text("logits-compare.log").splitlines():
    if line.startswith("{"):
        r["logits_vs_llama"] = json.loads(line)
for line in text("profile.log").splitlines():
    if line.startswith("cuda profile:"):
        r["profile"] = line[len("cuda profile:"):].strip()
print(json.dumps(r))
PY
cat "$out/summary.json"
tar -C "$logs" -czf "$out/logs.tgz" .
echo "gpu-check: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
