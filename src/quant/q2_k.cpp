// Q2_K: super-blocks of 256 = 16 sub-blocks of 16, 2-bit codes, a 4-bit
// scale and a 4-bit min per sub-block, f16 super-scales d and dmin.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

constexpr int kSub = 16;                 // elements per sub-block
constexpr int kNumSub = kQK_K / kSub;    // sub-blocks per super-block

// Given the final scales, recodes each element against its sub-block's
// dequantized (scale, min) and packs the codes. Sub-blocks whose scale is 0
// keep the codes of the search (ggml does the same).
void requantize_and_pack(const float* x, BlockQ2_K& y, uint8_t* L) {
  const float d_all = f16_to_f32(y.d);
  const float m_all = f16_to_f32(y.dmin);
  for (int j = 0; j < kNumSub; ++j) {
    const float d = d_all * (y.scales[j] & 0xF);
    if (!d) continue;
    const float dm = m_all * (y.scales[j] >> 4);
    for (int ii = 0; ii < kSub; ++ii) {
      const int l = nearest_int((x[kSub * j + ii] + dm) / d);
      L[kSub * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
    }
  }
  // Byte l of each 32-byte half holds elements l, l+32, l+64, l+96 of that half.
  for (int h = 0; h < kQK_K; h += 128) {
    for (int l = 0; l < 32; ++l) {
      y.qs[h / 4 + l] = static_cast<uint8_t>(L[h + l] | (L[h + l + 32] << 2) | (L[h + l + 64] << 4) |
                                             (L[h + l + 96] << 6));
    }
  }
}

// ggml's quantize_row_q2_K_ref: per sub-block a mean-absolute-error fit with
// weights |x|, then scales and mins coded linearly against their maxima.
void quantize_block_plain(const float* x, BlockQ2_K& y) {
  uint8_t L[kQK_K];
  uint8_t Laux[kSub];
  float weights[kSub];
  float mins[kNumSub];
  float scales[kNumSub];
  const float q4scale = 15.f;

  float max_scale = 0;  // scales are non-negative once the min is subtracted
  float max_min = 0;
  for (int j = 0; j < kNumSub; ++j) {
    for (int l = 0; l < kSub; ++l) weights[l] = std::fabs(x[kSub * j + l]);
    scales[j] = fit_scale_min(kSub, 3, x + kSub * j, weights, L + kSub * j, &mins[j], Laux, -0.5f, 0.1f,
                              15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }

  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < kNumSub; ++j) y.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
    y.d = f32_to_f16(max_scale / q4scale);
  } else {
    for (int j = 0; j < kNumSub; ++j) y.scales[j] = 0;
    y.d = f32_to_f16(0.f);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < kNumSub; ++j) {
      const int l = nearest_int(iscale * mins[j]);
      y.scales[j] = static_cast<uint8_t>(y.scales[j] | (l << 4));
    }
    y.dmin = f32_to_f16(max_min / q4scale);
  } else {
    y.dmin = f32_to_f16(0.f);
  }
  requantize_and_pack(x, y, L);
}

// ggml's quantize_row_q2_K_impl: element weights qw*sqrt(sigma^2 + x^2), a
// least-squares fit per sub-block, then a weighted search for the 4-bit
// scale and min codes.
void quantize_block_weighted(const float* x, const float* qw, BlockQ2_K& y) {
  uint8_t L[kQK_K];
  uint8_t Laux[kSub];
  float mins[kNumSub];
  float scales[kNumSub];
  float sw[kNumSub] = {};
  float weight[kSub];
  uint8_t Ls[kNumSub], Lm[kNumSub];

  float sumx2 = 0;
  for (int j = 0; j < kQK_K; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = sumx2 / kQK_K;
  for (int j = 0; j < kNumSub; ++j) {
    sw[j] = importance_weights(kSub, x + kSub * j, qw + kSub * j, sigma2, weight);
    scales[j] = fit_scale_min(kSub, 3, x + kSub * j, weight, L + kSub * j, &mins[j], Laux, -0.9f, 0.05f, 36,
                              false);
  }
  const float dm = fit_nonneg_scale(kNumSub, 15, scales, Ls, sw);
  const float mm = fit_nonneg_scale(kNumSub, 15, mins, Lm, sw);
  y.d = f32_to_f16(dm);
  y.dmin = f32_to_f16(mm);
  for (int j = 0; j < kNumSub; ++j) y.scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
  requantize_and_pack(x, y, L);
}

}  // namespace

void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n) {
  const int64_t nb = n / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {  // bytes 0..15, then 16..31
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * (sc & 0xF);
          const float ml = min * (sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
      q += 32;
    }
  }
}

void quantize_row_q2_K(const float* x, BlockQ2_K* y, int64_t n, const float* importance) {
  quantize_k_row(x, y, n, importance, quantize_block_weighted, quantize_block_plain);
}

}  // namespace ds4::quant
