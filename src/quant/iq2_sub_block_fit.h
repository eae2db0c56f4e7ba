// The scale search IQ2_XS and IQ2_S share for a sub-block of 16 magnitudes
// (two groups of 8, each a point of a 3-level 2-bit grid): ggml's scan of 19
// inverse scales around 5/max, each group snapped to the grid (off-grid words
// take their best neighbour) and the scale refit by weighted least squares;
// groups that needed a neighbour at the winning scale are snapped again and
// the scale refit once more.
#pragma once

#include <cstdint>

#include "quant/iq2_grid_search.h"

namespace ds4::quant {

// xval: the 16 magnitudes, max their maximum (> 0), weight the squared-error
// weights and waux their square roots (the neighbour search's weights).
// Writes the levels 0..2 to L[0..15] (all 0 when no scale fits) and returns
// the scale (value = scale * (2 * level + 1)).
float fit_iq2_sub_block(const Iq2GridSearch& t, const float* xval, float max, const float* weight, const float* waux,
                        int8_t* L);

// The 16 sub-block scales of a block coded as d * (2l + 1), l in 0..15 the
// nearest, two 4-bit l per byte (even sub-block low) into packed[0..7].
void code_iq2_sub_block_scales(const float* scales, float d, uint8_t* packed);

// A sub-block's scale from its 4-bit code, as ggml's IQ2_XS / IQ2_S
// dequantizers form it.
inline float iq2_sub_block_scale(float d, int code) { return d * (0.5f + static_cast<float>(code)) * 0.25f; }

}  // namespace ds4::quant
