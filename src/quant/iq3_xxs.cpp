// IQ3_XXS: super-blocks of 256 = 8 sub-blocks of 32 = 64 groups of 4. Each
// group is a point of a 256-point grid (8 magnitude levels); signs come per
// 8 elements as 7-bit even-parity indices; each sub-block has a 4-bit scale;
// one f16 scale per super-block.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_search.h"
#include "quant/iq3_tables.h"
#include "quant/iq_even_signs.h"
#include "quant/quant.h"
#include "quant/rounding.h"

namespace ds4::quant {
namespace {

// Below this a sub-block's largest magnitude counts as zero (ggml's
// GROUP_MAX_EPS_IQ3_XXS).
constexpr float kIq3xxsGroupMaxEps = 1e-8f;

constexpr Iq3SearchSteps kSteps = {15, true, false};

// One super-block (ggml's quantize_row_iq3_xxs_impl with the 256-point grid).
// Without importance each element is weighted by x^2, as ggml does.
void quantize_block(const Iq3SearchTables& t, const float* xbl, const float* qwbl, BlockIQ3_XXS& y) {
  float scales[kQK_K / 32];
  float weight[32];
  float xval[32];
  float waux[32];
  int8_t L[32];
  uint8_t block_signs[4];
  uint8_t q3[3 * kQK_K / 8] = {};  // grid indices, then one uint32 per sub-block
  uint32_t scales_and_signs[kQK_K / 32] = {};

  y.d = f32_to_f16(0.f);
  float max_scale = 0;
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  const float sigma2 = 2 * sumx2 / kQK_K;

  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const float* xb = xbl + 32 * ib;
    if (qwbl) {
      const float* qw = qwbl + 32 * ib;
      for (int i = 0; i < 32; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < 32; ++i) weight[i] = xb[i] * xb[i];
    }
    for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);

    // Work on magnitudes with even-parity signs (iq_even_signs.h).
    for (int k = 0; k < 4; ++k) block_signs[k] = even_parity_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k);

    float max = xval[0];
    for (int i = 1; i < 32; ++i) max = std::max(max, xval[i]);
    if (max < kIq3xxsGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float scale = fit_iq3_sub_block(t, kSteps, xval, weight, waux, max, L);
    if (scale < 0) {
      // Scales are coded unsigned; a negative fit is expressed by flipping
      // all signs (ggml keeps this guard although it should not trigger).
      scale = -scale;
      for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
    }
    for (int k = 0; k < 8; ++k) {
      uint16_t u = 0;
      for (int i = 0; i < 4; ++i) u = static_cast<uint16_t>(u | (L[4 * k + i] << (3 * i)));
      const int grid_index = t.grid_index(u);
      if (grid_index < 0) throw Error("IQ3_XXS quantize: code word off the grid (non-finite input?)");
      q3[8 * ib + k] = static_cast<uint8_t>(grid_index);
    }
    scales_and_signs[ib] = block_signs[0] | (block_signs[1] << 7) | (block_signs[2] << 14) |
                           (static_cast<uint32_t>(block_signs[3]) << 21);
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }

  if (!max_scale) {
    std::memset(y.qs, 0, sizeof(y.qs));
    return;
  }
  // Sub-block scales are coded as d*(2l+1) with l in 0..15, d = max/31; the
  // stored d carries ggml's 1.0125 fudge factor.
  const float d = max_scale / 31;
  y.d = f32_to_f16(d * 1.0125f);
  const float id = 1 / d;
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
    scales_and_signs[ib] |= static_cast<uint32_t>(l) << 28;
  }
  std::memcpy(q3 + kQK_K / 4, scales_and_signs, sizeof(scales_and_signs));
  std::memcpy(y.qs, q3, sizeof(y.qs));
}

}  // namespace

void dequantize_row_iq3_xxs(const BlockIQ3_XXS* x, float* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      uint32_t aux;
      std::memcpy(&aux, x[i].qs + kQK_K / 4 + 4 * ib, sizeof(aux));
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int g = 0; g < 4; ++g) {
        const uint8_t signs = kIq2xsSigns[(aux >> (7 * g)) & 127];
        for (int j = 0; j < 8; ++j) {
          const uint8_t magnitude = iq3xxs_grid_byte(qs[2 * g + j / 4], j % 4);
          y[j] = db * magnitude * (signs & kIq2xsSignMask[j] ? -1.f : 1.f);
        }
        y += 8;
      }
      qs += 8;
    }
  }
}

void quantize_row_iq3_xxs(const float* x, BlockIQ3_XXS* y, int64_t n, const float* importance) {
  const Iq3SearchTables& tables = Iq3SearchTables::xxs();
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    quantize_block(tables, x + i * kQK_K, importance ? importance + i * kQK_K : nullptr, y[i]);
  }
}

}  // namespace ds4::quant
