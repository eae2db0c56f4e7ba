// Internal to the AVX-512 IQ2_XXS kernels (dot_avx512.cpp, one-row;
// dot_tile_kquant_avx512.cpp, tiles): the tables and helpers both use to
// find a block's grid indices and sign flags in registers. Include only from
// a file compiled with the AVX-512 flags, after core/x86_intrinsics.h and
// dot_x86_common.h; everything is in an anonymous namespace.
#pragma once

#include <cstdint>

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

}  // namespace
}  // namespace ds4::quant
