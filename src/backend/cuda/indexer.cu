// Kernels of backend/cuda/indexer.h.
//   scores: a thread block per (token, run of rows) with the token's queries
//     and weights in shared memory; a warp per row, its f16 values converted
//     once into registers, each head's dot reduced across the warp.
//   select: a thread block per token; the top_k by k rounds of the block
//     arg-max the top-k kernel uses (a radix select is the faster way for long
//     row lists), then each chosen row's place in increasing order by counting
//     the chosen rows below it.
#include <string>

#include "backend/cuda/block_argmax.cuh"
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
    const uint16_t* row = a.rows + static_cast<int64_t>(r) * a.row_stride;
    float x[kMaxDimPerLane];  // unrolled whole so that it stays in registers
#pragma unroll
    for (int e = 0; e < kMaxDimPerLane; ++e) {
      const int d = lane + 32 * e;
      x[e] = e < per_lane && d < a.dim ? dev::f16_to_f32(row[d]) : 0.0f;
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

__global__ void select_kernel(const float* scores, const int32_t* n_rows_all, int max_rows, int top_k,
                              int32_t* allowed_all, int32_t* n_allowed, unsigned char* taken_all) {
  extern __shared__ int chosen[];  // top_k
  __shared__ float best_v[kThreads];
  __shared__ int best_i[kThreads];
  const int64_t t = blockIdx.x;
  const int n = n_rows_all[t];
  int32_t* allowed = allowed_all + t * top_k;
  if (n <= top_k) {
    for (int i = threadIdx.x; i < n; i += kThreads) allowed[i] = i;
    if (threadIdx.x == 0) n_allowed[t] = n;
    return;
  }
  const float* row = scores + t * max_rows;
  unsigned char* taken = taken_all + t * max_rows;
  for (int i = threadIdx.x; i < n; i += kThreads) taken[i] = 0;
  __syncthreads();
  for (int round = 0; round < top_k; ++round) {
    const int best = dev::block_argmax<kThreads>([&](int64_t i) { return row[i]; },
                                                 [&](int64_t i) { return taken[i] != 0; }, n, best_v, best_i);
    if (threadIdx.x == 0) {
      chosen[round] = best;
      taken[best] = 1;
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < top_k; i += kThreads) {
    int below = 0;
    for (int j = 0; j < top_k; ++j) below += chosen[j] < chosen[i] ? 1 : 0;
    allowed[below] = chosen[i];
  }
  if (threadIdx.x == 0) n_allowed[t] = top_k;
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
  scores_kernel<<<grid, kThreads, shared, stream>>>(rows);
  cuda_check_launch("indexer_scores", current_device());
}

void indexer_select_rows(const float* scores, const int32_t* n_rows, int64_t n_tokens, int max_rows, int top_k,
                         int32_t* allowed, int32_t* n_allowed, cudaStream_t stream) {
  if (top_k < 1 || top_k > kMaxTopK)
    throw Error("indexer select: top_k " + std::to_string(top_k) + " (1.." + std::to_string(kMaxTopK) + " allowed)");
  if (n_tokens == 0) return;
  // Marks of the rows taken so far, max_rows bytes per token, freed in the
  // stream's order (cudaFreeAsync).
  void* taken = nullptr;
  const size_t marks = static_cast<size_t>(n_tokens) * static_cast<size_t>(max_rows > 0 ? max_rows : 1);
  cuda_check(cudaMallocAsync(&taken, marks, stream), "cudaMallocAsync", current_device());
  select_kernel<<<static_cast<unsigned>(n_tokens), kThreads, static_cast<size_t>(top_k) * sizeof(int), stream>>>(
      scores, n_rows, max_rows, top_k, allowed, n_allowed, static_cast<unsigned char*>(taken));
  const cudaError_t launch = cudaGetLastError();
  (void)cudaFreeAsync(taken, stream);
  cuda_check(launch, "launch of indexer_select", current_device());
}

}  // namespace ds4::cuda
