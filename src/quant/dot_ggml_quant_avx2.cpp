// dot_ggml_quant.h's quantized dots compiled for AVX2 + FMA (dot_ggml_x86.cpp
// calls them when the CPU has both): the same source as the portable copy, so
// the same bits, at 2-3x its speed (std::fma inlined, integer loops
// vectorized); Q8_0, the matrices' type in most mixes, in explicit registers.
// --quality and the reference-parity tests spend most of their time here.
#include <immintrin.h>

#include <cstdint>

#include "core/fp16.h"
#include "quant/dot_ggml_avx2.h"
#include "quant/dot_ggml_quant.h"

namespace ds4::quant::ggml_avx2 {

// ggml's 8-lane Q8_0 form (dot_ggml_quant.h's dot_q8_0_q8_0): lane k of a
// block is the exact sum of products 4k..4k+3, then acc[k] = fma(d, lane,
// acc[k]). The int8 values are widened to int16 and multiplied in pairs into
// int32 (vpmaddwd), so nothing saturates: exact, as the replica's int
// arithmetic.
float dot_q8_0_q8_0(int64_t n, const BlockQ8_0 *w, const BlockQ8_0 *x) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m128i *wq = reinterpret_cast<const __m128i *>(w[i].qs);
    const __m128i *xq = reinterpret_cast<const __m128i *>(x[i].qs);
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

float dot_q4_K_q8_K(int64_t n, const BlockQ4_K *w, const BlockQ8_K *x) { return ggml_quant::dot_q4_K_q8_K(n, w, x); }
float dot_q2_K_q8_K(int64_t n, const BlockQ2_K *w, const BlockQ8_K *x) { return ggml_quant::dot_q2_K_q8_K(n, w, x); }
float dot_mxfp4_q8_0(int64_t n, const BlockMXFP4 *w, const BlockQ8_0 *x) { return ggml_quant::dot_mxfp4_q8_0(n, w, x); }
float dot_iq2_xxs_q8_K(int64_t n, const BlockIQ2_XXS *w, const BlockQ8_K *x) {
  return ggml_quant::dot_iq2_xxs_q8_K(n, w, x);
}
float dot_q6_K_q8_K(int64_t n, const BlockQ6_K *w, const BlockQ8_K *x) { return ggml_quant::dot_q6_K_q8_K(n, w, x); }
float dot_q5_K_q8_K(int64_t n, const BlockQ5_K *w, const BlockQ8_K *x) { return ggml_quant::dot_q5_K_q8_K(n, w, x); }
float dot_q3_K_q8_K(int64_t n, const BlockQ3_K *w, const BlockQ8_K *x) { return ggml_quant::dot_q3_K_q8_K(n, w, x); }
float dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS *w, const BlockQ8_K *x) {
  return ggml_quant::dot_iq3_xxs_q8_K(n, w, x);
}
float dot_iq3_s_q8_K(int64_t n, const BlockIQ3_S *w, const BlockQ8_K *x) { return ggml_quant::dot_iq3_s_q8_K(n, w, x); }
float dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS *w, const BlockQ8_K *x) {
  return ggml_quant::dot_iq4_xs_q8_K(n, w, x);
}
float vec_dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS *w, const BlockQ8_K *x) {
  return ggml_quant::vec_dot_iq3_xxs_q8_K(n, w, x);
}
float vec_dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS *w, const BlockQ8_K *x) {
  return ggml_quant::vec_dot_iq4_xs_q8_K(n, w, x);
}
float dot_q4_0_q8_0(int64_t n, const BlockQ4_0 *w, const BlockQ8_0 *x) { return ggml_quant::dot_q4_0_q8_0(n, w, x); }
float dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL *w, const BlockQ8_0 *x) {
  return ggml_quant::dot_iq4_nl_q8_0(n, w, x);
}
float tinyblas_q4_0_q8_0(int64_t n, const BlockQ4_0 *w, const BlockQ8_0 *x) {
  return ggml_quant::tinyblas_q4_0_q8_0(n, w, x);
}
float tinyblas_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL *w, const BlockQ8_0 *x) {
  return ggml_quant::tinyblas_iq4_nl_q8_0(n, w, x);
}
float dot_q5_0_q8_0(int64_t n, const BlockQ5_0 *w, const BlockQ8_0 *x) { return ggml_quant::dot_q5_0_q8_0(n, w, x); }
float dot_q4_1_q8_1(int64_t n, const BlockQ4_1 *w, const BlockQ8_1 *x) { return ggml_quant::dot_q4_1_q8_1(n, w, x); }
float dot_q5_1_q8_1(int64_t n, const BlockQ5_1 *w, const BlockQ8_1 *x) { return ggml_quant::dot_q5_1_q8_1(n, w, x); }

}  // namespace ds4::quant::ggml_avx2
