// Internal to the avx2 level: the prefill tiles with one int32 lane per weight
// row (dot_tile_lanes_avx2.cpp), for 2 activations or more; dot_tile_avx2.cpp
// routes a single activation to the decode kernels (dot_rows_avx2.h) instead.
// Same signature and contract as dot_tile.h's TileKernel.
#pragma once

#include <cstdint>

namespace ds4::quant::tile_avx2 {

void q8_0_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo);
void mxfp4_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                 int64_t n_acts, float* out, int64_t ldo);
void q2_K_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo);
void q4_K_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                int64_t n_acts, float* out, int64_t ldo);
void iq2_xxs_lanes(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const void* const* acts,
                   int64_t n_acts, float* out, int64_t ldo);

}  // namespace ds4::quant::tile_avx2
