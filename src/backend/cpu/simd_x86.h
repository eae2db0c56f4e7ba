// x86 vector helpers for the per-ISA kernel files (*_avx2.cpp, *_avx512.cpp):
// one traits struct per level (Avx2: 8 lanes, Avx512: 16 lanes) with the few
// operations a kernel template needs (f32 / exact f16 loads, FMA, max, a
// fixed-order horizontal sum), so one template serves both levels.
//
// Include only from a file compiled with that level's flags: each struct is
// defined only when the compiler targets its level. Everything sits in an
// anonymous namespace, so a helper compiled with ISA flags is never the copy
// the linker keeps for a baseline caller.
#pragma once

#include "core/x86_intrinsics.h"

#include <cstddef>
#include <cstdint>

namespace ds4::cpu::simd {
namespace {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
struct Avx2 {
  using V = __m256;
  static constexpr size_t kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  // 8 f16 values as f32 (exact).
  static V load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  // Fixed order: high half onto low half, then pairs, then the last two.
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
#endif

#if defined(__AVX512F__) && defined(__F16C__)
struct Avx512 {
  using V = __m512;
  static constexpr size_t kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  // 16 f16 values as f32 (exact).
  static V load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  // Fixed order, written out rather than left to _mm512_reduce_add_ps: high
  // 256 bits onto low, high 128 onto low, then pairs, then the last two.
  static float hsum(V v) {
    const __m512 high = _mm512_shuffle_f32x4(v, v, 0x4e);  // 128-bit lanes 2, 3 first
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(high));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
#endif

}  // namespace
}  // namespace ds4::cpu::simd
