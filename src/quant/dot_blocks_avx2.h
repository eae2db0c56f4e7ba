// Block partials of the avx2 level's integer kernels: for one weight block and
// its activation block, int32 lanes whose total is the block's exact integer
// sum (and, for the K-quants, its min sum). The one-row kernels (dot_avx2.cpp)
// fold them per block; the decode kernels (dot_rows_avx2.cpp) fold eight rows'
// partials at once into one register of row sums. Same integers either way, so
// both are bit-identical to the scalar reference.
//
// Include only from *_avx2.cpp files, after core/x86_kernel_prelude.h and
// dot_x86_common.h; everything here is in an anonymous namespace (see there).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq4_values.h"

namespace ds4::quant {
namespace {

// ---- Q8_0 x Q8_0 ----

// 8 partial sums of one block. Widening to int16 keeps every code pair exact,
// including -128 x -128 which the abs/sign maddubs trick gets wrong.
inline __m256i q8_0_block(const BlockQ8_0& w, const BlockQ8_0& x) {
  const __m256i w0 = _mm256_cvtepi8_epi16(load128(w.qs));
  const __m256i w1 = _mm256_cvtepi8_epi16(load128(w.qs + 16));
  const __m256i x0 = _mm256_cvtepi8_epi16(load128(x.qs));
  const __m256i x1 = _mm256_cvtepi8_epi16(load128(x.qs + 16));
  return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
}

// The same sums as q8_0_block by maddubs(|w|, x * sign(w)), exact while the
// activation block holds no -128 (its negation overflows); |w| <= 128 as u8
// times |x| <= 127 never saturates a pair.
inline __m256i q8_0_block_signed(__m256i w, __m256i x) {
  const __m256i prod = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(prod, _mm256_set1_epi16(1));
}

// ---- Q2_K x Q8_K ----

// One 32-output plane of a Q2_K half: 2-bit codes at bit 2*kPlane of the
// half's 32 bytes; lane 0 is one 16-group, lane 1 the next, each with its own
// scale word from `scale_words`.
template <int kPlane>
inline __m256i q2_K_plane(__m256i acc, __m256i q2, const int8_t* xq, __m256i scale_words) {
  const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * kPlane), _mm256_set1_epi8(3));
  const __m256i prod = _mm256_maddubs_epi16(codes, load256(xq + 32 * kPlane));
  return in_register(_mm256_add_epi32(acc, _mm256_madd_epi16(prod, scale_words)));
}

// pshufb patterns that spread scale bytes 2k (lane 0) and 2k+1 (lane 1) into
// zero-extended int16 words.
alignas(32) constexpr int8_t kQ2ScaleSpread[8][32] = {
#define DS4_Q2_SPREAD(k)                                                                        \
  {2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1,     \
   2 * (k), -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, 2 * (k) + 1, \
   -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1}
    DS4_Q2_SPREAD(0), DS4_Q2_SPREAD(1), DS4_Q2_SPREAD(2), DS4_Q2_SPREAD(3),
    DS4_Q2_SPREAD(4), DS4_Q2_SPREAD(5), DS4_Q2_SPREAD(6), DS4_Q2_SPREAD(7),
#undef DS4_Q2_SPREAD
};

inline __m256i q2_scale_words(__m256i scales, int k) {
  return _mm256_shuffle_epi8(scales, load256(kQ2ScaleSpread[k]));
}

// A Q2_K block's code sum (codes x scales) and min sum (bsums x mins), each as
// 8 int32 lanes.
inline void q2_K_block_parts(const BlockQ2_K& wb, const BlockQ8_K& xb, __m256i& isum, __m256i& msum) {
  const __m128i sc = load128(wb.scales);
  msum = q2_K_min_products(sc, xb);
  const __m256i scales = _mm256_broadcastsi128_si256(_mm_and_si128(sc, _mm_set1_epi8(0x0f)));
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i q2 = load256(wb.qs + 32 * h);
    const int8_t* xq = xb.qs + 128 * h;
    acc = q2_K_plane<0>(acc, q2, xq, q2_scale_words(scales, 4 * h + 0));
    acc = q2_K_plane<1>(acc, q2, xq, q2_scale_words(scales, 4 * h + 1));
    acc = q2_K_plane<2>(acc, q2, xq, q2_scale_words(scales, 4 * h + 2));
    acc = q2_K_plane<3>(acc, q2, xq, q2_scale_words(scales, 4 * h + 3));
  }
  isum = acc;
}

// ---- Q4_K x Q8_K ----

// A Q4_K block's code sum and min sum as 8 int32 lanes each: maddubs of the
// low (sub-block 2c) and high (2c+1) nibbles with their 32 activations, madd
// by the sub-block's scale; the mins against the activation's 16-sums.
inline void q4_K_block_parts(const BlockQ4_K& wb, const BlockQ8_K& xb, __m256i& isum, __m256i& msum) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const Q4KScales s = unpack_q4_K_scales(wb.scales);
  const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.min)));
  const __m256i mins_dup = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
  msum = _mm256_madd_epi16(mins_dup, load256(xb.bsums));
  __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m256i q4 = load256(wb.qs + 32 * c);
    const __m256i lo = _mm256_and_si256(q4, low4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
    // In order, in a register: left alone, the compiler holds every row's
    // products for a later tree of adds and spills them (rows8 unrolls 8
    // rows).
    acc[0] = in_register(_mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(xb.qs + 64 * c)),
                                                                    _mm256_set1_epi16(s.scale[2 * c]))));
    acc[1] =
        in_register(_mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(xb.qs + 64 * c + 32)),
                                                               _mm256_set1_epi16(s.scale[2 * c + 1]))));
  }
  isum = _mm256_add_epi32(acc[0], acc[1]);
}

// ---- Q5_K x Q8_K ----
//
// As Q4_K, with the fifth bit of sub-block s (bit s of qh byte l) added to
// the nibbles: codes 0..31, so vpmaddubsw pairs stay below 2 * 31 * 128.
inline void q5_K_block_parts(const BlockQ5_K& wb, const BlockQ8_K& xb, __m256i& isum, __m256i& msum) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
  const Q4KScales s = unpack_q4_K_scales(wb.scales);
  const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.min)));
  const __m256i mins_dup = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
  msum = _mm256_madd_epi16(mins_dup, load256(xb.bsums));
  const __m256i qh = load256(wb.qh);
  __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m256i q4 = load256(wb.qs + 32 * c);
    const __m256i hi_lo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4);
    const __m256i hi_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(q4, low4), hi_lo);
    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), low4), hi_hi);
    // In order, in a register: left alone, the compiler holds every row's
    // products for a later tree of adds and spills them (rows8 unrolls 8
    // rows).
    acc[0] = in_register(_mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(xb.qs + 64 * c)),
                                                                    _mm256_set1_epi16(s.scale[2 * c]))));
    acc[1] =
        in_register(_mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(xb.qs + 64 * c + 32)),
                                                               _mm256_set1_epi16(s.scale[2 * c + 1]))));
  }
  isum = _mm256_add_epi32(acc[0], acc[1]);
}

// ---- Q6_K x Q8_K ----
//
// The unsigned codes q (0..63) times x by vpmaddubsw (pairs <= 2*63*128),
// each 16-element sub-block's pairs times its signed scale by vpmaddwd, and
// the 32 * scale * sum(x) of the offset taken off through the activation's
// 16-sums: 8 int32 lanes whose total is the scalar reference's integer sum.

// pshufb patterns putting scale byte 2k (lane 0) / 2k+1 (lane 1) into the high
// byte of every word, for an arithmetic shift to sign-extend.
alignas(32) constexpr int8_t kQ6ScaleHigh[8][32] = {
#define DS4_Q6_SPREAD(k)                                                                                      \
  {-1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k), -1, 2 * (k),       \
   -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, 2 * (k) + 1, -1, \
   2 * (k) + 1, -1, 2 * (k) + 1}
    DS4_Q6_SPREAD(0), DS4_Q6_SPREAD(1), DS4_Q6_SPREAD(2), DS4_Q6_SPREAD(3),
    DS4_Q6_SPREAD(4), DS4_Q6_SPREAD(5), DS4_Q6_SPREAD(6), DS4_Q6_SPREAD(7),
#undef DS4_Q6_SPREAD
};

inline __m256i q6_K_block_parts(const BlockQ6_K& w, const BlockQ8_K& x) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(3);
  const __m256i scales = _mm256_broadcastsi128_si256(load128(w.scales));
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load256(w.ql + 64 * h), ql1 = load256(w.ql + 64 * h + 32);
    const __m256i qh = load256(w.qh + 32 * h);
    // Elements 128h + 32k + l, l < 32: the low nibble from ql0 / ql1, the
    // top bits from qh at 2k.
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4)),
        _mm256_or_si256(_mm256_and_si256(ql1, low4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4)),
    };
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i prod = _mm256_maddubs_epi16(q[k], load256(x.qs + 128 * h + 32 * k));
      const __m256i sc = _mm256_srai_epi16(_mm256_shuffle_epi8(scales, load256(kQ6ScaleHigh[4 * h + k])), 8);
      acc = in_register(_mm256_add_epi32(acc, _mm256_madd_epi16(prod, sc)));
    }
  }
  // sum sc * 16-sums, times 32
  const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(load128(w.scales)), load256(x.bsums));
  return _mm256_sub_epi32(acc, _mm256_slli_epi32(offset, 5));
}

// ---- Q3_K x Q8_K ----
//
// The unsigned codes u = q + 4 (0..7) times x by vpmaddubsw, each 16-element
// sub-block's pairs times its signed scale by vpmaddwd, the 4 * sc * sum(x) of
// the offset taken off through the activation's 16-sums: 8 int32 lanes whose
// total is the scalar reference's integer sum. The sub-blocks pair up in lanes
// as Q6_K's, so its scale spreading patterns serve here too.

inline __m256i q3_K_block_parts(const BlockQ3_K& w, const BlockQ8_K& x) {
  const __m256i low2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  const __m128i sc = q3_K_signed_scales(w.scales);
  const __m256i scales = _mm256_broadcastsi128_si256(sc);
  const __m256i hmask = load256(w.hmask);
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i qs = load256(w.qs + 32 * h);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      // Elements 128h + 32k + l: bits 2k of qs byte l, bit 4h + k of hmask byte l.
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * h + k), one);
      const __m256i u =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), low2), _mm256_slli_epi16(high, 2));
      const __m256i prod = _mm256_maddubs_epi16(u, load256(x.qs + 128 * h + 32 * k));
      const __m256i scale = _mm256_srai_epi16(_mm256_shuffle_epi8(scales, load256(kQ6ScaleHigh[4 * h + k])), 8);
      acc = in_register(_mm256_add_epi32(acc, _mm256_madd_epi16(prod, scale)));
    }
  }
  const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), load256(x.bsums));  // sum sc * 16-sums
  return _mm256_sub_epi32(acc, _mm256_slli_epi32(offset, 2));
}

// ---- IQ4_NL x Q8_0, IQ4_XS x Q8_K ----
//
// The table values (-127..113) by pshufb of the nibbles, widened to int16 with
// the activation: each sub-block's exact integer sum.

// Sum of value[q] * x over one 32-element sub-block (16 bytes of nibbles:
// elements 0..15 low, 16..31 high) as 8 int32 lanes.
inline __m256i iq4_sub_block(const uint8_t* qs, const int8_t* x, __m256i table) {
  const __m128i q = load128(qs), low4 = _mm_set1_epi8(0x0f);
  const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
  const __m256i v = _mm256_shuffle_epi8(table, idx);
  const __m256i xv = load256(x);
  const __m256i lo = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)),
                                       _mm256_cvtepi8_epi16(_mm256_castsi256_si128(xv)));
  const __m256i hi = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)),
                                       _mm256_cvtepi8_epi16(_mm256_extracti128_si256(xv, 1)));
  return _mm256_add_epi32(lo, hi);
}

// An IQ4_XS block: each sub-block's integer times its 6-bit scale - 32, as 8
// int32 lanes whose total is the scalar reference's integer. |x| times the
// value signed like x in vpmaddubsw: |v| <= 127 and |x| <= 128, so a pair is
// at most 32512 (x = -128 included), then vpmaddwd by the scale.
inline __m256i iq4_xs_block_parts(const BlockIQ4_XS& w, const BlockQ8_K& x) {
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues.data()));
  const __m128i low4 = _mm_set1_epi8(0x0f);
  __m256i acc = _mm256_setzero_si256();
  const uint32_t h = w.scales_h;
#pragma GCC unroll 8
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const int ls = ((w.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((h >> (2 * ib)) & 3) << 4);
    const __m128i q = load128(w.qs + 16 * ib);
    const __m256i v =
        _mm256_shuffle_epi8(table, _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4)));
    const __m256i xv = load256(x.qs + 32 * ib);
    const __m256i prod = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(v, xv));
    acc = in_register(_mm256_add_epi32(acc, _mm256_madd_epi16(prod, _mm256_set1_epi16(static_cast<int16_t>(ls - 32)))));
  }
  return acc;
}

// ---- IQ3_XXS / IQ3_S / IQ2_XS / IQ2_S x Q8_K ----
//
// Per sub-block: the 32 grid magnitudes take the weight signs, then
// maddubs(|x|, sign(w, x)) forms each product exactly (|x| = 128 fits a u8,
// |w| <= 62 so pairs never saturate) and madd applies the sub-block (or
// half) multiplier: 8 int32 lanes whose total is the scalar reference's
// integer per block. The float term's 0.25 (IQ3) or 0.125 (IQ2_XS, IQ2_S) is the
// kernels' last step.

inline __m256i iq3_sub_block(__m256i acc, __m256i signed_grid, const int8_t* xq, int multiplier) {
  const __m256i x = load256(xq);
  const __m256i prod = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(signed_grid, x));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(prod, _mm256_set1_epi16(static_cast<int16_t>(multiplier))));
}

// The sign flags of all eight aux words at once: each 7-bit field spread to a
// byte with its parity as bit 7 (ggml's ksigns_iq2xs), so bit e % 8 of byte
// e / 8 of dword b negates element e of sub-block b.
inline __m256i iq3_xxs_sign_flags(__m256i aux) {
  const __m256i field = _mm256_set1_epi32(0x7f);
  __m256i idx = _mm256_and_si256(aux, field);
  idx = _mm256_or_si256(idx, _mm256_and_si256(_mm256_slli_epi32(aux, 1), _mm256_slli_epi32(field, 8)));
  idx = _mm256_or_si256(idx, _mm256_and_si256(_mm256_slli_epi32(aux, 2), _mm256_slli_epi32(field, 16)));
  idx = _mm256_or_si256(idx, _mm256_and_si256(_mm256_slli_epi32(aux, 3), _mm256_slli_epi32(field, 24)));
  __m256i p = _mm256_xor_si256(idx, _mm256_srli_epi32(idx, 4));
  p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
  p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));  // bit 0 of each byte = the parity of its field
  return _mm256_or_si256(idx, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7));
}

// The grid magnitudes of sub-block b: 8 table words.
inline __m256i iq3_xxs_magnitudes(const BlockIQ3_XXS& w, int b) {
  const uint32_t* grid = kIq3xxsGrid.data();
  const uint8_t* g = w.qs + 8 * b;
  return _mm256_setr_epi32(static_cast<int32_t>(grid[g[0]]), static_cast<int32_t>(grid[g[1]]),
                           static_cast<int32_t>(grid[g[2]]), static_cast<int32_t>(grid[g[3]]),
                           static_cast<int32_t>(grid[g[4]]), static_cast<int32_t>(grid[g[5]]),
                           static_cast<int32_t>(grid[g[6]]), static_cast<int32_t>(grid[g[7]]));
}

// The signs and multipliers (2 * (aux >> 28) + 1, in both words of dword b)
// of all eight sub-blocks are formed in registers, then broadcast per
// sub-block: fewer uops than reading the sign table per group. kSignedX (for
// activations without a -128 code): the magnitudes (u8) against x carrying
// the weight signs, one vpsignb instead of negating the magnitudes, a vpabsb
// and a vpsignb.
template <bool kSignedX = false>
inline __m256i iq3_xxs_block_parts(const BlockIQ3_XXS& w, const BlockQ8_K& x) {
  const __m256i aux = load256(w.qs + kQK_K / 4);
  const __m256i flags = iq3_xxs_sign_flags(aux);
  const __m256i multipliers = _mm256_or_si256(_mm256_srli_epi32(aux, 27), _mm256_set1_epi32(1));
  const __m256i multiplier_words = _mm256_or_si256(multipliers, _mm256_slli_epi32(multipliers, 16));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int b = 0; b < 8; ++b) {
    const __m256i lane = _mm256_set1_epi32(b);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(flags, lane), load256(kIq3SignByte));
    const __m256i negate = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    const __m256i magnitudes = iq3_xxs_magnitudes(w, b);
    const __m256i xv = load256(x.qs + 32 * b);
    __m256i prod;
    if constexpr (kSignedX) {
      prod = _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(xv, _mm256_or_si256(negate, _mm256_set1_epi8(1))));
    } else {
      const __m256i weights = _mm256_sub_epi8(_mm256_xor_si256(magnitudes, negate), negate);
      prod = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(weights, xv));
    }
    acc = in_register(
        _mm256_add_epi32(acc, _mm256_madd_epi16(prod, _mm256_permutevar8x32_epi32(multiplier_words, lane))));
  }
  return acc;
}

// IQ2_XS and IQ2_S for activations without a -128 code (quantize_row_q8_K
// never writes one) take the grid magnitudes (u8, <= 43) against x carrying
// the weight signs (x = -128 would overflow there), one vpsignb instead of two
// and a vpabsb; the signs made in registers (IQ2_XS: parity_sign_controls
// from the index words' top 7 bits; IQ2_S: its explicit sign bits).
inline __m256i grid_sign_controls(const BlockIQ2_XS& w, int b) {
  int64_t q;
  std::memcpy(&q, w.qs + 4 * b, sizeof(q));
  return parity_sign_controls(_mm256_set1_epi64x(q), Iq2XsSignConstants{});
}
inline __m256i grid_sign_controls(const BlockIQ2_S& w, int b) {
  return _mm256_or_si256(explicit_sign_mask(iq2_s_sign_bits(w, b)), _mm256_set1_epi8(1));
}
inline __m256i grid_magnitudes(const BlockIQ2_XS& w, int b) { return iq2_xs_magnitudes(w, b); }
inline __m256i grid_magnitudes(const BlockIQ2_S& w, int b) { return iq2_s_magnitudes(w, b); }

// IQ2_XS, IQ2_S and IQ1_M: signed weight bytes (IQ1_M's 8 g + s, |w| <= 9:
// its 8 int32 lanes total S = 8 * sumi1 + sumi2, dot_x86_common.h) and a
// multiplier per 16-value half; kSignedX as above (IQ2_XS, IQ2_S).
template <bool kSignedX = false, typename Block>
inline __m256i halves_block_parts(const Block& w, const BlockQ8_K& x) {
  const __m256i halves = half_multipliers(w);
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int b = 0; b < 8; ++b) {
    const __m256i xv = load256(x.qs + 32 * b);
    __m256i prod;
    if constexpr (kSignedX) {
      prod = _mm256_maddubs_epi16(grid_magnitudes(w, b), _mm256_sign_epi8(xv, grid_sign_controls(w, b)));
    } else {
      int32_t lo, hi;  // (the scalar multipliers the tiles take; unused here)
      const __m256i weights = halves_weights(w, b, lo, hi);
      prod = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(weights, xv));
    }
    acc = in_register(_mm256_add_epi32(acc, _mm256_madd_epi16(prod, sub_block_multipliers(halves, b))));
  }
  return acc;
}
inline __m256i iq2_xs_block_parts(const BlockIQ2_XS& w, const BlockQ8_K& x) { return halves_block_parts(w, x); }
inline __m256i iq2_s_block_parts(const BlockIQ2_S& w, const BlockQ8_K& x) { return halves_block_parts(w, x); }
inline __m256i iq1_m_block_parts(const BlockIQ1_M& w, const BlockQ8_K& x) { return halves_block_parts(w, x); }

// ---- IQ2_XXS x Q8_K ----

// One sub-block's contribution (times its multiplier) to a block sum, from its
// code qword (in a register), the activation's 32 codes and their |x|.
inline __m256i iq2_xxs_sub_block(__m256i acc, uint64_t aux, __m256i x, __m256i abs_x) {
  const __m256i prod = _mm256_maddubs_epi16(abs_x, _mm256_sign_epi8(iq2_xxs_signed_grid(aux), x));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(prod, iq2_xxs_multiplier_words(aux)));
}

// The code qword of sub-block b of a block, kept in a register.
inline uint64_t iq2_xxs_aux(const BlockIQ2_XXS& w, int b) {
  uint64_t aux;
  std::memcpy(&aux, w.qs + 4 * b, 8);
  return in_register(aux);
}

}  // namespace
}  // namespace ds4::quant
