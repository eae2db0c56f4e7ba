// Q5_K: super-blocks of 256 = 8 sub-blocks of 32, 5-bit codes (low nibble
// in qs as Q4_K's, fifth bit in qh), 6-bit scale and min per sub-block packed
// as Q4_K's (k_scales.h), f16 d and dmin: x = d * sc * q - dmin * m.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/k_scale_min_fit.h"
#include "quant/k_scales.h"
#include "quant/quant.h"
#include "quant/rounding.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

constexpr int kSub = 32;
constexpr int kNumSub = kQK_K / kSub;

// The search (k_scale_min_fit.h) with this format's code range, then its
// packing of the codes.
void store(const KScaleMinBlock& b, BlockQ5_K& y) {
  y.d = b.d;
  y.dmin = b.dmin;
  std::memcpy(y.scales, b.scales, sizeof y.scales);
  std::memset(y.qh, 0, sizeof y.qh);
  // Each 32-byte chunk c: sub-block 2c in the low nibbles, 2c+1 in the high;
  // the fifth bit of sub-block s at bit s of qh.
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = b.codes[64 * c + l], hi = b.codes[64 * c + 32 + l];
      y.qh[l] = static_cast<uint8_t>(y.qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      y.qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    }
  }
}

void quantize_block_plain(const float* x, BlockQ5_K& y) { store(fit_k_scale_min_plain(x, 31, -0.5f, 15), y); }

void quantize_block_weighted(const float* x, const float* qw, BlockQ5_K& y) {
  store(fit_k_scale_min_weighted(x, qw, 31), y);
}

}  // namespace

void q5_K_codes(const BlockQ5_K& b, uint8_t* q) {
  // Sub-block sub's element l: a nibble of qs[32 (sub / 2) + l] (low for even
  // sub), bit sub of qh[l]. Nested so the l loop vectorizes.
  for (int sub = 0; sub < 8; ++sub) {
    const uint8_t* qs = b.qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    uint8_t* out = q + 32 * sub;
    for (int l = 0; l < 32; ++l)
      out[l] = static_cast<uint8_t>(((qs[l] >> shift) & 0xF) | (((b.qh[l] >> sub) & 1) << 4));
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
