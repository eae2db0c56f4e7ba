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
# Usage: scripts/gpu-check.sh BUILD_DIR [OUT_DIR]   (default OUT_DIR: $OUT or ./gpu-check)
set -u
build=${1:?usage: scripts/gpu-check.sh BUILD_DIR [OUT_DIR]}
out=${2:-${OUT:-gpu-check}}
mkdir -p "$out"

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
if [ -x "$build/bin/ds4-bench" ] && [ -x "$build/bin/ds4-mkmodel" ]; then
  models=${TMPDIR:-/tmp}/ds4-gpu-check
  mkdir -p "$models"
  python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 1000 for i in range(4096)]))' >"$models/tokens.json"
  step mkmodel 300 "$build/bin/ds4-mkmodel" --preset bench --layers 2 --mix ds4-q2 --seed 1 \
    --out "$models/bench-2-ds4-q2.gguf"
  step speed 300 "$build/bin/ds4-bench" -m "$models/bench-2-ds4-q2.gguf" --backend cuda --gpu-ctx 8192 \
    --tokens-file "$models/tokens.json" --ctx-start 512 --ctx-max 4096 -n 64 --warmup --csv "$out/speed.csv"
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
echo "gpu-check: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
