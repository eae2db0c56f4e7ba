// Internal to the avx2 level: the prefill tiles with one int32 lane per weight
// row (dot_tile_lanes_avx2.cpp), any number of activations; dot_tile_avx2.cpp
// sends fewer than a few of them to the decode kernels (dot_rows_avx2.h)
// instead. Same contract as dot_tile.h's TileKernel.
#pragma once

#include "quant/dot_tile.h"

namespace ds4::quant::tile_avx2 {

TileFunction q8_0_lanes, mxfp4_lanes, q2_K_lanes, q3_K_lanes, q4_K_lanes, q5_K_lanes, q6_K_lanes, iq2_xxs_lanes,
    iq2_xs_lanes, iq2_s_lanes, iq3_xxs_lanes, iq1_m_lanes, iq4_xs_lanes;

}  // namespace ds4::quant::tile_avx2
