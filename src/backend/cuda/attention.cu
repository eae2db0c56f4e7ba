// Two kernels with the same arithmetic for every (token, head), so the same
// bits (attention.h):
//   per head: a thread block per (token, head); warps take rows for the
//     dots, the threads the exp weights (thread 0 their sum in row order),
//     then each thread owns output elements and adds the weighted rows in
//     row order;
//   head groups: a thread block per (token, G heads), a warp per head doing
//     all of that head's dots, its weights (lane 0 the sum) and its
//     outputs. The G warps read the token's rows at about the same time, so
//     the rows come from L2 once per block rather than once per head (the
//     KV rows are shared by all heads).
#include <cuda_fp16.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_device.cuh"
#include "core/error.h"

namespace ds4::cuda {

namespace {

constexpr int kThreads = 256;
// The dynamic shared memory a launch may take without opting in.
constexpr size_t kSharedBytes = 48 * 1024;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float stored_value(const uint16_t* row, int d) { return dev::f16_to_f32(row[d]); }
__device__ __forceinline__ float stored_value(const float* row, int d) { return row[d]; }

// The dot of a head's query with one row, times the scale: lane l adds
// d = l, l + 32, ... in order, then a butterfly over the lanes. The whole
// warp calls it; every lane gets the result.
template <typename Row>
__device__ __forceinline__ float scaled_dot(const float* q, const Row* row, int dim, int lane, float scale) {
  float dot = 0.0f;
  for (int d = lane; d < dim; d += 32) dot += q[d] * stored_value(row, d);
  for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFullMask, dot, offset);
  return dot * scale;
}

// The scores in weights[0 .. n_rows) become the exp weights, by n threads
// (thread i of them; sync() waits for all n): the max of the scores and the
// sink (order-free) and each exp in parallel, the sum in row order by thread
// 0 (Default: a float denominator from exp(sink - max); Quality: ggml's sum
// in double, exp(sink - max) last, then the weights normalised in parallel).
// Returns the factor the weighted sum is multiplied by (Default: 1 /
// denominator; Quality: 1). `share` broadcasts thread 0's value to all.
template <bool kQuality, typename MaxAll, typename Sync, typename Share>
__device__ float softmax_weights(float* weights, int n_rows, float sink, int i, int n, MaxAll max_all, Sync sync,
                                 Share share) {
  float max = sink;
  for (int r = i; r < n_rows; r += n) max = fmaxf(max, weights[r]);
  max = max_all(max);
  for (int r = i; r < n_rows; r += n) weights[r] = expf(weights[r] - max);
  sync();
  float factor = 0.0f;
  if (i == 0) {
    if constexpr (kQuality) {
      double sum = 0.0;
      for (int r = 0; r < n_rows; ++r) sum += static_cast<double>(weights[r]);
      sum += static_cast<double>(expf(sink - max));
      factor = static_cast<float>(1.0 / sum);
    } else {
      float denom = expf(sink - max);
      for (int r = 0; r < n_rows; ++r) denom += weights[r];
      factor = 1.0f / denom;
    }
  }
  factor = share(factor);
  if constexpr (kQuality) {
    for (int r = i; r < n_rows; r += n) weights[r] *= factor;
    sync();
    return 1.0f;
  } else {
    return factor;
  }
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// softmax_weights by a whole thread block (kThreads), through `scratch`
// (kThreads / 32 floats of shared memory).
template <bool kQuality>
__device__ float block_softmax_weights(float* weights, int n_rows, float sink, float* scratch) {
  const int tid = static_cast<int>(threadIdx.x);
  auto max_all = [&](float v) {
    v = warp_max(v);
    if (tid % 32 == 0) scratch[tid / 32] = v;
    __syncthreads();
    float m = scratch[0];
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, scratch[w]);
    __syncthreads();  // scratch is read before it is written again
    return m;
  };
  auto share = [&](float v) {
    if (tid == 0) scratch[0] = v;
    __syncthreads();
    const float out = scratch[0];
    __syncthreads();
    return out;
  };
  return softmax_weights<kQuality>(weights, n_rows, sink, tid, kThreads, max_all, [] { __syncthreads(); }, share);
}

// softmax_weights by one warp (lane `lane`).
template <bool kQuality>
__device__ float warp_softmax_weights(float* weights, int n_rows, float sink, int lane) {
  return softmax_weights<kQuality>(
      weights, n_rows, sink, lane, 32, warp_max, [] { __syncwarp(); },
      [](float v) { return __shfl_sync(kFullMask, v, 0); });
}

// Output element d: the weighted rows in row order.
template <typename Row, bool kQuality>
__device__ __forceinline__ float weighted_rows(const float* weights, const Row* const* rows, int n_rows, int d,
                                               float inv_denom) {
  float acc = 0.0f;
  if constexpr (kQuality) {
    for (int r = 0; r < n_rows; ++r) acc = fmaf(weights[r], stored_value(rows[r], d), acc);
    return acc;
  } else {
    for (int r = 0; r < n_rows; ++r) acc += weights[r] * stored_value(rows[r], d);
    return acc * inv_denom;
  }
}

// Row: uint16_t (f16 bits, Default) or float (Quality).
template <typename Row, bool kQuality>
__global__ void attention_kernel(AttentionRows a) {
  extern __shared__ float weights[];  // max_rows
  __shared__ float scratch[kThreads / 32];
  const int64_t t = blockIdx.x / a.n_head;
  const int h = static_cast<int>(blockIdx.x % a.n_head);
  const float* q = a.q + (t * a.n_head + h) * a.dim;
  const Row* const* rows = reinterpret_cast<const Row* const*>(a.rows + t * a.max_rows);
  const int n_rows = a.n_rows[t];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < n_rows; r += kThreads / 32) {
    const float w = scaled_dot(q, rows[r], a.dim, lane, a.scale);
    if (lane == 0) weights[r] = w;
  }
  __syncthreads();
  const float inv_denom = block_softmax_weights<kQuality>(weights, n_rows, a.sinks[h], scratch);
  float* out = a.out + (t * a.n_head + h) * a.dim;
  for (int d = threadIdx.x; d < a.dim; d += kThreads)
    out[d] = weighted_rows<Row, kQuality>(weights, rows, n_rows, d, inv_denom);
}

// A thread block per (token, group of blockDim.x / 32 heads): warp w takes
// head group * G + w alone; weights for G heads of max_rows each.
template <typename Row, bool kQuality>
__global__ void attention_head_groups_kernel(AttentionRows a) {
  extern __shared__ float group_weights[];  // G x max_rows
  const int heads = static_cast<int>(blockDim.x) / 32;
  const int groups = a.n_head / heads;
  const int64_t t = blockIdx.x / groups;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = static_cast<int>(blockIdx.x % groups) * heads + warp;
  float* weights = group_weights + warp * a.max_rows;
  const float* q = a.q + (t * a.n_head + h) * a.dim;
  const Row* const* rows = reinterpret_cast<const Row* const*>(a.rows + t * a.max_rows);
  const int n_rows = a.n_rows[t];
  for (int r = 0; r < n_rows; ++r) {
    const float w = scaled_dot(q, rows[r], a.dim, lane, a.scale);
    if (lane == 0) weights[r] = w;
  }
  __syncwarp();
  const float inv_denom = warp_softmax_weights<kQuality>(weights, n_rows, a.sinks[h], lane);
  float* out = a.out + (t * a.n_head + h) * a.dim;
  for (int d = lane; d < a.dim; d += 32) out[d] = weighted_rows<Row, kQuality>(weights, rows, n_rows, d, inv_denom);
}

}  // namespace

int attention_head_group(const AttentionRows& a) {
  for (int g : {8, 4, 2})
    if (a.n_head % g == 0 && static_cast<size_t>(g) * static_cast<size_t>(a.max_rows) * sizeof(float) <= kSharedBytes)
      return g;
  return 1;
}

void attention_with_sink_rows(const AttentionRows& a, cudaStream_t stream, AttentionKernel kernel) {
  if (a.n_head < 1 || a.dim < 1 || a.max_rows < 0)
    throw Error("attention: " + std::to_string(a.n_head) + " heads of " + std::to_string(a.dim) + " values, " +
                std::to_string(a.max_rows) + " rows");
  if (a.n_tokens == 0) return;
  if (static_cast<size_t>(a.max_rows) * sizeof(float) > kSharedBytes)
    throw Error("attention: " + std::to_string(a.max_rows) + " rows per token exceed the kernel's " +
                std::to_string(kSharedBytes / sizeof(float)));
  const int group = attention_head_group(a);
  if (kernel == AttentionKernel::Auto)
    kernel = a.n_tokens > kAttentionPerHeadTokens && group > 1 ? AttentionKernel::HeadGroups : AttentionKernel::PerHead;
  const bool quality = a.numerics == backend::Numerics::Quality;
  if (kernel == AttentionKernel::HeadGroups) {
    const auto blocks = static_cast<unsigned>(a.n_tokens * (a.n_head / group));
    const size_t shared = static_cast<size_t>(group) * static_cast<size_t>(a.max_rows) * sizeof(float);
    if (quality)
      attention_head_groups_kernel<float, true><<<blocks, 32 * group, shared, stream>>>(a);
    else
      attention_head_groups_kernel<uint16_t, false><<<blocks, 32 * group, shared, stream>>>(a);
  } else {
    const auto blocks = static_cast<unsigned>(a.n_tokens * a.n_head);
    const size_t shared = static_cast<size_t>(a.max_rows) * sizeof(float);
    if (quality)
      attention_kernel<float, true><<<blocks, kThreads, shared, stream>>>(a);
    else
      attention_kernel<uint16_t, false><<<blocks, kThreads, shared, stream>>>(a);
  }
  int device = -1;
  (void)cudaGetDevice(&device);
  cuda_check_launch("attention", device);
}

}  // namespace ds4::cuda
