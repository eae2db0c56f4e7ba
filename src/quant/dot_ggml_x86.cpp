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
#include "quant/ggml_order.h"
#include "quant/k_scales.h"
#include "quant/mxfp4.h"
#include "quant/iq2_xxs_block_sum.h"

namespace ds4::quant {

namespace {

// The float replicas run at the avx2 level (same bits, vector lanes) unless
// the CPU lacks it or DS4_ISA forces the scalar kernels.
bool float_lanes_avx2() {
  static const bool avx2 = std::strcmp(dot_kernels().isa, "scalar") != 0;
  return avx2;
}

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

// The K-quant and MXFP4 experts: ggml repacks them (Q4_K, Q2_K, MXFP4 with
// rows % 8 == 0 on AVX2 / AVX-512) and mul_mat_id runs one gemv per token:
// per super-block (MXFP4: per 32-block) an exact integer sum, then
// acc = fma((float)isum, d_w * d_x, acc); K-quants keep a second accumulator
// for the min term and return acc - acc_min.

float dot_q4_K_q8_K_ggml_x86(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  // ggml_gemv_q4_K_8x8_q8_K.
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t isum = 0, imin = 0;
    for (int sub = 0; sub < 8; ++sub) {
      const ScaleMin6 sm = unpack_q4_K_scale_min(sub, w[i].scales);
      const uint8_t* q4 = w[i].qs + 32 * (sub / 2);
      const int shift = (sub % 2) * 4;
      int32_t s = 0;
      for (int e = 0; e < 32; ++e) s += ((q4[e] >> shift) & 0xF) * x[i].qs[32 * sub + e];
      isum += sm.scale * s;
      imin += sm.min * (x[i].bsums[2 * sub] + x[i].bsums[2 * sub + 1]);
    }
    acc = std::fma(static_cast<float>(isum), f16_to_f32(w[i].d) * x[i].d, acc);
    acc_min = std::fma(static_cast<float>(imin), f16_to_f32(w[i].dmin) * x[i].d, acc_min);
  }
  return acc - acc_min;
}

float dot_q2_K_q8_K_ggml_x86(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x) {
  // ggml_gemv_q2_K_8x8_q8_K.
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* sc = w[i].scales;
    int32_t isum = 0, imin = 0;
    for (int g = 0; g < 16; ++g) imin += x[i].bsums[g] * (sc[g] >> 4);
    // Element k = 128 * half + 32 * (shift / 2) + 16 * part + l holds bits
    // `shift` of q2[32 * half + 16 * part + l]; group = 8 * half + 2 * (shift / 2) + part.
    for (int half = 0; half < 2; ++half)
      for (int pair = 0; pair < 4; ++pair)
        for (int part = 0; part < 2; ++part) {
          const int group = 8 * half + 2 * pair + part;
          int32_t s = 0;
          for (int l = 0; l < 16; ++l) {
            const int q = (w[i].qs[32 * half + 16 * part + l] >> (2 * pair)) & 3;
            s += q * x[i].qs[128 * half + 32 * pair + 16 * part + l];
          }
          isum += (sc[group] & 0xF) * s;
        }
    acc = std::fma(static_cast<float>(isum), f16_to_f32(w[i].d) * x[i].d, acc);
    acc_min = std::fma(static_cast<float>(imin), f16_to_f32(w[i].dmin) * x[i].d, acc_min);
  }
  return acc - acc_min;
}

float dot_mxfp4_q8_0_ggml_x86(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x) {
  // ggml_gemv_mxfp4_8x8_q8_0 (gemv_q4_b32_8x8_q8_0_lut_avx): doubled E2M1
  // integers, the half E8M0 scale times the activation's scale.
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQKMxfp4; ++i) {
    int32_t s = 0;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      s += x[i].qs[j] * kMxfp4DoubledValues[w[i].qs[j] & 0xF];
      s += x[i].qs[j + kQKMxfp4 / 2] * kMxfp4DoubledValues[w[i].qs[j] >> 4];
    }
    acc = std::fma(static_cast<float>(s), e8m0_to_fp32_half(w[i].e) * f16_to_f32(x[i].d), acc);
  }
  return acc;
}

float dot_iq2_xxs_q8_K_ggml_x86(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
  // ggml's IQP path (iqp.cpp), which mul_mat_id takes for IQ types once an
  // expert has >= 8 tokens in the batch: the super-block's exact integer sum
  // (the generic kernel's), then acc = fma(isum, (d_w / 8) * d_x, acc).
  // (An expert with fewer tokens goes through the AVX2 vec_dot instead,
  // whose 8-lane float order differs; a one-batch prefill rarely has one.)
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    acc = std::fma(static_cast<float>(iq2_xxs_block_isum(w[i], x[i].qs)), (f16_to_f32(w[i].d) * 0.125f) * x[i].d,
                   acc);
  return acc;
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
  if (expert || n % (dpbf16 ? 32 : 16) != 0) return ggml_order::vec_dot_bf16(n, w, x, dpbf16, to_float);
  if (dpbf16) return ggml_order::tinyblas_dpbf16(n, w, x, to_float);
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
