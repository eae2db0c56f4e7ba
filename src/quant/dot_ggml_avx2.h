// The float dots of ggml_order.h at the avx2 level (dot_ggml_avx2.cpp) and
// the quantized dots of dot_ggml_quant.h (dot_ggml_quant_avx2.cpp):
// bit-identical to the scalar replicas, for CPUs with AVX2, FMA and F16C.
// Callers go through dot_ggml_x86.cpp, which checks the CPU.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace ds4::quant::ggml_avx2 {

float vec_dot_f32(int64_t n, const float* x, const float* y);       // ggml_order::vec_dot_f32
float vec_dot_f16(int64_t n, const uint16_t* w, const float* x);    // ggml_order::vec_dot_f16
float tinyblas_f32(int64_t n, const float* w, const float* x);      // ggml_order::tinyblas_dot, f32 weights
float tinyblas_f16(int64_t n, const uint16_t* w, const float* x);   // ggml_order::tinyblas_dot, f16 weights
float tinyblas_bf16(int64_t n, const uint16_t* w, const float* x);  // ggml_order::tinyblas_dot, bf16 weights
// acc[i] = fma(x[i], s, acc[i]) for i < n.
void fma_into(int64_t n, const float* x, float s, float* acc);

// dot_ggml_quant.h's functions of the same names.
float dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x);
float dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x);
float dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x);
float dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x);
float dot_iq2_xxs_q8_K(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x);
float dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x);
float dot_q5_K_q8_K(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x);
float dot_q3_K_q8_K(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x);
float dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x);
float dot_iq3_s_q8_K(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x);
float dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x);
float vec_dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x);
float vec_dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x);
float dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x);
float dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x);
float tinyblas_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x);
float tinyblas_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x);
float dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x);
float dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x);
float dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x);

}  // namespace ds4::quant::ggml_avx2
