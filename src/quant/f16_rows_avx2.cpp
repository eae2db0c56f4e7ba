// f16_rows.h with F16C, 8 elements at a time. vcvtps2ph with round-to-
// nearest-even gives core/fp16.h's f32_to_f16 for every non-NaN input
// (subnormal results and overflow to infinity alike); a NaN keeps part of its
// payload there, where f32_to_f16 gives the canonical quiet NaN, so groups
// holding a NaN take the scalar conversion. vcvtph2ps is f16_to_f32 for every
// input (signalling NaNs come back quiet in both).
#include "core/x86_kernel_prelude.h"

#include "quant/f16_rows.h"

namespace ds4::quant {

void f32_to_f16_row_f16c(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      f32_to_f16_row_scalar(x + i, y + i, 8);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  f32_to_f16_row_scalar(x + i, y + i, n - i);
}

void f16_to_f32_row_f16c(const uint16_t* x, float* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  f16_to_f32_row_scalar(x + i, y + i, n - i);
}

}  // namespace ds4::quant
