// Q4_1: blocks of 32 4-bit codes with an f16 scale and an f16 offset,
// x = d * q + m.
#include <algorithm>
#include <cfloat>

#include "core/fp16.h"
#include "quant/legacy_codes.h"
#include "quant/quant.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

using namespace legacy;

// ggml's quantize_row_q4_1_ref: m = the block's minimum, d = (max - min) / 15,
// codes truncated from (x - min) / d + 0.5, at most 15.
void quantize_block_plain(const float* x, BlockQ4_1& y) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < kBlock; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / 15;
  const float id = d ? 1.0f / d : 0.0f;
  y.d = f32_to_f16(d);
  y.m = f32_to_f16(min);
  uint8_t codes[kBlock];
  for (int j = 0; j < kBlock; ++j) {
    codes[j] = static_cast<uint8_t>(std::min(15, int8_cast_x86((x[j] - min) * id + 0.5f)));
  }
  pack_nibbles(codes, y.qs);
}

}  // namespace

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    int codes[kBlock];
    unpack_codes(x[i].qs, nullptr, codes);
    for (int j = 0; j < kBlock; ++j) y[kBlock * i + j] = static_cast<float>(codes[j]) * d + m;
  }
}

// With importance, ggml's quantize_row_q4_1_impl: make_qkx3_quants (our
// fit_scale_min: -0.9 + 0.05 k, 37 steps, least squares) per block, weighted
// by importance * sqrt(sigma2 + x^2).
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, const float* importance) {
  if (!importance) {
    for (int64_t i = 0; i < n / kQK4_1; ++i) quantize_block_plain(x + kBlock * i, y[i]);
    return;
  }
  const float sigma2 = row_sigma2(x, n);
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float* xb = x + kBlock * i;
    float weight[kBlock];
    block_weights(xb, importance + kBlock * i, sigma2, weight);
    uint8_t codes[kBlock], scratch[kBlock];
    float neg_min = 0;
    const float d = fit_scale_min(kBlock, 15, xb, weight, codes, &neg_min, scratch, -0.9f, 0.05f, 36, false);
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(-neg_min);
    pack_nibbles(codes, y[i].qs);
  }
}

}  // namespace ds4::quant
