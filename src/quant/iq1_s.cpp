// IQ1_S: super-blocks of 256 = 8 sub-blocks of 32 = 32 groups of 8. Each
// group is a point of the 2048-point {-1, 0, 1} grid; a sub-block shares a
// 3-bit scale and a shift of +-1/8; one f16 scale per super-block.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/fp16.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_grid_search.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

constexpr int kSub = 32;                    // values per sub-block
constexpr float kGroupMaxEpsIq1S = 1e-12f;  // ggml's GROUP_MAX_EPS_IQ1_S
constexpr float kXp[3] = {-1 + kIq1Delta, kIq1Delta, 1 + kIq1Delta};
constexpr float kXm[3] = {-1 - kIq1Delta, -kIq1Delta, 1 - kIq1Delta};

struct SubBlockFit {
  float scale = 0;
  int shift = 1;  // +1: levels shifted by +1/8, -1: by -1/8
};

// The exact weighted least-squares split of one sub-block into levels
// -1 / 0 / +1 and the shift sign, from prefix sums over the sorted values
// (ggml's quantize_row_iq1_s_impl). Writes the four grid indices to qs and
// their high bits to qh.
SubBlockFit fit_sub_block(const Iq2GridSearch& t, const float* xb, const float* weight, uint8_t* qs, uint16_t& qh) {
  float max = std::fabs(xb[0]);
  for (int i = 1; i < kSub; ++i) max = std::max(max, std::fabs(xb[i]));
  if (max < kGroupMaxEpsIq1S) return {};

  // Ascending by value; ties keep index order (glibc's qsort merges stably).
  int order[kSub];
  std::iota(order, order + kSub, 0);
  std::stable_sort(order, order + kSub, [&](int a, int b) { return xb[a] < xb[b]; });
  float sumx[kSub + 1], sumw[kSub + 1];
  sumx[0] = sumw[0] = 0;
  for (int j = 0; j < kSub; ++j) {
    const int i = order[j];
    sumx[j + 1] = sumx[j] + weight[i] * xb[i];
    sumw[j + 1] = sumw[j] + weight[i];
  }
  float best_score = -FLT_MAX, scale = max;
  int besti1 = -1, besti2 = -1, best_shift = 0;
  for (int i1 = 0; i1 <= kSub; ++i1) {
    for (int i2 = i1; i2 <= kSub; ++i2) {
      for (int shift : {1, -1}) {
        const float* v = shift == 1 ? kXp : kXm;
        const float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[kSub] - sumx[i2]) * v[2];
        const float sumq2 =
            (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] + (sumw[kSub] - sumw[i2]) * v[2] * v[2];
        if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
          scale = sumqx / sumq2;
          best_score = scale * sumqx;
          besti1 = i1;
          besti2 = i2;
          best_shift = shift;
        }
      }
    }
  }
  if (besti1 < 0 || besti2 < 0 || best_shift == 0) return {};
  int8_t L[kSub];
  for (int j = 0; j < kSub; ++j) L[order[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
  if (scale < 0) {
    for (int j = 0; j < kSub; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
    scale = -scale;
    best_shift = -best_shift;
  }
  const float* xx = best_shift == 1 ? kXp : kXm;
  int index[kSub / 8];
  bool all_on_grid = true;
  for (int g = 0; g < kSub / 8; ++g) {
    uint16_t u = 0;
    for (int j = 0; j < 8; ++j) u = static_cast<uint16_t>(u | (L[8 * g + j] << (2 * j)));
    index[g] = t.grid_index(u);
    if (index[g] < 0) {
      all_on_grid = false;
      index[g] = t.best_neighbour_valued(u, xb + 8 * g, weight + 8 * g, scale, xx, L + 8 * g);
    }
  }
  if (!all_on_grid) {
    float sumqx = 0, sumq2 = 0;
    for (int g = 0; g < kSub / 8; ++g) {
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
  uint16_t h = 0;
  for (int g = 0; g < kSub / 8; ++g) {
    qs[g] = static_cast<uint8_t>(index[g] & 255);
    h = static_cast<uint16_t>(h | ((index[g] >> 8) << (3 * g)));
  }
  qh = h;
  return {scale, best_shift};
}

void quantize_block(const Iq2GridSearch& t, const float* xbl, const float* qwbl, BlockIQ1_S& y) {
  std::memset(&y, 0, sizeof(y));
  y.d = f32_to_f16(0.f);
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += xbl[i] * xbl[i];
  const float sigma2 = 2 * sumx2 / kQK_K;

  float scales[kQK_K / kSub];
  int shifts[kQK_K / kSub];
  float weight[kSub];
  float max_scale = 0;
  for (int ib = 0; ib < kQK_K / kSub; ++ib) {
    const float* xb = xbl + kSub * ib;
    const float* qw = qwbl + kSub * ib;
    for (int i = 0; i < kSub; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    const SubBlockFit fit = fit_sub_block(t, xb, weight, y.qs + 4 * ib, y.qh[ib]);
    scales[ib] = fit.scale;
    shifts[ib] = fit.shift;
    max_scale = std::max(max_scale, fit.scale);
  }
  if (!max_scale) return;
  // Sub-block scales d * (2l + 1), d = max / 15; ggml stores d * 1.125 (an
  // empirical factor) as the block scale.
  const float d = max_scale / 15;
  y.d = f32_to_f16(d * 1.125f);
  const float id = 1 / d;
  for (int ib = 0; ib < kQK_K / kSub; ++ib) {
    int l = std::max(0, std::min(7, nearest_int(0.5f * (id * scales[ib] - 1))));
    if (shifts[ib] == -1) l |= 8;
    y.qh[ib] = static_cast<uint16_t>(y.qh[ib] | (l << 12));
  }
}

}  // namespace

void dequantize_row_iq1_s(const BlockIQ1_S* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int ib = 0; ib < kQK_K / kSub; ++ib) {
      const uint16_t h = x[i].qh[ib];
      const float dl = d * static_cast<float>(2 * ((h >> 12) & 7) + 1);
      const float delta = (h & 0x8000) ? -kIq1Delta : kIq1Delta;
      for (int g = 0; g < 4; ++g) {
        const int index = x[i].qs[4 * ib + g] | (((h >> (3 * g)) & 7) << 8);
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(iq1_grid_value(index, j)) + delta);
        y += 8;
      }
    }
  }
}

void quantize_row_iq1_s(const float* x, BlockIQ1_S* y, int64_t n, const float* importance) {
  const Iq2GridSearch& tables = Iq2GridSearch::iq1();
  quantize_imatrix_row(x, y, n, importance, [&](const float* xb, const float* qw, BlockIQ1_S& b) {
    quantize_block(tables, xb, qw, b);
  });
}

}  // namespace ds4::quant
