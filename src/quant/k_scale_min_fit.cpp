#include "quant/k_scale_min_fit.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/k_scales.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

constexpr int kSub = 32;
constexpr int kNumSub = kQK_K / kSub;

// Recodes every element against its sub-block's dequantized (scale, min);
// sub-blocks with scale 0 keep the search's codes.
void requantize(const float* x, int nmax, KScaleMinBlock& b) {
  const float d_all = f16_to_f32(b.d);
  const float m_all = f16_to_f32(b.dmin);
  for (int j = 0; j < kNumSub; ++j) {
    const ScaleMin6 sm = unpack_q4_K_scale_min(j, b.scales);
    const float d = d_all * sm.scale;
    if (!d) continue;
    const float dm = m_all * sm.min;
    for (int ii = 0; ii < kSub; ++ii) {
      const int l = nearest_int((x[kSub * j + ii] + dm) / d);
      b.codes[kSub * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

KScaleMinBlock fit_k_scale_min_plain(const float* x, int nmax, float rmin, int nstep) {
  KScaleMinBlock b;
  uint8_t Laux[kSub];
  float weights[kSub];
  float mins[kNumSub];
  float scales[kNumSub];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < kNumSub; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < kSub; ++l) sum_x2 += x[kSub * j + l] * x[kSub * j + l];
    const float av_x = std::sqrt(sum_x2 / kSub);
    for (int l = 0; l < kSub; ++l) weights[l] = av_x + std::fabs(x[kSub * j + l]);
    scales[j] = fit_scale_min(kSub, nmax, x + kSub * j, weights, b.codes + kSub * j, &mins[j], Laux, rmin, 0.1f,
                              nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[kNumSub], lm[kNumSub];
  for (int j = 0; j < kNumSub; ++j) {
    // Truncation to 8 bits before the clamp is ggml's (uint8_t) assignment.
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  pack_q4_K_scale_min(ls, lm, b.scales);
  b.d = f32_to_f16(max_scale / 63.f);
  b.dmin = f32_to_f16(max_min / 63.f);
  requantize(x, nmax, b);
  return b;
}

KScaleMinBlock fit_k_scale_min_weighted(const float* x, const float* qw, int nmax) {
  KScaleMinBlock b;
  uint8_t Laux[kSub];
  uint8_t Ls[kNumSub];
  uint8_t Lm[kNumSub];
  float weights[kSub];
  float sw[kNumSub];
  float mins[kNumSub];
  float scales[kNumSub];
  float sum_x2 = 0;
  for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < kNumSub; ++j) {
    sw[j] = importance_weights(kSub, x + kSub * j, qw + kSub * j, sigma2, weights);
    scales[j] = fit_scale_min(kSub, nmax, x + kSub * j, weights, b.codes + kSub * j, &mins[j], Laux, -0.9f, 0.05f, 36,
                              false);
  }
  // fit_nonneg_scale keeps its codes within 0..63, the 6-bit range.
  const float d_block = fit_nonneg_scale(kNumSub, 63, scales, Ls, sw);
  const float m_block = fit_nonneg_scale(kNumSub, 63, mins, Lm, sw);
  pack_q4_K_scale_min(Ls, Lm, b.scales);
  b.d = f32_to_f16(d_block);
  b.dmin = f32_to_f16(m_block);
  requantize(x, nmax, b);
  return b;
}

}  // namespace ds4::quant
