// A thread block per (token, head): warps take rows for the dots, one
// thread forms the exp weights and the denominator in row order, then each
// thread owns output elements and adds the weighted rows in row order.
#include <cuda_fp16.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_device.cuh"
#include "core/error.h"

namespace ds4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float stored_value(const uint16_t* row, int d) { return dev::f16_to_f32(row[d]); }
__device__ __forceinline__ float stored_value(const float* row, int d) { return row[d]; }

// Row: uint16_t (f16 bits, Default) or float (Quality).
template <typename Row, bool kQuality>
__global__ void attention_kernel(AttentionRows a) {
  extern __shared__ float weights[];  // max_rows
  __shared__ float inv_denom;
  const int64_t t = blockIdx.x / a.n_head;
  const int h = static_cast<int>(blockIdx.x % a.n_head);
  const float* q = a.q + (t * a.n_head + h) * a.dim;
  const Row* const* rows = reinterpret_cast<const Row* const*>(a.rows + t * a.max_rows);
  const int n_rows = a.n_rows[t];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < n_rows; r += kThreads / 32) {
    float dot = 0.0f;
    for (int d = lane; d < a.dim; d += 32) dot += q[d] * stored_value(rows[r], d);
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFullMask, dot, offset);
    if (lane == 0) weights[r] = dot * a.scale;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const float sink = a.sinks[h];
    float max = sink;
    for (int r = 0; r < n_rows; ++r) max = fmaxf(max, weights[r]);
    if (kQuality) {
      // ggml's soft_max: the sum in double, weights normalised before use.
      double sum = 0.0;
      for (int r = 0; r < n_rows; ++r) {
        weights[r] = expf(weights[r] - max);
        sum += static_cast<double>(weights[r]);
      }
      sum += static_cast<double>(expf(sink - max));
      const float inv = static_cast<float>(1.0 / sum);
      for (int r = 0; r < n_rows; ++r) weights[r] *= inv;
      inv_denom = 1.0f;
    } else {
      float denom = expf(sink - max);
      for (int r = 0; r < n_rows; ++r) {
        weights[r] = expf(weights[r] - max);
        denom += weights[r];
      }
      inv_denom = 1.0f / denom;
    }
  }
  __syncthreads();
  float* out = a.out + (t * a.n_head + h) * a.dim;
  for (int d = threadIdx.x; d < a.dim; d += kThreads) {
    float acc = 0.0f;
    if (kQuality) {
      for (int r = 0; r < n_rows; ++r) acc = fmaf(weights[r], stored_value(rows[r], d), acc);
      out[d] = acc;
    } else {
      for (int r = 0; r < n_rows; ++r) acc += weights[r] * stored_value(rows[r], d);
      out[d] = acc * inv_denom;
    }
  }
}

}  // namespace

void attention_with_sink_rows(const AttentionRows& a, cudaStream_t stream) {
  if (a.n_head < 1 || a.dim < 1 || a.max_rows < 0)
    throw Error("attention: " + std::to_string(a.n_head) + " heads of " + std::to_string(a.dim) + " values, " +
                std::to_string(a.max_rows) + " rows");
  if (a.n_tokens == 0) return;
  const size_t shared = static_cast<size_t>(a.max_rows) * sizeof(float);
  if (shared > 48 * 1024)
    throw Error("attention: " + std::to_string(a.max_rows) + " rows per token exceed the kernel's 12288");
  const auto blocks = static_cast<unsigned>(a.n_tokens * a.n_head);
  if (a.numerics == backend::Numerics::Quality)
    attention_kernel<float, true><<<blocks, kThreads, shared, stream>>>(a);
  else
    attention_kernel<uint16_t, false><<<blocks, kThreads, shared, stream>>>(a);
  int device = -1;
  (void)cudaGetDevice(&device);
  cuda_check_launch("attention", device);
}

}  // namespace ds4::cuda
