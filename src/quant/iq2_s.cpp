// IQ2_S: super-blocks of 256 = 16 sub-blocks of 16 = 32 groups of 8. Each
// group is a point of the 1024-point grid (3 magnitude levels) with 8
// explicit sign bits; each sub-block has a 4-bit scale; one f16 scale per
// super-block. Unlike IQ2_XXS/IQ2_XS, ggml quantizes it without an imatrix
// too, weighting each element by its square plus a quarter of the block's
// doubled mean square.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/iq2_grid_search.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_sub_block_fit.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

// Below this a sub-block's maximum counts as zero (ggml's GROUP_MAX_EPS_IQ2_S).
constexpr float kIq2sGroupMaxEps = 1e-8f;

// 10-bit grid index of group g (0..31) of a block.
int group_index(const BlockIQ2_S& b, int g) {
  return b.qs[g] | (((b.qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
}

// Block `y` of 256 values; qw: the importance of each value, or null
// (ggml's quantize_row_iq2_s_impl).
void quantize_block(const Iq2GridSearch& t, const float* xbl, const float* qw, BlockIQ2_S& y) {
  std::memset(&y, 0, sizeof(y));
  y.d = f32_to_f16(0.f);

  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  const float sigma2 = 2 * sumx2 / kQK_K;

  float scales[kQK_K / 16];
  float max_scale = 0;
  for (int ib = 0; ib < kQK_K / 16; ++ib) {
    const float* xb = xbl + 16 * ib;
    float weight[16], waux[16], xval[16];
    if (qw) {
      for (int i = 0; i < 16; ++i) weight[i] = qw[16 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < 16; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
    }
    for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
    uint8_t block_signs[2];
    for (int k = 0; k < 2; ++k) {
      uint8_t s = 0;
      for (int i = 0; i < 8; ++i) {
        const float v = xb[8 * k + i];
        if (v >= 0) {
          xval[8 * k + i] = v;
        } else {
          xval[8 * k + i] = -v;
          s = static_cast<uint8_t>(s | (1 << i));
        }
      }
      block_signs[k] = s;
    }
    float max = xval[0];
    for (int i = 1; i < 16; ++i) max = std::max(max, xval[i]);
    if (max < kIq2sGroupMaxEps) {
      scales[ib] = 0;  // the sub-block's indices and signs stay 0
      continue;
    }
    int8_t L[16];
    float scale = fit_iq2_sub_block(t, xval, max, weight, waux, L);
    if (scale < 0) {
      // Scales are coded unsigned; a negative fit is expressed by flipping
      // the signs (ggml keeps this guard although it should not trigger).
      scale = -scale;
      for (int k = 0; k < 2; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k]);
    }
    for (int k = 0; k < 2; ++k) {
      uint16_t u = 0;
      for (int i = 0; i < 8; ++i) u = static_cast<uint16_t>(u | (L[8 * k + i] << (2 * i)));
      const int grid_index = t.grid_index(u);
      if (grid_index < 0) throw Error("IQ2_S quantize: code word off the grid (non-finite input?)");
      const int g = 2 * ib + k;
      y.qs[g] = static_cast<uint8_t>(grid_index & 255);
      y.qh[g / 4] = static_cast<uint8_t>(y.qh[g / 4] | ((grid_index >> 8) << (2 * (g % 4))));
      y.signs[g] = block_signs[k];
    }
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }
  if (!max_scale) return;

  // Sub-block scales are coded as d*(2l+1) with l in 0..15, d = max/31; the
  // stored d is shrunk by 0.9875 (ggml's choice, after the codes are fixed
  // by the unshrunk d).
  const float d = max_scale / 31;
  y.d = f32_to_f16(d * 0.9875f);
  code_iq2_sub_block_scales(scales, d, y.scales);
}

}  // namespace

void dequantize_row_iq2_s(const BlockIQ2_S* x, float* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const float db[2] = {iq2_sub_block_scale(d, x[i].scales[ib] & 0xf), iq2_sub_block_scale(d, x[i].scales[ib] >> 4)};
      for (int l = 0; l < 4; ++l) {
        const int g = 4 * ib + l;
        const int index = group_index(x[i], g);
        const uint8_t signs = x[i].signs[g];
        for (int j = 0; j < 8; ++j) {
          y[j] = db[l / 2] * iq2s_grid_byte(index, j) * (signs & kIq2xsSignMask[j] ? -1.f : 1.f);
        }
        y += 8;
      }
    }
  }
}

void quantize_row_iq2_s(const float* x, BlockIQ2_S* y, int64_t n, const float* importance) {
  const Iq2GridSearch& tables = Iq2GridSearch::iq2_s();
  quantize_k_row(
      x, y, n, importance,
      [&](const float* xb, const float* qw, BlockIQ2_S& b) { quantize_block(tables, xb, qw, b); },
      [&](const float* xb, BlockIQ2_S& b) { quantize_block(tables, xb, nullptr, b); });
}

}  // namespace ds4::quant
