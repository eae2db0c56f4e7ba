// Internal to the AVX-512 IQ2_XXS kernels (dot_avx512.cpp, one-row;
// dot_tile_iq2_xxs_avx512.cpp, tiles): the tables and helpers both use to
// find a block's grid indices and sign flags in registers, and to decode the
// grid from registers (the avx512vbmi level). Include only from
// a file compiled with the AVX-512 flags, after core/x86_intrinsics.h and
// dot_x86_common.h; everything is in an anonymous namespace.
#pragma once

#include <array>
#include <cstdint>

#include "quant/iq2_xxs_tables.h"

namespace ds4::quant {
namespace {

// Per 128-bit lane (sub-blocks 2c, 2c+1): the eight grid indices as u16 words.
alignas(64) constexpr int8_t kGridIndexWords[64] = {
    0, -1, 1, -1, 2, -1, 3, -1, 8, -1, 9, -1, 10, -1, 11, -1, 0, -1, 1, -1, 2, -1, 3, -1, 8, -1, 9, -1, 10, -1, 11, -1,
    0, -1, 1, -1, 2, -1, 3, -1, 8, -1, 9, -1, 10, -1, 11, -1, 0, -1, 1, -1, 2, -1, 3, -1, 8, -1, 9, -1, 10, -1, 11, -1};
// permutexvar_epi16 indices moving index word 8c+i to word 4i (qword i); the
// other words are masked to zero.
alignas(64) constexpr int16_t kGridIndexQwords[4][32] = {
#define DS4_IQ2_Q(c)                                                                                          \
  {8 * (c), 0, 0, 0, 8 * (c) + 1, 0, 0, 0, 8 * (c) + 2, 0, 0, 0, 8 * (c) + 3, 0, 0, 0, 8 * (c) + 4, 0, 0, 0, \
   8 * (c) + 5, 0, 0, 0, 8 * (c) + 6, 0, 0, 0, 8 * (c) + 7, 0, 0, 0}
    DS4_IQ2_Q(0), DS4_IQ2_Q(1), DS4_IQ2_Q(2), DS4_IQ2_Q(3),
#undef DS4_IQ2_Q
};
constexpr __mmask32 kQwordLowWords = 0x11111111u;

// Sign of element e (sub-block s = e / 32, group g, position j) of a 64-element
// chunk, read from a lane [P0, S0, P1, S1] (S = sign dword, P = dword whose bit
// 7g is the parity of S's field g): byte and bit of that flag within the lane.
struct Iq2SignPattern {
  int8_t byte[64];
  uint8_t bit[64];
};
constexpr Iq2SignPattern make_iq2_sign_pattern() {
  Iq2SignPattern p{};
  for (int e = 0; e < 64; ++e) {
    const int s = e / 32, g = (e % 32) / 8, j = e % 8;
    const int flag = j < 7 ? 7 * g + j : 7 * g;
    p.byte[e] = static_cast<int8_t>((j < 7 ? 4 : 0) + 8 * s + flag / 8);
    p.bit[e] = static_cast<uint8_t>(1u << (flag % 8));
  }
  return p;
}
alignas(64) constexpr Iq2SignPattern kIq2SignPattern = make_iq2_sign_pattern();

// permutexvar_epi32 indices copying 128-bit lane c to all four lanes.
alignas(64) constexpr int32_t kLaneDwords[4][16] = {
#define DS4_LANE(c) {4 * (c), 4 * (c) + 1, 4 * (c) + 2, 4 * (c) + 3, 4 * (c), 4 * (c) + 1, 4 * (c) + 2, 4 * (c) + 3, \
                     4 * (c), 4 * (c) + 1, 4 * (c) + 2, 4 * (c) + 3, 4 * (c), 4 * (c) + 1, 4 * (c) + 2, 4 * (c) + 3}
    DS4_LANE(0), DS4_LANE(1), DS4_LANE(2), DS4_LANE(3),
#undef DS4_LANE
};

// Every dword: bit 7g holds the parity of bits 7g .. 7g+6.
inline __m512i field7_parity(__m512i v) {
  const __m512i t1 = _mm512_xor_si512(v, _mm512_srli_epi32(v, 1));
  const __m512i t2 = _mm512_xor_si512(t1, _mm512_srli_epi32(t1, 2));
  constexpr int kXor3 = 0x96;
  return _mm512_ternarylogic_epi32(t2, _mm512_srli_epi32(t1, 4), _mm512_srli_epi32(v, 6), kXor3);
}

// ---- The grid from registers ----
//
// The grid as compact codes (kIq2xxsCompactGrid: 2 bits per element, level
// 8, 25 or 43), all 256 entries held in eight registers and looked up with
// 16-bit two-table permutes: no hardware gathers, which are slow on AMD Zen
// cores. Without VBMI only iq2_xxs_codes is usable (dot_avx512.cpp's exact
// path); the chunk helpers below need the avx512vbmi level.
struct Iq2CompactGrid {
  __m512i part[8];  // entries 32p .. 32p+31
};

inline Iq2CompactGrid load_iq2_compact_grid() {
  Iq2CompactGrid g;
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) g.part[p] = _mm512_loadu_si512(kIq2xxsCompactGrid.data() + 32 * p);
  return g;
}

// Compact codes of 32 grid entries: word i of the result is the code of the
// entry whose index (0..255) is word i of idx.
inline __m512i iq2_xxs_codes(__m512i idx, const Iq2CompactGrid& grid) {
  // Index bits 0..5 select within 64 entries, bits 6 and 7 the quarter.
  const __mmask32 bit6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
  const __mmask32 bit7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
  const __m512i q0 = _mm512_permutex2var_epi16(grid.part[0], idx, grid.part[1]);
  const __m512i q1 = _mm512_permutex2var_epi16(grid.part[2], idx, grid.part[3]);
  const __m512i q2 = _mm512_permutex2var_epi16(grid.part[4], idx, grid.part[5]);
  const __m512i q3 = _mm512_permutex2var_epi16(grid.part[6], idx, grid.part[7]);
  return _mm512_mask_blend_epi16(bit7, _mm512_mask_blend_epi16(bit6, q0, q1), _mm512_mask_blend_epi16(bit6, q2, q3));
}

// A block is four 64-element chunks (chunk c = sub-blocks 2c, 2c+1, groups
// 8c..8c+7). The codes are arranged with qword q holding groups q, q+8,
// q+16, q+24, so chunk c's eight codes sit at bit 16c of the eight qwords:
// vpmultishiftqb moves element j's 2-bit level into byte j of its group's
// qword and vpermb turns it into the magnitude.

// vpermb indices (low bytes of the words; the high bytes are zeroed): word
// 4q+k = the grid index of group 8k+q, byte 8*(2k + q/4) + q%4 of the block.
constexpr std::array<int8_t, 64> make_iq2_group_index_words() {
  std::array<int8_t, 64> a{};
  for (int qw = 0; qw < 8; ++qw) {
    for (int k = 0; k < 4; ++k) {
      a[static_cast<size_t>(2 * (4 * qw + k))] = static_cast<int8_t>(8 * (2 * k + qw / 4) + qw % 4);
    }
  }
  return a;
}
alignas(64) constexpr std::array<int8_t, 64> kIq2GroupIndexWords = make_iq2_group_index_words();

// vpmultishiftqb controls for chunk c: byte j of each qword reads from bit
// 16c + 2j.
constexpr std::array<std::array<int8_t, 64>, 4> make_iq2_chunk_level_shifts() {
  std::array<std::array<int8_t, 64>, 4> a{};
  for (int c = 0; c < 4; ++c) {
    for (int b = 0; b < 64; ++b) {
      a[static_cast<size_t>(c)][static_cast<size_t>(b)] = static_cast<int8_t>(16 * c + 2 * (b % 8));
    }
  }
  return a;
}
alignas(64) constexpr std::array<std::array<int8_t, 64>, 4> kIq2ChunkLevelShifts = make_iq2_chunk_level_shifts();

// vpermb table: the magnitude of the level in index bits 0..1 (bits 2..5
// hold the next elements' levels).
constexpr std::array<uint8_t, 64> make_iq2_level_magnitudes() {
  std::array<uint8_t, 64> a{};
  for (int b = 0; b < 64; ++b) {
    a[static_cast<size_t>(b)] = b % 4 < 3 ? kIq2xxsLevelBytes[static_cast<size_t>(b % 4)] : 0;
  }
  return a;
}
alignas(64) constexpr std::array<uint8_t, 64> kIq2LevelMagnitudes = make_iq2_level_magnitudes();

// Codes of a block (its 64 code bytes in q), in the chunk arrangement.
inline __m512i iq2_xxs_chunk_codes(__m512i q, const Iq2CompactGrid& grid) {
  constexpr __mmask64 kWordLowBytes = 0x5555555555555555ull;
  return iq2_xxs_codes(_mm512_maskz_permutexvar_epi8(kWordLowBytes, _mm512_loadu_si512(kIq2GroupIndexWords.data()), q),
                       grid);
}

// Magnitudes (8, 25 or 43) of chunk c's 64 elements, in element order.
inline __m512i iq2_xxs_chunk_magnitudes(__m512i codes, int c) {
  const __m512i levels = _mm512_multishift_epi64_epi8(
      _mm512_loadu_si512(kIq2ChunkLevelShifts[static_cast<size_t>(c)].data()), codes);
  return _mm512_permutexvar_epi8(levels, _mm512_loadu_si512(kIq2LevelMagnitudes.data()));
}

// vpmultishiftqb controls picking, in sub-block b's qword, the four 7-bit
// sign fields of its W1 (bits 32 + 7g) into bytes 0..3.
alignas(64) constexpr int8_t kIq2SignFieldShifts[64] = {
    32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0, 0,
    32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0, 0, 32, 39, 46, 53, 0, 0, 0, 0};

// Sign flags of the block's chunks: signs[c] bit 8g+j negates element j of
// chunk c's group g (the 7-bit fields one per byte, bit 7 = their parity).
inline void iq2_xxs_chunk_signs(__m512i q, uint64_t signs[4]) {
  const __m512i f = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_loadu_si512(kIq2SignFieldShifts), q),
                                     _mm512_set1_epi64(0x7f7f7f7f));
  __m512i p = _mm512_xor_si512(f, _mm512_srli_epi64(f, 4));
  p = _mm512_xor_si512(p, _mm512_srli_epi64(p, 2));
  p = _mm512_xor_si512(p, _mm512_srli_epi64(p, 1));  // bit 0 of each byte = the parity of that byte
  constexpr int kOrAnd = 0xf8;                        // a | (b & c)
  // Qword b's low dword = sub-block b's flags, so dword b of the narrowed
  // register and qword c of it = chunk c's.
  const __m256i flags = _mm512_cvtepi64_epi32(
      _mm512_ternarylogic_epi64(f, _mm512_slli_epi64(p, 7), _mm512_set1_epi64(0x80808080), kOrAnd));
  const __m128i lo = _mm256_castsi256_si128(flags), hi = _mm256_extracti128_si256(flags, 1);
  signs[0] = static_cast<uint64_t>(_mm_cvtsi128_si64(lo));
  signs[1] = static_cast<uint64_t>(_mm_extract_epi64(lo, 1));
  signs[2] = static_cast<uint64_t>(_mm_cvtsi128_si64(hi));
  signs[3] = static_cast<uint64_t>(_mm_extract_epi64(hi, 1));
}

}  // namespace
}  // namespace ds4::quant
