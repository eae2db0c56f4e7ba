// Kernels of backend/cuda/ops.h.
#include <cfloat>

#include "backend/cuda/block_argmax.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kHcStreams = 4;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// ---- RMSNorm: a thread block per row, the double sum reduced in shared memory ----

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int64_t n, float eps, bool exact_products) {
  __shared__ double partial[kThreads];
  __shared__ float scale;
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = xr[i];
    sum += exact_products ? static_cast<double>(v) * v : static_cast<double>(v * v);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float mean = static_cast<float>(partial[0] / static_cast<double>(n));
    scale = 1.0f / sqrtf(mean + eps);
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = w ? xr[i] * scale * w[i] : xr[i] * scale;
}

// ---- SwiGLU ----

__device__ float sigmoid_two_branch(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

__global__ void swiglu_kernel(const float* gate, const float* up, const float* row_weight, float* out, int64_t n_rows,
                              int64_t n, float limit, bool quality) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= n_rows * n) return;
  float g = gate[i], u = up[i];
  if (limit > 1.0e-6f) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  if (quality) {
    out[i] = g / (1.0f + expf(-g)) * u;
  } else {
    const float weight = row_weight ? row_weight[i / n] : 1.0f;
    out[i] = g * sigmoid_two_branch(g) * u * weight;
  }
}

template <bool kGather>
__global__ void move_rows_kernel(const float* src, const int32_t* index, float* dst, int64_t m, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= m * n) return;
  const int64_t row = i / n, col = i % n;
  if constexpr (kGather) {
    dst[i] = src[index[row] * n + col];
  } else {
    dst[index[row] * n + col] = src[i];
  }
}

__global__ void repeat_rows_kernel(const float* src, float* dst, int64_t rows, int times, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= rows * times * n) return;
  dst[i] = src[(i / n) / times * n + i % n];
}

__global__ void moe_combine_kernel(const float* down, const float* pair_weight, const float* shared, float* out,
                                   int64_t n_tokens, int k, int64_t n_embd) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= n_tokens * n_embd) return;
  const int64_t t = i / n_embd, d = i % n_embd;
  float acc = 0.0f;
  for (int slot = 0; slot < k; ++slot) {
    const int64_t pair = t * k + slot;
    acc = pair_weight ? acc + down[pair * n_embd + d] * pair_weight[pair] : acc + down[pair * n_embd + d];
  }
  out[i] = shared ? acc + shared[i] : acc;
}

// ---- hyper-connections ----

__global__ void hc_weighted_sum_kernel(const float* state, const float* weights, float* out, int64_t n_tokens,
                                       int64_t n_embd, bool fused) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= n_tokens * n_embd) return;
  const int64_t t = i / n_embd, d = i % n_embd;
  const float* s = state + t * kHcStreams * n_embd + d;
  const float* w = weights + t * kHcStreams;
  float acc = 0.0f;
  for (int k = 0; k < kHcStreams; ++k) acc = fused ? fmaf(s[k * n_embd], w[k], acc) : acc + s[k * n_embd] * w[k];
  out[i] = acc;
}

__global__ void hc_post_kernel(const float* f, const float* state, const float* post, const float* comb, float* out,
                               int64_t n_tokens, int64_t n_embd, bool fused) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;  // (t, j, d)
  if (i >= n_tokens * kHcStreams * n_embd) return;
  const int64_t d = i % n_embd;
  const int64_t j = (i / n_embd) % kHcStreams;
  const int64_t t = i / (n_embd * kHcStreams);
  const float* s = state + t * kHcStreams * n_embd + d;
  const float* c = comb + t * kHcStreams * kHcStreams;
  float acc = f[t * n_embd + d] * post[t * kHcStreams + j];
  for (int k = 0; k < kHcStreams; ++k) {
    acc = fused ? fmaf(s[k * n_embd], c[k * kHcStreams + j], acc) : acc + s[k * n_embd] * c[k * kHcStreams + j];
  }
  out[i] = acc;
}

// One thread per token: the split is 24 values and a 4x4 matrix.
__device__ float sum_plus_eps(float v0, float v1, float v2, float v3, float eps, bool quality) {
  return quality ? (((eps + v0) + v1) + v2) + v3 : (((v0 + v1) + v2) + v3) + eps;
}

__device__ float sigmoid_plain(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void hc_split_kernel(const float* mix_all, const float* scale, const float* base, float eps, int iters,
                                float* pre, float* post, float* comb_all, int64_t n_tokens, bool quality) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (t >= n_tokens) return;
  constexpr int kN = kHcStreams;
  const float* mix = mix_all + t * (2 + kN) * kN;
  for (int i = 0; i < kN; ++i) {
    pre[t * kN + i] = sigmoid_plain(mix[i] * scale[0] + base[i]) + eps;
    post[t * kN + i] = 2.0f * sigmoid_plain(mix[kN + i] * scale[1] + base[kN + i]);
  }
  float c[kN * kN];
  for (int i = 0; i < kN; ++i) {
    float* r = c + i * kN;
    float max = -INFINITY;
    for (int j = 0; j < kN; ++j) {
      const int k = 2 * kN + i * kN + j;
      r[j] = quality ? fmaf(mix[k], scale[2], base[k]) : mix[k] * scale[2] + base[k];
      max = r[j] > max ? r[j] : max;
    }
    float sum = 0.0f;
    for (int j = 0; j < kN; ++j) {
      r[j] = expf(r[j] - max);
      sum += r[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < kN; ++j) r[j] = quality ? fmaf(r[j], inv, eps) : r[j] * inv + eps;
  }
  auto normalize_cols = [&] {
    for (int j = 0; j < kN; ++j) {
      const float inv = 1.0f / sum_plus_eps(c[j], c[kN + j], c[2 * kN + j], c[3 * kN + j], eps, quality);
      for (int i = 0; i < kN; ++i) c[i * kN + j] *= inv;
    }
  };
  normalize_cols();
  for (int it = 1; it < iters; ++it) {
    for (int i = 0; i < kN; ++i) {
      float* r = c + i * kN;
      const float inv = 1.0f / sum_plus_eps(r[0], r[1], r[2], r[3], eps, quality);
      for (int j = 0; j < kN; ++j) r[j] *= inv;
    }
    normalize_cols();
  }
  for (int k = 0; k < kN * kN; ++k) comb_all[t * kN * kN + k] = c[k];
}

__global__ void hc_head_weights_kernel(const float* mix, const float* scale, const float* base, float eps,
                                       float* weights, int64_t n_tokens, bool quality) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;  // (t, stream)
  if (i >= n_tokens * kHcStreams) return;
  const float z = mix[i] * scale[0] + base[i % kHcStreams];
  weights[i] = (quality ? sigmoid_plain(z) : sigmoid_two_branch(z)) + eps;
}

// ---- RoPE ----

__global__ void rope_kernel(float* x, const float* cos, const float* sin, int64_t n_rows, int n_head, int head_dim,
                            int n_pairs, bool fused) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;  // (row, head, pair)
  if (i >= n_rows * n_head * n_pairs) return;
  const int k = static_cast<int>(i % n_pairs);
  const int64_t h = (i / n_pairs) % n_head;
  const int64_t row = i / (static_cast<int64_t>(n_pairs) * n_head);
  float* tail = x + row * n_head * head_dim + h * head_dim + (head_dim - 2 * n_pairs);
  const float c = cos[row * n_pairs + k], s = sin[row * n_pairs + k];
  const float a = tail[2 * k], b = tail[2 * k + 1];
  if (fused) {
    tail[2 * k] = fmaf(a, c, -(b * s));
    tail[2 * k + 1] = fmaf(a, s, b * c);
  } else {
    tail[2 * k] = a * c - b * s;
    tail[2 * k + 1] = a * s + b * c;
  }
}

// ---- top-k: a thread block per row, k rounds of a block-wide arg-max ----

__global__ void top_k_kernel(const float* scores, int32_t* out, int64_t n, int k, unsigned char* taken_all) {
  __shared__ float best_v[kThreads];
  __shared__ int best_i[kThreads];
  const float* row = scores + blockIdx.x * n;
  unsigned char* taken = taken_all + blockIdx.x * n;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) taken[i] = 0;
  __syncthreads();
  for (int round = 0; round < k; ++round) {
    const int best = dev::block_argmax<kThreads>([&](int64_t i) { return row[i]; }, [&](int64_t i) { return taken[i] != 0; },
                                                 n, best_v, best_i);
    if (threadIdx.x == 0) {
      out[blockIdx.x * static_cast<int64_t>(k) + round] = best;
      taken[best] = 1;
    }
    __syncthreads();
  }
}

__global__ void share_ids_kernel(const int32_t* ids, int32_t* local, int64_t n, int rank, int size) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i < n) local[i] = ids[i] % size == rank ? ids[i] / size : -1;
}

}  // namespace

void rms_norm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps, Numerics numerics,
                   cudaStream_t stream) {
  if (n_rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(x, w, y, n, eps,
                                                                         numerics == Numerics::Default);
  cuda_check_launch("rms_norm", current_device());
}

void swiglu_clamp_rows(const float* gate, const float* up, const float* row_weight, float* out, int64_t n_rows,
                       int64_t n, float limit, Numerics numerics, cudaStream_t stream) {
  if (numerics == Numerics::Quality && row_weight)
    throw Error("swiglu: quality numerics apply the expert weight after the down projection");
  if (n_rows * n == 0) return;
  swiglu_kernel<<<blocks_for(n_rows * n), kThreads, 0, stream>>>(gate, up, row_weight, out, n_rows, n, limit,
                                                                 numerics == Numerics::Quality);
  cuda_check_launch("swiglu", current_device());
}

void gather_rows(const float* src, const int32_t* index, float* dst, int64_t m, int64_t n, cudaStream_t stream) {
  if (m * n == 0) return;
  move_rows_kernel<true><<<blocks_for(m * n), kThreads, 0, stream>>>(src, index, dst, m, n);
  cuda_check_launch("gather_rows", current_device());
}

void scatter_rows(const float* src, const int32_t* index, float* dst, int64_t m, int64_t n, cudaStream_t stream) {
  if (m * n == 0) return;
  move_rows_kernel<false><<<blocks_for(m * n), kThreads, 0, stream>>>(src, index, dst, m, n);
  cuda_check_launch("scatter_rows", current_device());
}

void repeat_rows(const float* src, float* dst, int64_t rows, int times, int64_t n, cudaStream_t stream) {
  if (rows * times * n == 0) return;
  repeat_rows_kernel<<<blocks_for(rows * times * n), kThreads, 0, stream>>>(src, dst, rows, times, n);
  cuda_check_launch("repeat_rows", current_device());
}

void share_expert_ids(const int32_t* ids, int32_t* local, int64_t n, int rank, int size, cudaStream_t stream) {
  if (n == 0) return;
  share_ids_kernel<<<blocks_for(n), kThreads, 0, stream>>>(ids, local, n, rank, size);
  cuda_check_launch("share_expert_ids", current_device());
}

void moe_combine_rows(const float* down, const float* pair_weight, const float* shared, float* out, int64_t n_tokens,
                      int k, int64_t n_embd, cudaStream_t stream) {
  if (n_tokens * n_embd == 0) return;
  moe_combine_kernel<<<blocks_for(n_tokens * n_embd), kThreads, 0, stream>>>(down, pair_weight, shared, out, n_tokens,
                                                                             k, n_embd);
  cuda_check_launch("moe_combine", current_device());
}

void hc_weighted_sum_rows(const float* state, const float* weights, float* out, int64_t n_tokens, int64_t n_embd,
                          Numerics numerics, cudaStream_t stream) {
  if (n_tokens * n_embd == 0) return;
  hc_weighted_sum_kernel<<<blocks_for(n_tokens * n_embd), kThreads, 0, stream>>>(state, weights, out, n_tokens, n_embd,
                                                                                 numerics == Numerics::Quality);
  cuda_check_launch("hc_weighted_sum", current_device());
}

void hc_post_rows(const float* f, const float* state, const float* post, const float* comb, float* out,
                  int64_t n_tokens, int64_t n_embd, Numerics numerics, cudaStream_t stream) {
  if (n_tokens * n_embd == 0) return;
  hc_post_kernel<<<blocks_for(n_tokens * kHcStreams * n_embd), kThreads, 0, stream>>>(
      f, state, post, comb, out, n_tokens, n_embd, numerics == Numerics::Quality);
  cuda_check_launch("hc_post", current_device());
}

void hc_split_rows(const float* mix, const float* scale, const float* base, float eps, int iters, float* pre,
                   float* post, float* comb, int64_t n_tokens, Numerics numerics, cudaStream_t stream) {
  if (n_tokens == 0) return;
  hc_split_kernel<<<blocks_for(n_tokens), kThreads, 0, stream>>>(mix, scale, base, eps, iters, pre, post, comb,
                                                                 n_tokens, numerics == Numerics::Quality);
  cuda_check_launch("hc_split", current_device());
}

void hc_head_weights_rows(const float* mix, const float* scale, const float* base, float eps, float* weights,
                          int64_t n_tokens, Numerics numerics, cudaStream_t stream) {
  if (n_tokens == 0) return;
  hc_head_weights_kernel<<<blocks_for(n_tokens * kHcStreams), kThreads, 0, stream>>>(
      mix, scale, base, eps, weights, n_tokens, numerics == Numerics::Quality);
  cuda_check_launch("hc_head_weights", current_device());
}

void rope_heads_rows(float* x, const float* cos, const float* sin, int64_t n_rows, int n_head, int head_dim,
                     int n_pairs, bool fused, cudaStream_t stream) {
  if (2 * n_pairs > head_dim)
    throw Error("rope: " + std::to_string(2 * n_pairs) + " rotated dims exceed the head width " +
                std::to_string(head_dim));
  const int64_t n = n_rows * n_head * n_pairs;
  if (n == 0) return;
  rope_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, cos, sin, n_rows, n_head, head_dim, n_pairs, fused);
  cuda_check_launch("rope", current_device());
}

void top_k_desc_rows(const float* scores, int32_t* out, int64_t n_rows, int64_t n, int k, cudaStream_t stream) {
  if (k < 0 || k > n) throw Error("top_k: k " + std::to_string(k) + " is outside 0.." + std::to_string(n));
  if (n_rows == 0 || k == 0) return;
  // Marks of the values taken so far, n bytes per row, freed with the call's
  // stream order kept (cudaFreeAsync).
  void* taken = nullptr;
  cuda_check(cudaMallocAsync(&taken, static_cast<size_t>(n_rows * n), stream), "cudaMallocAsync", current_device());
  top_k_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(scores, out, n, k,
                                                                       static_cast<unsigned char*>(taken));
  const cudaError_t launch = cudaGetLastError();
  (void)cudaFreeAsync(taken, stream);
  cuda_check(launch, "launch of top_k", current_device());
}

}  // namespace ds4::cuda
