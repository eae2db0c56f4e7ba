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

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "quant/dot.h"
#include "quant/dot_x86_common.h"
#include "quant/dot_blocks_avx2.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/mxfp4.h"

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
// The unsigned codes q (0..63) times x by vpmaddubsw (pairs <= 2*63*128),
// each 16-element sub-block's pairs times its signed scale by vpmaddwd, and
// the 32 * scale * sum(x) of the offset taken off through the activation's
// 16-sums: the scalar reference's integer sum, then its float term.

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

float dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(3);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const __m256i scales = _mm256_broadcastsi128_si256(load128(w[i].scales));
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(w[i].ql + 64 * h), ql1 = load256(w[i].ql + 64 * h + 32);
      const __m256i qh = load256(w[i].qh + 32 * h);
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
        const __m256i prod = _mm256_maddubs_epi16(q[k], load256(x[i].qs + 128 * h + 32 * k));
        const __m256i sc = _mm256_srai_epi16(_mm256_shuffle_epi8(scales, load256(kQ6ScaleHigh[4 * h + k])), 8);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(prod, sc));
      }
    }
    const __m256i offset =
        _mm256_madd_epi16(_mm256_cvtepi8_epi16(load128(w[i].scales)), load256(x[i].bsums));  // sum sc * 16-sums
    const int isum = hsum_i32(acc) - 32 * hsum_i32(offset);
    sumf += (f16_value(w[i].d) * x[i].d) * static_cast<float>(isum);
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
    dot_q4_0_q8_0,    dot_q4_1_q8_1, dot_q5_0_q8_0, dot_q5_1_q8_1,
};

// The AVX-512 levels' Q6_K kernel (no wider one yet).
float dot_q6_K_q8_K_avx2(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) { return dot_q6_K_q8_K(n, w, x); }
// And its 32-element formats' kernels.
float dot_q4_0_q8_0_avx2(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) { return dot_q4_0_q8_0(n, w, x); }
float dot_q4_1_q8_1_avx2(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x) { return dot_q4_1_q8_1(n, w, x); }
float dot_q5_0_q8_0_avx2(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x) { return dot_q5_0_q8_0(n, w, x); }
float dot_q5_1_q8_1_avx2(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x) { return dot_q5_1_q8_1(n, w, x); }

}  // namespace ds4::quant
