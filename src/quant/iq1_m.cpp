// IQ1_M: super-blocks of 256 = 16 sub-blocks of 16 = 32 groups of 8. Each
// group is a point of the 2048-point {-1, 0, 1} grid shifted by +-1/8; each
// sub-block has a 3-bit scale; the f16 super-block scale is spread over the
// top nibbles of the scale words.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_grid_search.h"
#include "quant/quant.h"
#include "quant/rounding.h"

namespace ds4::quant {
namespace {

constexpr int kSub = 16;                  // values per sub-block (one 3-bit scale)
constexpr float kGroupMaxEpsIq1M = 1e-7f;  // ggml's GROUP_MAX_EPS_IQ1_M
// Level values (level 0..2) with the group's shift: +1/8 (x_p) or -1/8 (x_m).
constexpr float kXp[3] = {-1 + kIq1Delta, kIq1Delta, 1 + kIq1Delta};
constexpr float kXm[3] = {-1 - kIq1Delta, -kIq1Delta, 1 - kIq1Delta};
// qh bits of a sub-block's two groups for shift choice k (bit 0 of k: the
// second group is -1/8, bit 1: the first group).
constexpr uint8_t kShiftMasks[4] = {0x00, 0x80, 0x08, 0x88};

// The level values of group g (0 or 1) of a sub-block with shift choice k.
const float* group_values(int k, int g) {
  if (g == 0) return k < 2 ? kXp : kXm;
  return k % 2 == 0 ? kXp : kXm;
}

// The 16-bit scale words of a block (little-endian, as ggml reads them).
void scale_words(const BlockIQ1_M& b, uint16_t* sc) {
  for (int i = 0; i < 4; ++i) sc[i] = static_cast<uint16_t>(b.scales[2 * i] | (b.scales[2 * i + 1] << 8));
}

float super_scale(const uint16_t* sc) {
  const uint16_t bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                              (sc[3] & 0xf000));
  return f16_to_f32(bits);
}

int group_index(const BlockIQ1_M& b, int group) {
  const int ib = group / 2;  // sub-block of 16: one qh byte
  return b.qs[group] | ((b.qh[ib] << (8 - 4 * (group % 2))) & 0x700);
}

void sub_block_weights(const float* xb, const float* qw, float sigma2, float* weight) {
  if (qw) {
    for (int i = 0; i < kSub; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
  } else {
    for (int i = 0; i < kSub; ++i) weight[i] = xb[i] * xb[i];
  }
}

struct SubBlockFit {
  float scale = 0;
  int shift = 0;
};

// The exact weighted least-squares split of one sub-block into levels
// -1 / 0 / +1 (each shifted by the group's +-1/8): values sorted, every pair
// of boundaries (i1, i2) and every shift choice tried (ggml's
// quantize_row_iq1_m_impl). Writes the two grid indices to qs/qh.
SubBlockFit fit_sub_block(const Iq2GridSearch& t, const float* xb, const float* weight, uint8_t* qs, uint8_t& qh) {
  float max = std::fabs(xb[0]);
  for (int i = 1; i < kSub; ++i) max = std::max(max, std::fabs(xb[i]));
  if (max < kGroupMaxEpsIq1M) return {};

  // Ascending by value; ties keep index order (glibc's qsort merges stably).
  int order[kSub];
  std::iota(order, order + kSub, 0);
  std::stable_sort(order, order + kSub, [&](int a, int b) { return xb[a] < xb[b]; });

  float best_score = -FLT_MAX, scale = max;
  int besti1 = -1, besti2 = -1, best_k = -1;
  for (int i1 = 0; i1 <= kSub; ++i1) {
    for (int i2 = i1; i2 <= kSub; ++i2) {
      float sumqx[4] = {0, 0, 0, 0}, sumq2[4] = {0, 0, 0, 0};
      for (int j = 0; j < kSub; ++j) {
        const int i = order[j];
        const int level = j < i1 ? 0 : j < i2 ? 1 : 2;
        for (int k = 0; k < 4; ++k) {
          const float q = group_values(k, i < kSub / 2 ? 0 : 1)[level];
          sumqx[k] += weight[i] * q * xb[i];
          sumq2[k] += weight[i] * q * q;
        }
      }
      for (int k = 0; k < 4; ++k) {
        if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
          scale = sumqx[k] / sumq2[k];
          best_score = scale * sumqx[k];
          besti1 = i1;
          besti2 = i2;
          best_k = k;
        }
      }
    }
  }
  if (besti1 < 0 || besti2 < 0 || best_k < 0) return {};
  int8_t L[kSub];
  for (int j = 0; j < kSub; ++j) L[order[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
  if (scale < 0) {
    for (int j = 0; j < kSub; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
    scale = -scale;
    best_k = 3 - best_k;
  }
  int index[2];
  bool all_on_grid = true;
  for (int g = 0; g < 2; ++g) {
    uint16_t u = 0;
    for (int j = 0; j < 8; ++j) u = static_cast<uint16_t>(u | (L[8 * g + j] << (2 * j)));
    index[g] = t.grid_index(u);
    if (index[g] < 0) {
      all_on_grid = false;
      index[g] = t.best_neighbour_valued(u, xb + 8 * g, weight + 8 * g, scale, group_values(best_k, g), L + 8 * g);
    }
  }
  if (!all_on_grid) {
    float sumqx = 0, sumq2 = 0;
    for (int g = 0; g < 2; ++g) {
      const float* xx = group_values(best_k, g);
      const uint8_t* lv = t.levels(index[g]);
      for (int j = 0; j < 8; ++j) {
        const float w = weight[8 * g + j];
        const float q = xx[lv[j]];
        sumqx += w * q * xb[8 * g + j];
        sumq2 += w * q * q;
      }
    }
    if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
  }
  qs[0] = static_cast<uint8_t>(index[0] & 255);
  qs[1] = static_cast<uint8_t>(index[1] & 255);
  qh = static_cast<uint8_t>((index[0] >> 8) | ((index[1] >> 8) << 4));
  return {scale, best_k};
}

void quantize_block(const Iq2GridSearch& t, const float* xbl, const float* qwbl, BlockIQ1_M& y) {
  std::memset(&y, 0, sizeof(y));
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  const float sigma2 = 2 * sumx2 / kQK_K;

  float scales[kQK_K / kSub];
  int shifts[kQK_K / kSub];
  float weight[kSub];
  float max_scale = 0;
  for (int ib = 0; ib < kQK_K / kSub; ++ib) {
    const float* xb = xbl + kSub * ib;
    sub_block_weights(xb, qwbl ? qwbl + kSub * ib : nullptr, sigma2, weight);
    const SubBlockFit fit = fit_sub_block(t, xb, weight, y.qs + 2 * ib, y.qh[ib]);
    scales[ib] = fit.scale;
    shifts[ib] = fit.shift;
    max_scale = std::max(max_scale, fit.scale);
  }
  if (!max_scale) return;

  // 3-bit sub-block scales d * (2l + 1), d = max / 15, then d refit by least
  // squares over the whole block with the coded scales and grid points.
  uint16_t sc[4] = {0, 0, 0, 0};
  float d = max_scale / 15;
  const float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int ib = 0; ib < kQK_K / kSub; ++ib) {
    const int l = std::max(0, std::min(7, nearest_int(0.5f * (id * scales[ib] - 1))));
    sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | (l << (3 * (ib % 4))));
    y.qh[ib] = static_cast<uint8_t>(y.qh[ib] | kShiftMasks[shifts[ib]]);
    const float* xb = xbl + kSub * ib;
    sub_block_weights(xb, qwbl ? qwbl + kSub * ib : nullptr, sigma2, weight);
    for (int g = 0; g < 2; ++g) {
      const float* xx = group_values(shifts[ib], g);
      const uint8_t* lv = t.levels(group_index(y, 2 * ib + g));
      for (int j = 0; j < 8; ++j) {
        const float w = weight[8 * g + j];
        const float q = xx[lv[j]] * static_cast<float>(2 * l + 1);
        sumqx += w * q * xb[8 * g + j];
        sumq2 += w * q * q;
      }
    }
  }
  if (sumq2 > 0) d = sumqx / sumq2;
  // ggml scales the refit by 1.1125 before coding it (an empirical factor).
  const uint16_t s = f32_to_f16(d * 1.1125f);
  sc[0] = static_cast<uint16_t>(sc[0] | ((s & 0x000f) << 12));
  sc[1] = static_cast<uint16_t>(sc[1] | ((s & 0x00f0) << 8));
  sc[2] = static_cast<uint16_t>(sc[2] | ((s & 0x0f00) << 4));
  sc[3] = static_cast<uint16_t>(sc[3] | (s & 0xf000));
  for (int i = 0; i < 4; ++i) {
    y.scales[2 * i] = static_cast<uint8_t>(sc[i] & 0xff);
    y.scales[2 * i + 1] = static_cast<uint8_t>(sc[i] >> 8);
  }
}

}  // namespace

void iq1_m_unpack(const BlockIQ1_M& b, Iq1MUnpacked& u) {
  uint16_t sc[4];
  scale_words(b, sc);
  u.d = super_scale(sc);
  for (int h = 0; h < kQK_K / kSub; ++h) {
    u.multiplier[h] = static_cast<int8_t>(2 * ((sc[h / 4] >> (3 * (h % 4))) & 7) + 1);
  }
  for (int g = 0; g < kQK_K / 8; ++g) {
    u.index[g] = static_cast<uint16_t>(group_index(b, g));
    u.shift_negative[g] = (b.qh[g / 2] >> (3 + 4 * (g % 2))) & 1;
  }
}

void dequantize_row_iq1_m(const BlockIQ1_M* x, float* y, int64_t n) {
  Iq1MUnpacked u;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    iq1_m_unpack(x[i], u);
    for (int g = 0; g < kQK_K / 8; ++g) {
      const float dl = u.d * static_cast<float>(u.multiplier[g / 2]);
      const float delta = u.shift_negative[g] ? -kIq1Delta : kIq1Delta;
      for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(iq1_grid_value(u.index[g], j)) + delta);
      y += 8;
    }
  }
}

void quantize_row_iq1_m(const float* x, BlockIQ1_M* y, int64_t n, const float* importance) {
  const Iq2GridSearch& tables = Iq2GridSearch::iq1();
  for (int64_t i = 0; i < n / kQK_K; ++i)
    quantize_block(tables, x + i * kQK_K, importance ? importance + i * kQK_K : nullptr, y[i]);
}

}  // namespace ds4::quant
