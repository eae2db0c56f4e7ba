// ds4's Q8_0 activation quantizer (quantize_row_q8_0_act) with AVX-512, bit
// for bit: the block maximum of |x| is exact in any order for finite values,
// d = amax / 127 and id = 1 / d are the scalar's own float operations, and
// x * id rounded to nearest-even (vrndscaleps, the default rounding mode)
// is what nearbyint gives. A block whose maximum is not finite (NaN or inf
// in it) goes through the scalar code, whose NaN handling depends on the
// element order.
#include "core/x86_intrinsics.h"

#include <cstdint>

#include "core/fp16.h"
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

}  // namespace ds4::quant
