// Q4_K: super-blocks of 256 = 8 sub-blocks of 32, 4-bit codes, 6-bit scale
// and 6-bit min per sub-block (packed, see k_scales.h), f16 d and dmin.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/k_scale_min_fit.h"
#include "quant/k_scales.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

// The search (k_scale_min_fit.h) with this format's code range, then its
// packing of the codes.
void store(const KScaleMinBlock& b, BlockQ4_K& y) {
  y.d = b.d;
  y.dmin = b.dmin;
  std::memcpy(y.scales, b.scales, sizeof y.scales);
  // Each 32-byte chunk: sub-block 2c in the low nibbles, 2c+1 in the high.
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      y.qs[32 * c + l] = static_cast<uint8_t>(b.codes[64 * c + l] | (b.codes[64 * c + 32 + l] << 4));
    }
  }
}

void quantize_block_plain(const float* x, BlockQ4_K& y) { store(fit_k_scale_min_plain(x, 15, -1.f, 20), y); }

void quantize_block_weighted(const float* x, const float* qw, BlockQ4_K& y) {
  store(fit_k_scale_min_weighted(x, qw, 15), y);
}

}  // namespace

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const ScaleMin6 lo = unpack_q4_K_scale_min(2 * chunk, x[i].scales);
      const ScaleMin6 hi = unpack_q4_K_scale_min(2 * chunk + 1, x[i].scales);
      const float d1 = d * lo.scale, m1 = min * lo.min;
      const float d2 = d * hi.scale, m2 = min * hi.min;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}

void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n, const float* importance) {
  quantize_k_row(x, y, n, importance, quantize_block_weighted, quantize_block_plain);
}

}  // namespace ds4::quant
