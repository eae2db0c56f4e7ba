// IQ2_XS: super-blocks of 256 = 16 sub-blocks of 16 = 32 groups of 8. Each
// group is a point of the 512-point grid (3 magnitude levels) with
// even-parity signs; each sub-block has a 4-bit scale; one f16 scale per
// super-block.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/iq2_grid_search.h"
#include "quant/iq2_sub_block_fit.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq_even_signs.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

// One sub-block of 16: the best scale and its two 16-bit group words (ggml's
// quantize_row_iq2_xs_impl inner loop). Returns the scale (0 for an
// all-small sub-block).
float quantize_sub_block(const Iq2GridSearch& t, const float* xb, const float* qw, float sigma2, uint16_t* words) {
  float weight[16], waux[16], xval[16];
  int8_t L[16];
  uint8_t block_signs[2];
  for (int i = 0; i < 16; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
  for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
  for (int k = 0; k < 2; ++k) block_signs[k] = even_parity_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k);

  float max = xval[0];
  for (int i = 1; i < 16; ++i) max = std::max(max, xval[i]);
  if (max < kGroupMaxEps) return 0;

  float scale = fit_iq2_sub_block(t, xval, max, weight, waux, L);
  if (scale < 0) {
    // Scales are coded unsigned; a negative fit is expressed by flipping
    // all signs (ggml keeps this guard although it should not trigger).
    scale = -scale;
    for (int k = 0; k < 2; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
  }
  for (int k = 0; k < 2; ++k) {
    uint16_t u = 0;
    for (int i = 0; i < 8; ++i) u = static_cast<uint16_t>(u | (L[8 * k + i] << (2 * i)));
    const int grid_index = t.grid_index(u);
    if (grid_index < 0) throw Error("IQ2_XS quantize: code word off the grid (non-finite input?)");
    words[k] = static_cast<uint16_t>(grid_index | (block_signs[k] << 9));
  }
  return scale;
}

void quantize_block(const Iq2GridSearch& t, const float* xbl, const float* qwbl, BlockIQ2_XS& y) {
  float scales[kQK_K / 16];
  uint16_t q2[kQK_K / 8] = {};
  y.d = f32_to_f16(0.f);
  std::memset(y.scales, 0, sizeof(y.scales));

  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  const float sigma2 = sumx2 / kQK_K;
  float max_scale = 0;
  for (int ib = 0; ib < kQK_K / 16; ++ib) {
    scales[ib] = quantize_sub_block(t, xbl + 16 * ib, qwbl + 16 * ib, sigma2, q2 + 2 * ib);
    max_scale = std::max(max_scale, scales[ib]);
  }
  if (!max_scale) {
    std::memset(y.qs, 0, sizeof(y.qs));
    return;
  }
  // Sub-block scales are coded as d*(2l+1) with l in 0..15, d = max/31.
  const float d = max_scale / 31;
  y.d = f32_to_f16(d);
  code_iq2_sub_block_scales(scales, d, y.scales);
  std::memcpy(y.qs, q2, sizeof(y.qs));
}

}  // namespace

void dequantize_row_iq2_xs(const BlockIQ2_XS* x, float* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const float db[2] = {iq2_sub_block_scale(d, x[i].scales[ib] & 0xf), iq2_sub_block_scale(d, x[i].scales[ib] >> 4)};
      for (int g = 0; g < 4; ++g) {
        const uint16_t word = x[i].qs[4 * ib + g];
        const uint8_t signs = kIq2xsSigns[word >> 9];
        for (int j = 0; j < 8; ++j) {
          y[j] = db[g / 2] * iq2xs_grid_byte(word & 511, j) * (signs & kIq2xsSignMask[j] ? -1.f : 1.f);
        }
        y += 8;
      }
    }
  }
}

void quantize_row_iq2_xs(const float* x, BlockIQ2_XS* y, int64_t n, const float* importance) {
  const Iq2GridSearch& tables = Iq2GridSearch::iq2_xs();
  quantize_imatrix_row(x, y, n, importance, [&](const float* xb, const float* qw, BlockIQ2_XS& b) {
    quantize_block(tables, xb, qw, b);
  });
}

}  // namespace ds4::quant
