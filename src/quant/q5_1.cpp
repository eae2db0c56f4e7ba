// Q5_1: blocks of 32 5-bit codes (low nibbles in qs, bit 4 in qh) with an f16
// scale and an f16 offset, x = d * q + m.
#include <cfloat>

#include "core/fp16.h"
#include "quant/legacy_codes.h"
#include "quant/quant.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

using namespace legacy;

// ggml's quantize_row_q5_1_ref: m = the block's minimum, d = (max - min) / 31,
// codes truncated from (x - min) / d + 0.5 (no clamp: at most 31 for finite x).
void quantize_block_plain(const float* x, BlockQ5_1& y) {
  float min, max;
  min_max(x, min, max);
  const float d = (max - min) / 31;
  const float id = d ? 1.0f / d : 0.0f;
  y.d = f32_to_f16(d);
  y.m = f32_to_f16(min);
  uint8_t codes[kBlock];
  for (int j = 0; j < kBlock; ++j) codes[j] = static_cast<uint8_t>(truncate_x86((x[j] - min) * id + 0.5f));
  pack_nibbles(codes, y.qs);
  pack_high_bits(codes, y.qh);
}

}  // namespace

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    int codes[kBlock];
    unpack_codes(x[i].qs, x[i].qh, codes);
    for (int j = 0; j < kBlock; ++j) y[kBlock * i + j] = static_cast<float>(codes[j]) * d + m;
  }
}

// With importance, ggml's quantize_row_q5_1_impl (fit_offset_weighted).
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n, const float* importance) {
  if (!importance) {
    for (int64_t i = 0; i < n / kQK5_1; ++i) quantize_block_plain(x + kBlock * i, y[i]);
    return;
  }
  const float sigma2 = row_sigma2(x, n);
  for (int64_t i = 0; i < n / kQK5_1; ++i) {
    uint8_t codes[kBlock];
    float d, m;
    fit_offset_weighted(x + kBlock * i, importance + kBlock * i, sigma2, 31, codes, d, m);
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(m);
    pack_nibbles(codes, y[i].qs);
    pack_high_bits(codes, y[i].qh);
  }
}

}  // namespace ds4::quant
