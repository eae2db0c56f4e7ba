// ds4's Q8_0 activation quantizer (quantize_row_q8_0_act) with AVX-512, bit
// for bit: the block maximum of |x| is exact in any order for finite values,
// d = amax / 127 and id = 1 / d are the scalar's own float operations, and
// x * id rounded to nearest-even (vrndscaleps, the default rounding mode)
// is what nearbyint gives. A block whose maximum is not finite (NaN or inf
// in it) goes through the scalar code, whose NaN handling depends on the
// element order.
#include "core/x86_kernel_prelude.h"

#include <cstdint>

#include "core/fp16.h"
#include "quant/dot_x86_common.h"
#include "quant/quant.h"

namespace ds4::quant {

void quantize_row_q8_0_act_scalar_block(const float* x, BlockQ8_0* y);

void quantize_row_q8_0_act_avx512(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    const __m512 lo = _mm512_loadu_ps(xb);
    const __m512 hi = _mm512_loadu_ps(xb + 16);
    const __m512 alo = _mm512_and_ps(lo, abs_mask), ahi = _mm512_and_ps(hi, abs_mask);
    // Not <= FLT_MAX: inf, or NaN (unordered). Tested per element: vmaxps
    // drops a NaN in its first operand.
    const __m512 fmax = _mm512_set1_ps(3.4028234663852886e38f);
    if ((_mm512_cmp_ps_mask(alo, fmax, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(ahi, fmax, _CMP_NLE_UQ)) != 0) {
      quantize_row_q8_0_act_scalar_block(xb, y + i);  // NaN or inf somewhere in the block
      continue;
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(alo, ahi));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    const __m512 scale = _mm512_set1_ps(id);
    constexpr int kNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    // |x * id| <= 127 (up to rounding) here, so the int32 conversion and the
    // saturating narrowing agree with the scalar clamp.
    const __m512i qlo = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(lo, scale), kNearestEven));
    const __m512i qhi = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(hi, scale), kNearestEven));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs), _mm512_cvtsepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16), _mm512_cvtsepi32_epi8(qhi));
  }
}

void quantize_row_q8_K_scalar_block(const float* x, BlockQ8_K* y);

// quantize_row_q8_K with AVX-512, bit for bit: the block maximum of |x| is
// exact in any order for finite values, the scalar's "first element on ties"
// is the first lane equal to it, and the codes are the scalar's own float
// operations (iscale * x, + 1.5 * 2^23, the mantissa bits: ggml's
// nearest_int). Blocks with NaN or inf go through the scalar code.
void quantize_row_q8_K_avx512(const float* x, BlockQ8_K* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 fmax = _mm512_set1_ps(3.4028234663852886e38f);
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK_K;
    __m512 v[16];
    __m512 m = _mm512_setzero_ps();
    __mmask16 bad = 0;
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) {
      v[k] = _mm512_loadu_ps(xb + 16 * k);
      const __m512 a = _mm512_and_ps(v[k], abs_mask);
      bad |= _mm512_cmp_ps_mask(a, fmax, _CMP_NLE_UQ);
      m = _mm512_max_ps(m, a);
    }
    if (bad != 0) {
      quantize_row_q8_K_scalar_block(xb, y + i);
      continue;
    }
    const float amax = _mm512_reduce_max_ps(m);
    if (amax == 0.0f) {
      quantize_row_q8_K_scalar_block(xb, y + i);  // the all-zero block
      continue;
    }
    float max = 0.0f;
    const __m512 want = _mm512_set1_ps(amax);
    for (int k = 0; k < 16; ++k) {
      const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_and_ps(v[k], abs_mask), want, _CMP_EQ_OQ);
      if (hit != 0) {
        max = xb[16 * k + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m512 scale = _mm512_set1_ps(iscale);
    const __m512 magic = _mm512_set1_ps(12582912.f);
    const __m512i mantissa = _mm512_set1_epi32(0x007fffff), half = _mm512_set1_epi32(0x00400000);
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) {
      const __m512i bits = _mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(v[k], scale), magic));
      const __m512i q = _mm512_sub_epi32(_mm512_and_si512(bits, mantissa), half);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * k), _mm512_cvtsepi32_epi8(q));
    }
    q8_K_bsums(y[i].qs, y[i].bsums);
    y[i].d = 1 / iscale;
  }
}

}  // namespace ds4::quant
