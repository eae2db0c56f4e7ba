// Dot products in the float order of ggml's x86 CPU kernels (AVX2 and up),
// for --quality: llama.cpp's quantised matmuls re-quantise activations, so a
// one-ulp difference in a dot product can flip an activation code in the next
// layer; matching ggml's accumulation order bit for bit avoids that.
#include <cmath>

#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/ggml_order.h"

namespace ds4::quant {

namespace {

// ggml's hsum_float_8: (hi128 + lo128), then lanes (0+2, 1+3), then 0 + 1.
float hsum8(const float (&a)[8]) {
  const float l0 = a[4] + a[0], l1 = a[5] + a[1], l2 = a[6] + a[2], l3 = a[7] + a[3];
  return (l0 + l2) + (l1 + l3);
}

}  // namespace

float dot_q8_0_q8_0_ggml_x86(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x) {
  // ggml_vec_dot_q8_0_q8_0 (AVX2 branch) and llamafile's tinyBLAS_Q0_AVX
  // agree: 8 float lanes, lane k gets fma(d_w * d_x, sum of products
  // 4k..4k+3, lane), blocks in order, then hsum_float_8.
  const int64_t nb = n / kQK8_0;
  float acc[8] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(w[i].d) * f16_to_f32(x[i].d);
    for (int k = 0; k < 8; ++k) {
      int s = 0;
      for (int j = 4 * k; j < 4 * k + 4; ++j) s += w[i].qs[j] * x[i].qs[j];
      acc[k] = std::fma(d, static_cast<float>(s), acc[k]);
    }
  }
  return hsum8(acc);
}

float dot_f32_ggml_x86(int64_t n, const float* w, const float* x, bool expert) {
  if (expert || n % 16 != 0) return ggml_order::vec_dot_f32(n, w, x);
  return ggml_order::tinyblas_dot(n, w, x, [](float v) { return v; });
}

float dot_f16_ggml_x86(int64_t n, const uint16_t* w, const float* x, bool expert) {
  const auto to_float = [](uint16_t h) { return f16_to_f32(h); };
  if (expert || n % 16 != 0) return ggml_order::vec_dot_f16(n, w, x, to_float);
  return ggml_order::tinyblas_dot(n, w, x, to_float);
}

}  // namespace ds4::quant
