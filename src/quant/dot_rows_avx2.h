// Internal to the avx2 level (dot_rows_avx2.cpp defines these, its tile
// kernels call them for a single activation): matrix-vector products for
// decode, 8 rows at a time. Each row's block partials are the one-row kernel's
// (dot_blocks_avx2.h); eight rows' partials fold into one register with row r
// in lane r, the block's float term is formed for the 8 rows at once and added
// lane by lane in block order, so out[r] is bit-identical to kDotAvx2's
// one-row kernel for row r (and so to the scalar reference). The next 8 rows
// are swept into cache meanwhile.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace ds4::quant::avx2_detail {

// out[r] = row r . x for the n_rows rows of n elements, row_bytes apart.
void q8_0_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_0* x, float* out);
void mxfp4_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_0* x, float* out);
void q2_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void q4_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void iq2_xxs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void q6_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void q3_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void q5_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void iq4_xs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void iq3_xxs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void iq2_xs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void iq2_s_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
void iq1_m_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);

}  // namespace ds4::quant::avx2_detail
