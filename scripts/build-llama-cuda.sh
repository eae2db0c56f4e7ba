#!/usr/bin/env bash
# Builds llama.cpp's CUDA backend (libggml-cuda.so) from the pinned reference
# source (.reference/llama.cpp, the commit of node-llama-cpp's prebuilt
# libraries) for one GPU architecture, so that ds4-ref-runner --gpu-backend
# can run llama.cpp's deepseek4 graph on a GPU next to the prebuilt
# libllama/libggml-base it already loads (docs/cuda.md "llama.cpp on the
# GPU"). npm's @node-llama-cpp/linux-x64-cuda carries the same library built
# for every architecture (159 MB), more than a GPU check can take along; one
# architecture is a fraction of it.
#
#   scripts/build-llama-cuda.sh [ARCH] [OUT]    ARCH: 90 (H100/H200, default), 80, 89, 100, 120
#
# Writes OUT/libggml-cuda.so (default .reference/llama-cuda/sm_ARCH) and the
# CUDA runtime it needs (libcudart.so.13, for GPU machines without the
# toolkit; cuBLAS is found as the GPU check finds it). Takes tens of minutes
# on two cores.
set -euo pipefail

die() { echo "build-llama-cuda: $*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
arch="${1:-90}"
out="${2:-$repo_root/.reference/llama-cuda/sm_$arch}"
src="$repo_root/.reference/llama.cpp"
[[ "$arch" =~ ^[0-9]+$ ]] || die "'$arch' is not a CUDA architecture number (such as 90)"
[[ -f "$src/ggml/src/ggml-cuda/CMakeLists.txt" ]] || die "no llama.cpp source in $src (run make reference)"
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[[ -x "$nvcc" ]] || die "nvcc not found (on PATH, CUDACXX or /usr/local/cuda/bin)"

build="$repo_root/.reference/llama-cuda/build-sm_$arch"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="$arch-real" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >/dev/null
cmake --build "$build" --target ggml-cuda
lib="$(find "$build" -name libggml-cuda.so -print -quit)"
[[ -n "$lib" ]] || die "the build made no libggml-cuda.so"
mkdir -p "$out"
strip --strip-debug -o "$out/libggml-cuda.so" "$lib"
cudart="$(dirname "$(readlink -f "$nvcc")")/../lib/libcudart.so.13"
[[ -e "$cudart" ]] || cudart="$(dirname "$(readlink -f "$nvcc")")/../targets/x86_64-linux/lib/libcudart.so.13"
[[ -e "$cudart" ]] && cp -L "$cudart" "$out/"
echo "build-llama-cuda: $(du -h "$out/libggml-cuda.so" | cut -f1) $out/libggml-cuda.so (sm_$arch)"
