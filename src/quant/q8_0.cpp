// Q8_0: blocks of 32 int8 codes with one f16 scale.
#include <cmath>

#include "core/fp16.h"
#include "quant/quant.h"
#include "quant/rounding.h"

namespace ds4::quant {

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}

// ggml's quantize_row_q8_0_ref: d = amax/127, codes round(x/d) with ties away
// from zero (roundf).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
      const float ax = std::fabs(xb[j]);
      amax = amax > ax ? amax : ax;  // ggml's MAX(): keeps the NaN behaviour too
    }
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      y[i].qs[j] = to_code_i8(std::round(xb[j] * id));
    }
  }
}

}  // namespace ds4::quant
