// Dot products in the float order of ggml's x86 CPU kernels (AVX2 and up),
// for --quality: llama.cpp's quantised matmuls re-quantise activations, so a
// one-ulp difference in a dot product can flip an activation code in the next
// layer; matching ggml's accumulation order bit for bit avoids that.
#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/dot_ggml_avx2.h"
#include "quant/dot_ggml_bf16_avx512.h"
#include "quant/dot_ggml_quant.h"
#include "quant/ggml_order.h"
#include "quant/iq4_values.h"
#include "quant/k_scales.h"
#include "quant/legacy_codes.h"
#include "quant/mxfp4.h"
#include "quant/iq2_xxs_block_sum.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"
#include "quant/iq_block_sums.h"
#include "quant/quant.h"

namespace ds4::quant {

namespace {

// The float replicas run at the avx2 level (same bits, vector lanes) unless
// the CPU lacks it or DS4_ISA forces the scalar kernels.
bool float_lanes_avx2() {
  static const bool avx2 = std::strcmp(dot_kernels().isa, "scalar") != 0;
  return avx2;
}

}  // namespace

// The quantized dots (dot_ggml_quant.h), in AVX2 registers where the CPU has them.

float dot_q8_0_q8_0_ggml_x86(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q8_0_q8_0(n, w, x) : ggml_quant::dot_q8_0_q8_0(n, w, x);
}

float dot_q4_K_q8_K_ggml_x86(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q4_K_q8_K(n, w, x) : ggml_quant::dot_q4_K_q8_K(n, w, x);
}

float dot_q2_K_q8_K_ggml_x86(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q2_K_q8_K(n, w, x) : ggml_quant::dot_q2_K_q8_K(n, w, x);
}

float dot_mxfp4_q8_0_ggml_x86(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_mxfp4_q8_0(n, w, x) : ggml_quant::dot_mxfp4_q8_0(n, w, x);
}

float dot_iq2_xxs_q8_K_ggml_x86(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_iq2_xxs_q8_K(n, w, x) : ggml_quant::dot_iq2_xxs_q8_K(n, w, x);
}

float dot_q6_K_q8_K_ggml_x86(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q6_K_q8_K(n, w, x) : ggml_quant::dot_q6_K_q8_K(n, w, x);
}

float dot_q5_K_q8_K_ggml_x86(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q5_K_q8_K(n, w, x) : ggml_quant::dot_q5_K_q8_K(n, w, x);
}

float dot_q3_K_q8_K_ggml_x86(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q3_K_q8_K(n, w, x) : ggml_quant::dot_q3_K_q8_K(n, w, x);
}

float dot_iq3_xxs_q8_K_ggml_x86(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_iq3_xxs_q8_K(n, w, x) : ggml_quant::dot_iq3_xxs_q8_K(n, w, x);
}

float dot_iq3_s_q8_K_ggml_x86(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_iq3_s_q8_K(n, w, x) : ggml_quant::dot_iq3_s_q8_K(n, w, x);
}

float dot_iq4_xs_q8_K_ggml_x86(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_iq4_xs_q8_K(n, w, x) : ggml_quant::dot_iq4_xs_q8_K(n, w, x);
}

float vec_dot_iq3_xxs_q8_K_ggml_x86(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::vec_dot_iq3_xxs_q8_K(n, w, x) : ggml_quant::vec_dot_iq3_xxs_q8_K(n, w, x);
}

float vec_dot_iq4_xs_q8_K_ggml_x86(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  return float_lanes_avx2() ? ggml_avx2::vec_dot_iq4_xs_q8_K(n, w, x) : ggml_quant::vec_dot_iq4_xs_q8_K(n, w, x);
}

float dot_q4_0_q8_0_ggml_x86(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q4_0_q8_0(n, w, x) : ggml_quant::dot_q4_0_q8_0(n, w, x);
}

float dot_iq4_nl_q8_0_ggml_x86(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_iq4_nl_q8_0(n, w, x) : ggml_quant::dot_iq4_nl_q8_0(n, w, x);
}

float tinyblas_q4_0_q8_0_ggml_x86(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) {
  return float_lanes_avx2() ? ggml_avx2::tinyblas_q4_0_q8_0(n, w, x) : ggml_quant::tinyblas_q4_0_q8_0(n, w, x);
}

float tinyblas_iq4_nl_q8_0_ggml_x86(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  return float_lanes_avx2() ? ggml_avx2::tinyblas_iq4_nl_q8_0(n, w, x) : ggml_quant::tinyblas_iq4_nl_q8_0(n, w, x);
}

float dot_q5_0_q8_0_ggml_x86(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q5_0_q8_0(n, w, x) : ggml_quant::dot_q5_0_q8_0(n, w, x);
}

float dot_q4_1_q8_1_ggml_x86(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q4_1_q8_1(n, w, x) : ggml_quant::dot_q4_1_q8_1(n, w, x);
}

float dot_q5_1_q8_1_ggml_x86(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x) {
  return float_lanes_avx2() ? ggml_avx2::dot_q5_1_q8_1(n, w, x) : ggml_quant::dot_q5_1_q8_1(n, w, x);
}

float dot_f32_ggml_x86(int64_t n, const float* w, const float* x, bool expert) {
  if (expert || n % 16 != 0) return vec_dot_f32_ggml_x86(n, w, x);
  if (float_lanes_avx2()) return ggml_avx2::tinyblas_f32(n, w, x);
  return ggml_order::tinyblas_dot(n, w, x, [](float v) { return v; });
}

float dot_f16_ggml_x86(int64_t n, const uint16_t* w, const float* x, bool expert) {
  const auto to_float = [](uint16_t h) { return f16_to_f32(h); };
  if (expert || n % 16 != 0) {
    return float_lanes_avx2() ? ggml_avx2::vec_dot_f16(n, w, x) : ggml_order::vec_dot_f16(n, w, x, to_float);
  }
  return float_lanes_avx2() ? ggml_avx2::tinyblas_f16(n, w, x) : ggml_order::tinyblas_dot(n, w, x, to_float);
}

float dot_bf16_ggml_x86(int64_t n, const uint16_t* w, const float* x, bool expert) {
  // The build llama.cpp loads here: vdpbf16ps where the CPU has AVX512-BF16.
  static const bool dpbf16 = cpu_features().avx512bf16;
  const auto to_float = [](uint16_t h) { return bf16_to_f32(h); };
  if (dpbf16) {
    // The instruction itself: the replica's bits by its definition.
    if (expert || n % 32 != 0) return ggml_avx512bf16::vec_dot_dpbf16(n, w, x);
    return ggml_avx512bf16::tinyblas_dpbf16(n, w, x);
  }
  if (expert || n % 16 != 0) return ggml_order::vec_dot_bf16(n, w, x, false, to_float);
  return float_lanes_avx2() ? ggml_avx2::tinyblas_bf16(n, w, x) : ggml_order::tinyblas_dot(n, w, x, to_float);
}

float vec_dot_f32_ggml_x86(int64_t n, const float* x, const float* y) {
  return float_lanes_avx2() ? ggml_avx2::vec_dot_f32(n, x, y) : ggml_order::vec_dot_f32(n, x, y);
}

void fma_into(int64_t n, const float* x, float s, float* acc) {
  if (float_lanes_avx2()) {
    ggml_avx2::fma_into(n, x, s, acc);
    return;
  }
  for (int64_t i = 0; i < n; ++i) acc[i] = std::fma(x[i], s, acc[i]);
}

}  // namespace ds4::quant
