// The forward pass's element-wise and small ops on a GPU (device pointers,
// asynchronous on `stream`), batched over rows (tokens), each the CPU op's
// float operations (backend/cpu/ops_*.h):
//   - bit-identical: HC weighted sum and post (fixed per-element order, fma
//     where Quality fuses), RoPE from the CPU's cos/sin cache, top-k;
//   - RMSNorm: the double sum in another order, so its scale can differ from
//     the CPU's in the last bit of the float;
//   - SwiGLU: CUDA's expf instead of glibc's (within 2 ulp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/numerics.h"

namespace ds4::cuda {

using backend::Numerics;

// y = x * (1 / sqrt(mean(x^2) + eps)) [* w] for n_rows rows of n floats
// (row stride n); w null: unweighted. The mean's sum is of exact products in
// double (Default) or of float products (Quality), as cpu::rms_norm_scale.
// y may alias x.
void rms_norm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps, Numerics numerics,
                   cudaStream_t stream);

// out = silu(min(gate, limit)) * clamp(up, -limit, limit) [* row_weight[r]]
// for n_rows rows of n (cpu::swiglu_clamp; limit <= 1e-6: no clamp;
// row_weight null: 1; Quality takes none).
void swiglu_clamp_rows(const float* gate, const float* up, const float* row_weight, float* out, int64_t n_rows,
                       int64_t n, float limit, Numerics numerics, cudaStream_t stream);

// Hyper-connections, per token t: out[t][d] = sum_i weights[t][i] *
// state[t][i][d] (cpu::hc_weighted_sum), and out[t][j][d] = post[t][j] *
// f[t][d] + sum_i comb[t][i*4+j] * state[t][i][d] (cpu::hc_post). State
// rows are 4 x n_embd; weights and post 4 per token, comb 16.
void hc_weighted_sum_rows(const float* state, const float* weights, float* out, int64_t n_tokens, int64_t n_embd,
                          Numerics numerics, cudaStream_t stream);
void hc_post_rows(const float* f, const float* state, const float* post, const float* comb, float* out,
                  int64_t n_tokens, int64_t n_embd, Numerics numerics, cudaStream_t stream);

// Rows of n floats: dst[i] = src[index[i]] (gather) or dst[index[i]] =
// src[i] (scatter), for i < m.
void gather_rows(const float* src, const int32_t* index, float* dst, int64_t m, int64_t n, cudaStream_t stream);
void scatter_rows(const float* src, const int32_t* index, float* dst, int64_t m, int64_t n, cudaStream_t stream);

// Rows of n floats, each repeated: dst row r * times + j = src row r (j <
// times); decode's routed experts read each token's row once per slot.
void repeat_rows(const float* src, float* dst, int64_t rows, int times, int64_t n, cudaStream_t stream);

// Tensor parallel (backend::TensorShare): local[p] = ids[p] / size where
// rank owns expert ids[p] (ids[p] % size == rank), else -1 (another GPU's).
void share_expert_ids(const int32_t* ids, int32_t* local, int64_t n, int rank, int size, cudaStream_t stream);

// The MoE sublayer's sum per token t (cpu::MoeLayer): acc = the k routed
// experts' down-projection rows down[t * k + slot] added in slot order, each
// times pair_weight[t * k + slot] when given (Quality; Default weighs before
// the down projection), then out[t] = acc + shared[t] (shared null: acc).
void moe_combine_rows(const float* down, const float* pair_weight, const float* shared, float* out, int64_t n_tokens,
                      int k, int64_t n_embd, cudaStream_t stream);

// The HC split per token (cpu::hc_split_sinkhorn): from the token's 24
// mixes, scale[3] and base[24], the 4 pre weights, 4 post weights and the
// 4x4 Sinkhorn-normalised combine matrix (16, comb[i*4+j]); and the output
// head's 4 weights from its 4 mixes, one scale and base[4]
// (cpu::hc_head_weights). CUDA's expf: within a few ulp of the CPU.
void hc_split_rows(const float* mix, const float* scale, const float* base, float eps, int iters, float* pre,
                   float* post, float* comb, int64_t n_tokens, Numerics numerics, cudaStream_t stream);
void hc_head_weights_rows(const float* mix, const float* scale, const float* base, float eps, float* weights,
                          int64_t n_tokens, Numerics numerics, cudaStream_t stream);

// RoPE on the last 2 * n_pairs dims of each of n_head heads of width
// head_dim, in each of n_rows rows, with row r's cos/sin (n_pairs each, as
// cpu::rope_cache made them; sin negated for the inverse); fused: Quality's
// fmas (cpu::RopeCache::fused).
void rope_heads_rows(float* x, const float* cos, const float* sin, int64_t n_rows, int n_head, int head_dim,
                     int n_pairs, bool fused, cudaStream_t stream);

// The indices of the k largest of each row's n scores, largest first, ties
// to the lower index, NaN never ahead of a number (cpu::top_k_desc).
void top_k_desc_rows(const float* scores, int32_t* out, int64_t n_rows, int64_t n, int k, cudaStream_t stream);

}  // namespace ds4::cuda
