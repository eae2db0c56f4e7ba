// Internal to the dot_tile_*_avx512.cpp files: the 16-row dword transpose
// of the one-lane-per-row kernels, and the byte multiply-add at both
// avx512 levels. Include after
// core/x86_kernel_prelude.h; everything is in an anonymous namespace, so each file
// gets its own copy built with its own flags (as dot_x86_common.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/x86_intrinsics.h"
#include "quant/dot_words_avx512.h"

namespace ds4::quant::tile_avx512 {
namespace {

// 16 rows' 8 dwords (row r in rows[r]) -> out[k] lane r = dword k of row r.
// An 8x8 dword transpose in each 256-bit half; pairing rows r and r+4 in the
// input makes the final 128-bit shuffles land the rows in natural order.
inline void transpose_rows(const __m256i rows[16], __m512i out[8]) {
  constexpr int kLowRow[8] = {0, 1, 2, 3, 8, 9, 10, 11};
  __m512i z[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(rows[kLowRow[j]]), rows[kLowRow[j] + 4], 1);
  }
  __m512i u[8];
#pragma GCC unroll 2
  for (int g = 0; g < 8; g += 4) {
    const __m512i t0 = _mm512_unpacklo_epi32(z[g], z[g + 1]);
    const __m512i t1 = _mm512_unpackhi_epi32(z[g], z[g + 1]);
    const __m512i t2 = _mm512_unpacklo_epi32(z[g + 2], z[g + 3]);
    const __m512i t3 = _mm512_unpackhi_epi32(z[g + 2], z[g + 3]);
    u[g] = _mm512_unpacklo_epi64(t0, t2);      // dwords 0 | 4
    u[g + 1] = _mm512_unpackhi_epi64(t0, t2);  // 1 | 5
    u[g + 2] = _mm512_unpacklo_epi64(t1, t3);  // 2 | 6
    u[g + 3] = _mm512_unpackhi_epi64(t1, t3);  // 3 | 7
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm512_shuffle_i64x2(u[k], u[4 + k], _MM_SHUFFLE(2, 0, 2, 0));
    out[k + 4] = _mm512_shuffle_i64x2(u[k], u[4 + k], _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// acc + sum of four u8 (a) x s8 (b) products per int32 lane. Exact only while
// no adjacent pair of products exceeds int16 (plain avx512 sums pairs with
// vpmaddubsw, which saturates); each caller states its bound.
template <bool kVnni>
inline __m512i dot_bytes(__m512i acc, __m512i a, __m512i b) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(acc, a, b);
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1)));
  }
}

// The 16 rows of the group starting at row r0 of a tile (rows past n_rows
// repeat the last one: the lanes they fill are never stored).
template <typename Block>
inline void group_row_pointers(const uint8_t* w, uint64_t row_bytes, int64_t r0, int64_t n_rows,
                               const Block* rows[16]) {
  for (int r = 0; r < 16; ++r) {
    const int64_t row = std::min<int64_t>(r0 + r, n_rows - 1);
    rows[r] = reinterpret_cast<const Block*>(w + static_cast<uint64_t>(row) * row_bytes);
  }
}

}  // namespace
}  // namespace ds4::quant::tile_avx512
