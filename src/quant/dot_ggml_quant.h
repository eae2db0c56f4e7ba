// The quantized dots of ggml's x86 float order (dot_ggml_x86.cpp says why),
// written once and compiled twice: by dot_ggml_x86.cpp for any x86-64, and by
// dot_ggml_quant_avx2.cpp with AVX2 and FMA, where std::fma is one instruction
// instead of a library call and the integer loops vectorize. Every operation
// is an exact integer sum, an explicit fma or a plain multiply, and nothing is
// contracted (-ffp-contract=off), so both copies give the same bits.
//
// Internal linkage (an unnamed namespace): each of the two objects keeps its
// own copy, and no function compiled with the AVX2 flags can become the one the
// linker picks for other callers (tests/cli/check_isa_objects.sh checks it).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "quant/iq2_xxs_block_sum.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/iq3_tables.h"
#include "quant/iq4_values.h"
#include "quant/iq_block_sums.h"
#include "quant/k_scales.h"
#include "quant/legacy_codes.h"
#include "quant/mxfp4.h"
#include "quant/quant.h"

namespace ds4::quant::ggml_quant {
namespace {

// ggml's hsum_float_8: (hi128 + lo128), then lanes (0+2, 1+3), then 0 + 1.
inline float hsum8(const float (&a)[8]) {
  const float l0 = a[4] + a[0], l1 = a[5] + a[1], l2 = a[6] + a[2], l3 = a[7] + a[3];
  return (l0 + l2) + (l1 + l3);
}

// ggml's AVX2 K-quant vec_dots multiply 32-element runs with maddubs then
// madd against the scales: element e lands in int32 lane (e % 32) / 4.
constexpr int lane_of(int e) { return (e % 32) / 4; }

// Per block, acc[k] = fma(d, (float)lane[k], acc[k]) (one 8-lane fmadd).
inline void fma_lanes(float d, const int32_t (&lane)[8], float (&acc)[8]) {
  for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lane[k]), acc[k]);
}

// A super-block's products in ggml's AVX2 K-quant lanes: lane k gets
// sc[e / kGroup] * q[e] * x[e] over the elements e of every 32-run whose
// (e % 32) / 4 is k (lane_of). Exact integers, so the 4-element partial
// sums first (the loops vectorize; the --quality dots run per token).
template <int kGroup>
inline void add_scaled_lanes(const int8_t* q, const int8_t* x, const int* sc, int32_t (&lane)[8]) {
  static_assert(kGroup % 4 == 0);
  for (int run = 0; run < kQK_K / 32; ++run) {
    const int8_t* qr = q + 32 * run;
    const int8_t* xr = x + 32 * run;
    int32_t s[8];
    for (int k = 0; k < 8; ++k) {
      s[k] = qr[4 * k] * xr[4 * k] + qr[4 * k + 1] * xr[4 * k + 1] + qr[4 * k + 2] * xr[4 * k + 2] +
             qr[4 * k + 3] * xr[4 * k + 3];
    }
    for (int k = 0; k < 8; ++k) lane[k] += sc[(32 * run + 4 * k) / kGroup] * s[k];
  }
}

// One 32-element block in ggml's 8-lane form (AVX2 vec_dot and tinyBLAS):
// lane k = fma(d, sum of v[j] * x[j] over j = 4k..4k+3, lane k).
inline void fma_block_lanes(float d, const int (&v)[32], const int8_t* x, float (&acc)[8]) {
  for (int k = 0; k < 8; ++k) {
    int32_t s = 0;
    for (int j = 4 * k; j < 4 * k + 4; ++j) s += v[j] * x[j];
    acc[k] = std::fma(d, static_cast<float>(s), acc[k]);
  }
}

// The codes of a 32-element block (0..15, or 0..31 with qh) minus offset.
inline void legacy_values(const uint8_t* qs, const uint8_t* qh, int offset, int (&v)[32]) {
  legacy::unpack_codes(qs, qh, v);
  for (int& c : v) c -= offset;
}

// Q8_0's 8-lane form over blocks of 32 values from `values(block, v)`.
template <typename Block, typename Values>
inline float q8_0_lanes(int64_t n, const Block* w, const BlockQ8_0* x, Values values) {
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int v[32];
    values(w[i], v);
    fma_block_lanes(f16_to_f32(w[i].d) * f16_to_f32(x[i].d), v, x[i].qs, acc);
  }
  return hsum8(acc);
}

inline float dot_q8_0_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x) {
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

inline float dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
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

inline float dot_q2_K_q8_K(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x) {
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

inline float dot_mxfp4_q8_0(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x) {
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

inline float dot_iq2_xxs_q8_K(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
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

// Q6_K, Q5_K, Q3_K: neither tinyBLAS nor the x86 repack takes them, so
// ggml's mul_mat and mul_mat_id both run the AVX2 vec_dot (zen4 build too):
// 8 int32 lanes per block (lane_of), acc = fma(d_x * d_w, lane, acc), hsum_float_8.

inline float dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) {
  // ggml_vec_dot_q6_K_q8_K: the unsigned codes 0..63 times the scale go into
  // the lanes; the -32 offset is then taken off lane k through the activation
  // sums of the 16-groups 2k and 2k+1 (not the lane's own elements).
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t q[kQK_K];
    q6_K_values(w[i], q);
    for (int8_t& v : q) v = static_cast<int8_t>(v + 32);  // the unsigned codes
    const int8_t* sc = w[i].scales;
    int sc16[kQK_K / 16];
    for (int g = 0; g < kQK_K / 16; ++g) sc16[g] = sc[g];
    int32_t lane[8] = {};
    add_scaled_lanes<16>(q, x[i].qs, sc16, lane);
    for (int k = 0; k < 8; ++k)
      lane[k] -= 32 * (x[i].bsums[2 * k] * sc[2 * k] + x[i].bsums[2 * k + 1] * sc[2 * k + 1]);
    fma_lanes(x[i].d * f16_to_f32(w[i].d), lane, acc);
  }
  return hsum8(acc);
}

inline float dot_q5_K_q8_K(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x) {
  // ggml_vec_dot_q5_K_q8_K: the min term is one exact integer per block,
  // summs = fma(-d_x * dmin_w, (float)imin, summs) in a scalar (contracted
  // in the zen4 build: vfmadd231ss), added after hsum_float_8.
  float acc[8] = {};
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint8_t codes[kQK_K];
    q5_K_codes(w[i], codes);
    int8_t q[kQK_K];
    std::memcpy(q, codes, sizeof q);  // 0..31: the same values as int8
    int32_t lane[8] = {};
    int32_t imin = 0;
    int sc[8];
    for (int sub = 0; sub < 8; ++sub) {
      const ScaleMin6 sm = unpack_q4_K_scale_min(sub, w[i].scales);
      imin += sm.min * (x[i].bsums[2 * sub] + x[i].bsums[2 * sub + 1]);
      sc[sub] = sm.scale;
    }
    add_scaled_lanes<32>(q, x[i].qs, sc, lane);
    summs = std::fma(-x[i].d * f16_to_f32(w[i].dmin), static_cast<float>(imin), summs);
    fma_lanes(x[i].d * f16_to_f32(w[i].d), lane, acc);
  }
  return hsum8(acc) + summs;
}

inline float dot_q3_K_q8_K(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x) {
  // ggml_vec_dot_q3_K_q8_K: signed values -4..3 and scales -32..31, no
  // separate offset term.
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int8_t sc8[kQK_K / 16];
    int8_t q[kQK_K];
    q3_K_scales(w[i], sc8);
    q3_K_values(w[i], q);
    int sc[kQK_K / 16];
    for (int g = 0; g < kQK_K / 16; ++g) sc[g] = sc8[g];
    int32_t lane[8] = {};
    add_scaled_lanes<16>(q, x[i].qs, sc, lane);
    fma_lanes(x[i].d * f16_to_f32(w[i].d), lane, acc);
  }
  return hsum8(acc);
}

// IQ3_XXS, IQ3_S, IQ4_XS go through the IQP panel path as IQ2_XXS does (a
// 2-D matrix: a batch of >= 8 tokens and rows % 8 == 0; an expert: >= 8 of
// its tokens in the batch): acc = fma(isum, dfac_w * d_x, acc), dfac the
// panel's float factor (IQ3_XXS: d / 4, IQ3_S and IQ4_XS: d).

inline float dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    acc = std::fma(static_cast<float>(iq3_xxs_block_isum(w[i], x[i].qs)), (f16_to_f32(w[i].d) * 0.25f) * x[i].d, acc);
  return acc;
}

inline float dot_iq3_s_q8_K(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    acc = std::fma(static_cast<float>(iq3_s_block_isum(w[i], x[i].qs)), f16_to_f32(w[i].d) * x[i].d, acc);
  return acc;
}

inline float dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i)
    acc = std::fma(static_cast<float>(iq4_xs_block_isum(w[i], x[i].qs)), f16_to_f32(w[i].d) * x[i].d, acc);
  return acc;
}

// With fewer than 8 tokens (decode, an expert with few tokens) or a grouped
// 3-D matrix, ggml runs the AVX2 vec_dots instead: 8 integer lanes per block
// (lane_of, sub-block scale per 32 elements), acc = fma(d_w * d_x, lane, acc),
// hsum_float_8 (IQ3_XXS: times 1/4 after it).

inline float vec_dot_iq3_xxs_q8_K(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x) {
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int32_t lane[8] = {};
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      uint32_t aux;
      std::memcpy(&aux, w[i].qs + kQK_K / 4 + 4 * ib, sizeof(aux));
      const int32_t ls = static_cast<int32_t>(2 * (aux >> 28) + 1);
      for (int e = 0; e < 32; ++e) {
        const uint8_t signs = kIq2xsSigns[(aux >> (7 * (e / 8))) & 127];
        const int v = iq3xxs_grid_byte(w[i].qs[8 * ib + e / 4], e % 4);
        const int q8 = x[i].qs[32 * ib + e];
        lane[lane_of(e)] += ls * v * ((signs & kIq2xsSignMask[e % 8]) ? -q8 : q8);
      }
    }
    fma_lanes(f16_to_f32(w[i].d) * x[i].d, lane, acc);
  }
  return 0.25f * hsum8(acc);
}

inline float vec_dot_iq4_xs_q8_K(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x) {
  float acc[8] = {};
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sc[kQK_K / 32];
    iq4_xs_scales(w[i], sc);
    int8_t v[kQK_K];
    for (int run = 0; run < kQK_K / 32; ++run)
      for (int l = 0; l < 16; ++l) {
        const uint8_t byte = w[i].qs[16 * run + l];
        v[32 * run + l] = kIq4nlValues[byte & 0xF];
        v[32 * run + 16 + l] = kIq4nlValues[byte >> 4];
      }
    int32_t lane[8] = {};
    add_scaled_lanes<32>(v, x[i].qs, sc, lane);
    fma_lanes(f16_to_f32(w[i].d) * x[i].d, lane, acc);
  }
  return hsum8(acc);
}

// ---- The 32-element types (legacy mix, IQ4_NL) ----

// Repacked 8x8 (x86 repack for Q4_0 and IQ4_NL when rows % 8 == 0: 2-D
// matrices and experts, gemm and gemv alike): per block an exact integer,
// acc = fma((float)isum, d_w * d_x, acc), as for MXFP4.
inline float dot_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int v[32];
    legacy_values(w[i].qs, nullptr, 8, v);
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += v[j] * x[i].qs[j];
    acc = std::fma(static_cast<float>(s), f16_to_f32(w[i].d) * f16_to_f32(x[i].d), acc);
  }
  return acc;
}

inline float dot_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int32_t s = 0;
    for (int j = 0; j < 16; ++j)
      s += kIq4nlValues[w[i].qs[j] & 0xF] * x[i].qs[j] + kIq4nlValues[w[i].qs[j] >> 4] * x[i].qs[j + 16];
    acc = std::fma(static_cast<float>(s), f16_to_f32(w[i].d) * f16_to_f32(x[i].d), acc);
  }
  return acc;
}

// Not repacked (a grouped 3-D matrix, rows % 8 != 0): tinyBLAS_Q0_AVX, Q8_0's
// 8-lane form. (One token would take ggml's vec_dot; for Q4_0 the same form,
// for IQ4_NL two alternating accumulators, not followed here.)
inline float tinyblas_q4_0_q8_0(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x) {
  return q8_0_lanes(n, w, x, [](const BlockQ4_0& b, int (&v)[32]) { legacy_values(b.qs, nullptr, 8, v); });
}

inline float tinyblas_iq4_nl_q8_0(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x) {
  return q8_0_lanes(n, w, x, [](const BlockIQ4_NL& b, int (&v)[32]) {
    legacy_values(b.qs, nullptr, 0, v);
    for (int k = 0; k < 32; ++k) v[k] = kIq4nlValues[v[k]];
  });
}

// Q5_0: tinyBLAS_Q0_AVX (2-D, >= 2 tokens) and the AVX2 vec_dot (experts)
// share Q8_0's 8-lane form, the values q - 16.
inline float dot_q5_0_q8_0(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x) {
  return q8_0_lanes(n, w, x, [](const BlockQ5_0& b, int (&v)[32]) { legacy_values(b.qs, b.qh, 16, v); });
}

// Q4_1, Q5_1: neither tinyBLAS nor the repack takes them, so every matrix
// runs the AVX2 vec_dot: the unsigned codes in the 8-lane form and the
// offset term summs = fma(m_w, s_x, summs) (contracted in the zen4 build),
// added after hsum_float_8.
inline float dot_q4_1_q8_1(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x) {
  float acc[8] = {};
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    int v[32];
    legacy_values(w[i].qs, nullptr, 0, v);
    summs = std::fma(f16_to_f32(w[i].m), f16_to_f32(x[i].s), summs);
    fma_block_lanes(f16_to_f32(w[i].d) * f16_to_f32(x[i].d), v, x[i].qs, acc);
  }
  return hsum8(acc) + summs;
}

inline float dot_q5_1_q8_1(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x) {
  float acc[8] = {};
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    int v[32];
    legacy_values(w[i].qs, w[i].qh, 0, v);
    summs = std::fma(f16_to_f32(w[i].m), f16_to_f32(x[i].s), summs);
    fma_block_lanes(f16_to_f32(w[i].d) * f16_to_f32(x[i].d), v, x[i].qs, acc);
  }
  return hsum8(acc) + summs;
}

}  // namespace
}  // namespace ds4::quant::ggml_quant
