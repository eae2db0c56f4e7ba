// ds4's Q8_0 activation quantizer (quantize_row_q8_0_act) with AVX2, bit for
// bit, as act_quant_avx512.cpp: the block maximum of |x| is exact in any order
// for finite values, d = amax / 127 and id = 1 / d are the scalar's own float
// operations, and x * id rounded to nearest-even (vroundps, the default
// rounding mode) is what nearbyint gives. A block whose maximum is not finite
// (NaN or inf in it) goes through the scalar code, whose NaN handling depends
// on the element order.
#include "core/x86_kernel_prelude.h"

#include <cstdint>

#include "core/fp16.h"
#include "quant/dot_x86_common.h"
#include "quant/quant.h"

namespace ds4::quant {

void quantize_row_q8_0_act_scalar_block(const float* x, BlockQ8_0* y);

void quantize_row_q8_0_act_avx2(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xb + 8 * k);
    __m256 a[4];
    __m256 bad = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      a[k] = _mm256_and_ps(v[k], abs_mask);
      // Not <= FLT_MAX: inf, or NaN (unordered). Tested per element: vmaxps
      // drops a NaN in its first operand.
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a[k], _mm256_set1_ps(3.4028234663852886e38f), _CMP_NLE_UQ));
    }
    if (_mm256_movemask_ps(bad) != 0) {
      quantize_row_q8_0_act_scalar_block(xb, y + i);
      continue;
    }
    const __m256 m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    const __m256 scale = _mm256_set1_ps(id);
    constexpr int kNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], scale), kNearestEven));
    // |x * id| <= 127 (up to rounding) here, so the saturating packs agree
    // with the scalar clamp. The packs work per 128-bit lane; the permute
    // puts the dwords back in element order.
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b = _mm256_packs_epi16(w01, w23);
    const __m256i ordered = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), ordered);
  }
}

void quantize_row_q8_K_scalar_block(const float* x, BlockQ8_K* y);

// quantize_row_q8_K with AVX2, bit for bit, as the AVX-512 copy
// (act_quant_avx512.cpp).
void quantize_row_q8_K_avx2(const float* x, BlockQ8_K* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 fmax = _mm256_set1_ps(3.4028234663852886e38f);
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK_K;
    __m256 m = _mm256_setzero_ps();
    __m256 bad = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int k = 0; k < 32; ++k) {
      const __m256 a = _mm256_and_ps(_mm256_loadu_ps(xb + 8 * k), abs_mask);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, fmax, _CMP_NLE_UQ));
      m = _mm256_max_ps(m, a);
    }
    if (_mm256_movemask_ps(bad) != 0) {
      quantize_row_q8_K_scalar_block(xb, y + i);
      continue;
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    if (amax == 0.0f) {
      quantize_row_q8_K_scalar_block(xb, y + i);  // the all-zero block
      continue;
    }
    float max = 0.0f;
    const __m256 want = _mm256_set1_ps(amax);
    for (int k = 0; k < 32; ++k) {
      const int hit =
          _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(xb + 8 * k), abs_mask), want, _CMP_EQ_OQ));
      if (hit != 0) {
        max = xb[8 * k + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 scale = _mm256_set1_ps(iscale);
    const __m256 magic = _mm256_set1_ps(12582912.f);
    const __m256i mantissa = _mm256_set1_epi32(0x007fffff), half = _mm256_set1_epi32(0x00400000);
    auto codes = [&](int k) {
      const __m256i bits = _mm256_castps_si256(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), scale), magic));
      return _mm256_sub_epi32(_mm256_and_si256(bits, mantissa), half);
    };
#pragma GCC unroll 2
    for (int c = 0; c < 8; ++c) {
      // 32 codes: the saturating packs work per 128-bit lane; the permute
      // puts the dwords back in element order.
      const __m256i w01 = _mm256_packs_epi32(codes(4 * c), codes(4 * c + 1));
      const __m256i w23 = _mm256_packs_epi32(codes(4 * c + 2), codes(4 * c + 3));
      const __m256i b = _mm256_packs_epi16(w01, w23);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 32 * c),
                          _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    q8_K_bsums(y[i].qs, y[i].bsums);
    y[i].d = 1 / iscale;
  }
}

}  // namespace ds4::quant
