// The float dots of ggml_order.h (--quality) with the lanes in AVX2 registers:
// a 16-lane accumulator is two __m256, each lane does exactly the scalar
// replica's fma sequence, and the final reductions are the replicas' own, so
// the results are the same bits. Only the speed differs: the replicas call fmaf
// once per element (a library call without -mfma), which made --quality and
// the tests that compare against it slow. dot_ggml_x86.cpp picks these when
// the CPU has AVX2, FMA and F16C.
//
// Nothing here calls an inline function shared with other files (the
// replicas, std::fma): a copy compiled with these ISA flags could be the one
// the linker keeps for every caller. The reduction and scalar fma are local.
#include <immintrin.h>

#include <cstdint>

#include "quant/dot_ggml_avx2.h"

namespace ds4::quant::ggml_avx2 {
namespace {

inline float fma1(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

struct F32Loads {
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float one(const float* p) { return *p; }
};
struct F16Loads {
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float one(const uint16_t* p) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(*p))); }
};

struct BF16Loads {
  static __m256 load8(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

// ggml_order::reduce_add16 of lanes 0..7 in lo, 8..15 in hi: halves, then
// 128-bit halves, then lanes (0 + 2, 1 + 3), then 0 + 1.
inline float reduce16(__m256 lo, __m256 hi) {
  const __m256 t3 = _mm256_add_ps(hi, lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  float t[4];
  _mm_storeu_ps(t, t6);
  return (t[0] + t[2]) + (t[1] + t[3]);
}

// ggml_order::vec_dot_4x16: accumulator j, lane l takes element 64i + 16j + l.
template <typename Loads, typename W>
float vec_dot_4x16(int64_t n, const W* w, const float* x) {
  __m256 lo[4], hi[4];
  for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64) {
    for (int j = 0; j < 4; ++j) {
      const int64_t k = i + 16 * j;
      lo[j] = _mm256_fmadd_ps(Loads::load8(w + k), _mm256_loadu_ps(x + k), lo[j]);
      hi[j] = _mm256_fmadd_ps(Loads::load8(w + k + 8), _mm256_loadu_ps(x + k + 8), hi[j]);
    }
  }
  lo[0] = _mm256_add_ps(lo[0], lo[2]);
  hi[0] = _mm256_add_ps(hi[0], hi[2]);
  lo[1] = _mm256_add_ps(lo[1], lo[3]);
  hi[1] = _mm256_add_ps(hi[1], hi[3]);
  return reduce16(_mm256_add_ps(lo[0], lo[1]), _mm256_add_ps(hi[0], hi[1]));
}

// ggml_order::tinyblas_dot: lane l takes elements 16c + l, one fma chain each.
template <typename Loads, typename W>
float tinyblas_dot(int64_t n, const W* w, const float* x) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int64_t c = 0; c < n; c += 16) {
    lo = _mm256_fmadd_ps(Loads::load8(w + c), _mm256_loadu_ps(x + c), lo);
    hi = _mm256_fmadd_ps(Loads::load8(w + c + 8), _mm256_loadu_ps(x + c + 8), hi);
  }
  return reduce16(lo, hi);
}

}  // namespace

float vec_dot_f32(int64_t n, const float* x, const float* y) {
  float sum = vec_dot_4x16<F32Loads>(n, x, y);
  for (int64_t i = n & ~int64_t{63}; i < n; ++i) sum = fma1(x[i], y[i], sum);
  return sum;
}

float vec_dot_f16(int64_t n, const uint16_t* w, const float* x) {
  double sum = vec_dot_4x16<F16Loads>(n, w, x);
  for (int64_t i = n & ~int64_t{63}; i < n; ++i) sum += static_cast<double>(F16Loads::one(w + i) * x[i]);
  return static_cast<float>(sum);
}

float tinyblas_f32(int64_t n, const float* w, const float* x) { return tinyblas_dot<F32Loads>(n, w, x); }

float tinyblas_f16(int64_t n, const uint16_t* w, const float* x) { return tinyblas_dot<F16Loads>(n, w, x); }

float tinyblas_bf16(int64_t n, const uint16_t* w, const float* x) { return tinyblas_dot<BF16Loads>(n, w, x); }

void fma_into(int64_t n, const float* x, float s, float* acc) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), sv, _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] = fma1(x[i], s, acc[i]);
}

}  // namespace ds4::quant::ggml_avx2
