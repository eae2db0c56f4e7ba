#include "quant/f16_rows.h"

#include <cstring>

#include "core/fp16.h"
#include "quant/dot.h"

namespace ds4::quant {
namespace {

bool use_f16c() {
  static const bool yes = std::strcmp(dot_kernels().isa, "scalar") != 0;
  return yes;
}

}  // namespace

void f32_to_f16_row_scalar(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void f16_to_f32_row_scalar(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

void f32_to_f16_row(const float* x, uint16_t* y, size_t n) {
  if (use_f16c()) return f32_to_f16_row_f16c(x, y, n);
  f32_to_f16_row_scalar(x, y, n);
}

void f16_to_f32_row(const uint16_t* x, float* y, size_t n) {
  if (use_f16c()) return f16_to_f32_row_f16c(x, y, n);
  f16_to_f32_row_scalar(x, y, n);
}

}  // namespace ds4::quant
