// Helpers the AVX2 and AVX-512 kernels share (the dot, tile and activation
// quantizer files); include it only from per-ISA files, after
// core/x86_kernel_prelude.h.
//
// Everything here is in an anonymous namespace, so each including file gets its
// own copy compiled with its own ISA flags: an ordinary inline function would be
// one definition shared across the program, and the linker could keep the copy
// built with AVX-512 flags for every caller, including baseline code.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"

namespace ds4::quant {
namespace {

inline float f16_value(uint16_t h) { return _cvtsh_ss(h); }

// ggml's E8M0 half scale, as mxfp4.h's e8m0_to_fp32_half.
inline float e8m0_half_value(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// A Q8_K block's 16 group sums from its 256 codes (vpmaddubsw with ones,
// then three rounds of pairwise adds; exact: each sum is at most 16 * 128).
inline void q8_K_bsums(const int8_t* qs, int16_t* bsums) {
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  __m256i s[8];  // lanes 0-3: group 2k in four 4-sums, lanes 4-7: group 2k + 1
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) s[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, load256(qs + 32 * k)), ones16);
  // Groups 0, 2, 4, 6 | 1, 3, 5, 7 and 8, 10, 12, 14 | 9, 11, 13, 15.
  const __m256i lo = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
  const __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
  const __m256i words = _mm256_packs_epi32(lo, hi);  // even groups | odd groups
  const __m128i even = _mm256_castsi256_si128(words), odd = _mm256_extracti128_si256(words, 1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bsums), _mm_unpacklo_epi16(even, odd));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bsums + 8), _mm_unpackhi_epi16(even, odd));
}

// Sum of the eight int32 lanes.
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// {sum(b[0]), ..., sum(b[7])} of eight 8 x int32 vectors.
inline __m256i hsum8_i32(const __m256i b[8]) {
  const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(b[0], b[1]), _mm256_hadd_epi32(b[2], b[3]));
  const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(b[4], b[5]), _mm256_hadd_epi32(b[6], b[7]));
  // u0 = [b0..b3 low-lane sums | b0..b3 high-lane sums], u1 likewise for b4..b7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// {sum(b[0]), ..., sum(b[7])} of eight 16 x int16 vectors, for sums that fit
// int16 per 128-bit half (each half's 8 words add up to at most 32767 in
// magnitude): three rounds of vphaddw instead of the eight vpmaddwd-by-ones
// hsum8_i32 would need first (on Zen 1/2 those run on one pipe, 2 cycles each).
inline __m256i hsum8_i16(const __m256i b[8]) {
  const __m256i u0 = _mm256_hadd_epi16(_mm256_hadd_epi16(b[0], b[1]), _mm256_hadd_epi16(b[2], b[3]));
  const __m256i u1 = _mm256_hadd_epi16(_mm256_hadd_epi16(b[4], b[5]), _mm256_hadd_epi16(b[6], b[7]));
  // Word r of each half is b[r]'s sum over that half.
  const __m256i h = _mm256_hadd_epi16(u0, u1);
  return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(h)),
                          _mm256_cvtepi16_epi32(_mm256_extracti128_si256(h, 1)));
}

// Adds the eight lanes of v to sum one at a time, lane 0 first, as the scalar
// reference adds its per-block (or per-position) terms.
inline float add_lanes_in_order(float sum, __m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) sum += t[k];
  return sum;
}

// ---- MXFP4 ----

// 8 partial sums of one MXFP4 x Q8_0 block: codes -> doubled E2M1 values by the
// 16-entry byte lookup `table` (kMxfp4DoubledValues in both lanes); |x| (u8, 128
// allowed) times w carrying x's sign (|w| <= 12 never overflows) keeps maddubs exact.
inline __m256i mxfp4_block(const BlockMXFP4& w, const BlockQ8_0& x, __m256i table) {
  const __m128i q = load128(w.qs);
  const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
  const __m256i wv = _mm256_shuffle_epi8(table, codes);
  const __m256i xv = load256(x.qs);
  const __m256i prod = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv));
  return _mm256_madd_epi16(prod, _mm256_set1_epi16(1));
}

// ---- Q2_K ----

// The min term's products bsum[j] * (scale[j] >> 4), summed in pairs: 8 int32
// lanes whose total is the block's min sum. `packed` is the block's 16 scale bytes.
inline __m256i q2_K_min_products(__m128i packed, const BlockQ8_K& x) {
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f)));
  return _mm256_madd_epi16(mins, load256(x.bsums));
}

// One Q2_K or Q4_K block's term from its integer sums (codes x scales, bsums x
// mins), with the scalar reference's rounding.
template <typename Block>
inline float k_block_value(const Block& w, const BlockQ8_K& x, int32_t isum, int32_t summs) {
  const float dall = x.d * f16_value(w.d);
  const float dmin = x.d * f16_value(w.dmin);
  return dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
}

// ---- Q3_K ----

// The 16 scales sc - 32 of a block as int8 (bytes j of the result). Bytes
// 0..7 hold the low nibbles of scales 0..7 (low) and 8..15 (high); byte
// 8 + j % 4 holds the top bit pair of scale j at bits 2 (j / 4). In vector
// registers throughout: assembling them in scalar words and reloading them as
// one vector missed store-to-load forwarding and doubled the decode kernel's time.
inline __m128i q3_K_signed_scales(const uint8_t* packed) {
  const __m128i low4 = _mm_set1_epi8(0x0f), low2 = _mm_set1_epi8(3);
  const __m128i nibbles = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed));
  int32_t top_word;
  std::memcpy(&top_word, packed + 8, 4);
  const __m128i low = _mm_and_si128(_mm_unpacklo_epi64(nibbles, _mm_srli_epi16(nibbles, 4)), low4);
  // Dword m of the broadcast word shifted by 2m: byte j's bits 0-1 are scale j's top pair.
  const __m128i top = _mm_srlv_epi32(_mm_set1_epi32(top_word), _mm_set_epi32(6, 4, 2, 0));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(_mm_and_si128(top, low2), 4)), _mm_set1_epi8(32));
}

// ---- Q4_K ----

struct Q4KScales {
  uint8_t scale[8];
  uint8_t min[8];
};

// ggml's unpacking of the 12 packed bytes into eight 6-bit scales and mins.
inline Q4KScales unpack_q4_K_scales(const uint8_t* packed) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t sc[2] = {u[0] & kLow6, (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4)};
  const uint32_t mn[2] = {u[1] & kLow6, ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4)};
  Q4KScales out;
  std::memcpy(out.scale, sc, 8);
  std::memcpy(out.min, mn, 8);
  return out;
}

// The same unpacking in a vector register: bytes 0..7 the scales, 8..15 the
// mins. Dwords of the result: scales 0-3 = u0 & 0x3f, scales 4-7 = (u2 & 0xf)
// | (u0 >> 6) << 4, mins 0-3 = u1 & 0x3f, mins 4-7 = (u2 >> 4) | (u1 >> 6) << 4
// (u0..u2 the packed dwords, bytewise).
inline __m128i q4_K_scale_min_bytes(const uint8_t* packed) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const __m128i words =
      _mm_set_epi32(static_cast<int>(u[1]), static_cast<int>(u[1]), static_cast<int>(u[0]), static_cast<int>(u[0]));
  const __m128i six_bits = _mm_and_si128(_mm_srlv_epi32(words, _mm_set_epi32(2, 0, 2, 0)),
                                         _mm_set_epi32(0x30303030, 0x3f3f3f3f, 0x30303030, 0x3f3f3f3f));
  const __m128i low_bits =
      _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(u[2])), _mm_set_epi32(4, 0, 0, 0)),
                    _mm_set_epi32(0x0f0f0f0f, 0, 0x0f0f0f0f, 0));
  return _mm_or_si128(six_bits, low_bits);
}

// The min term: sum over 16-groups j of bsum[j] * min[j/2].
inline int32_t q4_K_min_sum(const Q4KScales& s, const BlockQ8_K& x) {
  const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.min)));
  const __m256i mins_dup = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
  return hsum_i32(_mm256_madd_epi16(mins_dup, load256(x.bsums)));
}


// ---- IQ2_XXS (AVX2 registers) ----
//
// A sub-block's 32 signed weights come from table loads and one vpsignb: its
// four grid points (8 magnitude bytes each) and its four sign groups (8
// bytes of +1/-1 each, indexed by the 7-bit sign field) are assembled qword by
// qword. No gathers and no pdep: both are microcoded on AMD Zen 1 and 2 (pdep
// made this kernel 20x slower there), and the table form is also the fewest
// uops on every other x86 core (the kernel is bound by uop issue, not memory).

// Entry k: byte j = -1 where bit j of kIq2xsSigns[k] is set (element j
// negated), else +1 (vpsignb's operand).
constexpr std::array<uint64_t, 128> make_iq2_sign_factors() {
  std::array<uint64_t, 128> t{};
  for (int k = 0; k < 128; ++k) {
    uint64_t v = 0;
    for (int j = 0; j < 8; ++j) v |= static_cast<uint64_t>((kIq2xsSigns[k] >> j) & 1 ? 0xffu : 0x01u) << (8 * j);
    t[static_cast<size_t>(k)] = v;
  }
  return t;
}
alignas(64) constexpr std::array<uint64_t, 128> kIq2SignFactors = make_iq2_sign_factors();

// The 16 sub-block multipliers 2 * scale + 1, each as 16 int16 words.
constexpr std::array<std::array<int16_t, 16>, 16> make_iq2_multipliers() {
  std::array<std::array<int16_t, 16>, 16> t{};
  for (int s = 0; s < 16; ++s)
    for (int j = 0; j < 16; ++j) t[static_cast<size_t>(s)][static_cast<size_t>(j)] = static_cast<int16_t>(2 * s + 1);
  return t;
}
alignas(32) constexpr std::array<std::array<int16_t, 16>, 16> kIq2Multipliers = make_iq2_multipliers();

// Keeps v in a register: the compiler then reads its parts with shifts and
// register operands instead of re-loading them from memory, one load per part.
// The kernels are bound by load issue (two or three a cycle), not by ALU work.
template <typename T>
inline T in_register(T v) {
  if constexpr (sizeof(T) <= 8) {
    asm("" : "+r"(v));
  } else {
    asm("" : "+x"(v));
  }
  return v;
}

// The 32 values sign * grid (-43..43) of a sub-block from its 8 code bytes as
// one qword (grid indices in bytes 0-3, the sign fields and the scale above).
inline __m256i iq2_xxs_signed_grid(uint64_t aux) {
  const uint64_t* grid = kIq2xxsGrid.data();
  const uint64_t* sign = kIq2SignFactors.data();
  const __m256i g = _mm256_set_epi64x(
      static_cast<int64_t>(grid[(aux >> 24) & 255]), static_cast<int64_t>(grid[(aux >> 16) & 255]),
      static_cast<int64_t>(grid[(aux >> 8) & 255]), static_cast<int64_t>(grid[aux & 255]));
  const __m256i s = _mm256_set_epi64x(
      static_cast<int64_t>(sign[(aux >> 53) & 127]), static_cast<int64_t>(sign[(aux >> 46) & 127]),
      static_cast<int64_t>(sign[(aux >> 39) & 127]), static_cast<int64_t>(sign[(aux >> 32) & 127]));
  return _mm256_sign_epi8(g, s);
}

// The multiplier 2 * scale + 1 of a sub-block (aux as above) in all 16 words.
inline __m256i iq2_xxs_multiplier_words(uint64_t aux) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kIq2Multipliers[aux >> 60].data()));
}

// The 32 values sign * grid (-43..43) of the sub-block whose 8 code bytes
// start at q.
inline __m256i iq2_xxs_signed_grid(const uint8_t* q) {
  uint32_t w1;
  std::memcpy(&w1, q + 4, 4);
  const uint64_t* grid = kIq2xxsGrid.data();
  const uint64_t* sign = kIq2SignFactors.data();
  const __m256i g = _mm256_set_epi64x(static_cast<int64_t>(grid[q[3]]), static_cast<int64_t>(grid[q[2]]),
                                      static_cast<int64_t>(grid[q[1]]), static_cast<int64_t>(grid[q[0]]));
  const __m256i s = _mm256_set_epi64x(
      static_cast<int64_t>(sign[(w1 >> 21) & 127]), static_cast<int64_t>(sign[(w1 >> 14) & 127]),
      static_cast<int64_t>(sign[(w1 >> 7) & 127]), static_cast<int64_t>(sign[w1 & 127]));
  return _mm256_sign_epi8(g, s);
}

// The sub-block's multiplier 2 * scale + 1 in all 16 words.
inline __m256i iq2_xxs_multiplier_words(const uint8_t* q) {
  uint32_t w1;
  std::memcpy(&w1, q + 4, 4);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kIq2Multipliers[w1 >> 28].data()));
}

// The sub-block's multiplier 2 * scale + 1.
inline int16_t iq2_xxs_multiplier(const uint8_t* q) {
  uint32_t w1;
  std::memcpy(&w1, q + 4, 4);
  return static_cast<int16_t>(2 * (w1 >> 28) + 1);
}

// vpsignb controls of one sub-block computed in registers from the bits
// holding its signs instead of four table loads: byte 8j+k (k < 7) picks the
// byte holding group j's sign k (pshufb), isolates the bit and widens it to
// 0x00/0xff (cmpeq); the 8th sign of a group is the parity of its first 7
// (ggml's kIq2xsSigns), from vpsadbw's count (times 255, odd iff the count
// is) shifted to the group's top bit; | 1 turns the unset bytes into +1
// (vpsignb zeroes where its control is 0). Group j's sign k (k < 7) sits at
// bit `first(j) + k` of the sign bits: IQ2_XXS and IQ3_XXS 7j (a dword of 4 x
// 7 signs and the scale), IQ2_XS 16j + 9 (the top 7 bits of each 16-bit
// index word of the sub-block's qword).
template <int kGroupStride, int kFirst>
constexpr std::array<int8_t, 32> make_sign_source() {
  std::array<int8_t, 32> t{};
  for (int p = 0; p < 32; ++p) {
    const int j = (p % 16) / 8 + 2 * (p / 16), k = p % 8;
    t[static_cast<size_t>(p)] = k == 7 ? int8_t{-128} : static_cast<int8_t>((kGroupStride * j + kFirst + k) / 8);
  }
  return t;
}
template <int kGroupStride, int kFirst>
constexpr std::array<int8_t, 32> make_sign_bit() {
  std::array<int8_t, 32> t{};
  for (int p = 0; p < 32; ++p) {
    const int j = (p % 16) / 8 + 2 * (p / 16), k = p % 8;
    t[static_cast<size_t>(p)] =
        k == 7 ? int8_t{1} : static_cast<int8_t>(static_cast<uint8_t>(1u << ((kGroupStride * j + kFirst + k) % 8)));
  }
  return t;
}
alignas(32) constexpr std::array<int8_t, 32> kIq2SignSource = make_sign_source<7, 0>();
alignas(32) constexpr std::array<int8_t, 32> kIq2SignBit = make_sign_bit<7, 0>();
alignas(32) constexpr std::array<int8_t, 32> kIq2XsSignSource = make_sign_source<16, 9>();
alignas(32) constexpr std::array<int8_t, 32> kIq2XsSignBit = make_sign_bit<16, 9>();

template <const std::array<int8_t, 32>& kSource, const std::array<int8_t, 32>& kBit>
struct ParitySignConstants {
  __m256i source = load256(kSource.data());
  __m256i bit = load256(kBit.data());
};
using Iq2SignConstants = ParitySignConstants<kIq2SignSource, kIq2SignBit>;
using Iq2XsSignConstants = ParitySignConstants<kIq2XsSignSource, kIq2XsSignBit>;

// The controls from the sub-block's sign bits `signs` (broadcast or not: only
// bytes 0-7 of each 128-bit lane are read).
template <typename Constants>
inline __m256i parity_sign_controls(__m256i signs, const Constants& c) {
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(signs, c.source), c.bit), c.bit);
  const __m256i odd = _mm256_slli_epi64(_mm256_sad_epu8(set, _mm256_setzero_si256()), 63);
  return _mm256_or_si256(_mm256_or_si256(set, odd), _mm256_set1_epi8(1));
}

// Adjacent-pair sums of ws * x as 16 int16: |x| (u8) times ws carrying x's
// sign, exact for x = -128 (|ws| <= 43, so no pair saturates).
inline __m256i iq2_xxs_signed_products(__m256i ws, __m256i x) {
  return _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(ws, x));
}

// ---- IQ2_XS ----

// Sub-block b (0..7) of an IQ2_XS block: its 32 weights (grid bytes with the
// sign factors applied, |w| <= 43) and the multipliers 2 * scale + 1 of its
// two 16-element halves.
inline __m256i iq2_xs_magnitudes(const BlockIQ2_XS& w, int b) {
  const uint64_t* grid = kIq2xsGrid.data();
  const uint16_t* q = w.qs + 4 * b;
  return _mm256_set_epi64x(static_cast<int64_t>(grid[q[3] & 511]), static_cast<int64_t>(grid[q[2] & 511]),
                           static_cast<int64_t>(grid[q[1] & 511]), static_cast<int64_t>(grid[q[0] & 511]));
}

inline __m256i iq2_xs_weights(const BlockIQ2_XS& w, int b, int32_t& multiplier_lo, int32_t& multiplier_hi) {
  const uint64_t* sign = kIq2SignFactors.data();
  const uint16_t* q = w.qs + 4 * b;
  const __m256i g = iq2_xs_magnitudes(w, b);
  const __m256i s = _mm256_set_epi64x(static_cast<int64_t>(sign[q[3] >> 9]), static_cast<int64_t>(sign[q[2] >> 9]),
                                      static_cast<int64_t>(sign[q[1] >> 9]), static_cast<int64_t>(sign[q[0] >> 9]));
  multiplier_lo = 2 * (w.scales[b] & 0xf) + 1;
  multiplier_hi = 2 * (w.scales[b] >> 4) + 1;
  return _mm256_sign_epi8(g, s);
}

// ---- IQ3_XXS / IQ3_S ----

// pshufb pattern: byte e of a lane gets sign byte e / 8 of its lane's half of
// a broadcast 32-bit sign word.
alignas(32) constexpr int8_t kIq3SignByte[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};

// 0xff in byte e where bit e % 8 of sign byte e / 8 of `signs` is set, else 0.
inline __m256i explicit_sign_mask(uint32_t signs) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(signs)), load256(kIq3SignByte));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// Grid bytes negated where bit e % 8 of sign byte e / 8 of `signs` is set.
inline __m256i iq3_signed_grid(__m256i grid, uint32_t signs) {
  const __m256i negate = explicit_sign_mask(signs);
  return _mm256_sub_epi8(_mm256_xor_si256(grid, negate), negate);
}

// Sub-block b (0..7) of an IQ3_XXS block: its 32 weights (grid magnitudes
// with the weight signs, |w| <= 62) and its multiplier 2 * (aux >> 28) + 1.
inline __m256i iq3_xxs_weights(const BlockIQ3_XXS& w, int b, int32_t& multiplier) {
  const uint32_t* grid = kIq3xxsGrid.data();
  const uint8_t* sign_table = kIq2xsSigns.data();
  uint32_t aux;
  std::memcpy(&aux, w.qs + kQK_K / 4 + 4 * b, sizeof(aux));
  const uint8_t* g = w.qs + 8 * b;
  const __m256i magnitudes = _mm256_setr_epi32(static_cast<int32_t>(grid[g[0]]), static_cast<int32_t>(grid[g[1]]),
                                               static_cast<int32_t>(grid[g[2]]), static_cast<int32_t>(grid[g[3]]),
                                               static_cast<int32_t>(grid[g[4]]), static_cast<int32_t>(grid[g[5]]),
                                               static_cast<int32_t>(grid[g[6]]), static_cast<int32_t>(grid[g[7]]));
  const uint32_t signs = sign_table[aux & 127] | (sign_table[(aux >> 7) & 127] << 8) |
                         (sign_table[(aux >> 14) & 127] << 16) |
                         (static_cast<uint32_t>(sign_table[(aux >> 21) & 127]) << 24);
  multiplier = static_cast<int32_t>(2 * (aux >> 28) + 1);
  return iq3_signed_grid(magnitudes, signs);
}

// ---- IQ2_S ----

// Sub-block b's 32 signed grid values (|w| <= 43: index low 8 bits in qs,
// high 2 bits in qh[b], explicit sign bytes as IQ3_S's) and its halves'
// multipliers 2 * scale + 1.
inline __m256i iq2_s_magnitudes(const BlockIQ2_S& w, int b) {
  const uint64_t* grid = kIq2sGrid.data();
  const uint8_t* q = w.qs + 4 * b;
  const uint32_t high = w.qh[b];
  return _mm256_set_epi64x(static_cast<int64_t>(grid[q[3] | (((high >> 6) & 3) << 8)]),
                           static_cast<int64_t>(grid[q[2] | (((high >> 4) & 3) << 8)]),
                           static_cast<int64_t>(grid[q[1] | (((high >> 2) & 3) << 8)]),
                           static_cast<int64_t>(grid[q[0] | ((high & 3) << 8)]));
}

inline uint32_t iq2_s_sign_bits(const BlockIQ2_S& w, int b) {
  uint32_t signs;
  std::memcpy(&signs, w.signs + 4 * b, sizeof(signs));
  return signs;
}

inline __m256i iq2_s_weights(const BlockIQ2_S& w, int b, int32_t& multiplier_lo, int32_t& multiplier_hi) {
  const __m256i magnitudes = iq2_s_magnitudes(w, b);
  const uint32_t signs = iq2_s_sign_bits(w, b);
  multiplier_lo = 2 * (w.scales[b] & 0xf) + 1;
  multiplier_hi = 2 * (w.scales[b] >> 4) + 1;
  return iq3_signed_grid(magnitudes, signs);
}

// ---- IQ1_M ----
//
// The scalar reference sums per block sumi1 (activation times grid value g in
// {-1, 0, 1}) and sumi2 (the 8-group sums times each group's shift sign s),
// both weighted by the 16-half's multiplier, and takes sumi1 + sumi2 / 8. As
// one integer that is S / 8 with S = 8 * sumi1 + sumi2: the activation times
// weight bytes 8 * g + s (|w| <= 9). |S| < 2^23, so float(sumi1) +
// 0.125f * float(sumi2) and 0.125f * float(S) are the same float, exactly.

// The block's f16 super scale: the top nibbles of its four scale words.
inline uint16_t iq1_m_d_bits(const BlockIQ1_M& w) {
  uint16_t sc[4];
  std::memcpy(sc, w.scales, sizeof(sc));
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

// Sub-block b's 32 weight bytes 8 * g + s, and its halves' multipliers
// 2 * scale + 1 (3-bit scales, four to a little-endian word).
inline __m256i iq1_m_weights(const BlockIQ1_M& w, int b, int32_t& multiplier_lo, int32_t& multiplier_hi) {
  const uint64_t* grid = kIq1Grid.data();
  const uint8_t* qs = w.qs + 4 * b;
  const uint32_t h0 = w.qh[2 * b], h1 = w.qh[2 * b + 1];
  const __m256i g = _mm256_set_epi64x(
      static_cast<int64_t>(grid[qs[3] | ((h1 & 0x70) << 4)]), static_cast<int64_t>(grid[qs[2] | ((h1 & 0x07) << 8)]),
      static_cast<int64_t>(grid[qs[1] | ((h0 & 0x70) << 4)]), static_cast<int64_t>(grid[qs[0] | ((h0 & 0x07) << 8)]));
  // Group k's shift sign is bit 3 + 4 k of the sub-block's qh word: all ones
  // (-1) where set, else +1, per 8-byte group.
  const __m256i qh = _mm256_set1_epi16(static_cast<int16_t>(h0 | (h1 << 8)));
  const __m256i bit = _mm256_set_epi64x(static_cast<int64_t>(0x8000800080008000ull), 0x0800080008000800,
                                        0x0080008000800080, 0x0008000800080008);
  const __m256i negative = _mm256_cmpeq_epi16(_mm256_and_si256(qh, bit), bit);
  const __m256i shift = _mm256_or_si256(negative, _mm256_set1_epi8(1));
  const __m256i eight_g = _mm256_and_si256(_mm256_slli_epi16(g, 3), _mm256_set1_epi8(static_cast<char>(0xf8)));
  uint16_t sc;
  std::memcpy(&sc, w.scales + 2 * (b / 2), sizeof(sc));
  const int at = 6 * (b % 2);
  multiplier_lo = 2 * ((sc >> at) & 7) + 1;
  multiplier_hi = 2 * ((sc >> (at + 3)) & 7) + 1;
  return _mm256_add_epi8(eight_g, shift);
}

// A block's 16 half sub-block multipliers 2 * scale + 1 as int16 words, the
// first halves' (sub-blocks 0..7) in lane 0, the second halves' in lane 1:
// IQ2_XS and IQ2_S from 4-bit scales (sub-block b's the low and the high
// nibble of scale byte b), IQ1_M from 3-bit ones (sub-block b's at bits 6 (b
// % 2) and 6 (b % 2) + 3 of scale word b / 2).
inline __m256i odd_multiplier_words(__m256i scales) {
  return _mm256_or_si256(_mm256_slli_epi16(scales, 1), _mm256_set1_epi16(1));
}
inline __m256i nibble_half_multipliers(const uint8_t* scales) {
  const __m128i bytes = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales)));
  return odd_multiplier_words(_mm256_set_m128i(_mm_srli_epi16(bytes, 4), _mm_and_si128(bytes, _mm_set1_epi16(0xf))));
}
inline __m256i half_multipliers(const BlockIQ2_XS& w) { return nibble_half_multipliers(w.scales); }
inline __m256i half_multipliers(const BlockIQ2_S& w) { return nibble_half_multipliers(w.scales); }
inline __m256i half_multipliers(const BlockIQ1_M& w) {
  // Dword b = scale word b / 2; its two 3-bit fields shifted down per lane.
  const __m128i words = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales)));
  const __m256i v =
      _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(words), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
  const __m256i seven = _mm256_set1_epi32(7);
  const __m256i first = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 6, 0, 6, 0, 6, 0, 6)), seven);
  const __m256i second = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(3, 9, 3, 9, 3, 9, 3, 9)), seven);
  // packus interleaves per lane (first 0-3, second 0-3 | first 4-7, second
  // 4-7); the qword permute puts the firsts in lane 0.
  return odd_multiplier_words(_mm256_permute4x64_epi64(_mm256_packus_epi32(first, second), 0xd8));
}

// Sub-block b's multiplier words from half_multipliers: its first half's in
// lane 0, its second half's in lane 1, where vpmaddubsw leaves the halves'
// pair sums.
inline __m256i sub_block_multipliers(__m256i halves, int b) {
  return _mm256_shuffle_epi8(halves, _mm256_set1_epi16(static_cast<int16_t>(((2 * b + 1) << 8) | (2 * b))));
}

// The formats with a multiplier per 16-value half (IQ2_XS, IQ2_S, IQ1_M) by
// block type, for the kernels they share.
inline __m256i halves_weights(const BlockIQ2_XS& w, int b, int32_t& lo, int32_t& hi) {
  return iq2_xs_weights(w, b, lo, hi);
}
inline __m256i halves_weights(const BlockIQ2_S& w, int b, int32_t& lo, int32_t& hi) {
  return iq2_s_weights(w, b, lo, hi);
}
inline __m256i halves_weights(const BlockIQ1_M& w, int b, int32_t& lo, int32_t& hi) {
  return iq1_m_weights(w, b, lo, hi);
}

}  // namespace
}  // namespace ds4::quant
