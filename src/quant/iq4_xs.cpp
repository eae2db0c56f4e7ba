// IQ4_XS: super-blocks of 256 = 8 sub-blocks of 32 IQ4_NL-style indices, a
// 6-bit scale per sub-block (offset 32) and an f16 super-scale:
// x = d * (ls - 32) * value[q].
#include "core/fp16.h"
#include "quant/iq4_search.h"
#include "quant/iq4_values.h"
#include "quant/quant.h"

namespace ds4::quant {

void iq4_xs_scales(const BlockIQ4_XS& b, int* sc) {
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const int low = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
    const int high = (b.scales_h >> (2 * ib)) & 3;
    sc[ib] = (low | (high << 4)) - 32;
  }
}

void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    int sc[kQK_K / 32];
    iq4_xs_scales(x[i], sc);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const float dl = d * sc[ib];
      const uint8_t* qs = x[i].qs + 16 * ib;
      float* out = y + kQK_K * i + 32 * ib;
      for (int j = 0; j < 16; ++j) {
        out[j] = dl * kIq4nlValues[qs[j] & 0xf];
        out[j + 16] = dl * kIq4nlValues[qs[j] >> 4];
      }
    }
  }
}

void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n, const float* importance) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quantize_iq4_super_block(kQK_K, x + kQK_K * i, importance ? importance + kQK_K * i : nullptr, &y[i].d, y[i].qs,
                             &y[i].scales_h, y[i].scales_l);
  }
}

}  // namespace ds4::quant
