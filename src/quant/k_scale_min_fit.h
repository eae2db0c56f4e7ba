// The scale-and-min search shared by Q4_K and Q5_K: a super-block of 256 =
// 8 sub-blocks of 32 codes 0..nmax, each sub-block's scale and min coded in
// 6 bits (packed as k_scales.h) against f16 d and dmin. The formats differ
// only in nmax (15 or 31), in the plain search's range and in how they pack
// the codes, so the codes come back unpacked.
#pragma once

#include <cstdint>

namespace ds4::quant {

struct KScaleMinBlock {
  uint16_t d = 0;     // f16
  uint16_t dmin = 0;  // f16
  uint8_t scales[12] = {};
  uint8_t codes[256] = {};  // 0..nmax, element order
};

// ggml's quantize_row_q{4,5}_K_ref: per sub-block a least-squares fit weighted
// by rms(x)+|x| (fit_scale_min over rmin + 0.1 * i, i < nstep), scales and
// mins coded linearly against their maxima.
KScaleMinBlock fit_k_scale_min_plain(const float* x, int nmax, float rmin, int nstep);

// ggml's quantize_row_q{4,5}_K_impl (with quant_weights): element weights
// qw * sqrt(sigma^2 + x^2), then a weighted search for the 6-bit codes.
KScaleMinBlock fit_k_scale_min_weighted(const float* x, const float* qw, int nmax);

}  // namespace ds4::quant
