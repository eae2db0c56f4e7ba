// Internal to the AVX-512 kernel files (dot_avx512.cpp's 16-row decode
// kernels, dot_tile_kquant_avx512.cpp's tile re-layouts): IQ3_XXS, IQ2_XS,
// IQ2_S and IQ1_M blocks decoded in registers, 64 elements (a chunk) per register: the
// grid magnitudes in element order and the weight signs as one 64-bit mask per
// chunk. At the avx512vbmi level (kVbmi) the grids come from compact codes
// held in or read from small tables with byte and word permutes (hardware
// gathers are slow on AMD Zen cores); the other levels gather them. Include
// after core/x86_kernel_prelude.h and dot_x86_common.h; everything is in an
// anonymous namespace, so each file gets its own copy built with its flags.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "core/x86_intrinsics.h"
#include "quant/blocks.h"
#include "quant/dot_words_avx512.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq2_xxs_avx512.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"

namespace ds4::quant {
namespace {

// Sign bits for each W1 (odd dwords; even dwords are don't-care): the four
// 7-bit indices spread to one byte each, with bit 7 = parity of the byte
// (ggml's ksigns_iq2xs), so bit 8g+j negates element j of group g.
inline __m512i iq2_xxs_sign_bits(__m512i q) {
  constexpr int kSelect = 0xca;  // ternary logic: a ? b : c
  __m512i idx = _mm512_and_si512(q, _mm512_set1_epi32(0x7f));
  idx = _mm512_ternarylogic_epi32(_mm512_set1_epi32(0x7f00), _mm512_slli_epi32(q, 1), idx, kSelect);
  idx = _mm512_ternarylogic_epi32(_mm512_set1_epi32(0x7f0000), _mm512_slli_epi32(q, 2), idx, kSelect);
  idx = _mm512_ternarylogic_epi32(_mm512_set1_epi32(0x7f000000), _mm512_slli_epi32(q, 3), idx, kSelect);
  __m512i p = _mm512_xor_si512(idx, _mm512_srli_epi32(idx, 4));
  p = _mm512_xor_si512(p, _mm512_srli_epi32(p, 2));
  p = _mm512_xor_si512(p, _mm512_srli_epi32(p, 1));  // bit 0 of each byte = its parity
  return _mm512_ternarylogic_epi32(_mm512_set1_epi32(static_cast<int>(0x80808080u)), _mm512_slli_epi32(p, 7), idx,
                                   kSelect);
}

// ---- Chunks ----

// acc + chunk terms: `magnitudes` signed as the weights (bit e of `signs`:
// element e negative) times x (64 codes at xq), each pair's word times the
// word of `multipliers`.
template <bool kVnni>
__attribute__((always_inline)) inline __m512i signed_chunk(__m512i acc, __m512i magnitudes, uint64_t signs,
                                                           const int8_t* xq, __m512i multipliers) {
  const __m512i xv = _mm512_loadu_si512(xq);
  const __mmask64 negate = _kxor_mask64(_cvtu64_mask64(signs), _mm512_movepi8_mask(xv));
  const __m512i wv = _mm512_mask_sub_epi8(magnitudes, negate, _mm512_setzero_si512(), magnitudes);
  return dot_words<kVnni>(acc, _mm512_maddubs_epi16(_mm512_abs_epi8(xv), wv), multipliers);
}

// Sign flags one byte per group of 8 (bit j: element j), 32 groups in
// element order -> the 64-bit masks of the four chunks.
inline void chunk_sign_masks(__m256i flags, uint64_t signs[4]) {
  const __m128i lo = _mm256_castsi256_si128(flags), hi = _mm256_extracti128_si256(flags, 1);
  signs[0] = static_cast<uint64_t>(_mm_cvtsi128_si64(lo));
  signs[1] = static_cast<uint64_t>(_mm_extract_epi64(lo, 1));
  signs[2] = static_cast<uint64_t>(_mm_cvtsi128_si64(hi));
  signs[3] = static_cast<uint64_t>(_mm_extract_epi64(hi, 1));
}

// Magnitudes negated where `signs` is set: the weights themselves.
inline __m512i signed_magnitudes(__m512i magnitudes, uint64_t signs) {
  return _mm512_mask_sub_epi8(magnitudes, _cvtu64_mask64(signs), _mm512_setzero_si512(), magnitudes);
}

// ---- Compact codes as byte tables ----

// A 256-entry table of 16-bit compact codes split into two byte tables (entry
// e at byte e of the low, then of the high table), each held in four
// registers: 64 indices are looked up at once with byte permutes (vpermi2b
// reaches 128 entries, index bit 7 picks the half). The avx512vbmi level.
struct CodeByteTables {
  __m512i lo[4];
  __m512i hi[4];
};

constexpr std::array<uint8_t, 512> split_code_bytes(const std::array<uint16_t, 256>& codes) {
  std::array<uint8_t, 512> a{};
  for (size_t e = 0; e < 256; ++e) {
    a[e] = static_cast<uint8_t>(codes[e] & 0xff);
    a[256 + e] = static_cast<uint8_t>(codes[e] >> 8);
  }
  return a;
}

inline CodeByteTables load_code_byte_tables(const uint8_t* bytes) {
  CodeByteTables t;
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    t.lo[p] = _mm512_loadu_si512(bytes + 64 * p);
    t.hi[p] = _mm512_loadu_si512(bytes + 256 + 64 * p);
  }
  return t;
}

// The table bytes of 64 byte indices; upper = the indices' bit 7.
inline __m512i code_byte_lookup(__m512i idx, __mmask64 upper, const __m512i table[4]) {
  return _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(table[0], idx, table[1]),
                                _mm512_permutex2var_epi8(table[2], idx, table[3]));
}

// ---- IQ3_XXS ----
//
// Chunk c holds sub-blocks 2c and 2c + 1 (grid points 16c..16c+15), each
// weighted by its multiplier 2 * (aux >> 28) + 1. The aux words (bytes
// 64..95 of qs) have IQ2_XXS's W1 layout, so its sign decoding serves.

// IQ3_XXS's 12-bit codes (3-bit level of element j at bit 3j) as byte tables.
alignas(64) constexpr std::array<uint8_t, 512> kIq3CodeBytes = split_code_bytes(kIq3xxsCompactGrid);

// vpermi2b indices over (low bytes, high bytes) of a block's 64 codes: qword q
// of chunk c = [low, high] of point 16c + 2q, then of point 16c + 2q + 1.
constexpr std::array<std::array<uint8_t, 64>, 4> make_iq3_point_pairs() {
  std::array<std::array<uint8_t, 64>, 4> a{};
  for (size_t c = 0; c < 4; ++c) {
    for (size_t q = 0; q < 8; ++q) {
      const auto point = static_cast<uint8_t>(16 * c + 2 * q);
      a[c][8 * q] = point;
      a[c][8 * q + 1] = static_cast<uint8_t>(64 + point);
      a[c][8 * q + 2] = static_cast<uint8_t>(point + 1);
      a[c][8 * q + 3] = static_cast<uint8_t>(64 + point + 1);
    }
  }
  return a;
}
alignas(64) constexpr std::array<std::array<uint8_t, 64>, 4> kIq3PointPairs = make_iq3_point_pairs();

// vpmultishiftqb controls: byte j of each qword reads the level of element j
// % 4 of the qword's first (j < 4) or second point, from bit 3j or 16 + 3j'.
alignas(64) constexpr int8_t kIq3LevelShifts[64] = {
#define DS4_IQ3_QWORD 0, 3, 6, 9, 16, 19, 22, 25
    DS4_IQ3_QWORD, DS4_IQ3_QWORD, DS4_IQ3_QWORD, DS4_IQ3_QWORD,
    DS4_IQ3_QWORD, DS4_IQ3_QWORD, DS4_IQ3_QWORD, DS4_IQ3_QWORD,
#undef DS4_IQ3_QWORD
};

// vpermb table: the magnitude of the level in index bits 0..2.
constexpr std::array<uint8_t, 64> make_iq3_level_magnitudes() {
  std::array<uint8_t, 64> a{};
  for (size_t b = 0; b < 64; ++b) a[b] = kIq3xxsLevelBytes[b % 8];
  return a;
}
alignas(64) constexpr std::array<uint8_t, 64> kIq3LevelMagnitudes = make_iq3_level_magnitudes();

// permutexvar_epi16 indices: sub-block b's multiplier sits in word 2b; chunk
// c's words 0..15 take sub-block 2c's, 16..31 sub-block 2c + 1's.
alignas(64) constexpr WordSpread kIq3MultiplierWords = word_spread(16, 2, 0);

// 2 * (aux >> 28) + 1 of sub-block b in word 2b (kIq3MultiplierWords spreads them).
inline __m512i iq3_xxs_multipliers(const BlockIQ3_XXS& w) {
  return _mm512_castsi256_si512(
      _mm256_or_si256(_mm256_srli_epi32(load256(w.qs + kQK_K / 4), 27), _mm256_set1_epi32(1)));
}

// The block's sign masks, one per chunk.
inline void iq3_xxs_signs(const BlockIQ3_XXS& w, uint64_t signs[4]) {
  const __m256i aux = load256(w.qs + kQK_K / 4);
  chunk_sign_masks(_mm512_castsi512_si256(iq2_xxs_sign_bits(_mm512_castsi256_si512(aux))), signs);
}

// The block's magnitudes, chunk by chunk (tables: kVbmi only).
template <bool kVbmi>
__attribute__((always_inline)) inline void iq3_xxs_magnitudes(const BlockIQ3_XXS& w, const CodeByteTables* tables,
                                                              __m512i out[4]) {
  if constexpr (kVbmi) {
    const __m512i idx = _mm512_loadu_si512(w.qs);
    const __mmask64 upper = _mm512_movepi8_mask(idx);
    const __m512i low = code_byte_lookup(idx, upper, tables->lo);
    const __m512i high = code_byte_lookup(idx, upper, tables->hi);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i pairs =
          _mm512_permutex2var_epi8(low, _mm512_loadu_si512(kIq3PointPairs[static_cast<size_t>(c)].data()), high);
      out[c] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(_mm512_loadu_si512(kIq3LevelShifts), pairs),
                                       _mm512_loadu_si512(kIq3LevelMagnitudes.data()));
    }
  } else {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      out[c] = _mm512_i32gather_epi32(_mm512_cvtepu8_epi32(load128(w.qs + 16 * c)), kIq3xxsGrid.data(), 4);
    }
  }
}

// ---- IQ2_XS and IQ2_S ----
//
// Chunk c holds groups 8c..8c+7 (8 elements each; 2-bit levels 8 / 25 / 43,
// as IQ2_XXS's), its four 16-element halves weighted by 2 * scale + 1. At
// avx512vbmi the groups' indices are arranged as IQ2_XXS's codes (qword q:
// groups q, q + 8, q + 16, q + 24) before the code lookup, so its chunk
// decoding (iq2_xxs_chunk_magnitudes) serves.

// permutexvar_epi16 indices: word 4q + k takes group 8k + q's word.
constexpr std::array<int16_t, 32> make_iq2_group_arrangement() {
  std::array<int16_t, 32> a{};
  for (size_t q = 0; q < 8; ++q) {
    for (size_t k = 0; k < 4; ++k) a[4 * q + k] = static_cast<int16_t>(8 * k + q);
  }
  return a;
}
alignas(64) constexpr std::array<int16_t, 32> kIq2GroupArrangement = make_iq2_group_arrangement();

// The compact codes of the entries whose indices are the words of idx, from
// a table of 64 * kPairs codes: vpermi2w reads index bits 0..5, the higher
// bits pick the pair of registers by a tree of blends.
template <int kPairs>
__attribute__((always_inline)) inline __m512i compact_code_lookup(__m512i idx, const uint16_t* table) {
  __m512i level[kPairs];
#pragma GCC unroll 16
  for (int p = 0; p < kPairs; ++p) {
    level[p] =
        _mm512_permutex2var_epi16(_mm512_loadu_si512(table + 64 * p), idx, _mm512_loadu_si512(table + 64 * p + 32));
  }
#pragma GCC unroll 4
  for (int bit = 6, n = kPairs; n > 1; ++bit, n /= 2) {
    const __mmask32 high = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(static_cast<int16_t>(1 << bit)));
#pragma GCC unroll 8
    for (int p = 0; p < n / 2; ++p) level[p] = _mm512_mask_blend_epi16(high, level[2 * p], level[2 * p + 1]);
  }
  return level[0];
}

// 2 * scale + 1 of the 16 halves as words 0..15 (half 2b: the low nibble of
// scales[b], half 2b + 1: its high nibble); kHalfMultiplierWords spreads them.
inline __m512i half_multipliers(const uint8_t* scales) {
  const __m128i s = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales));
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const __m128i nibbles = _mm_unpacklo_epi8(_mm_and_si128(s, low4), _mm_and_si128(_mm_srli_epi16(s, 4), low4));
  const __m256i words = _mm256_cvtepu8_epi16(nibbles);
  return _mm512_castsi256_si512(_mm256_or_si256(_mm256_slli_epi16(words, 1), _mm256_set1_epi16(1)));
}

// IQ2_XS's sign flags from its 32 group words (the 7-bit sign index in bits
// 9..15; bit 7 of the flag byte = the index's parity), one byte per group.
inline __m256i iq2_xs_sign_flags(__m512i q) {
  const __m512i f = _mm512_srli_epi16(q, 9);
  __m512i p = _mm512_xor_si512(f, _mm512_srli_epi16(f, 4));
  p = _mm512_xor_si512(p, _mm512_srli_epi16(p, 2));
  p = _mm512_xor_si512(p, _mm512_srli_epi16(p, 1));  // bit 0 = the parity of f
  return _mm512_cvtepi16_epi8(_mm512_or_si512(f, _mm512_slli_epi16(_mm512_and_si512(p, _mm512_set1_epi16(1)), 7)));
}

// The chunk magnitudes from the 32 groups' grid indices (words, group order)
// through a compact table of 64 * kPairs codes (the avx512vbmi level).
template <int kPairs>
__attribute__((always_inline)) inline void iq2_compact_magnitudes(__m512i idx, const uint16_t* table, __m512i out[4]) {
  const __m512i codes = compact_code_lookup<kPairs>(
      _mm512_permutexvar_epi16(_mm512_loadu_si512(kIq2GroupArrangement.data()), idx), table);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) out[c] = iq2_xxs_chunk_magnitudes(codes, c);
}

inline void block_signs(const BlockIQ2_XS& w, uint64_t signs[4]) {
  chunk_sign_masks(iq2_xs_sign_flags(_mm512_loadu_si512(w.qs)), signs);
}

template <bool kVbmi>
__attribute__((always_inline)) inline void block_magnitudes(const BlockIQ2_XS& w, __m512i out[4]) {
  if constexpr (kVbmi) {
    iq2_compact_magnitudes<8>(_mm512_and_si512(_mm512_loadu_si512(w.qs), _mm512_set1_epi16(511)),
                              kIq2xsCompactGrid.data(), out);
  } else {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      out[c] = _mm512_i32gather_epi64(
          _mm256_and_si256(_mm256_cvtepu16_epi32(load128(w.qs + 8 * c)), _mm256_set1_epi32(511)), kIq2xsGrid.data(), 8);
    }
  }
}

// IQ2_S: group g's 10-bit index is qs[g] with bits 2(g % 4)..+1 of qh[g / 4]
// on top; its signs are explicit bytes.

// permutexvar_epi16 indices (word g = qh byte g / 4) and srlv_epi16 counts
// (2 (g % 4)) for the top index bits of the 32 groups.
alignas(64) constexpr int16_t kIq2sHighWords[32] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                                    4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7};
alignas(64) constexpr int16_t kIq2sHighShifts[32] = {0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6,
                                                     0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6};
alignas(32) constexpr int32_t kIq2sChunkShifts[8] = {0, 2, 4, 6, 8, 10, 12, 14};

inline void block_signs(const BlockIQ2_S& w, uint64_t signs[4]) { std::memcpy(signs, w.signs, 4 * sizeof(uint64_t)); }

template <bool kVbmi>
__attribute__((always_inline)) inline void block_magnitudes(const BlockIQ2_S& w, __m512i out[4]) {
  if constexpr (kVbmi) {
    const __m512i high = _mm512_permutexvar_epi16(_mm512_loadu_si512(kIq2sHighWords),
                                                  _mm512_cvtepu8_epi16(_mm256_castsi128_si256(load128(w.qh))));
    const __m512i top =
        _mm512_and_si512(_mm512_srlv_epi16(high, _mm512_loadu_si512(kIq2sHighShifts)), _mm512_set1_epi16(3));
    iq2_compact_magnitudes<16>(_mm512_or_si512(_mm512_cvtepu8_epi16(load256(w.qs)), _mm512_slli_epi16(top, 8)),
                               kIq2sCompactGrid.data(), out);
  } else {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      uint16_t qh;
      std::memcpy(&qh, w.qh + 2 * c, sizeof(qh));
      const __m256i top =
          _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(qh), load256(kIq2sChunkShifts)), _mm256_set1_epi32(3));
      const __m256i idx =
          _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.qs + 8 * c))),
                          _mm256_slli_epi32(top, 8));
      out[c] = _mm512_i32gather_epi64(idx, kIq2sGrid.data(), 8);
    }
  }
}

// IQ1_M: chunk c holds groups 8c..8c+7, group g's 11-bit grid index being
// qs[g] with bits 0..2 of its qh nibble (nibble g % 2 of qh byte g / 2) on
// top, and bit 3 of that nibble its shift sign. The weight bytes are 8 * g +
// s (grid values g in {-1, 0, 1}, s = -1 or +1: |w| <= 9, signed, so no sign
// mask), each 16-element half times 2 * scale + 1 (3-bit scales, four to a
// little-endian word). The grid (2048 points) is gathered at every level.

// permutexvar_epi16 indices (word h = scale word h / 4) and srlv_epi16 counts
// (3 (h % 4)) for the 16 halves' scales.
alignas(64) constexpr int16_t kIq1HalfWords[32] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                                   0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
alignas(64) constexpr int16_t kIq1HalfShifts[32] = {0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9,
                                                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
alignas(64) constexpr int64_t kIq1NibbleShifts[8] = {0, 4, 8, 12, 16, 20, 24, 28};

// 2 * scale + 1 of the 16 halves as words 0..15.
inline __m512i iq1_m_multipliers(const BlockIQ1_M& w) {
  const __m512i scale_words =
      _mm512_permutexvar_epi16(_mm512_loadu_si512(kIq1HalfWords),
                               _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales))));
  const __m512i scales =
      _mm512_and_si512(_mm512_srlv_epi16(scale_words, _mm512_loadu_si512(kIq1HalfShifts)), _mm512_set1_epi16(7));
  return _mm512_or_si512(_mm512_slli_epi16(scales, 1), _mm512_set1_epi16(1));
}

// Chunk c's 64 weight bytes 8 * g + s.
__attribute__((always_inline)) inline __m512i iq1_m_chunk_weights(const BlockIQ1_M& w, int c) {
  uint32_t qh;
  std::memcpy(&qh, w.qh + 4 * c, sizeof(qh));
  const __m512i nibbles = _mm512_srlv_epi64(_mm512_set1_epi64(qh), _mm512_loadu_si512(kIq1NibbleShifts));
  const __m512i idx =
      _mm512_or_si512(_mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.qs + 8 * c))),
                      _mm512_slli_epi64(_mm512_and_si512(nibbles, _mm512_set1_epi64(7)), 8));
  const __m512i grid = _mm512_i64gather_epi64(idx, kIq1Grid.data(), 8);
  const __m512i shift = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(nibbles, _mm512_set1_epi64(8)),
                                                _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
  // grid bytes are -1, 0, 1: shifted by 3 in words, the bits that cross into
  // the next byte are the ones the 0xf8 mask clears.
  return _mm512_add_epi8(_mm512_and_si512(_mm512_slli_epi16(grid, 3), _mm512_set1_epi8(static_cast<char>(0xf8))),
                         shift);
}

// IQ1_M's weights stand in for magnitudes: no sign masks.
inline void block_signs(const BlockIQ1_M&, uint64_t signs[4]) { signs[0] = signs[1] = signs[2] = signs[3] = 0; }

template <bool kVbmi>
__attribute__((always_inline)) inline void block_magnitudes(const BlockIQ1_M& w, __m512i out[4]) {
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) out[c] = iq1_m_chunk_weights(w, c);
}

// The 16 halves' multipliers as words 0..15.
template <typename Block>
inline __m512i half_multiplier_words(const Block& w) {
  return half_multipliers(w.scales);
}
inline __m512i half_multiplier_words(const BlockIQ1_M& w) { return iq1_m_multipliers(w); }

// ---- The formats behind one interface ----
//
// For the 16-row decode kernels (dot_avx512.cpp) and the VNNI tiles
// (dot_tile_kquant_avx512.cpp): the block type, the tables the avx512vbmi
// level decodes from (tables()), a block's sign masks and chunk magnitudes
// (decode), its multiplier words and how they spread over the chunks' pair
// words, and the scales the one-row kernel applies to each block's integer
// (kBlockScale) and to its sum at the end (kFinalScale).

struct NoTables {};

// 16-element halves' words (half_multipliers) over the chunks.
alignas(64) constexpr WordSpread kHalfMultiplierWords = word_spread(8, 1, 0);

template <bool kVbmi>
struct Iq3XxsGrid {
  using Block = BlockIQ3_XXS;
  using Tables = CodeByteTables;
  static constexpr float kBlockScale = 1.0f;
  static constexpr float kFinalScale = 0.25f;
  static constexpr const WordSpread& kMultiplierSpread = kIq3MultiplierWords;
  static Tables tables() {
    if constexpr (kVbmi) return load_code_byte_tables(kIq3CodeBytes.data());
    return Tables{};
  }
  __attribute__((always_inline)) static void decode(const Block& w, const Tables& t, uint64_t signs[4],
                                                    __m512i magnitudes[4]) {
    iq3_xxs_signs(w, signs);
    iq3_xxs_magnitudes<kVbmi>(w, &t, magnitudes);
  }
  static __m512i multiplier_words(const Block& w) { return iq3_xxs_multipliers(w); }
};

// The one-row kernels' scales per block and at the end (a type, not float
// template arguments: clang 14 has none).
struct EighthAtEnd {  // IQ2_XS, IQ2_S
  static constexpr float kBlock = 1.0f, kFinal = 0.125f;
};
struct EighthPerBlock {  // IQ1_M: its one-row kernel's float(sumi1) + 0.125 float(sumi2)
  static constexpr float kBlock = 0.125f, kFinal = 1.0f;
};

// IQ2_XS, IQ2_S and IQ1_M: no tables, a multiplier per 16-element half
// (half_multiplier_words), block_signs / block_magnitudes per block type.
template <typename B, bool kVbmi, typename Scales>
struct HalvesGrid {
  using Block = B;
  using Tables = NoTables;
  static constexpr float kBlockScale = Scales::kBlock;
  static constexpr float kFinalScale = Scales::kFinal;
  static constexpr const WordSpread& kMultiplierSpread = kHalfMultiplierWords;
  static Tables tables() { return {}; }
  __attribute__((always_inline)) static void decode(const Block& w, const Tables&, uint64_t signs[4],
                                                    __m512i magnitudes[4]) {
    block_signs(w, signs);
    block_magnitudes<kVbmi>(w, magnitudes);
  }
  static __m512i multiplier_words(const Block& w) { return half_multiplier_words(w); }
};
template <bool kVbmi>
using Iq2XsGrid = HalvesGrid<BlockIQ2_XS, kVbmi, EighthAtEnd>;
template <bool kVbmi>
using Iq2SGrid = HalvesGrid<BlockIQ2_S, kVbmi, EighthAtEnd>;
// IQ1_M: kVbmi is ignored: its 2048 grid points do not fit registers, every
// level gathers.
template <bool kVbmi>
using Iq1MGrid = HalvesGrid<BlockIQ1_M, kVbmi, EighthPerBlock>;

}  // namespace
}  // namespace ds4::quant
