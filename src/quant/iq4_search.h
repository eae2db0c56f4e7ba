// The quantizer IQ4_NL and IQ4_XS share (ggml's quantize_row_iq4_nl_impl as
// ggml_quantize_chunk runs it: 7 rescaling tries each way).
#pragma once

#include <cstdint>

namespace ds4::quant {

// One super-block of `size` values (32: IQ4_NL, one scale; 256: IQ4_XS, eight
// sub-blocks of 32 with 6-bit scales written to scales_h / scales_l) into the
// f16 scale *d and size/2 bytes of nibble indices q4. Per sub-block a scale is
// fitted by weighted least squares at the scale mapping the largest magnitude
// onto the table's end and at 15 rescalings around it, weights
// importance*sqrt(sigma^2 + x^2) with importance, x^2 without.
void quantize_iq4_super_block(int size, const float* x, const float* importance, uint16_t* d, uint8_t* q4,
                              uint16_t* scales_h, uint8_t* scales_l);

// Index of the table value nearest x (kIq4nlValues, ties to the lower one as
// ggml's best_index_int8).
int iq4_nearest_index(float x);

}  // namespace ds4::quant
