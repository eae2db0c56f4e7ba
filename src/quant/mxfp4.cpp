// MXFP4: blocks of 32 E2M1 codes sharing an E8M0 power-of-two scale.
#include "quant/mxfp4.h"

#include <cmath>

#include "quant/quant.h"

namespace ds4::quant {
namespace {

// Index of the doubled E2M1 value nearest to x at half-scale `half_scale`;
// the first index wins ties (so 0 beats -0, and the smaller magnitude wins
// at exact midpoints between positive values).
int nearest_mxfp4_code(float x, float half_scale) {
  int best = 0;
  float best_err = std::fabs(kMxfp4DoubledValues[0] * half_scale - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(kMxfp4DoubledValues[i] * half_scale - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n) {
  const int64_t nb = n / kQKMxfp4;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      const int8_t lo = kMxfp4DoubledValues[x[i].qs[j] & 0x0F];
      const int8_t hi = kMxfp4DoubledValues[x[i].qs[j] >> 4];
      y[i * kQKMxfp4 + j] = lo * d;
      y[i * kQKMxfp4 + j + kQKMxfp4 / 2] = hi * d;
    }
  }
}

// ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127, so the
// block maximum lands in [4, 8) times 2^(e-127), i.e. near E2M1's top value
// 6; each element then takes the nearest representable value.
void quantize_row_mxfp4(const float* x, BlockMXFP4* y, int64_t n) {
  const int64_t nb = n / kQKMxfp4;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQKMxfp4;
    float amax = 0.0f;
    for (int j = 0; j < kQKMxfp4; ++j) {
      if (amax < std::fabs(xb[j])) amax = std::fabs(xb[j]);
    }
    uint8_t e = 0;
    if (amax > 0.0f) {
      // ggml converts this float straight to uint8_t; below 2^-125 that is
      // out of range there (undefined), here it clamps to the smallest scale.
      const float biased = std::floor(std::log2(amax)) - 2 + 127;
      e = biased <= 0.0f ? 0 : biased >= 255.0f ? 255 : static_cast<uint8_t>(biased);
    }
    const float d = e8m0_to_fp32_half(e);
    y[i].e = e;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      const int lo = nearest_mxfp4_code(xb[j], d);
      const int hi = nearest_mxfp4_code(xb[j + kQKMxfp4 / 2], d);
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace ds4::quant
