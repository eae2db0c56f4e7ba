// The KV compressor's gated pooling on a GPU (backend/cpu/ops_compressor_pool.h,
// MODEL.md 4.5), for several pooled rows at once (the windows a prefill batch
// closes): for every column j of pooled row o, a softmax over its candidates'
// scores weights their kv values. The CPU's float steps in its order per
// numerics (Default: float sums over (previous, current) pairs; Quality:
// the exp sum and the weighted sum in double), with CUDA's expf for glibc's
// (and for ggml's vector expf in Quality): within a few ulp of the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/numerics.h"

namespace ds4::cuda {

struct PoolRows {
  // n_out x n_cand device pointers to each candidate's dim-wide score and kv
  // slices (lane B of a ratio-4 window already offset by dim), the first
  // n_prev of each row's candidates the previous window's lane (ratio 4: 4
  // of 8; ratio 128: none).
  const float* const* score_rows = nullptr;
  const float* const* kv_rows = nullptr;
  int n_cand = 0;
  int n_prev = 0;
  int64_t n_out = 0;
  int dim = 0;
  float* out = nullptr;  // n_out x dim
};

// ds4::Error on a candidate count the CPU's pooling does not take (more
// than cpu::kPoolMaxRows, or n_prev neither 0 nor half of n_cand).
void compressor_pool_rows(const PoolRows& rows, backend::Numerics numerics, cudaStream_t stream);

}  // namespace ds4::cuda
