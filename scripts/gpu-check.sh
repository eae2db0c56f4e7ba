#!/usr/bin/env bash
# The CUDA backend's checks on a machine with an NVIDIA GPU, as one short
# script (docs/cuda.md): the kernels against the CPU's scalar references
# (tests/cuda/test_cuda_kernels, a GPU being required), the small ops
# against the CPU's (test_cuda_ops), the stateful layer pieces against the
# CPU backend's (test_cuda_layers), the whole model against the CPU backend
# (test_cuda_backend), the device tests,
# compute-sanitizer's memcheck over the kernels that index the most, and the
# kernels' speeds (ds4-bench-cuda). The programs are built elsewhere (make
# gpu-build, which needs no GPU) and carried over: the GPU machine needs only
# its driver and the CUDA toolkit's cuBLAS. Carry BUILD/tests/test_cuda_*
# and BUILD/bench/ds4-bench-cuda (and BUILD/bin/ds4-bench, ds4-mkmodel for
# the whole model's speed).
#
# With llama/ in the bundle (scripts/gpu-bundle.sh after
# scripts/build-llama-cuda.sh), llama.cpp's deepseek4 on the same GPU and file:
# the logits of 128 tokens against ours in --quality (scripts/compare-logits.py)
# and prefill/decode speed; summary.json then holds the issue's figures
# (decode's share of the HBM roofline, prefill over llama.cpp's).
#
# Usage: scripts/gpu-check.sh BUILD_DIR|BUNDLE.tar.xz [OUT_DIR]   (default OUT_DIR: $OUT or ./gpu-check)
set -u
build=${1:?usage: scripts/gpu-check.sh BUILD_DIR|BUNDLE.tar.xz [OUT_DIR]}
out=${2:-${OUT:-gpu-check}}
mkdir -p "$out"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -f "$build" ]; then  # a bundle from scripts/gpu-bundle.sh
  unpacked=${TMPDIR:-/tmp}/ds4-gpu-bundle
  rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -C "$unpacked" -xJf "$build" || { echo "gpu-check: cannot unpack $build"; exit 1; }
  build=$unpacked
fi

# cuBLAS 13: the toolkit's, else the pip wheel's.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null); do
  if [ -e "$dir/libcublas.so.13" ]; then
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    break
  fi
done

status=0
step() {  # step NAME TIMEOUT COMMAND...: runs it, its output to OUT/NAME.log and the terminal's tail
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$out/$name.log"
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  [ $rc -eq 0 ] || status=1
}

# A library the carried programs cannot find here, named before anything runs.
ldd "$build/tests/test_cuda_kernels" "$build/bench/ds4-bench-cuda" 2>&1 | grep -i "not found" && status=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv >"$out/nvidia-smi.log" 2>&1
cat "$out/nvidia-smi.log"
export DS4_REQUIRE_GPU=1
# Most telling first: a device run is short and may be cut off, so the whole
# model and its layers come before the per-kernel sweep, the speeds and the
# sanitizer (the slowest).
step devices 60 "$build/tests/test_cuda_devices"
step backend 180 "$build/tests/test_cuda_backend"
step layers 120 "$build/tests/test_cuda_layers"
step ops 120 "$build/tests/test_cuda_ops"
step kernels 300 "$build/tests/test_cuda_kernels"
# The whole model's speed (when BUILD/bin/ds4-bench and ds4-mkmodel were
# carried too): a 2-layer bench model in ds4-q2, prefill and decode with
# --backend cuda (docs/cuda.md); the CSV comes back in OUT.
models=${TMPDIR:-/tmp}/ds4-gpu-check
model="$models/bench-2-ds4-q2.gguf"
if [ -x "$build/bin/ds4-bench" ] && [ -x "$build/bin/ds4-mkmodel" ]; then
  mkdir -p "$models"
  python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 1000 for i in range(4096)]))' >"$models/tokens.json"
  python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 129280 for i in range(128)]))' >"$models/tokens-128.json"
  step mkmodel 300 "$build/bin/ds4-mkmodel" --preset bench --layers 2 --mix ds4-q2 --seed 1 --out "$model"
  step speed 300 "$build/bin/ds4-bench" -m "$model" --backend cuda --gpu-ctx 8192 \
    --tokens-file "$models/tokens.json" --ctx-start 4096 --ctx-max 4096 -n 64 --warmup --csv "$out/speed.csv"
  # Where the time goes (DS4_CUDA_PROFILE: every phase waited for, so slower): one line "cuda profile: ..."
  # for a 2048-token prefill with 16 decode steps.
  step profile 300 env DS4_CUDA_PROFILE=1 "$build/bin/ds4-bench" -m "$model" --backend cuda --gpu-ctx 4096 \
    --tokens-file "$models/tokens.json" --ctx-start 2048 --ctx-max 2048 -n 16
fi
# llama.cpp's CUDA build on the same file and GPU (when the bundle has it).
if [ -x "$build/llama/ds4-ref-runner" ] && [ -e "$build/llama/libggml-cuda.so" ] && [ -f "$model" ]; then
  llama=(env DS4_REF_BINS="$build/llama" LD_LIBRARY_PATH="$build/llama:${LD_LIBRARY_PATH:-}"
    "$build/llama/ds4-ref-runner" --gpu-backend "$build/llama/libggml-cuda.so")
  step logits-llama 300 "${llama[@]}" logits -m "$model" --tokens "$models/tokens-128.json" --out "$models/llama.bin"
  if [ -x "$build/bin/ds4" ]; then
    step logits-ours 300 "$build/bin/ds4" -m "$model" --backend cuda --quality --gpu-ctx 4096 \
      --tokens-file "$models/tokens-128.json" --dump-logits "$models/ours.bin"
    step logits-compare 300 python3 "$here/compare-logits.py" "$models/ours.bin" "$models/llama.bin" 129280 \
      --min-top1 0.9
  fi
  step speed-llama 300 "${llama[@]}" bench -m "$model" --tokens "$models/tokens.json" --gen 64 --warmup
fi
step bench 300 "$build/bench/ds4-bench-cuda"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$sanitizer" ]; then
  step memcheck-layers 180 "$sanitizer" --tool memcheck --error-exitcode 9 "$build/tests/test_cuda_layers"
  step memcheck-ops 120 "$sanitizer" --tool memcheck --error-exitcode 9 "$build/tests/test_cuda_ops" \
    --gtest_filter='CudaOps.Compressor*:CudaOps.Indexer*:CudaOps.Qat*:CudaOps.Attention*'
  step memcheck 240 "$sanitizer" --tool memcheck --error-exitcode 9 "$build/tests/test_cuda_kernels" \
    --gtest_filter='CudaMatvec.FastOrder*:CudaDequantize.F32*:CudaActivationQuant.*:CudaGemm.*'
fi
# The issue's figures from the logs: decode's share of the HBM roofline
# (tokens/s x weight bytes per token / the device's copy read rate) and
# prefill over llama.cpp's.
python3 - "$out" >"$out/summary.json" 2>"$out/summary.err" <<'PY'
import csv, json, os, re, sys
out = sys.argv[1]
def text(name):
    p = os.path.join(out, name)
    return open(p).read() if os.path.exists(p) else ""
r = {}
rows = list(csv.DictReader(open(os.path.join(out, "speed.csv")))) if os.path.exists(os.path.join(out, "speed.csv")) else []
if rows:
    r["ours_prefill_tps"] = float(rows[-1]["prefill_tps"])
    r["ours_gen_tps"] = float(rows[-1]["gen_tps"])
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
print(json.dumps(r))
PY
cat "$out/summary.json"
echo "gpu-check: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
