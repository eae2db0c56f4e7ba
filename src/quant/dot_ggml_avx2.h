// The float dots of ggml_order.h at the avx2 level (dot_ggml_avx2.cpp):
// bit-identical to the scalar replicas, for CPUs with AVX2, FMA and F16C.
// Callers go through dot_ggml_x86.cpp, which checks the CPU.
#pragma once

#include <cstdint>

namespace ds4::quant::ggml_avx2 {

float vec_dot_f32(int64_t n, const float* x, const float* y);       // ggml_order::vec_dot_f32
float vec_dot_f16(int64_t n, const uint16_t* w, const float* x);    // ggml_order::vec_dot_f16
float tinyblas_f32(int64_t n, const float* w, const float* x);      // ggml_order::tinyblas_dot, f32 weights
float tinyblas_f16(int64_t n, const uint16_t* w, const float* x);   // ggml_order::tinyblas_dot, f16 weights
float tinyblas_bf16(int64_t n, const uint16_t* w, const float* x);  // ggml_order::tinyblas_dot, bf16 weights
// acc[i] = fma(x[i], s, acc[i]) for i < n.
void fma_into(int64_t n, const float* x, float s, float* acc);

}  // namespace ds4::quant::ggml_avx2
