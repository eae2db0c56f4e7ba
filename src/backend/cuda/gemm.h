// Prefill's matrix products on a GPU through cuBLAS: Y (n_tokens x rows, row
// stride ldy) = X (n_tokens x cols, f32) times the transpose of W (rows x
// cols of any supported weight type), all device memory.
//
// A quantized W is dequantized into a scratch buffer as f16 (11 significant
// bits, more than any of the formats' values carry) or, for MXFP4, as bf16
// (exact: its values are small integers times a power of two, beyond f16's
// range at large scales); X is rounded to the same type and cuBLAS
// accumulates in f32 on the tensor cores. F16 and BF16 weights are used as
// they are; F32 weights go through cublasSgemm in plain f32 (no TF32).
// Results are close to, not bit-identical with, the CPU's Q8 products.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "core/ggml_type.h"

struct cublasContext;

namespace ds4::cuda {

// Dequantized weights go through a scratch buffer of at most this many
// bytes, a block of rows at a time (the output head alone would take 1.7 GiB
// as f16).
inline constexpr size_t kGemmWeightScratchBytes = 64ull << 20;

class GemmRunner {
 public:
  // On the current device, queued on `stream`.
  explicit GemmRunner(cudaStream_t stream, size_t weight_scratch_bytes = kGemmWeightScratchBytes);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  void matmul(GgmlType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens, float* y,
              int64_t ldy);
  cudaStream_t stream() const { return stream_; }

 private:
  void* scratch(DeviceBuffer& buffer, size_t bytes);

  cublasContext* handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  size_t weight_scratch_limit_ = 0;
  int device_ = -1;
  DeviceBuffer weight_scratch_, act_scratch_;
};

}  // namespace ds4::cuda
