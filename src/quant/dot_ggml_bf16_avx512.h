// ggml_order.h's BF16 dots as the AVX512-BF16 build of ggml computes them,
// with the vdpbf16ps instruction itself (dot_ggml_bf16_avx512.cpp): the
// same bits as the scalar replicas by the instruction's definition, ~50x
// faster. Only for CPUs with AVX512-BF16; callers go through
// dot_ggml_x86.cpp, which checks the CPU.
#pragma once

#include <cstdint>

namespace ds4::quant::ggml_avx512bf16 {

// ggml_order::tinyblas_dpbf16 (n % 32 == 0).
float tinyblas_dpbf16(int64_t n, const uint16_t* w, const float* x);
// ggml_order::vec_dot_bf16 with dpbf16.
float vec_dot_dpbf16(int64_t n, const uint16_t* w, const float* x);

}  // namespace ds4::quant::ggml_avx512bf16
