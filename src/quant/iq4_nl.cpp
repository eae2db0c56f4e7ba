// IQ4_NL: blocks of 32 4-bit indices into a fixed non-linear table
// (iq4_values.h) and an f16 scale: x = d * value[q].
#include "core/fp16.h"
#include "quant/iq4_search.h"
#include "quant/iq4_values.h"
#include "quant/quant.h"

namespace ds4::quant {

void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    float* out = y + kQK8_0 * i;
    for (int j = 0; j < kQK8_0 / 2; ++j) {
      out[j] = d * kIq4nlValues[x[i].qs[j] & 0xf];
      out[j + kQK8_0 / 2] = d * kIq4nlValues[x[i].qs[j] >> 4];
    }
  }
}

void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n, const float* importance) {
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    quantize_iq4_super_block(kQK8_0, x + kQK8_0 * i, importance ? importance + kQK8_0 * i : nullptr, &y[i].d,
                             y[i].qs, nullptr, nullptr);
  }
}

}  // namespace ds4::quant
