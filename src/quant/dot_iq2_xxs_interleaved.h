// Internal to the avx512vbmi level (dot_avx512.cpp defines these,
// dot_tile_iq2_xxs_avx512.cpp calls them): IQ2_XXS rows against an activation
// laid out once per matrix, for the matrix-vector products of decode. Call
// only where kDotAvx512Vbmi runs.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace ds4::quant::avx512_detail {

// xi[i] = x[i] with its codes interleaved for the weight blocks: qword s of
// 64-byte chunk c = the 8 codes of group 4s + c. exact[i] = 1 where x[i]
// holds -128, which the interleaved kernel cannot negate; those blocks take
// the exact path. nb blocks each.
void iq2_xxs_interleave_act(int64_t nb, const BlockQ8_K* x, BlockQ8_K* xi, uint8_t* exact);

// The dot of an IQ2_XXS row of n elements with activation x (xi, exact as
// iq2_xxs_interleave_act made them): bit-identical to every level's
// iq2_xxs_q8_K(n, w, x).
float dot_iq2_xxs_q8_K_interleaved(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x, const BlockQ8_K* xi,
                                   const uint8_t* exact);

}  // namespace ds4::quant::avx512_detail
