// Attention with a sink over f16 rows on a GPU (backend/cpu/ops_attention.h,
// Default numerics as attention_with_sink_f16): for each token t and head h,
// scores s[r] = dot(q[t][h], row r of the token's list) * scale, weights
// exp(s[r] - m) with m the max of the scores and the sink, denominator
// exp(sink - m) + the weights in row order, out = (the weights times the
// rows, rows in order) * (1 / denominator). Rows are both key and value
// (the raw window, then the allowed compressed rows). The dots add in
// another order than the CPU's and expf is CUDA's: within float rounding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ds4::cuda {

struct AttentionRows {
  const float* q = nullptr;            // n_tokens x n_head x dim
  const uint16_t* const* rows = nullptr;  // n_tokens x max_rows pointers to dim f16 values (device)
  const int32_t* n_rows = nullptr;     // n_tokens: the rows of each token's list (<= max_rows)
  int max_rows = 0;
  const float* sinks = nullptr;        // n_head
  float scale = 1.0f;
  int64_t n_tokens = 0;
  int n_head = 0;
  int dim = 0;
  float* out = nullptr;                // n_tokens x n_head x dim
};

void attention_with_sink_f16_rows(const AttentionRows& a, cudaStream_t stream);

}  // namespace ds4::cuda
