// AVX-512 dot kernels: the "avx512" level (F/BW/VL/DQ) and the "avx512vnni"
// level, which differs only in using vpdpbusd/vpdpwssd for the integer
// multiply-adds. Both are instantiated from the same templates.
//
// Integer formats: SIMD forms exactly the integer partial sums the scalar
// reference forms, then the float scales are applied and accumulated in the
// scalar reference's order, so every integer kernel here is bit-identical to
// dot_kernels_scalar() for all inputs (codes -128..127, any scales). The
// per-block scale products are computed 16 blocks at a time; only the final
// running sum stays sequential (one dependent add per block).
// Float formats (f16/bf16/f32) use 64 FMA lanes and differ from the scalar
// result only by accumulated rounding. vdpbf16ps is not used for bf16: it
// would round the f32 activations to bf16 (8-bit mantissa), far beyond
// accumulated rounding.
//
// IQ2_XXS reads its grid with hardware gathers (4 vpgatherqq per block): on
// the Intel Xeon (Emerald Rapids) it was measured on, that beat decoding the
// grid from registers with AVX512BW only (iq2_xxs_exact_partials, kept as the
// exact path for blocks whose activations hold -128) by about 40%. On AMD
// Zen 5 the gathers are slow: the "avx512vbmi" level (the default on AMD)
// decodes the grid from registers with byte permutes instead, 1.6x faster
// there. Elsewhere small per-block values are loaded through a buffer rather
// than gathered.
//
// This file is built with the VNNI/BF16/VBMI flags too, so the plain
// "avx512" kernels must not let the compiler auto-vectorize into those
// instructions: they are written with explicit intrinsics only, and VBMI
// intrinsics appear only in the avx512vbmi level's IQ2_XXS path.
//
// Contracting a*b+c into an FMA would round the scale combination differently
// from the scalar reference (compiled without FMA), so it is off in this file;
// FMAs the float kernels want are written as intrinsics.
#include "core/x86_kernel_prelude.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "quant/dot.h"
#include "quant/dot_rows_avx512.h"
#include "quant/dot_words_avx512.h"
#include "quant/dot_x86_common.h"
#include "quant/iq1_tables.h"
#include "quant/iq2_xxs_avx512.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq_grids_avx512.h"
#include "quant/iq4_values.h"
#include "quant/mxfp4.h"

namespace ds4::quant {
namespace {

// Helpers live in anonymous namespaces (here and in dot_x86_common.h), never in
// ordinary inline functions: one compiled here with the ISA flags could be the
// copy the linker keeps for every caller, including baseline code.
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// Two 32-byte rows side by side in one register.
inline __m512i load_pair256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(lo)), load256(hi), 1);
}

inline __m256i fold512(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// ---- Per-block integer sums, 16 blocks at a time ----
//
// The 32-element formats (Q8_0, MXFP4) produce one register per pair of
// blocks, 8 int32 partials per block. These helpers reduce 8 such registers
// (16 blocks) to one register of 16 block sums.

// [b0 | b1], [b2 | b3] (8 partials each) -> lane k holds 4 partials of block k.
inline __m512i pairs_to_lanes(__m512i b01, __m512i b23) {
  const __m512i even = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i odd = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_add_epi32(even, odd);
}

// Four registers of 4 blocks (block 4g+L in lane L of t[g]) -> int32 lane
// 4L+g holds the sum of block 4g+L.
inline __m512i transpose_sum(__m512i t0, __m512i t1, __m512i t2, __m512i t3) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(t0, t1), _mm512_unpackhi_epi32(t0, t1));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(t2, t3), _mm512_unpackhi_epi32(t2, t3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// Index of block k's sum in transpose_sum's output.
constexpr int transposed_block(int k) { return 4 * (k & 3) + (k >> 2); }

// Sums of 16 consecutive blocks in transpose_sum's lane order; pair(k)
// covers blocks k and k+1.
template <typename Pair>
inline __m512i block_sums16(Pair pair) {
  __m512i t[4];
#pragma GCC unroll 16
  for (int g = 0; g < 4; ++g) t[g] = pairs_to_lanes(pair(4 * g), pair(4 * g + 2));
  return transpose_sum(t[0], t[1], t[2], t[3]);
}

// ---- Q8_0 x Q8_0 ----

template <bool kVnni>
inline __m512i q8_0_pair(const BlockQ8_0* w, const BlockQ8_0* x) {
  if constexpr (kVnni) {
    // vpdpbusd multiplies unsigned by signed bytes: bias w by 128 to make it
    // unsigned, then subtract the 128 * sum(x) the bias added. Exact for
    // every code pair, including -128 x -128.
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i wv = load_pair256(w[0].qs, w[1].qs);
    const __m512i xv = load_pair256(x[0].qs, x[1].qs);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i biased = _mm512_dpbusd_epi32(zero, _mm512_xor_si512(wv, bias), xv);
    return _mm512_sub_epi32(biased, _mm512_dpbusd_epi32(zero, bias, xv));
  } else {
    // Widening to int16 keeps every code pair exact.
    const __m512i p0 = _mm512_madd_epi16(_mm512_cvtepi8_epi16(load256(w[0].qs)),
                                         _mm512_cvtepi8_epi16(load256(x[0].qs)));
    const __m512i p1 = _mm512_madd_epi16(_mm512_cvtepi8_epi16(load256(w[1].qs)),
                                         _mm512_cvtepi8_epi16(load256(x[1].qs)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(fold512(p0)), fold512(p1), 1);
  }
}

inline int32_t q8_0_single(const BlockQ8_0& w, const BlockQ8_0& x) {
  const __m512i p = _mm512_madd_epi16(_mm512_cvtepi8_epi16(load256(w.qs)), _mm512_cvtepi8_epi16(load256(x.qs)));
  return _mm512_reduce_add_epi32(p);
}

// The u16 at the start of each of 16 consecutive blocks of kStride bytes,
// in transpose_sum's lane order. Scalar loads through a small buffer:
// hardware gathers are far slower than this on AMD cores.
// blocks past kCount read as 0.
template <size_t kStride, int kCount = 16>
inline __m256i block_u16xN(const void* blocks) {
  const auto* p = static_cast<const unsigned char*>(blocks);
  alignas(32) uint16_t v[16];
#pragma GCC unroll 16
  for (int lane = 0; lane < 16; ++lane) {
    if (transposed_block(lane) < kCount) {
      std::memcpy(&v[lane], p + kStride * transposed_block(lane), 2);
    } else {
      v[lane] = 0;
    }
  }
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(v));
}
template <size_t kStride>
inline __m256i block_u16x16(const void* blocks) { return block_u16xN<kStride>(blocks); }

// The first byte of each of 16 consecutive blocks, same order, as u32 lanes.
template <size_t kStride>
inline __m512i block_u8x16(const void* blocks) {
  const auto* p = static_cast<const unsigned char*>(blocks);
  alignas(16) uint8_t v[16];
#pragma GCC unroll 16
  for (int lane = 0; lane < 16; ++lane) v[lane] = p[kStride * transposed_block(lane)];
  return _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(v)));
}

// The f32 at the start of each of 16 consecutive blocks, in transpose_sum's lane order.
// Blocks past kCount read as 0.
template <size_t kStride, int kCount = 16>
inline __m512 block_f32xN(const void* blocks) {
  const auto* p = static_cast<const unsigned char*>(blocks);
  alignas(64) float v[16];
#pragma GCC unroll 16
  for (int lane = 0; lane < 16; ++lane) {
    if (transposed_block(lane) < kCount) {
      std::memcpy(&v[lane], p + kStride * transposed_block(lane), 4);
    } else {
      v[lane] = 0.0f;
    }
  }
  return _mm512_load_ps(v);
}
template <size_t kStride>
inline __m512 block_f32x16(const void* blocks) { return block_f32xN<kStride>(blocks); }

// Adds the first kCount of 16 per-block terms (in transpose_sum's lane order)
// to sum one block at a time, in block order, as the scalar reference does.
template <int kCount = 16>
inline float add_in_block_order(float sum, __m512 terms) {
  alignas(64) float t[16];
  _mm512_store_ps(t, terms);
#pragma GCC unroll 16
  for (int k = 0; k < kCount; ++k) sum += t[transposed_block(k)];
  return sum;
}

template <bool kVnni>
float dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x) {
  const int64_t nb = n / kQK8_0;
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    const __m512i isum = block_sums16([&](int k) { return q8_0_pair<kVnni>(w + i + k, x + i + k); });
    // Per block: float(isum) * (d_w * d_x), each product rounded as in scalar.
    const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(block_u16x16<sizeof(BlockQ8_0)>(w + i)),
                                   _mm512_cvtph_ps(block_u16x16<sizeof(BlockQ8_0)>(x + i)));
    sumf = add_in_block_order(sumf, _mm512_mul_ps(_mm512_cvtepi32_ps(isum), d));
  }
  for (; i < nb; ++i) {
    sumf += static_cast<float>(q8_0_single(w[i], x[i])) * (f16_value(w[i].d) * f16_value(x[i].d));
  }
  return sumf;
}

// ---- MXFP4 x Q8_0 ----

// Doubled E2M1 values of two blocks' codes, in the element order of the
// matching pair of Q8_0 blocks: [lo nibbles 0 | hi nibbles 0 | lo 1 | hi 1].
inline __m512i mxfp4_pair_values(const BlockMXFP4* w, __m512i table) {
  const __m256i q = _mm256_set_m128i(load128(w[1].qs), load128(w[0].qs));
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
  const __m512i codes =
      _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0f));
  return _mm512_shuffle_epi8(table, codes);
}

template <bool kVnni>
inline __m512i mxfp4_pair(const BlockMXFP4* w, const BlockQ8_0* x, __m512i table) {
  const __m512i wv = mxfp4_pair_values(w, table);
  const __m512i xv = load_pair256(x[0].qs, x[1].qs);
  // |x| (u8, 128 allowed) times w carrying x's sign (|w| <= 12 never
  // overflows): exact in both vpdpbusd and maddubs.
  const __m512i ws = _mm512_mask_sub_epi8(wv, _mm512_movepi8_mask(xv), _mm512_setzero_si512(), wv);
  const __m512i ax = _mm512_abs_epi8(xv);
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, ws);
  } else {
    return _mm512_madd_epi16(_mm512_maddubs_epi16(ax, ws), _mm512_set1_epi16(1));
  }
}

// ggml's E8M0 half scale 2^(e-128) (see e8m0_to_fp32_half) per lane.
inline __m512 e8m0_half(__m512i e) {
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal));
}

template <bool kVnni>
float dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x) {
  const int64_t nb = n / kQKMxfp4;
  const __m512i table = _mm512_broadcast_i32x4(load128(kMxfp4DoubledValues.data()));
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    const __m512i isum = block_sums16([&](int k) { return mxfp4_pair<kVnni>(w + i + k, x + i + k, table); });
    const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(block_u16x16<sizeof(BlockQ8_0)>(x + i)),
                                   e8m0_half(block_u8x16<sizeof(BlockMXFP4)>(w + i)));
    sumf = add_in_block_order(sumf, _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
  }
  for (; i < nb; ++i) {
    const float d = f16_value(x[i].d) * e8m0_half_value(w[i].e);
    sumf += d * static_cast<float>(hsum_i32(mxfp4_block(w[i], x[i], _mm512_castsi512_si256(table))));
  }
  return sumf;
}

// ---- Q2_K x Q8_K ----

// pshufb patterns giving 128-bit lane i the zero-extended scale byte 4k+i as
// int16 words: one register covers the four 16-groups of two planes.
alignas(64) constexpr int8_t kQ2ScaleSpread[4][64] = {
#define DS4_Q2_LANE(s) s, -1, s, -1, s, -1, s, -1, s, -1, s, -1, s, -1, s, -1
#define DS4_Q2_SPREAD(k) \
  {DS4_Q2_LANE(4 * (k)), DS4_Q2_LANE(4 * (k) + 1), DS4_Q2_LANE(4 * (k) + 2), DS4_Q2_LANE(4 * (k) + 3)}
    DS4_Q2_SPREAD(0), DS4_Q2_SPREAD(1), DS4_Q2_SPREAD(2), DS4_Q2_SPREAD(3),
#undef DS4_Q2_SPREAD
#undef DS4_Q2_LANE
};

// Code-times-scale partials of one block: 16 int32 lanes whose total is the
// block's isum.
template <bool kVnni>
inline __m512i q2_K_code_partials(const BlockQ2_K& wb, const BlockQ8_K& xb, __m128i sc) {
  const __m512i low2 = _mm512_set1_epi8(3);
  const __m512i scales = _mm512_broadcast_i32x4(_mm_and_si128(sc, _mm_set1_epi8(0x0f)));
  __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 16
  for (int h = 0; h < 2; ++h) {
    // Planes 0,1 (and 2,3 after >> 4) of this half's 32 code bytes, each
    // plane's 32 outputs in two 128-bit lanes: four 16-groups per register.
    const __m256i q2 = load256(wb.qs + 32 * h);
    const __m512i planes = _mm512_inserti64x4(_mm512_castsi256_si512(q2), _mm256_srli_epi16(q2, 2), 1);
    const __m512i codes01 = _mm512_and_si512(planes, low2);
    const __m512i codes23 = _mm512_and_si512(_mm512_srli_epi16(planes, 4), low2);
    const int8_t* xq = xb.qs + 128 * h;
    acc = dot_words<kVnni>(acc, _mm512_maddubs_epi16(codes01, load512(xq)),
                           _mm512_shuffle_epi8(scales, load512(kQ2ScaleSpread[2 * h])));
    acc = dot_words<kVnni>(acc, _mm512_maddubs_epi16(codes23, load512(xq + 64)),
                           _mm512_shuffle_epi8(scales, load512(kQ2ScaleSpread[2 * h + 1])));
  }
  return acc;
}

// One block's integer parts: 16 int32 lanes whose total is the code sum and 8
// whose total is the min sum.
struct KBlockParts {
  __m512i codes;
  __m256i mins;
};

// A K-quant row (Q2_K, Q4_K) dotted with x: integer sums of 16 blocks at once
// (parts(i) for block i), then the scalar's per-block float term
// d * isum - dmin * msum, added in block order.
//
// The last group may be short (kCount < 16 blocks: 8 for a 2048-wide expert
// down row): its missing blocks get zero parts and their terms are not added.
template <typename Block, int kCount, typename Parts>
inline float k_quant_group(float sumf, const Block* w, const BlockQ8_K* x, Parts parts) {
  __m512i min_pairs[8];
  const auto block = [&](int k) {
    return k < kCount ? parts(k) : KBlockParts{_mm512_setzero_si512(), _mm256_setzero_si256()};
  };
  const __m512i isum = block_sums16([&](int k) {
    __m256i part[2];
    __m256i mins[2];
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
      const KBlockParts p = block(k + b);
      mins[b] = p.mins;
      part[b] = fold512(p.codes);
    }
    min_pairs[k / 2] = _mm512_inserti64x4(_mm512_castsi256_si512(mins[0]), mins[1], 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(part[0]), part[1], 1);
  });
  const __m512i summs = block_sums16([&](int k) { return min_pairs[k / 2]; });
  const __m512 xd = block_f32xN<sizeof(BlockQ8_K), kCount>(x);
  const __m512 dall = _mm512_mul_ps(xd, _mm512_cvtph_ps(block_u16xN<sizeof(Block), kCount>(&w[0].d)));
  const __m512 dmin = _mm512_mul_ps(xd, _mm512_cvtph_ps(block_u16xN<sizeof(Block), kCount>(&w[0].dmin)));
  return add_in_block_order<kCount>(sumf, _mm512_sub_ps(_mm512_mul_ps(dall, _mm512_cvtepi32_ps(isum)),
                                                        _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(summs))));
}

template <typename Block, typename Parts>
inline float k_quant_dot(int64_t n, const Block* w, const BlockQ8_K* x, Parts parts) {
  const int64_t nb = n / kQK_K;
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    sumf = k_quant_group<Block, 16>(sumf, w + i, x + i, [&](int k) { return parts(i + k); });
  }
  if (i + 8 <= nb) {
    sumf = k_quant_group<Block, 8>(sumf, w + i, x + i, [&](int k) { return parts(i + k); });
    i += 8;
  }
  for (; i < nb; ++i) {
    const KBlockParts p = parts(i);
    sumf += k_block_value(w[i], x[i], _mm512_reduce_add_epi32(p.codes), hsum_i32(p.mins));
  }
  return sumf;
}

template <bool kVnni>
float dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x) {
  return k_quant_dot(n, w, x, [&](int64_t i) {
    const __m128i sc = load128(w[i].scales);
    return KBlockParts{q2_K_code_partials<kVnni>(w[i], x[i], sc), q2_K_min_products(sc, x[i])};
  });
}

// ---- Q4_K x Q8_K ----
//
// One integer sum per block (the scalar reference's order): maddubs of each
// sub-block's nibbles with its 32 activations, then a multiply-add by the
// sub-block's scale word; 16 blocks' sums at once, their float terms added in
// block order.

// permutexvar_epi16 indices: scale word 2c in words 0..15, 2c+1 in 16..31.
alignas(64) constexpr WordSpread kQ4ScaleWords = word_spread(16, 1, 0);

// Eight int32 lanes whose total is the block's min sum: bsum[j] * min[j/2].
inline __m256i q4_K_min_products(const Q4KScales& s, const BlockQ8_K& x) {
  const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.min)));
  const __m256i mins_dup = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
  return _mm256_madd_epi16(mins_dup, load256(x.bsums));
}

// Code-times-scale partials of one block: 16 int32 lanes whose total is the
// block's isum.
template <bool kVnni>
inline __m512i q4_K_code_partials(const BlockQ4_K& wb, const BlockQ8_K& xb, const Q4KScales& s) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i scale_words =
      _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.scale))));
  // Both nibble planes from one broadcast load: low nibbles (sub-block 2c) in
  // the lower half, high nibbles (2c+1) in the upper, matching the 64
  // contiguous activations. Two accumulators halve the multiply-add chain.
  const __m512i plane_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i q4 = _mm512_broadcast_i64x4(load256(wb.qs + 32 * c));
    const __m512i codes = _mm512_and_si512(_mm512_srlv_epi64(q4, plane_shift), low4);
    acc[c & 1] = dot_words<kVnni>(acc[c & 1], _mm512_maddubs_epi16(codes, load512(xb.qs + 64 * c)),
                                  _mm512_permutexvar_epi16(load512(kQ4ScaleWords[c].data()), scale_words));
  }
  return _mm512_add_epi32(acc[0], acc[1]);
}

template <bool kVnni>
float dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  return k_quant_dot(n, w, x, [&](int64_t i) {
    const Q4KScales s = unpack_q4_K_scales(w[i].scales);
    return KBlockParts{q4_K_code_partials<kVnni>(w[i], x[i], s), q4_K_min_products(s, x[i])};
  });
}

// ---- 16 rows against one activation (decode) ----
//
// A matrix-vector product through the one-row kernels pays, per row, for the
// horizontal sums, the gathered block scales and a chain of float adds. Taken
// 16 rows at a time instead, the rows are the lanes: block_sums16 turns the
// 16 rows' partials of one block into one register of row sums (row k in lane
// transposed_block(k)), the per-block float term is formed for all 16 rows at
// once and added to each lane in block order from 0, exactly the sum the
// one-row kernel forms for that row.
//
// Reading 16 short rows (1-2.3 KB) block by block defeats the hardware
// prefetchers: the next 16 rows (contiguous) are asked for while these are
// dotted, swept linearly, an equal share per block. Asking instead for each
// row's block a fixed distance ahead left IQ2_XXS at 7.7 GB/s from DRAM
// (ds4-bench-matvec, 2 threads) against 18 for the one-row loop; the sweep
// gives 20.
// The sweep goes into L2 (prefetcht1): into L1 it evicted the rows being read
// on AMD Zen 4 (ds4-bench-matvec -t 2, 3 alternating rounds: IQ2_XXS 15-16.5
// -> 18-19 GB/s, Q2_K 14-17 -> 23-26).

// The f16 at `offset` in block b of each of the 16 rows, as f32, lane order of
// block_sums16.
template <typename Block>
inline __m512 rows_f16_f32(const Block* const* rows, int64_t b, size_t offset) {
  alignas(32) uint16_t v[16];
#pragma GCC unroll 16
  for (int lane = 0; lane < 16; ++lane) {
    std::memcpy(&v[lane], reinterpret_cast<const unsigned char*>(&rows[transposed_block(lane)][b]) + offset, 2);
  }
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(v)));
}

// acc lanes (block_sums16 order) -> out[r] for the first `count` rows.
inline void store_rows(__m512 acc, float* out, int count) {
  alignas(64) float t[16];
  _mm512_store_ps(t, acc);
  for (int r = 0; r < count; ++r) out[r] = t[transposed_block(r)];
}

// Runs block(b, acc) for b = 0..nb-1, sweeping the next group (`next`, null
// for the last) into cache meanwhile.
template <typename Block, typename PerBlock>
inline __m512 rows16_blocks(int64_t nb, const Block* const* rows, const Block* const* next, PerBlock block) {
  if (nb <= 0) return _mm512_setzero_ps();
  const char* sweep = next != nullptr ? reinterpret_cast<const char*>(next[0]) : nullptr;
  const size_t span = next != nullptr ? static_cast<size_t>(reinterpret_cast<const char*>(&next[15][nb]) - sweep) : 0;
  const size_t share = (span + static_cast<size_t>(nb) - 1) / static_cast<size_t>(nb);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (sweep != nullptr) {
      const char* p = sweep + static_cast<size_t>(b) * share;
      for (size_t off = 0; off < share; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
    }
    acc = block(b, acc);
  }
  return acc;
}

// K-quant rows: parts(row, block) as k_quant_dot's, terms as k_quant_group's.
template <typename Block, typename Parts>
inline __m512 k_quant_rows16(int64_t nb, const Block* const* rows, const Block* const* next, const BlockQ8_K* x,
                             Parts parts) {
  return rows16_blocks(nb, rows, next, [&](int64_t b, __m512 acc) {
    __m512i min_pairs[8];
    // Inlined by force: GCC left it out of line for Q5_K, and a call spills every vector register.
    const __m512i isum = block_sums16([&](int k) __attribute__((always_inline)) {
      __m256i part[2];
      __m256i mins[2];
#pragma GCC unroll 2
      for (int r = 0; r < 2; ++r) {
        const KBlockParts p = parts(rows[k + r][b], x[b]);
        mins[r] = p.mins;
        part[r] = fold512(p.codes);
      }
      min_pairs[k / 2] = _mm512_inserti64x4(_mm512_castsi256_si512(mins[0]), mins[1], 1);
      return _mm512_inserti64x4(_mm512_castsi256_si512(part[0]), part[1], 1);
    });
    const __m512i summs = block_sums16([&](int k) { return min_pairs[k / 2]; });
    const __m512 xd = _mm512_set1_ps(x[b].d);
    const __m512 dall = _mm512_mul_ps(xd, rows_f16_f32(rows, b, offsetof(Block, d)));
    const __m512 dmin = _mm512_mul_ps(xd, rows_f16_f32(rows, b, offsetof(Block, dmin)));
    return _mm512_add_ps(acc, _mm512_sub_ps(_mm512_mul_ps(dall, _mm512_cvtepi32_ps(isum)),
                                            _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(summs))));
  });
}

template <bool kVnni>
inline KBlockParts q2_K_parts(const BlockQ2_K& w, const BlockQ8_K& x) {
  const __m128i sc = load128(w.scales);
  return KBlockParts{q2_K_code_partials<kVnni>(w, x, sc), q2_K_min_products(sc, x)};
}

// ---- IQ2_XXS x Q8_K ----
//
// A block's 64 code bytes are eight (W0, W1) dword pairs, one per 32-element
// sub-block: W0 = four grid indices, W1 = four 7-bit sign indices + 4-bit
// scale. All eight W1 are decoded at once in the odd dwords of a register.

alignas(64) constexpr int32_t kOddDwords[16] = {1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15};
// Per 128-bit lane (sub-blocks 2k, 2k+1): the two W0s' bytes into bytes 0..7.
alignas(64) constexpr int8_t kGridIndexBytes[64] = {
    0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1,
    0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1};
// permutexvar_epi16 indices: the scale of sub-block b sits in word 4b+2;
// register k covers sub-blocks 2k (words 0..15) and 2k+1 (words 16..31).
alignas(64) constexpr WordSpread kIq2ScaleWords = word_spread(16, 4, 2);

alignas(64) constexpr int64_t kLowQwords[8] = {0, 2, 4, 6, 0, 2, 4, 6};

// Compact codes of a block's 32 groups, group g in word g.
inline __m512i iq2_xxs_group_codes(__m512i q, const Iq2CompactGrid& grid, __m512i index_pattern) {
  // Each lane's two W0s hold the grid indices of its 8 groups.
  const __m512i picked = _mm512_permutexvar_epi64(load512(kLowQwords), _mm512_shuffle_epi8(q, index_pattern));
  return iq2_xxs_codes(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(picked)), grid);
}

// With one lane of codes (8 groups) in every lane, lane L takes groups 2L and
// 2L+1: each group's low code byte into its bytes 0..3 and high byte into
// 4..7, so byte j of a group holds element j's 2-bit level.
alignas(64) constexpr int8_t kCodeByteSpread[64] = {
    0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
    4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7,
    8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11,
    12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15};
// Low and high bit of element j's 2-bit level within its code byte.
alignas(16) constexpr uint8_t kLevelLowBit[16] = {1, 4, 16, 64, 1, 4, 16, 64, 1, 4, 16, 64, 1, 4, 16, 64};
alignas(16) constexpr uint8_t kLevelHighBit[16] = {2, 8, 32, 128, 2, 8, 32, 128, 2, 8, 32, 128, 2, 8, 32, 128};

// Grid bytes (8, 25 or 43) of sub-blocks 2k and 2k+1: their 8 group codes
// are lane k of `codes`.
template <int kPair>
inline __m512i iq2_xxs_grid_bytes(__m512i codes) {
  const __m512i lane = _mm512_shuffle_i32x4(codes, codes, kPair * 0x55);
  const __m512i spread = _mm512_shuffle_epi8(lane, load512(kCodeByteSpread));
  const __mmask64 level1 = _mm512_test_epi8_mask(spread, _mm512_broadcast_i32x4(load128(kLevelLowBit)));
  const __mmask64 level2 = _mm512_test_epi8_mask(spread, _mm512_broadcast_i32x4(load128(kLevelHighBit)));
  const __m512i low = _mm512_mask_blend_epi8(level1, _mm512_set1_epi8(static_cast<char>(kIq2xxsLevelBytes[0])),
                                             _mm512_set1_epi8(static_cast<char>(kIq2xxsLevelBytes[1])));
  return _mm512_mask_blend_epi8(level2, low, _mm512_set1_epi8(static_cast<char>(kIq2xxsLevelBytes[2])));
}

template <bool kVnni>
inline __m512i iq2_xxs_pair(__m512i acc, __m512i grid, const int8_t* xq, uint64_t sign_bits, __m512i scale_words) {
  const __m512i xv = load512(xq);
  // Negate the (small, unsigned) grid value where exactly one of the stored
  // sign and x's sign is negative, and multiply by |x| as u8: exact for
  // x = -128, where negating x itself would overflow.
  const __mmask64 neg = _kxor_mask64(_cvtu64_mask64(sign_bits), _mm512_movepi8_mask(xv));
  const __m512i gs = _mm512_mask_sub_epi8(grid, neg, _mm512_setzero_si512(), grid);
  return dot_words<kVnni>(acc, _mm512_maddubs_epi16(_mm512_abs_epi8(xv), gs), scale_words);
}

// Integer partials of one block (their total is the block's isum), exact for
// every code including -128: the compact grid decoded in registers, |x| times
// the grid with the combined sign.
template <bool kVnni>
__m512i iq2_xxs_exact_partials(const BlockIQ2_XXS& w, const BlockQ8_K& x) {
  const Iq2CompactGrid grid = load_iq2_compact_grid();
  const __m512i q = load512(w.qs);
  const __m256i signs = _mm512_castsi512_si256(_mm512_permutexvar_epi32(load512(kOddDwords), iq2_xxs_sign_bits(q)));
  const __m128i signs_lo = _mm256_castsi256_si128(signs);
  const __m128i signs_hi = _mm256_extracti128_si256(signs, 1);
  // Sub-block scale 2*(W1 >> 28) + 1, in the low word of each odd dword.
  const __m512i ls = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(q, 28), 1), _mm512_set1_epi32(1));
  const __m512i codes = iq2_xxs_group_codes(q, grid, load512(kGridIndexBytes));
  const int8_t* xq = x.qs;
  __m512i acc = _mm512_setzero_si512();
  acc = iq2_xxs_pair<kVnni>(acc, iq2_xxs_grid_bytes<0>(codes), xq, static_cast<uint64_t>(_mm_cvtsi128_si64(signs_lo)),
                            _mm512_permutexvar_epi16(load512(kIq2ScaleWords[0].data()), ls));
  acc = iq2_xxs_pair<kVnni>(acc, iq2_xxs_grid_bytes<1>(codes), xq + 64,
                            static_cast<uint64_t>(_mm_extract_epi64(signs_lo, 1)),
                            _mm512_permutexvar_epi16(load512(kIq2ScaleWords[1].data()), ls));
  acc = iq2_xxs_pair<kVnni>(acc, iq2_xxs_grid_bytes<2>(codes), xq + 128,
                            static_cast<uint64_t>(_mm_cvtsi128_si64(signs_hi)),
                            _mm512_permutexvar_epi16(load512(kIq2ScaleWords[2].data()), ls));
  acc = iq2_xxs_pair<kVnni>(acc, iq2_xxs_grid_bytes<3>(codes), xq + 192,
                            static_cast<uint64_t>(_mm_extract_epi64(signs_hi, 1)),
                            _mm512_permutexvar_epi16(load512(kIq2ScaleWords[3].data()), ls));
  return acc;
}

// The fast path. Grid entries come from kIq2xxsGrid by hardware gathers (8
// groups per gather, in element order); the weight signs are applied to x
// (mask_sub), so maddubs multiplies the unsigned grid bytes by signed codes.
// Negating x is exact except for x = -128, which Q8_K quantization never
// produces; a block whose activations hold -128 is redone by
// iq2_xxs_exact_partials.

// Integer partials of one block (their total is the block's isum).
template <bool kVnni>
inline __m512i iq2_xxs_block_partials(const BlockIQ2_XXS& w, const BlockQ8_K& x) {
  const __m512i q = load512(w.qs);
  // Lane c: [parity of S(2c), S(2c), parity of S(2c+1), S(2c+1)].
  const __m512i flags = _mm512_mask_blend_epi32(0x5555, q, _mm512_srli_epi64(field7_parity(q), 32));
  const __m512i ls = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(q, 28), 1), _mm512_set1_epi32(1));
  const __m512i idx = _mm512_shuffle_epi8(q, load512(kGridIndexWords));
  const auto* grid = reinterpret_cast<const long long*>(kIq2xxsGrid.data());
  __m512i x_min = _mm512_set1_epi8(127);
  __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i lane = _mm512_permutexvar_epi32(load512(kLaneDwords[c]), flags);
    const __mmask64 negate = _mm512_test_epi8_mask(_mm512_shuffle_epi8(lane, load512(kIq2SignPattern.byte)),
                                                   load512(kIq2SignPattern.bit));
    const __m512i g = _mm512_i64gather_epi64(
        _mm512_maskz_permutexvar_epi16(kQwordLowWords, load512(kGridIndexQwords[c]), idx), grid, 8);
    const __m512i xv = load512(x.qs + 64 * c);
    x_min = _mm512_min_epi8(x_min, xv);
    const __m512i xs = _mm512_mask_sub_epi8(xv, negate, _mm512_setzero_si512(), xv);
    acc = dot_words<kVnni>(acc, _mm512_maddubs_epi16(g, xs),
                           _mm512_permutexvar_epi16(load512(kIq2ScaleWords[c].data()), ls));
  }
  if (_mm512_cmpeq_epi8_mask(x_min, _mm512_set1_epi8(-128)) != 0) return iq2_xxs_exact_partials<kVnni>(w, x);
  return acc;
}

// The avx512vbmi level's path: the grid from registers, without gathers
// (vpgatherqq is slow on AMD Zen cores). The block's 32 grid indices become
// compact codes with qword q holding groups q, q+8, q+16, q+24, so chunk c's
// eight codes sit at bit 16c of the eight qwords: vpmultishiftqb moves
// element j's 2-bit level into byte j, vpermb turns it into its magnitude.
// A chunk's sign flags become one 64-bit mask, bit 8g+j for element j of
// group g.

// Integer partials of one block (their total is the block's isum), the same
// sums as iq2_xxs_block_partials.
template <bool kVnni>
inline __m512i iq2_xxs_block_partials_vbmi(const BlockIQ2_XXS& w, const BlockQ8_K& x, const Iq2CompactGrid& grid) {
  const __m512i q = load512(w.qs);
  const __m512i ls = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(q, 28), 1), _mm512_set1_epi32(1));
  const __m512i codes = iq2_xxs_chunk_codes(q, grid);
  uint64_t chunk_signs[4];
  iq2_xxs_chunk_signs(q, chunk_signs);
  __m512i x_min = _mm512_set1_epi8(127);
  __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i g = iq2_xxs_chunk_magnitudes(codes, c);
    const __m512i xv = load512(x.qs + 64 * c);
    x_min = _mm512_min_epi8(x_min, xv);
    const __m512i xs =
        _mm512_mask_sub_epi8(xv, _cvtu64_mask64(chunk_signs[c]), _mm512_setzero_si512(), xv);
    acc = dot_words<kVnni>(acc, _mm512_maddubs_epi16(g, xs),
                           _mm512_permutexvar_epi16(load512(kIq2ScaleWords[c].data()), ls));
  }
  if (_mm512_cmpeq_epi8_mask(x_min, _mm512_set1_epi8(-128)) != 0) return iq2_xxs_exact_partials<kVnni>(w, x);
  return acc;
}

// kGridInRegisters: the avx512vbmi level's path (the CPU has VBMI).
template <bool kVnni, bool kGridInRegisters>
float dot_iq2_xxs_q8_K(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
  Iq2CompactGrid grid{};
  if constexpr (kGridInRegisters) grid = load_iq2_compact_grid();
  const auto partials = [&](const BlockIQ2_XXS& wb, const BlockQ8_K& xb) {
    if constexpr (kGridInRegisters) {
      return iq2_xxs_block_partials_vbmi<kVnni>(wb, xb, grid);
    } else {
      return iq2_xxs_block_partials<kVnni>(wb, xb);
    }
  };
  const int64_t nb = n / kQK_K;
  float sumf = 0.0f;
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    const __m512i isum = block_sums16([&](int k) {
      const __m256i lo = fold512(partials(w[i + k], x[i + k]));
      const __m256i hi = fold512(partials(w[i + k + 1], x[i + k + 1]));
      return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    });
    // Per block, as the scalar reference: (d_w * d_x) * float(isum).
    const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(block_u16x16<sizeof(BlockIQ2_XXS)>(w + i)),
                                   block_f32x16<sizeof(BlockQ8_K)>(x + i));
    sumf = add_in_block_order(sumf, _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
  }
  for (; i < nb; ++i) {
    const int32_t isum = _mm512_reduce_add_epi32(partials(w[i], x[i]));
    sumf += (f16_value(w[i].d) * x[i].d) * static_cast<float>(isum);
  }
  return 0.125f * sumf;
}

// ---- Float formats ----

struct F32Weights {
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_first(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct F16Weights {
  static __m512 load(const uint16_t* p) { return _mm512_cvtph_ps(load256(p)); }
  static __m512 load_first(const uint16_t* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};
struct BF16Weights {
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint16_t* p) { return widen(load256(p)); }
  static __m512 load_first(const uint16_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

template <typename Weights, typename T>
float dot_float(int64_t n, const T* w, const float* x) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_fmadd_ps(Weights::load(w + i), _mm512_loadu_ps(x + i), acc0);
    acc1 = _mm512_fmadd_ps(Weights::load(w + i + 16), _mm512_loadu_ps(x + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(Weights::load(w + i + 32), _mm512_loadu_ps(x + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(Weights::load(w + i + 48), _mm512_loadu_ps(x + i + 48), acc3);
  }
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm512_fmadd_ps(Weights::load(w + i), _mm512_loadu_ps(x + i), acc0);
  }
  if (i < n) {
    // Masked loads never touch the elements past n.
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc1 = _mm512_fmadd_ps(Weights::load_first(w + i, m), _mm512_maskz_loadu_ps(m, x + i), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

// ---- IQ2_XXS x Q8_K, the activation interleaved (decode) ----
//
// A matrix-vector product dots every row with the same activation, so the
// activation is laid out once (iq2_xxs_interleave_act) to suit the weight
// blocks: chunk c (64 bytes) of an interleaved block holds, in its qword s,
// the 8 elements of group 4s + c (sub-block s). Then every chunk's int32
// lanes 2s, 2s+1 belong to sub-block s, so vpdpbusd accumulates all four
// chunks in one register and each sub-block's scale is applied once per
// block; each group's sign byte and grid code sit in qword s of their
// registers, where in-qword byte and bit selects (vpmultishiftqb,
// vpshufbitqmb) reach them. Per block this is about half the vector work of
// iq2_xxs_block_partials_vbmi; rows are taken in pairs so that their grid
// lookups share the byte permutes (iq2_xxs_interleaved_pair): tile/iq2_xxs
// 64x4096x1 41 -> 50 GMAC/s with both.
// The integer sums are the scalar reference's (the order of integer adds
// does not matter), so results are bit-identical to the other levels.

// vpshufbitqmb controls for chunk c: mask bit 8s + j = bit j of sign byte
// 8s + c (group 4s + c's flags, in qword s).
constexpr std::array<std::array<int8_t, 64>, 4> make_iq2_sign_bit_select() {
  std::array<std::array<int8_t, 64>, 4> a{};
  for (int c = 0; c < 4; ++c) {
    for (int b = 0; b < 64; ++b) a[static_cast<size_t>(c)][static_cast<size_t>(b)] = static_cast<int8_t>(8 * c + b % 8);
  }
  return a;
}
alignas(64) constexpr std::array<std::array<int8_t, 64>, 4> kIq2SignBitSelect = make_iq2_sign_bit_select();

// The compact grid as byte tables (CodeByteTables): two blocks' 64 grid
// indices are looked up at once, about half the work of the 16-bit lookup
// per block.
alignas(64) constexpr std::array<uint8_t, 512> kIq2GridBytes = split_code_bytes(kIq2xxsCompactGrid);

// vpermt2b indices over two blocks' codes (block 1 at +64): byte 16L + i of
// 128-bit lane L = the grid index byte of group 8L + i of block 0 (i < 8) or
// of group 8L + i - 8 of block 1 (i >= 8). Group 4s + k's index is byte
// 8s + k of its block. Unpacking the looked-up low and high bytes then gives
// word 8L + i = group 8L + i's code, block 0 from the low halves and block 1
// from the high halves.
constexpr std::array<int8_t, 64> make_iq2_pair_index_bytes() {
  std::array<int8_t, 64> a{};
  for (int lane = 0; lane < 4; ++lane) {
    for (int i = 0; i < 16; ++i) {
      const int group = 8 * lane + i % 8, block = i / 8;
      a[static_cast<size_t>(16 * lane + i)] = static_cast<int8_t>(64 * block + 8 * (group / 4) + group % 4);
    }
  }
  return a;
}
alignas(64) constexpr std::array<int8_t, 64> kIq2PairIndexBytes = make_iq2_pair_index_bytes();

// Integer partials of one block against its interleaved activation (their
// total is the block's isum). Exact unless the activation holds -128
// (negating it overflows); iq2_xxs_interleave_act flags those blocks.
// q: the block's 64 code bytes; codes: word 4s+k = the grid code of group 4s+k.
inline __m512i iq2_xxs_interleaved_partials(__m512i q, __m512i codes, const BlockQ8_K& xi, __m512i signs_lo,
                                            __m512i signs_hi) {
  // Qword s: 2 * (W1 >> 28) + 1 in both dwords (bit 59 is W1's bit 27).
  const __m512i scale =
      _mm512_or_si512(_mm512_shuffle_epi32(_mm512_srli_epi64(q, 59), _MM_PERM_CCAA), _mm512_set1_epi32(1));
  // Byte 8s+k: ksigns of group 4s+k's 7-bit field (vpermi2b reads index bits 0..6).
  const __m512i signs =
      _mm512_permutex2var_epi8(signs_lo, _mm512_multishift_epi64_epi8(load512(kIq2SignFieldShifts), q), signs_hi);
  __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i g = iq2_xxs_chunk_magnitudes(codes, c);
    const __mmask64 negate =
        _mm512_bitshuffle_epi64_mask(signs, load512(kIq2SignBitSelect[static_cast<size_t>(c)].data()));
    const __m512i xv = load512(xi.qs + 64 * c);
    acc = _mm512_dpbusd_epi32(acc, g, _mm512_mask_sub_epi8(xv, negate, _mm512_setzero_si512(), xv));
  }
  // Lanes 2s and 2s+1 (sub-block s) times its scale.
  return _mm512_mullo_epi32(acc, scale);
}

// The partials of two blocks (each against its own interleaved activation),
// their grid codes looked up together.
struct Iq2Partials2 {
  __m512i p0, p1;
};
inline Iq2Partials2 iq2_xxs_interleaved_pair(const BlockIQ2_XXS& w0, const BlockIQ2_XXS& w1, const BlockQ8_K& x0,
                                             const BlockQ8_K& x1, const CodeByteTables& grid, __m512i signs_lo,
                                             __m512i signs_hi) {
  const __m512i q0 = load512(w0.qs), q1 = load512(w1.qs);
  const __m512i idx = _mm512_permutex2var_epi8(q0, load512(kIq2PairIndexBytes.data()), q1);
  const __mmask64 upper = _mm512_movepi8_mask(idx);
  const __m512i lo = code_byte_lookup(idx, upper, grid.lo), hi = code_byte_lookup(idx, upper, grid.hi);
  return {iq2_xxs_interleaved_partials(q0, _mm512_unpacklo_epi8(lo, hi), x0, signs_lo, signs_hi),
          iq2_xxs_interleaved_partials(q1, _mm512_unpackhi_epi8(lo, hi), x1, signs_lo, signs_hi)};
}

float dot_f16_f32(int64_t n, const uint16_t* w, const float* x) { return dot_float<F16Weights>(n, w, x); }
float dot_bf16_f32(int64_t n, const uint16_t* w, const float* x) { return dot_float<BF16Weights>(n, w, x); }
float dot_f32_f32(int64_t n, const float* w, const float* x) { return dot_float<F32Weights>(n, w, x); }

// One AVX-512 level's table: its own kernels for the formats that have
// AVX-512 versions (VNNI dot products, IQ2_XXS's grid from registers with
// VBMI), the avx2 level's one-row kernels for every other format.
template <bool kVnni, bool kVbmi>
constexpr DotKernels avx512_level(const char* isa) {
  return {
      isa,
      dot_q8_0_q8_0<kVnni>,
      dot_q2_K_q8_K<kVnni>,
      dot_q4_K_q8_K<kVnni>,
      dot_iq2_xxs_q8_K<kVnni, kVbmi>,
      dot_mxfp4_q8_0<kVnni>,
      dot_f16_f32,
      dot_bf16_f32,
      dot_f32_f32,
      dot_q6_K_q8_K_avx2,
      dot_iq2_xs_q8_K_avx2,
      dot_iq1_m_q8_K_avx2,
      dot_iq1_s_q8_K_avx2,
      dot_iq3_xxs_q8_K_avx2,
      dot_iq3_s_q8_K_avx2,
      dot_q3_K_q8_K_avx2,
      dot_q5_K_q8_K_avx2,
      dot_iq4_nl_q8_0_avx2,
      dot_iq4_xs_q8_K_avx2,
      dot_q4_0_q8_0_avx2,
      dot_q4_1_q8_1_avx2,
      dot_q5_0_q8_0_avx2,
      dot_q5_1_q8_1_avx2,
      dot_iq2_s_q8_K_avx2,
  };
}

}  // namespace

extern const DotKernels kDotAvx512 = avx512_level<false, false>("avx512");
extern const DotKernels kDotAvx512Vnni = avx512_level<true, false>("avx512vnni");
// The avx512vnni kernels, but IQ2_XXS with its grid in registers (VBMI).
extern const DotKernels kDotAvx512Vbmi = avx512_level<true, true>("avx512vbmi");

namespace avx512_detail {

void iq2_xxs_interleave_act(int64_t nb, const BlockQ8_K* x, BlockQ8_K* xi, uint8_t* exact) {
  for (int64_t i = 0; i < nb; ++i) {
    xi[i].d = x[i].d;
    std::memcpy(xi[i].bsums, x[i].bsums, sizeof(x[i].bsums));
    __m512i x_min = _mm512_set1_epi8(127);
    const __m512i part[4] = {load512(x[i].qs), load512(x[i].qs + 64), load512(x[i].qs + 128),
                             load512(x[i].qs + 192)};
    for (const __m512i& v : part) x_min = _mm512_min_epi8(x_min, v);
    exact[i] = _mm512_cmpeq_epi8_mask(x_min, _mm512_set1_epi8(-128)) != 0;
    // Source qword 4s + c (sub-block s, group c) -> chunk c, qword s.
    const auto* src = reinterpret_cast<const unsigned char*>(x[i].qs);
    auto* dst = reinterpret_cast<unsigned char*>(xi[i].qs);
    for (int c = 0; c < 4; ++c) {
      for (int s = 0; s < 8; ++s) std::memcpy(dst + 8 * (8 * c + s), src + 8 * (4 * s + c), 8);
    }
  }
}

namespace {

template <bool kAnyExact>
__m512 iq2_xxs_rows16(int64_t nb, const BlockIQ2_XXS* const* rows, const BlockIQ2_XXS* const* next,
                      const BlockQ8_K* x, const BlockQ8_K* xi, const uint8_t* exact) {
  const CodeByteTables grid = load_code_byte_tables(kIq2GridBytes.data());
  const __m512i signs_lo = load512(kIq2xsSigns.data()), signs_hi = load512(kIq2xsSigns.data() + 64);
  const __m512 acc = rows16_blocks(nb, rows, next, [&](int64_t b, __m512 sum) {
    // Inlined by force: GCC sometimes leaves this lambda out of line, and a
    // call spills every vector register (the grid tables with them).
    const __m512i isum = block_sums16([&](int k) __attribute__((always_inline)) {
      const BlockIQ2_XXS& w0 = rows[k][b];
      const BlockIQ2_XXS& w1 = rows[k + 1][b];
      if (kAnyExact && exact[b]) {
        return _mm512_inserti64x4(_mm512_castsi256_si512(fold512(iq2_xxs_exact_partials<true>(w0, x[b]))),
                                  fold512(iq2_xxs_exact_partials<true>(w1, x[b])), 1);
      }
      const Iq2Partials2 p = iq2_xxs_interleaved_pair(w0, w1, xi[b], xi[b], grid, signs_lo, signs_hi);
      // Row k's 16 partials folded into the low half, row k+1's into the high.
      return _mm512_add_epi32(_mm512_shuffle_i64x2(p.p0, p.p1, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_i64x2(p.p0, p.p1, _MM_SHUFFLE(3, 1, 3, 1)));
    });
    // As dot_iq2_xxs_q8_K: (d_w * d_x) * isum per block.
    const __m512 d = _mm512_mul_ps(rows_f16_f32(rows, b, offsetof(BlockIQ2_XXS, d)), _mm512_set1_ps(x[b].d));
    return _mm512_add_ps(sum, _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
  });
  return _mm512_mul_ps(_mm512_set1_ps(0.125f), acc);
}

// Rows r0 .. r0+15 of w (rows past n_rows repeat the last one and are not
// stored) and the next 16 rows' pointers (null at the end).
template <typename Block>
int row_group(const uint8_t* w, uint64_t row_bytes, int64_t r0, int64_t n_rows, const Block* rows[16],
              const Block* next_rows[16], const Block* const** next) {
  for (int r = 0; r < 16; ++r) {
    rows[r] = reinterpret_cast<const Block*>(w + static_cast<uint64_t>(std::min<int64_t>(r0 + r, n_rows - 1)) * row_bytes);
    next_rows[r] = reinterpret_cast<const Block*>(
        w + static_cast<uint64_t>(std::min<int64_t>(r0 + 16 + r, n_rows - 1)) * row_bytes);
  }
  *next = r0 + 16 < n_rows ? next_rows : nullptr;
  return static_cast<int>(std::min<int64_t>(16, n_rows - r0));
}

template <typename Block, typename Group>
void for_row_groups(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, float* out, Group group) {
  for (int64_t r0 = 0; r0 < n_rows; r0 += 16) {
    const Block* rows[16];
    const Block* next_rows[16];
    const Block* const* next;
    const int count = row_group(w, row_bytes, r0, n_rows, rows, next_rows, &next);
    store_rows(group(rows, next), out + r0, count);
  }
}

}  // namespace

void iq2_xxs_rows_interleaved(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x,
                              const BlockQ8_K* xi, const uint8_t* exact, float* out) {
  const int64_t nb = n / kQK_K;
  bool any_exact = false;
  for (int64_t i = 0; i < nb; ++i) any_exact |= exact[i] != 0;
  for_row_groups<BlockIQ2_XXS>(w, row_bytes, n_rows, out, [&](const BlockIQ2_XXS* const* rows,
                                                              const BlockIQ2_XXS* const* next) {
    return any_exact ? iq2_xxs_rows16<true>(nb, rows, next, x, xi, exact)
                     : iq2_xxs_rows16<false>(nb, rows, next, x, xi, exact);
  });
}

// ---- Q6_K x Q8_K, 16 rows against one activation ----
//
// The one-row kernel (dot_avx2.cpp's, which every avx512 level uses) forms one
// exact integer per block, sum_j sc_j * (sum of q * x over sub-block j) - 32 *
// sum_j sc_j * bsum_j, and adds (d_w * d_x) * isum in block order; here 16
// rows' integers at once, in lanes, and the same float term per lane.

// permutexvar_epi16 indices: register r covers sub-blocks 4r..4r+3, eight
// words (16 elements' pairs) each.
alignas(64) constexpr WordSpread kQ6ScaleWords = word_spread(8, 1, 0);

// 16 int32 lanes whose total is the block's isum, the -32 offset included.
template <bool kVnni>
inline __m512i q6_K_block_partials(const BlockQ6_K& w, const BlockQ8_K& x) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(3);
  const __m256i scales16 = _mm256_cvtepi8_epi16(load128(w.scales));
  const __m512i scale_words = _mm512_castsi256_si512(scales16);
  // Half h: ql bytes 64h..64h+63 hold elements 128h + 0..63 in their low
  // nibbles and 128h + 64..127 in their high ones; the qh bytes 32h..32h+31
  // (in both 256-bit halves) give each its top two bits, from bits 0-1 / 2-3
  // (low nibbles of the first / second 32) and 4-5 / 6-7 (high nibbles).
  const __m512i shift_low = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
  const __m512i shift_high = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = load512(w.ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(load256(w.qh + 32 * h));
    const __m512i q_low = _mm512_or_si512(
        _mm512_and_si512(ql, low4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift_low), low2), 4));
    const __m512i q_high =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                        _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift_high), low2), 4));
    // q <= 63 and |x| <= 128: each pair's sum fits int16 (no saturation).
    acc[0] = dot_words<kVnni>(acc[0], _mm512_maddubs_epi16(q_low, load512(x.qs + 128 * h)),
                              _mm512_permutexvar_epi16(load512(kQ6ScaleWords[2 * h].data()), scale_words));
    acc[1] = dot_words<kVnni>(acc[1], _mm512_maddubs_epi16(q_high, load512(x.qs + 128 * h + 64)),
                              _mm512_permutexvar_epi16(load512(kQ6ScaleWords[2 * h + 1].data()), scale_words));
  }
  const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales16, load256(x.bsums)), 5);  // 32 * sc * bsum
  return _mm512_sub_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_zextsi256_si512(offset));
}

// The f32 block scales of 16 rows (lane order as block_sums16's): the f16 d
// field, or IQ1_M's scale assembled from its scale words.
template <typename Block>
inline __m512 row_scales(const Block* const* rows, int64_t b) {
  return rows_f16_f32(rows, b, offsetof(Block, d));
}
inline __m512 row_scales(const BlockIQ1_M* const* rows, int64_t b) {
  alignas(32) uint16_t v[16];
#pragma GCC unroll 16
  for (int lane = 0; lane < 16; ++lane) v[lane] = iq1_m_d_bits(rows[transposed_block(lane)][b]);
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(v)));
}

// How a one-row kernel turns a block's isum into floats: acc += (d_w * d_x) *
// (block_scale * isum) in block order, the total times `finish` at the end.
// A factor of 1 is left out, as those kernels do.
struct IsumTerms {
  float block_scale = 1.0f;
  float finish = 1.0f;
};

// Rows whose one-row kernel adds (d_w * d_x) * isum per block (Q3_K, Q6_K,
// IQ4_XS, and the IQ formats with their kTerms): `partials` gives a row
// block's 16 int32 lanes totalling its isum.
template <typename Block, IsumTerms kTerms = IsumTerms{}, typename Partials>
void scaled_int_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out,
                     Partials partials) {
  const int64_t nb = n / kQK_K;
  for_row_groups<Block>(w, row_bytes, n_rows, out, [&](const Block* const* rows, const Block* const* next) {
    const __m512 sum = rows16_blocks(nb, rows, next, [&](int64_t b, __m512 acc) {
      // Inlined by force, as in k_quant_rows16.
      const __m512i isum = block_sums16([&](int k) __attribute__((always_inline)) {
        const __m256i a = fold512(partials(rows[k][b], x[b]));
        const __m256i c = fold512(partials(rows[k + 1][b], x[b]));
        return _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
      });
      // The one-row kernel's (d_w * d_x) * isum, lane by lane.
      const __m512 d = _mm512_mul_ps(row_scales(rows, b), _mm512_set1_ps(x[b].d));
      __m512 value = _mm512_cvtepi32_ps(isum);
      if constexpr (kTerms.block_scale != 1.0f) value = _mm512_mul_ps(_mm512_set1_ps(kTerms.block_scale), value);
      return _mm512_add_ps(acc, _mm512_mul_ps(d, value));
    });
    if constexpr (kTerms.finish != 1.0f) return _mm512_mul_ps(_mm512_set1_ps(kTerms.finish), sum);
    return sum;
  });
}

template <bool kVnni>
void q6_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  scaled_int_rows<BlockQ6_K>(n, w, row_bytes, n_rows, x, out, [](const BlockQ6_K& wb, const BlockQ8_K& xb) {
    return q6_K_block_partials<kVnni>(wb, xb);
  });
}
template void q6_K_rows<false>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);
template void q6_K_rows<true>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);

template <bool kVnni>
void q2_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  for_row_groups<BlockQ2_K>(w, row_bytes, n_rows, out, [&](const BlockQ2_K* const* rows, const BlockQ2_K* const* next) {
    return k_quant_rows16(n / kQK_K, rows, next, x, [](const BlockQ2_K& wb, const BlockQ8_K& xb) {
      return q2_K_parts<kVnni>(wb, xb);
    });
  });
}
template void q2_K_rows<false>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);
template void q2_K_rows<true>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);

// ---- Q3_K x Q8_K, 16 rows against one activation ----
//
// The one-row kernel (dot_avx2.cpp's, which every avx512 level uses) forms one
// exact integer per block, sum_j sc_j * (sum of (q + 4) * x over sub-block j)
// - 4 * sum_j sc_j * bsum_j, and adds (d_w * d_x) * isum in block order; here
// 16 rows' integers at once, in lanes, and the same float term per lane.

// 16 int32 lanes whose total is the block's isum, the -4 offset included.
// Register (h, p) holds elements 128h + 64p + 0..63: the 2-bit planes 2p
// (lower half) and 2p + 1 (upper) of qs bytes 32h.., with hmask bits 4h + 2p
// and 4h + 2p + 1; its sub-blocks 8h + 4p .. + 3 take Q6_K's scale words.
template <bool kVnni>
inline __m512i q3_K_block_partials(const BlockQ3_K& w, const BlockQ8_K& x) {
  const __m512i low2 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
  const __m128i sc = q3_K_signed_scales(w.scales);
  const __m256i scales16 = _mm256_cvtepi8_epi16(sc);
  const __m512i scale_words = _mm512_castsi256_si512(scales16);
  const __m512i hmask = _mm512_broadcast_i64x4(load256(w.hmask));
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i qs = _mm512_broadcast_i64x4(load256(w.qs + 32 * h));
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      const __m512i plane = _mm512_set_epi64(4 * p + 2, 4 * p + 2, 4 * p + 2, 4 * p + 2, 4 * p, 4 * p, 4 * p, 4 * p);
      const int b = 4 * h + 2 * p;
      const __m512i bit = _mm512_set_epi64(b + 1, b + 1, b + 1, b + 1, b, b, b, b);
      // Shifting whole qwords brings the next byte's bits into bits 8-s..7
      // of each byte; the masks keep only bits 0-1 (s <= 6) and bit 0 (s <= 7).
      const __m512i u = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi64(qs, plane), low2),
                                        _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(hmask, bit), one), 2));
      // u <= 7 and |x| <= 128: each pair's sum fits int16.
      acc[p] = dot_words<kVnni>(acc[p], _mm512_maddubs_epi16(u, load512(x.qs + 128 * h + 64 * p)),
                                _mm512_permutexvar_epi16(load512(kQ6ScaleWords[2 * h + p].data()), scale_words));
    }
  }
  const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(scales16, load256(x.bsums)), 2);  // 4 * sc * bsum
  return _mm512_sub_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_zextsi256_si512(offset));
}

template <bool kVnni>
void q3_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  scaled_int_rows<BlockQ3_K>(n, w, row_bytes, n_rows, x, out, [](const BlockQ3_K& wb, const BlockQ8_K& xb) {
    return q3_K_block_partials<kVnni>(wb, xb);
  });
}
template void q3_K_rows<false>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);
template void q3_K_rows<true>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);

// ---- Q5_K x Q8_K, 16 rows against one activation ----
//
// Q4_K's rows (k_quant_rows16) with the fifth bit: chunk c's low nibbles
// (sub-block 2c, lower half) take bit 2c of qh byte l, its high nibbles
// (2c + 1, upper half) bit 2c + 1; codes 0..31, pairs below 2 * 31 * 128.
// Bit-identical to the avx2 one-row kernel every avx512 level uses for Q5_K.
template <bool kVnni>
inline __m512i q5_K_code_partials(const BlockQ5_K& wb, const BlockQ8_K& xb, const Q4KScales& s) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
  const __m512i scale_words =
      _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.scale))));
  const __m512i plane_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  const __m512i qh = _mm512_broadcast_i64x4(load256(wb.qh));
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i q4 = _mm512_broadcast_i64x4(load256(wb.qs + 32 * c));
    const __m512i bit = _mm512_set_epi64(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c, 2 * c, 2 * c, 2 * c);
    const __m512i fifth = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, bit), one), 4);
    const __m512i codes = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi64(q4, plane_shift), low4), fifth);
    acc[c & 1] = dot_words<kVnni>(acc[c & 1], _mm512_maddubs_epi16(codes, load512(xb.qs + 64 * c)),
                                  _mm512_permutexvar_epi16(load512(kQ4ScaleWords[c].data()), scale_words));
  }
  return _mm512_add_epi32(acc[0], acc[1]);
}

template <bool kVnni>
void q5_K_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  for_row_groups<BlockQ5_K>(w, row_bytes, n_rows, out, [&](const BlockQ5_K* const* rows, const BlockQ5_K* const* next) {
    return k_quant_rows16(n / kQK_K, rows, next, x, [](const BlockQ5_K& wb, const BlockQ8_K& xb) {
      const Q4KScales s = unpack_q4_K_scales(wb.scales);
      return KBlockParts{q5_K_code_partials<kVnni>(wb, xb, s), q4_K_min_products(s, xb)};
    });
  });
}
template void q5_K_rows<false>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);
template void q5_K_rows<true>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);

// ---- IQ4_XS x Q8_K, 16 rows against one activation ----
//
// Register r holds sub-blocks 2r and 2r + 1: their 32 nibble bytes placed as
// [low of 2r | high of 2r | low of 2r+1 | high of 2r+1], looked up in the
// table (-127..113), multiplied with x by |x| * (v signed like x) in
// vpmaddubsw (pairs at most 2 * 128 * 127: no saturation, x = -128 included),
// then by the sub-blocks' scales - 32 (Q4_K's scale words). The total is the
// one-row kernel's exact integer.
template <bool kVnni>
inline __m512i iq4_xs_block_partials(const BlockIQ4_XS& w, const BlockQ8_K& x) {
  alignas(16) int16_t ls[8];
#pragma GCC unroll 8
  for (int ib = 0; ib < 8; ++ib) {
    ls[ib] = static_cast<int16_t>(
        (((w.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((w.scales_h >> (2 * ib)) & 3) << 4)) - 32);
  }
  const __m512i scale_words = _mm512_castsi128_si512(_mm_load_si128(reinterpret_cast<const __m128i*>(ls)));
  const __m512i table = _mm512_broadcast_i32x4(load128(kIq4nlValues.data()));
  const __m512i nibble_shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    const __m512i q32 = _mm512_castsi256_si512(load256(w.qs + 32 * r));
    const __m512i q = _mm512_shuffle_i64x2(q32, q32, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i v = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi64(q, nibble_shift), low4));
    const __m512i xv = load512(x.qs + 64 * r);
    const __m512i signed_v = _mm512_mask_sub_epi8(v, _mm512_movepi8_mask(xv), _mm512_setzero_si512(), v);
    acc[r & 1] = dot_words<kVnni>(acc[r & 1], _mm512_maddubs_epi16(_mm512_abs_epi8(xv), signed_v),
                                  _mm512_permutexvar_epi16(load512(kQ4ScaleWords[r].data()), scale_words));
  }
  return _mm512_add_epi32(acc[0], acc[1]);
}

template <bool kVnni>
void iq4_xs_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  scaled_int_rows<BlockIQ4_XS>(n, w, row_bytes, n_rows, x, out, [](const BlockIQ4_XS& wb, const BlockQ8_K& xb) {
    return iq4_xs_block_partials<kVnni>(wb, xb);
  });
}
template void iq4_xs_rows<false>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);
template void iq4_xs_rows<true>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);

// ---- IQ3_XXS, IQ2_XS, IQ2_S, IQ1_M x Q8_K, 16 rows against one activation ----
//
// A block is four 64-element chunks (iq_grids_avx512.h decodes their grid
// magnitudes and sign masks). Each chunk's magnitudes are negated where the
// weight's sign and x's differ and vpmaddubsw takes |x| times them (|x| <=
// 128, magnitudes <= 62: pairs fit int16, x = -128 included); the pairs' words
// are then weighted by their sub-block's or half's multiplier. The total is
// the one-row kernel's exact integer (dot_avx2.cpp, which every avx512 level
// uses for these formats); the float terms are (d_w * d_x) * isum per block
// (IQ1_M: its isum times 0.125 first) and the sum times 0.25 (IQ3_XXS) or
// 0.125 (IQ2_XS, IQ2_S) at the end.

// 16 int32 lanes totalling a block's isum: chunk c's pairs weighted by the
// words of `multipliers` that multiplier_index[c] picks.
template <bool kVnni>
__attribute__((always_inline)) inline __m512i grid_partials(const __m512i magnitudes[4], const uint64_t signs[4],
                                                            const BlockQ8_K& x, const WordSpread& multiplier_index,
                                                            __m512i multipliers) {
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    acc[c & 1] = signed_chunk<kVnni>(acc[c & 1], magnitudes[c], signs[c], x.qs + 64 * c,
                                     _mm512_permutexvar_epi16(load512(multiplier_index[c].data()), multipliers));
  }
  return _mm512_add_epi32(acc[0], acc[1]);
}

// A grid format's rows (Grid: iq_grids_avx512.h's interface).
template <bool kVnni, typename Grid>
void grid_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  using Block = typename Grid::Block;
  const typename Grid::Tables tables = Grid::tables();
  scaled_int_rows<Block, IsumTerms{.block_scale = Grid::kBlockScale, .finish = Grid::kFinalScale}>(
      n, w, row_bytes, n_rows, x, out, [&tables](const Block& wb, const BlockQ8_K& xb) __attribute__((always_inline)) {
        uint64_t signs[4];
        __m512i magnitudes[4];
        Grid::decode(wb, tables, signs, magnitudes);
        return grid_partials<kVnni>(magnitudes, signs, xb, Grid::kMultiplierSpread, Grid::multiplier_words(wb));
      });
}

// The entry points of dot_rows_avx512.h, at the three avx512 levels.
#define DS4_GRID_ROWS(name, Grid)                                                                              \
  template <bool kVnni, bool kVbmi>                                                                            \
  void name(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) { \
    grid_rows<kVnni, Grid<kVbmi>>(n, w, row_bytes, n_rows, x, out);                                            \
  }                                                                                                            \
  template void name<false, false>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);      \
  template void name<true, false>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);       \
  template void name<true, true>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);
DS4_GRID_ROWS(iq3_xxs_rows, Iq3XxsGrid)
DS4_GRID_ROWS(iq2_xs_rows, Iq2XsGrid)
DS4_GRID_ROWS(iq2_s_rows, Iq2SGrid)
#undef DS4_GRID_ROWS

// IQ1_M (Iq1MGrid): its weights signed in place of magnitudes, the float
// terms (d_w * d_x) * (0.125 * isum) per block.
template <bool kVnni>
void iq1_m_rows(int64_t n, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const BlockQ8_K* x, float* out) {
  grid_rows<kVnni, Iq1MGrid<false>>(n, w, row_bytes, n_rows, x, out);
}
template void iq1_m_rows<false>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);
template void iq1_m_rows<true>(int64_t, const uint8_t*, uint64_t, int64_t, const BlockQ8_K*, float*);

}  // namespace avx512_detail
}  // namespace ds4::quant
