// Q4_K: super-blocks of 256 = 8 sub-blocks of 32, 4-bit codes, 6-bit scale
// and 6-bit min per sub-block (packed, see k_scales.h), f16 d and dmin.
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "quant/k_scales.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

constexpr int kSub = 32;
constexpr int kNumSub = kQK_K / kSub;

// Recodes every element against its sub-block's dequantized (scale, min)
// and packs the nibbles; sub-blocks with scale 0 keep the search's codes.
void requantize_and_pack(const float* x, BlockQ4_K& y, uint8_t* L) {
  const float d_all = f16_to_f32(y.d);
  const float m_all = f16_to_f32(y.dmin);
  for (int j = 0; j < kNumSub; ++j) {
    const ScaleMin6 sm = unpack_q4_K_scale_min(j, y.scales);
    const float d = d_all * sm.scale;
    if (!d) continue;
    const float dm = m_all * sm.min;
    for (int ii = 0; ii < kSub; ++ii) {
      const int l = nearest_int((x[kSub * j + ii] + dm) / d);
      L[kSub * j + ii] = static_cast<uint8_t>(std::max(0, std::min(15, l)));
    }
  }
  // Each 32-byte chunk: sub-block 2c in the low nibbles, 2c+1 in the high.
  uint8_t* q = y.qs;
  for (int j = 0; j < kQK_K; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
}

// ggml's quantize_row_q4_K_ref: per sub-block a least-squares fit weighted
// by rms(x)+|x|, then scales and mins coded linearly against their maxima.
void quantize_block_plain(const float* x, BlockQ4_K& y) {
  uint8_t L[kQK_K];
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
    scales[j] = fit_scale_min(kSub, 15, x + kSub * j, weights, L + kSub * j, &mins[j], Laux, -1.f, 0.1f, 20,
                              false);
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
  pack_q4_K_scale_min(ls, lm, y.scales);
  y.d = f32_to_f16(max_scale / 63.f);
  y.dmin = f32_to_f16(max_min / 63.f);
  requantize_and_pack(x, y, L);
}

// ggml's quantize_row_q4_K_impl (with quant_weights): element weights
// qw*sqrt(sigma^2 + x^2), then a weighted search for the 6-bit codes.
void quantize_block_weighted(const float* x, const float* qw, BlockQ4_K& y) {
  uint8_t L[kQK_K];
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
    for (int l = 0; l < kSub; ++l) {
      weights[l] = qw[kSub * j + l] * std::sqrt(sigma2 + x[kSub * j + l] * x[kSub * j + l]);
    }
    float sumw = 0;
    for (int l = 0; l < kSub; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = fit_scale_min(kSub, 15, x + kSub * j, weights, L + kSub * j, &mins[j], Laux, -0.9f, 0.05f, 36,
                              false);
  }
  const float d_block = fit_nonneg_scale(kNumSub, 63, scales, Ls, sw);
  const float m_block = fit_nonneg_scale(kNumSub, 63, mins, Lm, sw);
  pack_q4_K_scale_min(Ls, Lm, y.scales);
  y.d = f32_to_f16(d_block);
  y.dmin = f32_to_f16(m_block);
  requantize_and_pack(x, y, L);
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
