// AVX2 dot kernels (with FMA, F16C and BMI2): the "avx2" level of dot.h.
//
// Integer formats: SIMD forms exactly the integer partial sums the scalar
// reference forms, then the float scales are applied and accumulated in the
// scalar reference's order, so every integer kernel here is bit-identical to
// dot_kernels_scalar() for all inputs (codes -128..127, any scales). Only the
// final running sum stays sequential (one dependent add per block).
// Float formats (f16/bf16/f32) use 32 FMA lanes and differ from the scalar
// result only by accumulated rounding.
//
// Contracting a*b+c into an FMA would round the scale combination differently
// from the scalar reference (compiled without FMA), so it is off in this file;
// FMAs the float kernels want are written as intrinsics.
#include "core/x86_kernel_prelude.h"

#include <cstdint>
#include <cstring>

#include "quant/dot.h"
#include "quant/dot_x86_common.h"
#include "quant/dot_blocks_avx2.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_s_tables.h"
#include "quant/iq2_xs_tables.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"
#include "quant/quant.h"
#include "quant/iq4_values.h"
#include "quant/mxfp4.h"
#include <cstddef>

namespace ds4::quant {
namespace {

// Helpers live in anonymous namespaces (here and in dot_x86_common.h), never in
// ordinary inline functions: one compiled here with the ISA flags could be the
// copy the linker keeps for every caller, including baseline code.

inline __m128i fold_i32(__m256i v) {
  return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---- Q8_0 x Q8_0 ----

// The u16 at the start of each of 8 consecutive blocks of kStride bytes
// (scalar loads: gathers are slower on AMD cores).
template <size_t kStride>
inline __m128i block_u16x8(const void* blocks) {
  const auto* p = static_cast<const unsigned char*>(blocks);
  alignas(16) uint16_t v[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) std::memcpy(&v[k], p + kStride * k, 2);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(v));
}

float dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x) {
  const int64_t nb = n / kQK8_0;
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i b[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) b[k] = q8_0_block(w[i + k], x[i + k]);
    // Per block: float(isum) * (d_w * d_x), each product rounded as in scalar.
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(block_u16x8<sizeof(BlockQ8_0)>(w + i)),
                                   _mm256_cvtph_ps(block_u16x8<sizeof(BlockQ8_0)>(x + i)));
    sumf = add_lanes_in_order(sumf, _mm256_mul_ps(_mm256_cvtepi32_ps(hsum8_i32(b)), d));
  }
  for (; i < nb; ++i) {
    sumf += static_cast<float>(hsum_i32(q8_0_block(w[i], x[i]))) *
            (f16_value(w[i].d) * f16_value(x[i].d));
  }
  return sumf;
}

// ---- MXFP4 x Q8_0 ----

// The first byte of each of 8 consecutive blocks of kStride bytes, as u32.
template <size_t kStride>
inline __m256i block_u8x8(const void* blocks) {
  const auto* p = static_cast<const unsigned char*>(blocks);
  alignas(16) uint8_t v[16] = {};
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) v[k] = p[kStride * k];
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v)));
}

// ggml's E8M0 half scale 2^(e-128) (see e8m0_to_fp32_half) per lane.
inline __m256 e8m0_half(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
}

float dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x) {
  const int64_t nb = n / kQKMxfp4;
  const __m256i table = _mm256_broadcastsi128_si256(load128(kMxfp4DoubledValues.data()));
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i b[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) b[k] = mxfp4_block(w[i + k], x[i + k], table);
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(block_u16x8<sizeof(BlockQ8_0)>(x + i)),
                                   e8m0_half(block_u8x8<sizeof(BlockMXFP4)>(w + i)));
    sumf = add_lanes_in_order(sumf, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum8_i32(b))));
  }
  for (; i < nb; ++i) {
    const float d = f16_value(x[i].d) * e8m0_half_value(w[i].e);
    sumf += d * static_cast<float>(hsum_i32(mxfp4_block(w[i], x[i], table)));
  }
  return sumf;
}

// ---- Q2_K x Q8_K ----

float dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x) {
  const int64_t nb = n / kQK_K;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    __m256i isum, msum;
    q2_K_block_parts(w[i], x[i], isum, msum);
    const __m128i sums = _mm_hadd_epi32(fold_i32(isum), fold_i32(msum));
    const __m128i sums2 = _mm_hadd_epi32(sums, sums);
    sumf += k_block_value(w[i], x[i], _mm_cvtsi128_si32(sums2), _mm_extract_epi32(sums2, 1));
  }
  return sumf;
}

// ---- Q6_K x Q8_K ----
//
// The block's exact integer sum (q6_K_block_parts, dot_blocks_avx2.h), then the
// scalar reference's float term.
float dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const int isum = hsum_i32(q6_K_block_parts(w[i], x[i]));
    sumf += (f16_value(w[i].d) * x[i].d) * static_cast<float>(isum);
  }
  return sumf;
}

// ---- Q3_K x Q8_K ----
//
// The block's exact integer sum (q3_K_block_parts, dot_blocks_avx2.h), then
// the scalar reference's float term.

float dot_q3_K_q8_K(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const int isum = hsum_i32(q3_K_block_parts(w[i], x[i]));
    sumf += (f16_value(w[i].d) * x[i].d) * static_cast<float>(isum);
  }
  return sumf;
}

// ---- Q4_K x Q8_K ----
//
// One integer sum per block, one float term (the scalar reference's order).

float dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  const int64_t nb = n / kQK_K;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    __m256i isum, msum;
    q4_K_block_parts(w[i], x[i], isum, msum);
    sumf += k_block_value(w[i], x[i], hsum_i32(isum), hsum_i32(msum));
  }
  return sumf;
}

// ---- Q5_K x Q8_K ----
//
// One integer sum and one min sum per block (q5_K_block_parts), one float term.

float dot_q5_K_q8_K(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i isum, msum;
    q5_K_block_parts(w[i], x[i], isum, msum);
    sumf += k_block_value(w[i], x[i], hsum_i32(isum), hsum_i32(msum));
  }
  return sumf;
}

// ---- IQ2_XXS x Q8_K ----

float dot_iq2_xxs_q8_K(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
  const int64_t nb = n / kQK_K;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int b = 0; b < 8; ++b) {
      const __m256i xv = in_register(load256(x[i].qs + 32 * b));
      acc = iq2_xxs_sub_block(acc, iq2_xxs_aux(w[i], b), xv, _mm256_abs_epi8(xv));
    }
    const float d = f16_value(w[i].d) * x[i].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return 0.125f * sumf;
}

// ---- IQ2_XS x Q8_K ----
//
// Per sub-block of 32: the four groups' grid qwords and sign factors by
// table loads, |x| times sign-corrected grid (maddubs), each 16-value half
// times its multiplier 2 * scale + 1 (madd); exact integers, one float term
// per block as the scalar kernel.

float dot_iq2_xs_q8_K(int64_t n, const BlockIQ2_XS* w, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_value(w[i].d) * x[i].d;
    sumf += d * static_cast<float>(hsum_i32(iq2_xs_block_parts(w[i], x[i])));
  }
  return 0.125f * sumf;
}

// ---- IQ1_M x Q8_K ----
//
// Per block the exact integer S = 8 * sumi1 + sumi2 (iq1_m_block_parts), and
// the scalar kernel's float term: 0.125f * float(S) is its sumi1 + sumi2 / 8.

float dot_iq1_m_q8_K(int64_t n, const BlockIQ1_M* w, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_value(iq1_m_d_bits(w[i])) * x[i].d;
    sumf += d * (0.125f * static_cast<float>(hsum_i32(iq1_m_block_parts(w[i], x[i]))));
  }
  return sumf;
}

// ---- IQ1_S x Q8_K ----
//
// q8 * grid exactly as for IQ1_M (maddubs of g + 1, minus the pair sums of
// q8), times the sub-block's multiplier; the shift term from the
// activation's 16-sums in scalar code, as the scalar kernel.

float dot_iq1_s_q8_K(int64_t n, const BlockIQ1_S* w, const BlockQ8_K* x) {
  const int64_t nb = n / kQK_K;
  const uint64_t* grid = kIq1Grid.data();
  const __m256i ones = _mm256_set1_epi8(1);
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    __m256i acc = _mm256_setzero_si256();
    int32_t sumi1 = 0;
    for (int b = 0; b < 8; ++b) {
      const uint16_t h = w[i].qh[b];
      const uint8_t* qs = w[i].qs + 4 * b;
      const __m256i q8 = load256(x[i].qs + 32 * b);
      const __m256i g = _mm256_set_epi64x(static_cast<int64_t>(grid[qs[3] | (((h >> 9) & 7) << 8)]),
                                          static_cast<int64_t>(grid[qs[2] | (((h >> 6) & 7) << 8)]),
                                          static_cast<int64_t>(grid[qs[1] | (((h >> 3) & 7) << 8)]),
                                          static_cast<int64_t>(grid[qs[0] | ((h & 7) << 8)]));
      const __m256i products =
          _mm256_sub_epi16(_mm256_maddubs_epi16(_mm256_add_epi8(g, ones), q8), _mm256_maddubs_epi16(ones, q8));
      const int16_t ls = static_cast<int16_t>(2 * ((h >> 12) & 7) + 1);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(products, _mm256_set1_epi16(ls)));
      sumi1 += ls * ((h & 0x8000) ? -1 : 1) * (x[i].bsums[2 * b] + x[i].bsums[2 * b + 1]);
    }
    sumf += f16_value(w[i].d) * x[i].d * (static_cast<float>(hsum_i32(acc)) + kIq1Delta * static_cast<float>(sumi1));
  }
  return sumf;
}

// ---- IQ3_XXS / IQ3_S x Q8_K ----
//
// Per sub-block: the 32 grid magnitudes (8 grid words) take the weight signs,
// then maddubs(|x|, sign(w, x)) forms each product exactly (|x| = 128 fits a
// u8, |w| <= 62 so pairs never saturate) and madd applies the sub-block
// multiplier: the scalar reference's integer per block.

float dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    sumf += (f16_value(w[i].d) * x[i].d) * static_cast<float>(hsum_i32(iq3_xxs_block_parts(w[i], x[i])));
  }
  return 0.25f * sumf;
}

float dot_iq3_s_q8_K(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x) {
  const uint32_t* grid = kIq3sGrid.data();
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    __m256i acc = _mm256_setzero_si256();
    for (int b = 0; b < 8; ++b) {
      const uint8_t* g = w[i].qs + 8 * b;
      const uint32_t high = w[i].qh[b];
      int32_t words[8];
      for (int k = 0; k < 8; ++k) words[k] = static_cast<int32_t>(grid[g[k] | (((high >> k) & 1) << 8)]);
      uint32_t signs;
      std::memcpy(&signs, w[i].signs + 4 * b, sizeof(signs));
      const int multiplier = 2 * ((w[i].scales[b / 2] >> (4 * (b % 2))) & 0xF) + 1;
      acc = iq3_sub_block(acc, iq3_signed_grid(load256(words), signs), x[i].qs + 32 * b, multiplier);
    }
    sumf += (f16_value(w[i].d) * x[i].d) * static_cast<float>(hsum_i32(acc));
  }
  return sumf;
}

// ---- IQ2_S x Q8_K ----
//
// Per sub-block of 32: the four groups' grid qwords by table loads, their
// explicit sign bytes applied as IQ3_S's, |x| times sign-corrected grid
// (maddubs), each 16-value half times its multiplier 2 * scale + 1 (madd);
// exact integers, one float term per block as the scalar kernel.

float dot_iq2_s_q8_K(int64_t n, const BlockIQ2_S* w, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    sumf += (f16_value(w[i].d) * x[i].d) * static_cast<float>(hsum_i32(iq2_s_block_parts(w[i], x[i])));
  }
  return 0.125f * sumf;
}

// ---- IQ4_NL x Q8_0, IQ4_XS x Q8_K ----
//
// The table values (-127..113) by pshufb of the nibbles, widened to int16 with
// the activation so -128 activations stay exact (the abs/sign maddubs trick
// would overflow on them): each sub-block's exact integer sum, then the
// scalar reference's float terms.

float dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues.data()));
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = f16_value(x[i].d) * f16_value(w[i].d);
    sumf += d * static_cast<float>(hsum_i32(iq4_sub_block(w[i].qs, x[i].qs, table)));
  }
  return sumf;
}

float dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    sumf += (f16_value(w[i].d) * x[i].d) * static_cast<float>(hsum_i32(iq4_xs_block_parts(w[i], x[i])));
  }
  return sumf;
}

// ---- Q4_0 / Q5_0 x Q8_0, Q4_1 / Q5_1 x Q8_1 ----
//
// The 32 unsigned codes (bit 4 from qh for the 5-bit formats) times x by
// vpmaddubsw; the signed formats' offset (8 or 16) times x taken off in the
// same int16 pairs (|pair| <= 2 * 31 * 128 + 2 * 16 * 128 fits), then int32 by
// vpmaddwd. One integer sum per block, the float terms of eight blocks side by
// side in the scalar reference's order, added to the running sum in order.

// The block's codes in element order: low nibbles (elements 0..15) in the low
// lane, high nibbles (16..31) in the high lane, plus 16 where qh has bit j set.
inline __m256i legacy_codes(const uint8_t* qs, const uint8_t* qh) {
  const __m128i packed = load128(qs);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), low4), _mm_and_si128(packed, low4));
  if (qh) {
    uint32_t bits;
    std::memcpy(&bits, qh, sizeof bits);
    // Byte j gets qh byte j / 8, then tests bit j % 8.
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int32_t>(bits)),
        _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    codes = _mm256_or_si256(codes, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
  }
  return codes;
}

// 8 int32 partial sums of sum_j (code_j - offset) * x_j.
template <int kOffset>
inline __m256i legacy_block_sum(const uint8_t* qs, const uint8_t* qh, const int8_t* xq) {
  const __m256i x = load256(xq);
  __m256i prod = _mm256_maddubs_epi16(legacy_codes(qs, qh), x);
  if constexpr (kOffset != 0) prod = _mm256_sub_epi16(prod, _mm256_maddubs_epi16(_mm256_set1_epi8(kOffset), x));
  return _mm256_madd_epi16(prod, _mm256_set1_epi16(1));
}

// The u16 at byte `offset` of each of eight consecutive blocks, as floats.
template <typename Block>
inline __m256 block_f16x8(const Block* blocks, size_t offset) {
  return _mm256_cvtph_ps(block_u16x8<sizeof(Block)>(reinterpret_cast<const unsigned char*>(blocks) + offset));
}

float dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) {
  const int64_t nb = n / kQK4_0;
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i b[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) b[k] = legacy_block_sum<8>(w[i + k].qs, nullptr, x[i + k].qs);
    const __m256 term = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(hsum8_i32(b)), block_f16x8(w + i, 0)),
                                      block_f16x8(x + i, 0));
    sumf = add_lanes_in_order(sumf, term);
  }
  for (; i < nb; ++i) {
    sumf += static_cast<float>(hsum_i32(legacy_block_sum<8>(w[i].qs, nullptr, x[i].qs))) * f16_value(w[i].d) *
            f16_value(x[i].d);
  }
  return sumf;
}

float dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x) {
  const int64_t nb = n / kQK5_0;
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i b[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) b[k] = legacy_block_sum<16>(w[i + k].qs, w[i + k].qh, x[i + k].qs);
    const __m256 d = _mm256_mul_ps(block_f16x8(w + i, 0), block_f16x8(x + i, 0));
    sumf = add_lanes_in_order(sumf, _mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum8_i32(b))));
  }
  for (; i < nb; ++i) {
    sumf += (f16_value(w[i].d) * f16_value(x[i].d)) *
            static_cast<float>(hsum_i32(legacy_block_sum<16>(w[i].qs, w[i].qh, x[i].qs)));
  }
  return sumf;
}

// Q4_1 / Q5_1: (d_w * d_x) * sum + m_w * s_x per block.
template <typename Block>
float dot_legacy_q8_1(int64_t n, const Block* w, const BlockQ8_1* x) {
  auto qh_of = [](const Block& b) -> const uint8_t* {
    if constexpr (requires { b.qh; }) {
      return b.qh;
    } else {
      return nullptr;
    }
  };
  const int64_t nb = n / kQK8_1;
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i b[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) b[k] = legacy_block_sum<0>(w[i + k].qs, qh_of(w[i + k]), x[i + k].qs);
    const __m256 d = _mm256_mul_ps(block_f16x8(w + i, offsetof(Block, d)), block_f16x8(x + i, offsetof(BlockQ8_1, d)));
    const __m256 m = _mm256_mul_ps(block_f16x8(w + i, offsetof(Block, m)), block_f16x8(x + i, offsetof(BlockQ8_1, s)));
    sumf = add_lanes_in_order(sumf, _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(hsum8_i32(b))), m));
  }
  for (; i < nb; ++i) {
    const int32_t isum = hsum_i32(legacy_block_sum<0>(w[i].qs, qh_of(w[i]), x[i].qs));
    sumf += (f16_value(w[i].d) * f16_value(x[i].d)) * static_cast<float>(isum) + f16_value(w[i].m) * f16_value(x[i].s);
  }
  return sumf;
}

float dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x) { return dot_legacy_q8_1(n, w, x); }
float dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x) { return dot_legacy_q8_1(n, w, x); }
// ---- Float formats ----

// Loads of 8 weights as f32; `tail` variants read only the first `count`.
struct F32Weights {
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};
struct F16Weights {
  static __m256 load(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
};
struct BF16Weights {
  static __m256 load(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
};

template <typename Weights, typename T>
float dot_float(int64_t n, const T* w, const float* x) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(Weights::load(w + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(Weights::load(w + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(Weights::load(w + i + 16), _mm256_loadu_ps(x + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(Weights::load(w + i + 24), _mm256_loadu_ps(x + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(Weights::load(w + i), _mm256_loadu_ps(x + i), acc0);
  }
  if (i < n) {
    // Copy the last < 8 elements into zero-padded buffers; reading past the
    // end of the caller's arrays is not allowed.
    T wt[8] = {};
    float xt[8] = {};
    std::memcpy(wt, w + i, static_cast<size_t>(n - i) * sizeof(T));
    std::memcpy(xt, x + i, static_cast<size_t>(n - i) * sizeof(float));
    acc1 = _mm256_fmadd_ps(Weights::load(wt), _mm256_loadu_ps(xt), acc1);
  }
  return hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

float dot_f16_f32(int64_t n, const uint16_t* w, const float* x) { return dot_float<F16Weights>(n, w, x); }
float dot_bf16_f32(int64_t n, const uint16_t* w, const float* x) { return dot_float<BF16Weights>(n, w, x); }
float dot_f32_f32(int64_t n, const float* w, const float* x) { return dot_float<F32Weights>(n, w, x); }

}  // namespace

extern const DotKernels kDotAvx2 = {
    "avx2",           dot_q8_0_q8_0, dot_q2_K_q8_K, dot_q4_K_q8_K, dot_iq2_xxs_q8_K,
    dot_mxfp4_q8_0,   dot_f16_f32,   dot_bf16_f32,  dot_f32_f32, dot_q6_K_q8_K,
    dot_iq2_xs_q8_K,  dot_iq1_m_q8_K, dot_iq1_s_q8_K,
    dot_iq3_xxs_q8_K, dot_iq3_s_q8_K,
    dot_q3_K_q8_K,    dot_q5_K_q8_K, dot_iq4_nl_q8_0, dot_iq4_xs_q8_K,
    dot_q4_0_q8_0,    dot_q4_1_q8_1, dot_q5_0_q8_0, dot_q5_1_q8_1,
    dot_iq2_s_q8_K,
};

// The AVX-512 levels' Q6_K kernel (no wider one yet).
float dot_q6_K_q8_K_avx2(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) { return dot_q6_K_q8_K(n, w, x); }
float dot_iq2_xs_q8_K_avx2(int64_t n, const BlockIQ2_XS* w, const BlockQ8_K* x) { return dot_iq2_xs_q8_K(n, w, x); }
float dot_iq1_m_q8_K_avx2(int64_t n, const BlockIQ1_M* w, const BlockQ8_K* x) { return dot_iq1_m_q8_K(n, w, x); }
float dot_iq1_s_q8_K_avx2(int64_t n, const BlockIQ1_S* w, const BlockQ8_K* x) { return dot_iq1_s_q8_K(n, w, x); }
float dot_iq3_xxs_q8_K_avx2(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) { return dot_iq3_xxs_q8_K(n, w, x); }
float dot_iq3_s_q8_K_avx2(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x) { return dot_iq3_s_q8_K(n, w, x); }
float dot_q3_K_q8_K_avx2(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x) { return dot_q3_K_q8_K(n, w, x); }
float dot_q5_K_q8_K_avx2(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x) { return dot_q5_K_q8_K(n, w, x); }
float dot_iq4_nl_q8_0_avx2(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) { return dot_iq4_nl_q8_0(n, w, x); }
float dot_iq4_xs_q8_K_avx2(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) { return dot_iq4_xs_q8_K(n, w, x); }

float dot_q4_0_q8_0_avx2(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) { return dot_q4_0_q8_0(n, w, x); }
float dot_q4_1_q8_1_avx2(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x) { return dot_q4_1_q8_1(n, w, x); }
float dot_q5_0_q8_0_avx2(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x) { return dot_q5_0_q8_0(n, w, x); }
float dot_q5_1_q8_1_avx2(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x) { return dot_q5_1_q8_1(n, w, x); }
float dot_iq2_s_q8_K_avx2(int64_t n, const BlockIQ2_S* w, const BlockQ8_K* x) { return dot_iq2_s_q8_K(n, w, x); }

}  // namespace ds4::quant
