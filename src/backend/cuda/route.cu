// Kernels of backend/cuda/route.h: a thread block per token, a thread per
// expert (strided beyond the block), k rounds of a block-wide arg-max.
#include "backend/cuda/block_argmax.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/route.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxExperts = 1024;
constexpr int kMaxUsed = 32;
constexpr float kExpertWeightSumFloor = 6.103515625e-5f;  // smallest normal f16

__device__ float softplus(float x, bool quality) {
  if (x > 20.0f) return x;
  if (quality) return logf(1.0f + expf(x));
  if (x < -20.0f) return expf(x);
  return log1pf(expf(x));
}

__global__ void route_kernel(RouteRows r, bool quality) {
  __shared__ float scores[kMaxExperts];
  __shared__ float selection[kMaxExperts];
  __shared__ float best_v[kThreads];
  __shared__ int best_i[kThreads];
  __shared__ int chosen[kMaxUsed];
  __shared__ bool taken[kMaxExperts];
  const int64_t t = blockIdx.x;
  for (int e = threadIdx.x; e < r.n_expert; e += kThreads) {
    scores[e] = sqrtf(softplus(r.logits[t * r.n_expert + e], quality));
    selection[e] = r.bias ? scores[e] + r.bias[e] : scores[e];
    taken[e] = false;
  }
  __syncthreads();
  if (r.tid2eid) {
    if (threadIdx.x < r.k) chosen[threadIdx.x] = r.tid2eid[static_cast<int64_t>(r.tokens[t]) * r.k + threadIdx.x];
  } else {
    for (int round = 0; round < r.k; ++round) {
      const int best = dev::block_argmax<kThreads>([&](int64_t e) { return selection[e]; },
                                                   [&](int64_t e) { return taken[e]; }, r.n_expert, best_v, best_i);
      if (threadIdx.x == 0) {
        chosen[round] = best;
        taken[best] = true;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum;
    if (quality) {
      double dsum = 0.0;
      for (int s = 0; s < r.k; ++s) dsum += static_cast<double>(scores[chosen[s]]);
      sum = static_cast<float>(dsum);
    } else {
      sum = 0.0f;
      for (int s = 0; s < r.k; ++s) sum += scores[chosen[s]];
    }
    sum = fmaxf(sum, kExpertWeightSumFloor);
    for (int s = 0; s < r.k; ++s) {
      r.ids[t * r.k + s] = chosen[s];
      r.weights[t * r.k + s] = scores[chosen[s]] / sum * r.scale;
    }
  }
}

}  // namespace

void route_rows(const RouteRows& rows, backend::Numerics numerics, cudaStream_t stream) {
  if (rows.n_expert < 1 || rows.n_expert > kMaxExperts)
    throw Error("route: " + std::to_string(rows.n_expert) + " experts (the kernel takes 1.." +
                std::to_string(kMaxExperts) + ")");
  if (rows.k < 1 || rows.k > kMaxUsed || rows.k > rows.n_expert)
    throw Error("route: " + std::to_string(rows.k) + " experts per token of " + std::to_string(rows.n_expert));
  if (rows.tid2eid && !rows.tokens) throw Error("route: a hash table without the tokens");
  if (rows.n_tokens == 0) return;
  route_kernel<<<static_cast<unsigned>(rows.n_tokens), kThreads, 0, stream>>>(rows, numerics == backend::Numerics::Quality);
  int device = -1;
  (void)cudaGetDevice(&device);
  cuda_check_launch("route", device);
}

}  // namespace ds4::cuda
