// IQ2_XXS: super-blocks of 256 = 8 sub-blocks of 32 = 32 groups of 8. Each
// group is a grid point (3 magnitude levels) with even-parity signs; each
// sub-block has a 4-bit scale; one f16 scale per super-block.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/iq2_grid_search.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq_even_signs.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

constexpr int kMaxQ = 3;  // levels per element; values 2*l+1 = 1, 3, 5

// Snaps each group of 8 to the grid at inverse scale `id`: round every
// element to a level, and if that word is off the grid take the best of its
// nearest grid points at scale `scale`. Writes levels to L.
void snap_to_grid(const Iq2GridSearch& t, const float* xval, const float* waux, float id, float scale,
                  int8_t* L) {
  for (int k = 0; k < 4; ++k) {
    uint16_t u = 0;
    for (int i = 0; i < 8; ++i) {
      const int l = std::max(0, std::min(kMaxQ - 1, nearest_int(0.5f * (id * xval[8 * k + i] - 1))));
      L[8 * k + i] = static_cast<int8_t>(l);
      u = static_cast<uint16_t>(u | (l << (2 * i)));
    }
    if (t.grid_index(u) < 0) t.best_neighbour(u, xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
  }
}

// One super-block (ggml's quantize_row_iq2_xxs_impl).
void quantize_block(const Iq2GridSearch& t, const float* xbl, const float* qwbl, BlockIQ2_XXS& y) {
  float scales[kQK_K / 32];
  float weight[32];
  float xval[32];
  int8_t L[32];
  int8_t Laux[32];
  float waux[32];
  uint8_t block_signs[4];
  uint32_t q2[2 * (kQK_K / 32)] = {};

  y.d = f32_to_f16(0.f);
  float max_scale = 0;
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  const float sigma2 = sumx2 / kQK_K;

  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const float* xb = xbl + 32 * ib;
    const float* qw = qwbl + 32 * ib;
    for (int i = 0; i < 32; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);

    // Work on magnitudes with even-parity signs (iq_even_signs.h).
    for (int k = 0; k < 4; ++k) block_signs[k] = even_parity_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k);

    float max = xval[0];
    for (int i = 1; i < 32; ++i) max = std::max(max, xval[i]);
    if (max < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    // Starting scale from a plain 4-level fit, then a scan of 13 scales
    // around it, each snapped to the grid and refit by least squares.
    uint8_t L0[32];
    float scale = fit_nonneg_scale(32, kMaxQ + 1, xval, L0, weight);
    for (int i = 0; i < 32; ++i) L[i] = static_cast<int8_t>(L0[i]);
    const float eff_max = scale * kMaxQ;
    if (eff_max <= 0) {
      scales[ib] = 0;
      continue;
    }
    float best = 0;
    for (int is = -6; is <= 6; ++is) {
      const float id = (2 * kMaxQ - 1 + is * 0.1f) / eff_max;
      const float this_scale = 1 / id;
      snap_to_grid(t, xval, waux, id, this_scale, Laux);
      float sumqx = 0, sumq2 = 0;
      for (int i = 0; i < 32; ++i) {
        const float w = weight[i];
        const float q = 2 * Laux[i] + 1;
        sumqx += w * xval[i] * q;
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        scale = sumqx / sumq2;
        best = scale * sumqx;
        std::memcpy(L, Laux, 32);
      }
    }
    // Final snap at the chosen scale and its least-squares refit.
    if (scale > 0) {
      snap_to_grid(t, xval, waux, 1 / scale, scale, L);
      float sumqx = 0, sumq2 = 0;
      for (int i = 0; i < 32; ++i) {
        const float w = weight[i];
        const float q = 2 * L[i] + 1;
        sumqx += w * xval[i] * q;
        sumq2 += w * q * q;
      }
      if (sumq2 > 0) scale = sumqx / sumq2;
    }
    if (scale < 0) {
      // Scales are coded unsigned; a negative fit is expressed by flipping
      // all signs (ggml keeps this guard although it should not trigger).
      scale = -scale;
      for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
    }
    for (int k = 0; k < 4; ++k) {
      uint16_t u = 0;
      for (int i = 0; i < 8; ++i) u = static_cast<uint16_t>(u | (L[8 * k + i] << (2 * i)));
      const int grid_index = u < Iq2GridSearch::kMapSize ? t.grid_index(u) : -1;
      if (grid_index < 0) throw Error("IQ2_XXS quantize: code word off the grid (non-finite input?)");
      q2[2 * ib] |= static_cast<uint32_t>(grid_index) << (8 * k);
      q2[2 * ib + 1] |= static_cast<uint32_t>(block_signs[k]) << (7 * k);
    }
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }

  if (!max_scale) {
    std::memset(y.qs, 0, sizeof(y.qs));
    return;
  }
  // Sub-block scales are coded as d*(2l+1) with l in 0..15, d = max/31.
  const float d = max_scale / 31;
  y.d = f32_to_f16(d);
  const float id = 1 / d;
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
    q2[2 * ib + 1] |= static_cast<uint32_t>(l) << 28;
  }
  std::memcpy(y.qs, q2, sizeof(y.qs));
}

}  // namespace

void dequantize_row_iq2_xxs(const BlockIQ2_XXS* x, float* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      uint32_t w[2];
      std::memcpy(w, x[i].qs + 4 * ib, sizeof(w));
      const float db = d * (0.5f + static_cast<float>(w[1] >> 28)) * 0.25f;
      for (int g = 0; g < 4; ++g) {
        const int grid = (w[0] >> (8 * g)) & 0xFF;
        const uint8_t signs = kIq2xsSigns[(w[1] >> (7 * g)) & 127];
        for (int j = 0; j < 8; ++j) {
          y[j] = db * iq2xxs_grid_byte(grid, j) * (signs & kIq2xsSignMask[j] ? -1.f : 1.f);
        }
        y += 8;
      }
    }
  }
}

void quantize_row_iq2_xxs(const float* x, BlockIQ2_XXS* y, int64_t n, const float* importance) {
  const Iq2GridSearch& tables = Iq2GridSearch::iq2_xxs();
  quantize_imatrix_row(x, y, n, importance, [&](const float* xb, const float* qw, BlockIQ2_XXS& b) {
    quantize_block(tables, xb, qw, b);
  });
}

}  // namespace ds4::quant
