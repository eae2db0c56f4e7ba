#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs on a GPU machine into one compressed
# file small enough to carry there (docs/cuda.md "Checks"): from BUILD (a
# CUDA build, e.g. make gpu-build or -DCMAKE_CUDA_ARCHITECTURES=90-real) the
# CUDA tests, ds4-bench-cuda, ds4, ds4-bench and ds4-mkmodel, debug info
# stripped; and, when scripts/build-llama-cuda.sh has made llama.cpp's CUDA
# backend for ARCH, llama/: ds4-ref-runner (from REF_BUILD, default build),
# the prebuilt libllama / libggml-base / CPU libraries it loads, and
# libggml-cuda.so with its CUDA runtime; lib/: the shared libraries the
# programs need beyond the C and C++ runtimes (the GPU machine's image is not
# this one's).
#
#   scripts/gpu-bundle.sh BUILD [OUT_DIR] [ARCH] [REF_BUILD]   -> OUT_DIR/gpu-bundle.tar.xz (default .gpu-run, 90)
#
# On the GPU machine: scripts/gpu-check.sh OUT_DIR/gpu-bundle.tar.xz $OUT
set -euo pipefail
die() { echo "gpu-bundle: $*" >&2; exit 1; }
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=${1:?usage: scripts/gpu-bundle.sh BUILD [OUT_DIR] [ARCH] [REF_BUILD]}
out=${2:-$repo_root/.gpu-run}
arch=${3:-90}
ref_build=${4:-$repo_root/build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tests" "$stage/bench" "$stage/bin" "$out"

take() {  # take FILE DEST_DIR [required]
  if [ -e "$1" ]; then
    strip --strip-debug -o "$2/$(basename "$1")" "$1"
  elif [ "${3:-}" = required ]; then
    die "$1 is not built"
  fi
}
for t in devices backend layers ops kernels; do take "$build/tests/test_cuda_$t" "$stage/tests" required; done
take "$build/bench/ds4-bench-cuda" "$stage/bench" required
for p in ds4 ds4-bench ds4-mkmodel; do take "$build/bin/$p" "$stage/bin"; done

llama_cuda="$repo_root/.reference/llama-cuda/sm_$arch"
bins="$repo_root/.reference/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
if [ -e "$llama_cuda/libggml-cuda.so" ] && [ -x "$ref_build/bin/ds4-ref-runner" ] && [ -d "$bins" ]; then
  mkdir -p "$stage/llama"
  take "$ref_build/bin/ds4-ref-runner" "$stage/llama" required
  # The AMX build (sapphirerapids) aborts on these graphs; the others by level.
  for lib in libllama.v0.4.0.so libggml.v0.4.0.so libggml-base.so libggml-cpu-x64.so libggml-cpu-haswell.so \
      libggml-cpu-skylakex.so libggml-cpu-icelake.so libggml-cpu-zen4.so; do
    cp "$bins/$lib" "$stage/llama/"
  done
  cp "$llama_cuda"/libggml-cuda.so "$stage/llama/"
  [ -e "$llama_cuda/libcudart.so.13" ] && cp "$llama_cuda/libcudart.so.13" "$stage/llama/"
else
  echo "gpu-bundle: no llama.cpp CUDA backend for sm_$arch (scripts/build-llama-cuda.sh $arch): the comparison with llama.cpp is left out"
fi
# The shared libraries the programs load beyond the C and C++ runtimes (ZeroMQ,
# Open MPI, liburing, PCRE2, OpenSSL, ...): the GPU machine's image need not have
# them. gpu-check.sh puts lib/ first on its programs' library path only.
mkdir -p "$stage/lib"
for exe in "$stage"/tests/* "$stage"/bench/* "$stage"/bin/* "$stage"/llama/ds4-ref-runner; do
  [ -f "$exe" ] || continue
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;  # glibc and the C++ runtime: the machine's own
    libllama*|libggml*) ;;  # llama/ has them
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
tar -C "$stage" -cJf "$out/gpu-bundle.tar.xz" .
echo "gpu-bundle: $(du -h "$out/gpu-bundle.tar.xz" | cut -f1) $out/gpu-bundle.tar.xz ($(du -sh "$stage" | cut -f1) unpacked)"
