// Q3_K: super-blocks of 256 = 16 sub-blocks of 16, 3-bit codes (q - 4) split
// into a low bit pair (qs) and a high bit (hmask), a 6-bit scale per
// sub-block stored with an offset of 32, and an f16 super-scale:
// x = d * (sc - 32) * (q - 4).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

constexpr int kSub = 16;
constexpr int kNumSub = kQK_K / kSub;

// Scale codes 0..63: low nibbles in bytes 0..7 (sub-blocks 0..7 low, 8..15
// high), the top bit pairs in bytes 8..11.
void pack_scales(const int* codes, uint8_t* packed) {
  std::memset(packed, 0, kKScaleSize);
  for (int j = 0; j < kNumSub; ++j) {
    const int l = codes[j];
    if (j < 8) {
      packed[j] = static_cast<uint8_t>(l & 0xF);
    } else {
      packed[j - 8] = static_cast<uint8_t>(packed[j - 8] | ((l & 0xF) << 4));
    }
    packed[8 + j % 4] = static_cast<uint8_t>(packed[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
  }
}

// Recodes every element against its sub-block's dequantized scale (sub-blocks
// with scale 0 keep the search's codes), then splits the codes 0..7 into
// hmask bits and qs bit pairs.
void requantize_and_pack(const float* x, BlockQ3_K& y, int8_t* L) {
  int8_t sc[kNumSub];
  q3_K_scales(y, sc);
  for (int j = 0; j < kNumSub; ++j) {
    const float d = f16_to_f32(y.d) * sc[j];
    if (!d) continue;
    for (int ii = 0; ii < kSub; ++ii) {
      const int l = nearest_int(x[kSub * j + ii] / d);
      L[kSub * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
    }
  }
  std::memset(y.hmask, 0, sizeof y.hmask);
  for (int e = 0; e < kQK_K; ++e) {
    if (L[e] > 3) {
      y.hmask[e % 32] = static_cast<uint8_t>(y.hmask[e % 32] | (1 << (e / 32)));
      L[e] = static_cast<int8_t>(L[e] - 4);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int8_t* q = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      y.qs[32 * h + l] = static_cast<uint8_t>(q[l] | (q[l + 32] << 2) | (q[l + 64] << 4) | (q[l + 96] << 6));
    }
  }
}

// ggml's quantize_row_q3_K_ref: a signed scale per sub-block by coordinate
// descent, the scales coded against the largest in magnitude.
void quantize_block_plain(const float* x, BlockQ3_K& y) {
  int8_t L[kQK_K];
  float scales[kNumSub];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < kNumSub; ++j) {
    scales[j] = fit_signed_scale_descent(kSub, 4, x + kSub * j, L + kSub * j);
    const float scale = std::fabs(scales[j]);
    if (scale > amax) {
      amax = scale;
      max_scale = scales[j];
    }
  }
  int codes[kNumSub] = {};
  if (max_scale) {
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < kNumSub; ++j) {
      // ggml keeps the rounded value in an int8_t before clamping.
      const int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
      codes[j] = std::max(-32, std::min(31, l)) + 32;
    }
    pack_scales(codes, y.scales);
    y.d = f32_to_f16(1 / iscale);
  } else {
    std::memset(y.scales, 0, sizeof y.scales);
    y.d = f32_to_f16(0.f);
  }
  requantize_and_pack(x, y, L);
}

// ggml's quantize_row_q3_K_impl (with quant_weights): element weights
// qw*sqrt(sigma^2 + x^2), a weighted signed fit per sub-block, then the
// sub-block scales fitted the same way with their weight sums.
void quantize_block_weighted(const float* x, const float* qw, BlockQ3_K& y) {
  int8_t L[kQK_K];
  float scales[kNumSub];
  float weights[kSub];
  float sw[kNumSub];
  int8_t Ls[kNumSub];

  float sum_x2 = 0;
  for (int j = 0; j < kQK_K; ++j) sum_x2 += x[j] * x[j];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < kNumSub; ++j) {
    sw[j] = importance_weights(kSub, x + kSub * j, qw + kSub * j, sigma2, weights);
    scales[j] = fit_signed_scale(kSub, 4, x + kSub * j, L + kSub * j, weights);
  }
  const float d_block = fit_signed_scale(kNumSub, 32, scales, Ls, sw);
  int codes[kNumSub];
  for (int j = 0; j < kNumSub; ++j) codes[j] = Ls[j];
  pack_scales(codes, y.scales);
  y.d = f32_to_f16(d_block);
  requantize_and_pack(x, y, L);
}

}  // namespace

void q3_K_scales(const BlockQ3_K& b, int8_t* sc) {
  for (int j = 0; j < kNumSub; ++j) {
    const int low = j < 8 ? (b.scales[j] & 0xF) : (b.scales[j - 8] >> 4);
    const int high = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

void q3_K_values(const BlockQ3_K& b, int8_t* q) {
  // Element e = 128 h + 32 k + l: bits 2k of qs[32 h + l], high bit e / 32 of
  // hmask[l]. Nested so the l loop vectorizes (the --quality dots decode
  // every block once per token).
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k) {
      const int run = 4 * h + k;
      int8_t* out = q + 32 * run;
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * h + l] >> (2 * k)) & 3;
        const int high = (b.hmask[l] >> run) & 1;
        out[l] = static_cast<int8_t>(low - 4 + 4 * high);
      }
    }
}

void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    int8_t sc[kNumSub];
    int8_t q[kQK_K];
    q3_K_scales(x[i], sc);
    q3_K_values(x[i], q);
    for (int j = 0; j < kNumSub; ++j) {
      const float dl = d * sc[j];
      for (int l = 0; l < kSub; ++l) y[kQK_K * i + kSub * j + l] = dl * q[kSub * j + l];
    }
  }
}

void quantize_row_q3_K(const float* x, BlockQ3_K* y, int64_t n, const float* importance) {
  quantize_k_row(x, y, n, importance, quantize_block_weighted, quantize_block_plain);
}

}  // namespace ds4::quant
