// Q5_0: blocks of 32 5-bit codes (low nibbles in qs, bit 4 in qh) and one
// f16 scale, x = d * (q - 16).
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "quant/legacy_codes.h"
#include "quant/quant.h"
#include "quant/scale_search.h"

namespace ds4::quant {
namespace {

using namespace legacy;

// ggml's quantize_row_q5_0_ref (fit_symmetric_plain with half 16).
void quantize_block_plain(const float* x, BlockQ5_0& y) {
  uint8_t codes[kBlock];
  y.d = f32_to_f16(fit_symmetric_plain(x, 16, codes));
  pack_nibbles(codes, y.qs);
  pack_high_bits(codes, y.qh);
}

}  // namespace

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    int codes[kBlock];
    unpack_codes(x[i].qs, x[i].qh, codes);
    for (int j = 0; j < kBlock; ++j) y[kBlock * i + j] = static_cast<float>(codes[j] - 16) * d;
  }
}

// With importance, ggml's quantize_row_q5_0_impl: make_qx_quants (our
// fit_signed_scale) per block, weighted by importance * sqrt(sigma2 + x^2).
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n, const float* importance) {
  if (!importance) {
    for (int64_t i = 0; i < n / kQK5_0; ++i) quantize_block_plain(x + kBlock * i, y[i]);
    return;
  }
  const float sigma2 = row_sigma2(x, n);
  for (int64_t i = 0; i < n / kQK5_0; ++i) {
    const float* xb = x + kBlock * i;
    float weight[kBlock];
    block_weights(xb, importance + kBlock * i, sigma2, weight);
    int8_t codes[kBlock];
    y[i].d = f32_to_f16(fit_signed_scale(kBlock, 16, xb, codes, weight));
    pack_nibbles(codes, y[i].qs);
    pack_high_bits(codes, y[i].qh);
  }
}

}  // namespace ds4::quant
