// Whole rows between f32 and IEEE half, bit-identical to core/fp16.h's
// f32_to_f16 / f16_to_f32 element by element, with F16C where the dot
// kernels run at the avx2 level or above (the pipeline's f16 hidden states:
// 16384 floats a token each way).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds4::quant {

void f32_to_f16_row(const float* x, uint16_t* y, size_t n);
void f16_to_f32_row(const uint16_t* x, float* y, size_t n);

// The scalar conversions, and the F16C copies (f16_rows_avx2.cpp; only where
// the CPU has AVX2 and F16C), which call the scalar ones for what they leave.
void f32_to_f16_row_scalar(const float* x, uint16_t* y, size_t n);
void f16_to_f32_row_scalar(const uint16_t* x, float* y, size_t n);
void f32_to_f16_row_f16c(const float* x, uint16_t* y, size_t n);
void f16_to_f32_row_f16c(const uint16_t* x, float* y, size_t n);

}  // namespace ds4::quant
