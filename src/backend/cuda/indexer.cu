// Kernels of backend/cuda/indexer.h.
//   scores: a thread block per (token, run of rows) with the token's queries
//     and weights in shared memory; a warp per row, its stored values (f16
//     bits or f32) read once into registers, each head's dot reduced across the warp.
//   select: a thread block per token; the top_k-th score by a radix select
//     (four 8-bit histogram passes over order-preserving keys), then one pass
//     in row order taking the rows above it and the lowest-indexed rows equal
//     to it, written in increasing order: O(rows) however large top_k is.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/indexer.h"
#include "backend/cuda/quant_device.cuh"
#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 8;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kMaxDimPerLane = 8;  // dims up to 256
constexpr size_t kSharedLimit = 48 * 1024;
constexpr int kMaxTopK = 4096;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float stored_value(const uint16_t* row, int d) { return dev::f16_to_f32(row[d]); }
__device__ __forceinline__ float stored_value(const float* row, int d) { return row[d]; }

// Row: uint16_t (f16 bits) or float.
template <typename Row>
__global__ void scores_kernel(IndexerRows a) {
  extern __shared__ float shared[];  // q (n_head x dim), then weights (n_head)
  const int64_t t = blockIdx.x;
  const int n_q = a.n_head * a.dim;
  float* q = shared;
  float* w = shared + n_q;
  for (int i = threadIdx.x; i < n_q; i += kThreads) q[i] = a.q[t * n_q + i];
  for (int h = threadIdx.x; h < a.n_head; h += kThreads) w[h] = a.weights[t * a.n_head + h];
  __syncthreads();
  const int n_rows = a.n_rows[t];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = (a.dim + 31) / 32;
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = static_cast<int>(blockIdx.y) * kRowsPerBlock + k * kWarps + warp;
    if (r >= n_rows) break;
    const Row* row = static_cast<const Row*>(a.rows) + static_cast<int64_t>(r) * a.row_stride;
    float x[kMaxDimPerLane];  // unrolled whole so that it stays in registers
#pragma unroll
    for (int e = 0; e < kMaxDimPerLane; ++e) {
      const int d = lane + 32 * e;
      x[e] = e < per_lane && d < a.dim ? stored_value(row, d) : 0.0f;
    }
    float score = 0.0f;
    for (int h = 0; h < a.n_head; ++h) {
      const float* qh = q + h * a.dim;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < kMaxDimPerLane; ++e) {
        const int d = lane + 32 * e;
        if (e < per_lane && d < a.dim) dot += x[e] * qh[d];
      }
      for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFullMask, dot, offset);
      score += fmaxf(dot, 0.0f) * w[h];
    }
    if (lane == 0) a.scores[t * a.max_rows + r] = score;
  }
}

// Scores as unsigned keys in the selection's order: larger score, larger
// key; NaN below every number; -0 the same key as +0 (they tie, as in the
// CPU's float comparison).
__device__ __forceinline__ unsigned order_key(float v) {
  if (isnan(v)) return 0u;
  unsigned bits = __float_as_uint(v);
  if (bits == 0x80000000u) bits = 0u;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// Exclusive prefix sum of one int per thread over the block; *total gets
// the sum. Every thread must call it.
__device__ int block_exclusive_scan(int v, int* scratch, int* total) {
  const int tid = static_cast<int>(threadIdx.x);
  scratch[tid] = v;
  __syncthreads();
  for (int offset = 1; offset < kThreads; offset *= 2) {
    const int add = tid >= offset ? scratch[tid - offset] : 0;
    __syncthreads();
    scratch[tid] += add;
    __syncthreads();
  }
  const int inclusive = scratch[tid];
  *total = scratch[kThreads - 1];
  __syncthreads();
  return inclusive - v;
}

// A thread block per token. The top_k-th key T by four 8-bit radix passes
// (each a histogram of the keys that share the bits found so far); then, in
// index order, every row with a key above T and the lowest-indexed rows
// with key T until top_k are taken, written in increasing row order.
__global__ void select_kernel(const float* scores, const int32_t* n_rows_all, int max_rows, int top_k,
                              int32_t* allowed_all, int32_t* n_allowed) {
  __shared__ unsigned hist[256];
  __shared__ unsigned prefix, mask;
  __shared__ int need;
  __shared__ int scan[kThreads];
  const int64_t t = blockIdx.x;
  const int n = n_rows_all[t];
  const int tid = static_cast<int>(threadIdx.x);
  int32_t* allowed = allowed_all + t * top_k;
  if (n <= top_k) {
    for (int i = tid; i < n; i += kThreads) allowed[i] = i;
    if (tid == 0) n_allowed[t] = n;
    return;
  }
  const float* row = scores + t * max_rows;
  if (tid == 0) {
    prefix = 0u;
    mask = 0u;
    need = top_k;
  }
  __syncthreads();
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) hist[b] = 0u;
    __syncthreads();
    for (int i = tid; i < n; i += kThreads) {
      const unsigned key = order_key(row[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      // From the top bin down: the bin holding the need-th largest key.
      int above = 0;
      for (int b = 255; b >= 0; --b) {
        const int count = static_cast<int>(hist[b]);
        if (above + count >= need) {
          prefix |= static_cast<unsigned>(b) << shift;
          mask |= 255u << shift;
          need -= above;
          break;
        }
        above += count;
      }
    }
    __syncthreads();
  }
  const unsigned threshold = prefix;
  const int equal_quota = need;  // rows with key == threshold to take, lowest index first
  int written = 0, equal_taken = 0;
  for (int start = 0; start < n; start += kThreads) {
    const int i = start + tid;
    const unsigned key = i < n ? order_key(row[i]) : 0u;
    const int above = i < n && key > threshold ? 1 : 0;
    const int equal = i < n && key == threshold ? 1 : 0;
    int equal_total = 0, taken_total = 0;
    const int equal_before = block_exclusive_scan(equal, scan, &equal_total);
    const int take = above | (equal && equal_taken + equal_before < equal_quota ? 1 : 0);
    const int taken_before = block_exclusive_scan(take, scan, &taken_total);
    if (take) allowed[written + taken_before] = i;
    written += taken_total;
    equal_taken += equal_total;
  }
  if (tid == 0) n_allowed[t] = top_k;
}

}  // namespace

void indexer_scores_rows(const IndexerRows& rows, cudaStream_t stream) {
  if (rows.dim < 1 || rows.dim > 32 * kMaxDimPerLane)
    throw Error("indexer scores: row length " + std::to_string(rows.dim) + " (1.." +
                std::to_string(32 * kMaxDimPerLane) + " allowed)");
  const size_t shared = static_cast<size_t>(rows.n_head) * static_cast<size_t>(rows.dim + 1) * sizeof(float);
  if (shared > kSharedLimit)
    throw Error("indexer scores: " + std::to_string(rows.n_head) + " heads of " + std::to_string(rows.dim) + " need " +
                std::to_string(shared) + " bytes of shared memory (at most " + std::to_string(kSharedLimit) + ")");
  if (rows.n_tokens == 0 || rows.max_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows.n_tokens),
                  static_cast<unsigned>((rows.max_rows + kRowsPerBlock - 1) / kRowsPerBlock));
  if (rows.f32_rows)
    scores_kernel<float><<<grid, kThreads, shared, stream>>>(rows);
  else
    scores_kernel<uint16_t><<<grid, kThreads, shared, stream>>>(rows);
  cuda_check_launch("indexer_scores", current_device());
}

void indexer_select_rows(const float* scores, const int32_t* n_rows, int64_t n_tokens, int max_rows, int top_k,
                         int32_t* allowed, int32_t* n_allowed, cudaStream_t stream) {
  if (top_k < 1 || top_k > kMaxTopK)
    throw Error("indexer select: top_k " + std::to_string(top_k) + " (1.." + std::to_string(kMaxTopK) + " allowed)");
  if (n_tokens == 0) return;
  select_kernel<<<static_cast<unsigned>(n_tokens), kThreads, 0, stream>>>(scores, n_rows, max_rows, top_k, allowed,
                                                                          n_allowed);
  cuda_check_launch("indexer_select", current_device());
}

}  // namespace ds4::cuda
