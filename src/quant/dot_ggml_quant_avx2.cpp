// dot_ggml_quant.h's quantized dots compiled for AVX2 + FMA (dot_ggml_x86.cpp
// calls them when the CPU has both): the same source as the portable copy, so
// the same bits, at 2-3x its speed (std::fma inlined, integer loops
// vectorized); in explicit registers: Q8_0 (the matrices' type in most
// mixes) and the IQ2_XXS / IQ3_XXS block integers (grid lookups the compiler
// cannot vectorize).
// --quality and the reference-parity tests spend most of their time here.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "quant/dot_ggml_avx2.h"
#include "quant/dot_ggml_quant.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"

namespace ds4::quant::ggml_avx2 {

// ggml's 8-lane Q8_0 form (dot_ggml_quant.h's dot_q8_0_q8_0): lane k of a
// block is the exact sum of products 4k..4k+3, then acc[k] = fma(d, lane,
// acc[k]). The int8 values are widened to int16 and multiplied in pairs into
// int32 (vpmaddwd), so nothing saturates: exact, as the replica's int
// arithmetic.
float dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m128i* wq = reinterpret_cast<const __m128i*>(w[i].qs);
    const __m128i* xq = reinterpret_cast<const __m128i*>(x[i].qs);
    // Pair sums of elements 0..15 and 16..31: [p0..p3 | p4..p7], pair j = 2j,
    // 2j+1.
    const __m256i lo =
        _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(wq)), _mm256_cvtepi8_epi16(_mm_loadu_si128(xq)));
    const __m256i hi =
        _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(wq + 1)), _mm256_cvtepi8_epi16(_mm_loadu_si128(xq + 1)));
    // hadd gives the 4-element sums as [q0 q1 q4 q5 | q2 q3 q6 q7]; put them in
    // order.
    const __m256i quads = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
    const float d = f16_to_f32(w[i].d) * f16_to_f32(x[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(quads), acc);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, acc);
  return ggml_quant::hsum8(lanes);
}

namespace {

// The 32 byte masks of four sign bytes: byte e is 0xFF where bit e % 8 of
// sign byte e / 8 is set (element e negated).
__m256i sign_masks(uint32_t four_sign_bytes) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(four_sign_bytes)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// The 8 int32 partial sums of grid value x sign x q8 over 32 elements: the
// grid's unsigned bytes (<= 62) take their signs first, then both operands
// widen to int16 and multiply in pairs into int32, so nothing wraps (a q8 of
// -128 included): exact, as the scalar sums.
__m256i signed_grid_products(__m256i grid, uint32_t four_sign_bytes, const int8_t* q8) {
  const __m256i neg = sign_masks(four_sign_bytes);
  const __m256i signed_grid = _mm256_sub_epi8(_mm256_xor_si256(grid, neg), neg);  // -g where the mask is set
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  const __m256i lo = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(signed_grid)),
                                       _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)));
  const __m256i hi = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(signed_grid, 1)),
                                       _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)));
  return _mm256_add_epi32(lo, hi);
}

// One IQ2_XXS / IQ3_XXS sub-block times its scale: `word` holds four 7-bit
// sign-table indices and the 4-bit scale ls (scale 2 ls + 1) in its top nibble.
__m256i scaled_sub_block(__m256i grid, uint32_t word, const int8_t* q8) {
  uint32_t signs = 0;
  for (int g = 0; g < 4; ++g) signs |= uint32_t{kIq2xsSigns[(word >> (7 * g)) & 127]} << (8 * g);
  const __m256i ls = _mm256_set1_epi32(static_cast<int>(2 * (word >> 28) + 1));
  return _mm256_mullo_epi32(signed_grid_products(grid, signs, q8), ls);
}

int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// iq2_xxs_block_isum (iq2_xxs_block_sum.h) in registers: the same integer.
int32_t iq2_xxs_block_isum_avx2(const BlockIQ2_XXS& w, const int8_t* q8) {
  __m256i block = _mm256_setzero_si256();
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    uint32_t aux[2];
    std::memcpy(aux, w.qs + 4 * ib, sizeof(aux));
    const __m256i grid = _mm256_set_epi64x(static_cast<int64_t>(kIq2xxsGrid[(aux[0] >> 24) & 0xFF]),
                                           static_cast<int64_t>(kIq2xxsGrid[(aux[0] >> 16) & 0xFF]),
                                           static_cast<int64_t>(kIq2xxsGrid[(aux[0] >> 8) & 0xFF]),
                                           static_cast<int64_t>(kIq2xxsGrid[aux[0] & 0xFF]));
    block = _mm256_add_epi32(block, scaled_sub_block(grid, aux[1], q8 + 32 * ib));
  }
  return hsum_epi32(block);
}

// iq3_xxs_block_isum (iq_block_sums.h) in registers: the same integer.
int32_t iq3_xxs_block_isum_avx2(const BlockIQ3_XXS& w, const int8_t* q8) {
  __m256i block = _mm256_setzero_si256();
  for (int ib = 0; ib < kQK_K / 32; ++ib) {
    const uint8_t* idx = w.qs + 8 * ib;
    uint32_t aux;
    std::memcpy(&aux, w.qs + kQK_K / 4 + 4 * ib, sizeof(aux));
    const __m256i grid = _mm256_set_epi32(static_cast<int>(kIq3xxsGrid[idx[7]]), static_cast<int>(kIq3xxsGrid[idx[6]]),
                                          static_cast<int>(kIq3xxsGrid[idx[5]]), static_cast<int>(kIq3xxsGrid[idx[4]]),
                                          static_cast<int>(kIq3xxsGrid[idx[3]]), static_cast<int>(kIq3xxsGrid[idx[2]]),
                                          static_cast<int>(kIq3xxsGrid[idx[1]]), static_cast<int>(kIq3xxsGrid[idx[0]]));
    block = _mm256_add_epi32(block, scaled_sub_block(grid, aux, q8 + 32 * ib));
  }
  return hsum_epi32(block);
}


// The IQP form of dot_ggml_quant.h with the block integers above: per block
// acc = fma(isum, (d_w * factor) * d_x, acc), the portable copy's float steps,
// so its bits.
template <typename Block, typename BlockIsum>
float iqp_dot(int64_t n, const Block* w, const BlockQ8_K* x, float factor, BlockIsum isum) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(isum(w[i], x[i].qs))),
                                     _mm_set_ss((f16_to_f32(w[i].d) * factor) * x[i].d), _mm_set_ss(acc)));
  return acc;
}

}  // namespace

float dot_iq2_xxs_q8_K(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
  return iqp_dot(n, w, x, 0.125f, iq2_xxs_block_isum_avx2);
}

float dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  return iqp_dot(n, w, x, 0.25f, iq3_xxs_block_isum_avx2);
}

float dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) { return ggml_quant::dot_q4_K_q8_K(n, w, x); }
float dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x) { return ggml_quant::dot_q2_K_q8_K(n, w, x); }
float dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x) { return ggml_quant::dot_mxfp4_q8_0(n, w, x); }
float dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) { return ggml_quant::dot_q6_K_q8_K(n, w, x); }
float dot_q5_K_q8_K(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x) { return ggml_quant::dot_q5_K_q8_K(n, w, x); }
float dot_q3_K_q8_K(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x) { return ggml_quant::dot_q3_K_q8_K(n, w, x); }
float dot_iq3_s_q8_K(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x) { return ggml_quant::dot_iq3_s_q8_K(n, w, x); }
float dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  return ggml_quant::dot_iq4_xs_q8_K(n, w, x);
}
float vec_dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  return ggml_quant::vec_dot_iq3_xxs_q8_K(n, w, x);
}
float vec_dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  return ggml_quant::vec_dot_iq4_xs_q8_K(n, w, x);
}
float dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) { return ggml_quant::dot_q4_0_q8_0(n, w, x); }
float dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  return ggml_quant::dot_iq4_nl_q8_0(n, w, x);
}
float tinyblas_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) {
  return ggml_quant::tinyblas_q4_0_q8_0(n, w, x);
}
float tinyblas_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  return ggml_quant::tinyblas_iq4_nl_q8_0(n, w, x);
}
float dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x) { return ggml_quant::dot_q5_0_q8_0(n, w, x); }
float dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x) { return ggml_quant::dot_q4_1_q8_1(n, w, x); }
float dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x) { return ggml_quant::dot_q5_1_q8_1(n, w, x); }

}  // namespace ds4::quant::ggml_avx2
