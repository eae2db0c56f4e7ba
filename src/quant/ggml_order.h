// Scalar replicas of the float order of ggml's AVX-512 CPU kernels (the
// libggml-cpu variant llama.cpp loads on AVX-512 machines), for --quality:
// llama.cpp re-quantises activations, so an ulp of difference upstream can
// flip an activation code; these make our values bit-identical instead.
// Each function names the ggml routine it follows. fma is exact, so the
// scalar replicas give the vector kernels' results bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ds4::quant::ggml_order {

// GCC's _mm512_reduce_add_ps: halves 256 + 256, then 128 + 128, then lanes
// (0 + 2, 1 + 3), then 0 + 1.
inline float reduce_add16(const float (&a)[16]) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = a[8 + i] + a[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

// The body ggml_vec_dot_f32 and ggml_vec_dot_f16 (AVX-512 branch, no
// AVX512-FP16) share: 4 accumulators of 16 lanes over the first n & ~63
// elements (acc = fma(w, x, acc)), folded 0 += 2, 1 += 3, 0 += 1 and
// reduce_add16. W converts a weight element to float.
template <typename W, typename ToFloat>
inline float vec_dot_4x16(int64_t n, const W *w, const float *x, ToFloat to_float) {
  float acc[4][16] = {};
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l) {
        const int64_t k = i + 16 * j + l;
        acc[j][l] = std::fma(to_float(w[k]), x[k], acc[j][l]);
      }
  for (int l = 0; l < 16; ++l) {
    acc[0][l] += acc[2][l];
    acc[1][l] += acc[3][l];
  }
  for (int l = 0; l < 16; ++l) acc[0][l] += acc[1][l];
  return reduce_add16(acc[0]);
}

// ggml_vec_dot_f32: the shared body, then the n % 64 leftovers added one by
// one in float (sumf += x * y, contracted).
inline float vec_dot_f32(int64_t n, const float *x, const float *y) {
  float sum = vec_dot_4x16(n, x, y, [](float v) { return v; });
  for (int64_t i = n & ~int64_t{63}; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

// llamafile's tinyBLAS<16, __m512> (what ggml's mul_mat runs for F32 and F16
// weights when a batch has >= 2 tokens, k % 16 == 0 and rows % 4 == 0):
// 16 lanes, lane l = fma(w[16c + l], x[16c + l], lane) over chunks c, then
// reduce_add16. W converts a weight element to float.
template <typename W, typename ToFloat>
inline float tinyblas_dot(int64_t n, const W *w, const float *x, ToFloat to_float) {
  float acc[16] = {};
  for (int64_t c = 0; c < n; c += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(to_float(w[c + l]), x[c + l], acc[l]);
  return reduce_add16(acc);
}

// ggml_vec_dot_f16 without AVX512-FP16 (F32Cx16): the shared body widened to
// double, the n % 64 leftovers added in double.
template <typename ToFloat>
inline float vec_dot_f16(int64_t n, const uint16_t *w, const float *x, ToFloat to_float) {
  double sum = vec_dot_4x16(n, w, x, to_float);
  for (int64_t i = n & ~int64_t{63}; i < n; ++i) sum += static_cast<double>(to_float(w[i]) * x[i]);
  return static_cast<float>(sum);
}

// ---- BF16 weights (activations rounded to bf16, passed as exact floats) ----
//
// llama.cpp picks its CPU build by the CPU: on AVX512-BF16 CPUs (Zen 4 and
// later, Cooper Lake, Sapphire Rapids) the BF16 kernels use vdpbf16ps, on other
// AVX-512 CPUs 16-lane FMAs. The products of two bf16 values are exact in
// float, so a multiply then add (ggml's AVX512F vec_dot, contracted or not)
// equals one fma.

// vdpbf16ps reads denormal inputs as zero (DAZ) ...
inline float bf16_daz(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}
// ... and flushes denormal results to zero (FTZ), rounding to nearest even.
inline float ftz(float v) { return bf16_daz(v); }

// One vdpbf16ps lane (Intel SDM): the odd pair first, then the even pair, each
// an fma with DAZ inputs and an FTZ result.
inline float dpbf16_lane(float acc, float w_even, float x_even, float w_odd, float x_odd) {
  acc = ftz(std::fma(bf16_daz(w_odd), bf16_daz(x_odd), acc));
  return ftz(std::fma(bf16_daz(w_even), bf16_daz(x_even), acc));
}

// tinyBLAS<32, __m512, __m512bh> (llamafile_sgemm, AVX512-BF16 build; ggml's
// mul_mat for >= 2 tokens, k % 32 == 0): lane l of chunk c takes elements
// 32c + 2l and 32c + 2l + 1 (one vdpbf16ps), then reduce_add16.
template <typename ToFloat>
inline float tinyblas_dpbf16(int64_t n, const uint16_t *w, const float *x, ToFloat to_float) {
  float acc[16] = {};
  for (int64_t c = 0; c < n; c += 32)
    for (int l = 0; l < 16; ++l) {
      const int64_t k = c + 2 * l;
      acc[l] = dpbf16_lane(acc[l], to_float(w[k]), x[k], to_float(w[k + 1]), x[k + 1]);
    }
  return reduce_add16(acc);
}

// ggml_vec_dot_bf16 (decode, experts, other k): AVX512-BF16 build: two
// accumulators of one vdpbf16ps each per 64 elements; AVX512F build: two
// 16-lane fma accumulators per 32 elements. Each accumulator reduce_add16,
// both added in double, then the leftovers' float products one by one in
// double.
template <typename ToFloat>
inline float vec_dot_bf16(int64_t n, const uint16_t *w, const float *x, bool dpbf16, ToFloat to_float) {
  float c[2][16] = {};
  int64_t i = 0;
  if (dpbf16) {
    for (; i + 64 <= n; i += 64)
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 16; ++l) {
          const int64_t k = i + 32 * h + 2 * l;
          c[h][l] = dpbf16_lane(c[h][l], to_float(w[k]), x[k], to_float(w[k + 1]), x[k + 1]);
        }
  } else {
    for (; i + 32 <= n; i += 32)
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 16; ++l) {
          const int64_t k = i + 16 * h + l;
          c[h][l] = std::fma(to_float(w[k]), x[k], c[h][l]);
        }
  }
  double sum = 0.0;
  sum += static_cast<double>(reduce_add16(c[0]));
  sum += static_cast<double>(reduce_add16(c[1]));
  for (; i < n; ++i) sum += static_cast<double>(to_float(w[i]) * x[i]);
  return static_cast<float>(sum);
}

// ggml_v_expf, AVX-512 branch (vec.h): a degree-5 polynomial after range
// reduction by ln 2, scaled by 2^n; |n| > 192 gives 0 or +inf.
inline float v_expf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (std::fabs(n) > 192.0f || std::isnan(n)) {
    // _CMP_GT_OQ is false for NaN, so NaN n keeps the scalef result (NaN).
    if (std::isnan(n)) return std::ldexp(j, 0) * n;
    return n <= 0.0f ? 0.0f : INFINITY;
  }
  return std::ldexp(j, static_cast<int>(n));  // _mm512_scalef_ps(j, n), n integral
}

}  // namespace ds4::quant::ggml_order
