// Q6_K: super-blocks of 256 = 16 sub-blocks of 16, 6-bit codes (q - 32) split
// into a low nibble (ql) and a high bit pair (qh), a signed 8-bit scale per
// sub-block and an f16 super-scale: x = d * sc * (q - 32).
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

// ggml's quantize_row_q6_K_ref / quantize_row_q6_K_impl for one block:
// a signed scale fit per sub-block (importance-weighted when given), the
// scales coded against the largest in magnitude, then every element recoded
// against its sub-block's dequantized scale.
void quantize_block(const float* x, const float* importance, BlockQ6_K& y) {
  int8_t L[kQK_K];
  float scales[kNumSub];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < kNumSub; ++ib) {
    const float scale =
        fit_signed_scale(kSub, 32, x + kSub * ib, L + kSub * ib, importance ? importance + kSub * ib : nullptr);
    scales[ib] = scale;
    if (std::fabs(scale) > max_abs_scale) {
      max_abs_scale = std::fabs(scale);
      max_scale = scale;
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(&y, 0, sizeof y);
    return;
  }
  const float iscale = -128.f / max_scale;
  y.d = f32_to_f16(1 / iscale);
  for (int ib = 0; ib < kNumSub; ++ib) y.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < kNumSub; ++j) {
    const float d = f16_to_f32(y.d) * y.scales[j];
    if (!d) continue;
    for (int ii = 0; ii < kSub; ++ii) {
      const int l = nearest_int(x[kSub * j + ii] / d);
      L[kSub * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
    }
  }
  // Per half of 128: element l + 32k (k < 4) has its low nibble in ql byte
  // l (k = 0, 2: low / high nibble) or l + 32 (k = 1, 3), its bit pair at 2k of qh byte l.
  for (int h = 0; h < 2; ++h) {
    const int8_t* q = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      y.ql[64 * h + l] = static_cast<uint8_t>((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
      y.ql[64 * h + l + 32] = static_cast<uint8_t>((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
      y.qh[32 * h + l] = static_cast<uint8_t>((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) |
                                              ((q[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    int8_t q[kQK_K];
    q6_K_values(x[i], q);
    for (int e = 0; e < kQK_K; ++e) y[kQK_K * i + e] = d * x[i].scales[e / kSub] * q[e];
  }
}

void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n, const float* importance) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    quantize_block(x + kQK_K * i, importance ? importance + kQK_K * i : nullptr, y[i]);
  }
}

void q6_K_values(const BlockQ6_K& b, int8_t* q) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int8_t* out = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

}  // namespace ds4::quant
