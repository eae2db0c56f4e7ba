// The block-wide arg-max the top-k and routing kernels take k rounds of:
// numbers by value descending, NaN last, then the lower index (the CPU's
// cpu::top_k_desc order). Every thread of the block must call it.
#pragma once

namespace ds4::cuda::dev {

// (va, ia) goes before (vb, ib).
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

// The index of the first-ranked of values[0..n) not yet taken (-1 when all
// are), over a block of kThreads threads; best_v/best_i are kThreads-long
// shared scratch. Returns the same index to every thread.
template <int kThreads, typename Values, typename Taken>
__device__ int block_argmax(Values values, Taken taken, int64_t n, float* best_v, int* best_i) {
  float v = 0.0f;
  int index = -1;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    if (taken(i)) continue;
    if (index < 0 || ranks_before(values(i), static_cast<int>(i), v, index)) {
      v = values(i);
      index = static_cast<int>(i);
    }
  }
  best_v[threadIdx.x] = v;
  best_i[threadIdx.x] = index;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const int other = best_i[threadIdx.x + stride];
      if (other >= 0 && (best_i[threadIdx.x] < 0 ||
                         ranks_before(best_v[threadIdx.x + stride], other, best_v[threadIdx.x], best_i[threadIdx.x]))) {
        best_v[threadIdx.x] = best_v[threadIdx.x + stride];
        best_i[threadIdx.x] = other;
      }
    }
    __syncthreads();
  }
  const int best = best_i[0];
  __syncthreads();
  return best;
}

}  // namespace ds4::cuda::dev
