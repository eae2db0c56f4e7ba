// Kernels of backend/cuda/qat.h: the CPU's float steps (ops_qat.cpp) one
// block of values per warp, the block's absolute maximum reduced across the
// warp (a maximum does not depend on the order it is taken in).
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/qat.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kFp8Block = 64;
constexpr int kFp4Block = 32;  // one value per lane
constexpr int kHadamard = 128;
constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;

// The largest |v| over the warp, NaN ignored, 0 when there is none (the
// CPU's `fabs(v) > amax ? fabs(v) : amax` from 0).
__device__ float warp_amax(float a) {
  float m = a > 0.0f ? a : 0.0f;
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, m, offset);
    m = other > m ? other : m;
  }
  return m;
}

// 2^ceil(log2(amax / max)): the log2 correctly rounded to float (a double
// log2 rounded once), as glibc's log2f gives it but for its 0.502-ulp cases.
__device__ float pow2_block_scale(float amax, float max_code_value) {
  const float ratio = amax / max_code_value;
  const float log = static_cast<float>(log2(static_cast<double>(ratio)));
  return ldexpf(1.0f, static_cast<int>(ceilf(log)));
}

// cpu::e4m3_round: nearest E4M3FN value, ties to the even code, sign kept.
__device__ float e4m3_round(float v) {
  const float a = fminf(fabsf(v), kE4m3Max);
  float r;
  if (a < 0x1p-6f) {
    r = rintf(a * 512.0f) * 0x1p-9f;
  } else {
    unsigned bits = __float_as_uint(a);
    bits += 0x7ffffu + ((bits >> 20) & 1u);
    r = __uint_as_float(bits & 0xfff00000u);
  }
  return v < 0.0f ? -r : r;
}

// cpu::e2m1_round: nearest of the 8 magnitudes, ties to the even index.
__device__ float e2m1_round(float v) {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float sign = v < 0.0f ? -1.0f : 1.0f;
  const float a = fminf(fabsf(v), kE2m1Max);
  int best = 0;
  float best_diff = fabsf(a - values[0]);
  for (int i = 1; i < 8; ++i) {
    const float diff = fabsf(a - values[i]);
    if (diff < best_diff || (diff == best_diff && (i & 1) == 0 && (best & 1) != 0)) {
      best = i;
      best_diff = diff;
    }
  }
  return sign * values[best];
}

// A 32-value FP4 block held one value per lane.
static_assert(kFp4Block == kWarp);
__device__ float fp4_round_trip_lane(float v) {
  const float amax = fmaxf(warp_amax(fabsf(v)), 6.0f * 0x1p-126f);
  const float s = pow2_block_scale(amax, kE2m1Max);
  return e2m1_round(fminf(fmaxf(v / s, -kE2m1Max), kE2m1Max)) * s;
}

// A warp per 64-value block, two values per lane.
__global__ void fp8_round_trip_kernel(float* x, int64_t n_rows, int64_t stride, int blocks_per_row) {
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarp;
  if (warp >= n_rows * blocks_per_row) return;  // whole warps leave together
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  float* block = x + (warp / blocks_per_row) * stride + (warp % blocks_per_row) * kFp8Block;
  const float v0 = block[lane], v1 = block[lane + kWarp];
  const float a0 = fabsf(v0), a1 = fabsf(v1);
  const float amax = fmaxf(warp_amax(a1 > a0 ? a1 : a0), 1.0e-4f);
  const float s = pow2_block_scale(amax, kE4m3Max);
  block[lane] = e4m3_round(fminf(fmaxf(v0 / s, -kE4m3Max), kE4m3Max)) * s;
  block[lane + kWarp] = e4m3_round(fminf(fmaxf(v1 / s, -kE4m3Max), kE4m3Max)) * s;
}

// A thread block of 64 per 128-value chunk: the butterfly in shared memory
// (each stage's a + b and a - b are the CPU's, whatever order threads run
// in), the scale, then (with_fp4) the four 32-value blocks, warp 0 taking
// blocks 0 and 2, warp 1 blocks 1 and 3.
__global__ void hadamard_kernel(float* x, int64_t stride, int n_chunks, bool with_fp4) {
  __shared__ float s[kHadamard];
  const int t = static_cast<int>(threadIdx.x);
  float* chunk = x + (blockIdx.x / n_chunks) * stride + (blockIdx.x % n_chunks) * static_cast<int64_t>(kHadamard);
  s[t] = chunk[t];
  s[t + kHadamard / 2] = chunk[t + kHadamard / 2];
  __syncthreads();
  for (int step = 1; step < kHadamard; step *= 2) {
    const int i = (t / step) * 2 * step + t % step;
    const float a = s[i], b = s[i + step];  // this thread's pair alone
    s[i] = a + b;
    s[i + step] = a - b;
    __syncthreads();
  }
  float v0 = s[t] * 0.08838834764831845f;
  float v1 = s[t + kHadamard / 2] * 0.08838834764831845f;
  if (with_fp4) {
    v0 = fp4_round_trip_lane(v0);
    v1 = fp4_round_trip_lane(v1);
  }
  chunk[t] = v0;
  chunk[t + kHadamard / 2] = v1;
}

}  // namespace

void fp8_e4m3_round_trip_rows(float* x, int64_t n_rows, int64_t stride, int n, cudaStream_t stream) {
  if (n % kFp8Block != 0) throw Error("fp8 round trip: " + std::to_string(n) + " values are not whole 64-blocks");
  const int blocks_per_row = n / kFp8Block;
  const int64_t warps = n_rows * blocks_per_row;
  if (warps == 0) return;
  const auto grid = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  fp8_round_trip_kernel<<<grid, kWarp * kWarpsPerBlock, 0, stream>>>(x, n_rows, stride, blocks_per_row);
  cuda_check_launch("fp8_round_trip", current_device());
}

void hadamard128_rows(float* x, int64_t n_rows, int64_t stride, int n_chunks, bool with_fp4, cudaStream_t stream) {
  if (n_rows * n_chunks == 0) return;
  hadamard_kernel<<<static_cast<unsigned>(n_rows * n_chunks), kHadamard / 2, 0, stream>>>(x, stride, n_chunks,
                                                                                          with_fp4);
  cuda_check_launch("hadamard128", current_device());
}

}  // namespace ds4::cuda
