// Internal to the AVX-512 levels (dot_avx512.cpp defines these, the tile
// kernels call them): matrix-vector products against one activation (decode),
// 16 rows at a time with the rows in register lanes, each output bit-identical
// to the level's one-row kernel. The IQ2_XXS ones take an activation laid out
// once per matrix and need the avx512vbmi level; call each only where its
// level runs.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace ds4::quant::avx512_detail {

// xi[i] = x[i] with its codes interleaved for the weight blocks: qword s of
// 64-byte chunk c = the 8 codes of group 4s + c. exact[i] = 1 where x[i]
// holds -128, which the interleaved kernel cannot negate; those blocks take
// the exact path. nb blocks each.
void iq2_xxs_interleave_act(int64_t nb, const BlockQ8_K* x, BlockQ8_K* xi, uint8_t* exact);

// out[r] = row r . x (xi, exact as iq2_xxs_interleave_act made them) for the
// n_rows rows of n elements, row_bytes apart: bit-identical to every level's
// iq2_xxs_q8_K(n, row, x).
void iq2_xxs_rows_interleaved(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x,
                              const BlockQ8_K* xi, const uint8_t* exact, float* out);

// The same for Q2_K rows, bit-identical to the level's one-row kernel (kVnni:
// the avx512vnni and avx512vbmi levels). Q4_K's decode is the tile file's
// (dot_tile_kquant_avx512.cpp: rows in lanes without the tile's re-layout).
template <bool kVnni>
void q2_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
// The same for Q6_K rows, bit-identical to the avx2 one-row kernel that every
// avx512 level uses for Q6_K.
template <bool kVnni>
void q6_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
// The same for Q3_K and Q5_K rows, bit-identical to the avx2 one-row kernels
// that every avx512 level uses for them.
template <bool kVnni>
void q3_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
template <bool kVnni>
void q5_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
// The same for IQ4_XS, bit-identical to the avx2 one-row kernel every avx512
// level uses.
template <bool kVnni>
void iq4_xs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
// The same for IQ3_XXS, bit-identical to the avx2 one-row kernel every avx512
// level uses; kVbmi (the avx512vbmi level, with kVnni) decodes the grid from
// registers, the others gather it.
template <bool kVnni, bool kVbmi>
void iq3_xxs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
// The same for IQ2_XS and IQ2_S.
template <bool kVnni, bool kVbmi>
void iq2_xs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
template <bool kVnni, bool kVbmi>
void iq2_s_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);
// The same for IQ1_M (its grid gathered at every level).
template <bool kVnni>
void iq1_m_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out);

}  // namespace ds4::quant::avx512_detail
