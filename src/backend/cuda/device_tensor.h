// Weights on a GPU and the products the forward pass takes with them.
//   DeviceTensor: a matrix (or a 3-D stack of them) copied as stored, in its
//     ggml type's bytes; upload_f32: a vector (norm, sinks) as f32.
//   DeviceProducts: Y = X W^T for n tokens: up to kMatvecTokens through the
//     decode matrix-vector kernels (activations quantized on the GPU to the
//     form the CPU dots the type with; each token's result bit-identical to
//     its product alone, so a batched decode step equals each session's
//     alone), more through GemmRunner (gemm.h: the int8 tensor cores on the
//     same activation form, or cuBLAS).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/numerics.h"
#include "core/ggml_type.h"
#include "model/deepseek4_weights.h"

namespace ds4::cuda {

// Products of at most this many tokens take the decode kernels.
inline constexpr int64_t kMatvecTokens = 16;

struct DeviceTensor {
  GgmlType type = GgmlType::F32;
  int64_t cols = 0;    // ne[0]
  int64_t rows = 0;    // ne[1]: rows of one matrix
  int64_t n_mats = 1;  // ne[2] (3-D stacks: experts, attention output groups)
  uint64_t matrix_bytes = 0;
  DeviceBuffer data;

  const void* matrix(int64_t m) const { return data.as<const uint8_t>() + m * static_cast<int64_t>(matrix_bytes); }
};

// `t` as stored, viewed as n_mats matrices of rows x cols (n_mats 1: the
// whole tensor is one matrix). ds4::Error naming the tensor when its type
// has no device kernels or the view does not divide it.
DeviceTensor upload_tensor(const model::TensorView& t, int64_t rows, int64_t n_mats = 1);
// The matrices of a stack of n_mats (routed experts) that `share` owns
// (backend::TensorShare: matrix e when e % size == rank), back to back:
// matrix e is local matrix e / size. Tensor parallel's half of the experts.
DeviceTensor upload_expert_share(const model::TensorView& t, int64_t rows, int64_t n_mats, int rank, int size);
// A 2-D tensor as one matrix of ne[1] rows.
DeviceTensor upload_matrix(const model::TensorView& t);
// `t` dequantized to n f32 values on the host (ds4::Error naming it unless
// it holds exactly n).
DeviceBuffer upload_f32(const model::TensorView& t, uint64_t n);

class DeviceProducts {
 public:
  DeviceProducts(cudaStream_t stream, backend::Numerics numerics,
                 PrefillProducts prefill = PrefillProducts::Int8TensorCores);

  // Y (n x w.rows, row stride ldy) = X (n x w.cols, contiguous) times the
  // transpose of matrix m of w.
  void run(const DeviceTensor& w, int64_t m, const float* x, int64_t n, float* y, int64_t ldy);

  GemmRunner& gemm() { return gemm_; }
  cudaStream_t stream() const { return gemm_.stream(); }

 private:
  GemmRunner gemm_;
  backend::Numerics numerics_;
  DeviceBuffer act_;  // the tokens' quantized activations
};

}  // namespace ds4::cuda
