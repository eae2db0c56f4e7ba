// What the CUDA kernel tests compare against: the CPU's activation
// quantizers and scalar dot kernels, by type.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "backend/cuda/quant_kernels.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "quant/dot.h"
#include "quant/quant.h"

namespace ds4::cuda::test {

// The CPU quantizer of each activation form: n values of x into y.
inline void cpu_quantize(ActQuant form, const float* x, void* y, int64_t n) {
  switch (form) {
    case ActQuant::Q8_0:
      return quant::quantize_row_q8_0_act_scalar(x, static_cast<quant::BlockQ8_0*>(y), n);
    case ActQuant::Q8_0_GgmlX86:
      return quant::quantize_row_q8_0_act_ggml_x86(x, static_cast<quant::BlockQ8_0*>(y), n);
    case ActQuant::Q8_1:
      return quant::quantize_row_q8_1_act(x, static_cast<quant::BlockQ8_1*>(y), n);
    case ActQuant::Q8_1_GgmlX86:
      return quant::quantize_row_q8_1_act_ggml_x86(x, static_cast<quant::BlockQ8_1*>(y), n);
    case ActQuant::Q8_K:
      return quant::quantize_row_q8_K_scalar(x, static_cast<quant::BlockQ8_K*>(y), n);
  }
}

// The CPU scalar dot of one weight row with one activation row.
using ScalarDot = std::function<float(int64_t, const void*, const void*)>;
inline ScalarDot scalar_dot(GgmlType type) {
  const quant::DotKernels& k = quant::dot_kernels_scalar();
#define DS4_DOT(field, W, A)                                         \
  return [f = k.field](int64_t n, const void* w, const void* a) {    \
    return f(n, static_cast<const W*>(w), static_cast<const A*>(a)); \
  }
  switch (type) {
    case GgmlType::F32:
      DS4_DOT(f32_f32, float, float);
    case GgmlType::F16:
      DS4_DOT(f16_f32, uint16_t, float);
    case GgmlType::BF16:
      DS4_DOT(bf16_f32, uint16_t, float);
    case GgmlType::Q8_0:
      DS4_DOT(q8_0_q8_0, quant::BlockQ8_0, quant::BlockQ8_0);
    case GgmlType::Q4_0:
      DS4_DOT(q4_0_q8_0, quant::BlockQ4_0, quant::BlockQ8_0);
    case GgmlType::Q4_1:
      DS4_DOT(q4_1_q8_1, quant::BlockQ4_1, quant::BlockQ8_1);
    case GgmlType::Q5_0:
      DS4_DOT(q5_0_q8_0, quant::BlockQ5_0, quant::BlockQ8_0);
    case GgmlType::Q5_1:
      DS4_DOT(q5_1_q8_1, quant::BlockQ5_1, quant::BlockQ8_1);
    case GgmlType::MXFP4:
      DS4_DOT(mxfp4_q8_0, quant::BlockMXFP4, quant::BlockQ8_0);
    case GgmlType::IQ4_NL:
      DS4_DOT(iq4_nl_q8_0, quant::BlockIQ4_NL, quant::BlockQ8_0);
    case GgmlType::Q2_K:
      DS4_DOT(q2_K_q8_K, quant::BlockQ2_K, quant::BlockQ8_K);
    case GgmlType::Q3_K:
      DS4_DOT(q3_K_q8_K, quant::BlockQ3_K, quant::BlockQ8_K);
    case GgmlType::Q4_K:
      DS4_DOT(q4_K_q8_K, quant::BlockQ4_K, quant::BlockQ8_K);
    case GgmlType::Q5_K:
      DS4_DOT(q5_K_q8_K, quant::BlockQ5_K, quant::BlockQ8_K);
    case GgmlType::Q6_K:
      DS4_DOT(q6_K_q8_K, quant::BlockQ6_K, quant::BlockQ8_K);
    case GgmlType::IQ2_XXS:
      DS4_DOT(iq2_xxs_q8_K, quant::BlockIQ2_XXS, quant::BlockQ8_K);
    case GgmlType::IQ2_XS:
      DS4_DOT(iq2_xs_q8_K, quant::BlockIQ2_XS, quant::BlockQ8_K);
    case GgmlType::IQ2_S:
      DS4_DOT(iq2_s_q8_K, quant::BlockIQ2_S, quant::BlockQ8_K);
    case GgmlType::IQ3_XXS:
      DS4_DOT(iq3_xxs_q8_K, quant::BlockIQ3_XXS, quant::BlockQ8_K);
    case GgmlType::IQ3_S:
      DS4_DOT(iq3_s_q8_K, quant::BlockIQ3_S, quant::BlockQ8_K);
    case GgmlType::IQ1_S:
      DS4_DOT(iq1_s_q8_K, quant::BlockIQ1_S, quant::BlockQ8_K);
    case GgmlType::IQ1_M:
      DS4_DOT(iq1_m_q8_K, quant::BlockIQ1_M, quant::BlockQ8_K);
    case GgmlType::IQ4_XS:
      DS4_DOT(iq4_xs_q8_K, quant::BlockIQ4_XS, quant::BlockQ8_K);
    default:
      throw Error("no scalar dot for " + std::string(ggml_type_name(type)));
  }
#undef DS4_DOT
}

}  // namespace ds4::cuda::test
