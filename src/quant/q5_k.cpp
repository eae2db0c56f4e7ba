// Q5_K: super-blocks of 256 = 8 sub-blocks of 32, 5-bit codes (low nibble
// in qs as Q4_K's, fifth bit in qh), 6-bit scale and min per sub-block packed
// as Q4_K's (k_scales.h), f16 d and dmin: x = d * sc * q - dmin * m.
#include <algorithm>
#include <cmath>
#include <cstring>

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
// (sub-blocks with scale 0 keep the search's codes) and splits the codes
// 0..31 into nibbles and qh bits.
void requantize_and_pack(const float* x, BlockQ5_K& y, uint8_t* L) {
  const float d_all = f16_to_f32(y.d);
  const float m_all = f16_to_f32(y.dmin);
  for (int j = 0; j < kNumSub; ++j) {
    const ScaleMin6 sm = unpack_q4_K_scale_min(j, y.scales);
    const float d = d_all * sm.scale;
    if (!d) continue;
    const float dm = m_all * sm.min;
    for (int ii = 0; ii < kSub; ++ii) {
      const int l = nearest_int((x[kSub * j + ii] + dm) / d);
      L[kSub * j + ii] = static_cast<uint8_t>(std::max(0, std::min(31, l)));
    }
  }
  std::memset(y.qh, 0, sizeof y.qh);
  // Each 32-byte chunk c: sub-block 2c in the low nibbles, 2c+1 in the high;
  // the fifth bit of sub-block s at bit s of qh.
  for (int c = 0; c < kNumSub / 2; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      y.qh[l] = static_cast<uint8_t>(y.qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      y.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    }
  }
}

// ggml's quantize_row_q5_K_ref: per sub-block a least-squares fit weighted
// by rms(x)+|x|, then scales and mins coded linearly against their maxima.
void quantize_block_plain(const float* x, BlockQ5_K& y) {
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
    scales[j] = fit_scale_min(kSub, 31, x + kSub * j, weights, L + kSub * j, &mins[j], Laux, -0.5f, 0.1f, 15,
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

// ggml's quantize_row_q5_K_impl (with quant_weights): element weights
// qw*sqrt(sigma^2 + x^2), then a weighted search for the 6-bit codes.
void quantize_block_weighted(const float* x, const float* qw, BlockQ5_K& y) {
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
    scales[j] = fit_scale_min(kSub, 31, x + kSub * j, weights, L + kSub * j, &mins[j], Laux, -0.9f, 0.05f, 36,
                              false);
  }
  const float d_block = fit_nonneg_scale(kNumSub, 63, scales, Ls, sw);
  const float m_block = fit_nonneg_scale(kNumSub, 63, mins, Lm, sw);
  for (int j = 0; j < kNumSub; ++j) {
    Ls[j] = std::min<uint8_t>(63, Ls[j]);
    Lm[j] = std::min<uint8_t>(63, Lm[j]);
  }
  pack_q4_K_scale_min(Ls, Lm, y.scales);
  y.d = f32_to_f16(d_block);
  y.dmin = f32_to_f16(m_block);
  requantize_and_pack(x, y, L);
}

}  // namespace

void q5_K_codes(const BlockQ5_K& b, uint8_t* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int sub = e / 32, l = e % 32;
    const uint8_t byte = b.qs[32 * (sub / 2) + l];
    const int low = sub % 2 ? byte >> 4 : byte & 0xF;
    q[e] = static_cast<uint8_t>(low | (((b.qh[l] >> sub) & 1) << 4));
  }
}

void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    uint8_t q[kQK_K];
    q5_K_codes(x[i], q);
    for (int j = 0; j < kNumSub; ++j) {
      const ScaleMin6 sm = unpack_q4_K_scale_min(j, x[i].scales);
      const float dl = d * sm.scale, ml = min * sm.min;
      for (int l = 0; l < kSub; ++l) y[kQK_K * i + kSub * j + l] = dl * q[kSub * j + l] - ml;
    }
  }
}

void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n, const float* importance) {
  quantize_k_row(x, y, n, importance, quantize_block_weighted, quantize_block_plain);
}

}  // namespace ds4::quant
