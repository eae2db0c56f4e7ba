// Prefill's matrix products on a GPU: Y (n_tokens x rows, row stride ldy) =
// X (n_tokens x cols, f32) times the transpose of W (rows x cols of any
// supported weight type), all device memory.
//
// With int8 tensor cores on (use_int8_tensor_cores, the backend's default),
// a quantized W of int8_tensor_core_type goes through matmul_int8 on X
// quantized in the numerics' activation form, as the CPU and the decode
// kernels dot it: each result equals the CPU scalar kernel's bit for bit.
//
// Otherwise (float weights, IQ1_M, or int8 off) through cuBLAS: a quantized
// W is dequantized into a scratch buffer as f16 (11 significant bits, more
// than any of the formats' values carry) or, for MXFP4, as bf16 (exact: its
// values are small integers times a power of two, beyond f16's range at
// large scales); X is rounded to the same type and cuBLAS accumulates in f32
// on the tensor cores. F16 and BF16 weights are used as they are; F32
// weights go through cublasSgemm in plain f32 (no TF32). Results are close
// to, not bit-identical with, the CPU's Q8 products.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "backend/numerics.h"
#include "core/ggml_type.h"

struct cublasContext;

namespace ds4::cuda {

// Dequantized weights go through a scratch buffer of at most this many
// bytes, a block of rows at a time (the output head alone would take 1.7 GiB
// as f16).
inline constexpr size_t kGemmWeightScratchBytes = 64ull << 20;

// How prefill multiplies quantized weights (--gpu-prefill).
enum class PrefillProducts {
  Int8TensorCores,  // matmul_int8 where the type allows, exact to the CPU
  Cublas,           // dequantized to f16 / bf16, cuBLAS
};

class GemmRunner {
 public:
  // On the current device, queued on `stream`.
  explicit GemmRunner(cudaStream_t stream, size_t weight_scratch_bytes = kGemmWeightScratchBytes);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Quantized weights the int8 kernel takes go through it, their
  // activations quantized as `numerics` dots them.
  void use_int8_tensor_cores(backend::Numerics numerics);
  // Whether matmul takes `type` through the int8 kernel.
  bool int8_for(GgmlType type) const;

  void matmul(GgmlType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens, float* y,
              int64_t ldy);
  // `n_tokens` rows of x quantized for an int8_for(type) weight into a
  // scratch buffer of this runner (valid until the next call): the
  // activations of matmul_int8 / matmul_int8_tasks on this runner's stream.
  const void* quantize_for(GgmlType type, const float* x, int64_t n_tokens, int64_t cols);
  cudaStream_t stream() const { return stream_; }

 private:
  void* scratch(DeviceBuffer& buffer, size_t bytes);
  void cublas_matmul(GgmlType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens,
                     float* y, int64_t ldy);

  bool int8_ = false;
  backend::Numerics numerics_ = backend::Numerics::Default;

  cublasContext* handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  size_t weight_scratch_limit_ = 0;
  int device_ = -1;
  DeviceBuffer weight_scratch_, act_scratch_, quantized_scratch_;
};

}  // namespace ds4::cuda
