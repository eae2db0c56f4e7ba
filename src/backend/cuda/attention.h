// Attention with a sink over stored KV rows on a GPU (backend/cpu/ops_attention.h),
// for each token t and head h: scores s[r] = dot(q[t][h], row r of the
// token's list) * scale, m the max of the scores and the sink. Rows are both
// key and value (the raw window, then the allowed compressed rows).
//   Default (f16 rows, as attention_with_sink_f16): weights exp(s[r] - m),
//     denominator exp(sink - m) + the weights in row order (a float), out =
//     (the weights times the rows, rows in order) * (1 / denominator).
//   Quality (f32 rows, as attention_with_sink in Quality): the weights'
//     sum in double, each weight multiplied by the float of 1 / sum before
//     the weighted sum (fused multiply-adds, as ggml's).
// The dots add in another order than the CPU's and expf is CUDA's: within
// float rounding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/numerics.h"

namespace ds4::cuda {

struct AttentionRows {
  const float* q = nullptr;           // n_tokens x n_head x dim
  const void* const* rows = nullptr;  // n_tokens x max_rows pointers to dim stored values (device)
  const int32_t* n_rows = nullptr;    // n_tokens: the rows of each token's list (<= max_rows)
  int max_rows = 0;
  const float* sinks = nullptr;  // n_head
  float scale = 1.0f;
  int64_t n_tokens = 0;
  int n_head = 0;
  int dim = 0;
  float* out = nullptr;  // n_tokens x n_head x dim
  // Default: rows of f16 bits; Quality: rows of f32.
  backend::Numerics numerics = backend::Numerics::Default;
};

// Which kernel: both give the same bits (the same operations per token and
// head). PerHead: a thread block per (token, head), the dots and outputs
// spread over 8 warps (low latency for a few tokens). HeadGroups: a thread
// block per (token, group of attention_head_group heads), a warp per head,
// so the rows (shared by all heads) are read from L2 once per group rather
// than once per head (prefill). Auto: HeadGroups above
// kAttentionPerHeadTokens tokens when a group of 2 or more fits.
enum class AttentionKernel { Auto, PerHead, HeadGroups };
inline constexpr int64_t kAttentionPerHeadTokens = 16;
// The heads per HeadGroups block: 8, 4 or 2 dividing n_head whose weights
// (max_rows floats each) fit the 48 KiB of shared memory; else 1.
int attention_head_group(const AttentionRows& a);

void attention_with_sink_rows(const AttentionRows& a, cudaStream_t stream,
                              AttentionKernel kernel = AttentionKernel::Auto);

}  // namespace ds4::cuda
