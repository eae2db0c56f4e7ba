// MoE routing on a GPU, per token (backend/cpu/ops_moe.h): router scores
// sqrt(softplus(logit)), the experts chosen by top-k of score + bias (ties
// to the lower expert) or read from the hash table for the token, and their
// weights score / max(sum of the chosen scores, 2^-14) * scale (the sum in
// float in slot order, Default, or in double, Quality). CUDA's expf / log1pf
// against glibc's: scores within a few ulp of the CPU's, ids the same
// unless two biased scores are that close. Quality's exact ties follow the
// lower expert here, not ggml's sort order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/numerics.h"

namespace ds4::cuda {

struct RouteRows {
  const float* logits = nullptr;   // n_tokens x n_expert
  const float* bias = nullptr;     // n_expert, or null (no exp_probs_b)
  const int32_t* tid2eid = nullptr;  // hash layers: n_vocab x k, every id in [0, n_expert) (checked by the caller)
  const int32_t* tokens = nullptr;   // hash layers: the n_tokens token ids
  int64_t n_tokens = 0;
  int n_expert = 0;
  int k = 0;
  float scale = 1.0f;
  int32_t* ids = nullptr;    // n_tokens x k
  float* weights = nullptr;  // n_tokens x k
};

void route_rows(const RouteRows& rows, backend::Numerics numerics, cudaStream_t stream);

}  // namespace ds4::cuda
