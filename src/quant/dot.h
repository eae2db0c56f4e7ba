// Vector-dot kernels: one weight row of n elements against one activation
// row, result in f32. A DotKernels table holds one implementation per weight
// format for one ISA level; dot_kernels() picks the best level the CPU runs.
//
// The scalar table is the reference: it forms the same integer sums as
// ggml's generic C kernels (ggml-cpu/quants.c) and combines them in the same
// float order, so SIMD levels are tested against it.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/blocks.h"

namespace ds4::quant {

struct DotKernels {
  const char* isa;  // "scalar", "avx2", "avx512", "avx512vnni", "avx512vbmi"
  float (*q8_0_q8_0)(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x);
  float (*q2_K_q8_K)(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x);
  float (*q4_K_q8_K)(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x);
  float (*iq2_xxs_q8_K)(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x);
  float (*mxfp4_q8_0)(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x);  // llama.cpp pairs MXFP4 with Q8_0
  float (*f16_f32)(int64_t n, const uint16_t* w, const float* x);
  float (*bf16_f32)(int64_t n, const uint16_t* w, const float* x);
  float (*f32_f32)(int64_t n, const float* w, const float* x);
  float (*q6_K_q8_K)(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x);
  float (*iq2_xs_q8_K)(int64_t n, const BlockIQ2_XS* w, const BlockQ8_K* x);
  float (*iq1_m_q8_K)(int64_t n, const BlockIQ1_M* w, const BlockQ8_K* x);
  float (*iq1_s_q8_K)(int64_t n, const BlockIQ1_S* w, const BlockQ8_K* x);
  float (*iq3_xxs_q8_K)(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x);
  float (*iq3_s_q8_K)(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x);
  float (*q3_K_q8_K)(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x);
  float (*q5_K_q8_K)(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x);
  float (*iq4_nl_q8_0)(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x);  // ggml's vec_dot_type for IQ4_NL
  float (*iq4_xs_q8_K)(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x);
  float (*q4_0_q8_0)(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x);
  float (*q4_1_q8_1)(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x);
  float (*q5_0_q8_0)(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x);
  float (*q5_1_q8_1)(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x);
  float (*iq2_s_q8_K)(int64_t n, const BlockIQ2_S* w, const BlockQ8_K* x);
};

const DotKernels& dot_kernels_scalar();
// Best level for this CPU. The environment variable DS4_ISA=scalar|avx2|
// avx512|avx512vnni|avx512vbmi forces a level; ds4::Error if the CPU cannot
// run it or the level is not built. Chosen once, on first call. avx512vbmi
// (avx512vnni with IQ2_XXS's grid decoded from registers instead of
// gathered) is chosen by default on AMD CPUs only.
const DotKernels& dot_kernels();
// Every level this CPU can run, scalar first, the most capable last.
std::vector<const DotKernels*> dot_kernels_available();
// True when the level named `isa` is built and this CPU runs it.
bool dot_level_available(const char* isa);
// The level named `isa`; ds4::Error if unknown, not built or not runnable.
const DotKernels& dot_kernels_for(const char* isa);

// Scalar reference kernels (also reachable through dot_kernels_scalar()).
float dot_q8_0_q8_0_scalar(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x);
float dot_q2_K_q8_K_scalar(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x);
float dot_q4_K_q8_K_scalar(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x);
float dot_iq2_xxs_q8_K_scalar(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x);
float dot_mxfp4_q8_0_scalar(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x);
float dot_f16_f32_scalar(int64_t n, const uint16_t* w, const float* x);
float dot_bf16_f32_scalar(int64_t n, const uint16_t* w, const float* x);
float dot_f32_f32_scalar(int64_t n, const float* w, const float* x);
// One integer sum per block (scale times each 16-element sub-block's sum),
// one float term per block, as the other K-quants.
float dot_q6_K_q8_K_scalar(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x);
// One integer sum per block (each 16-value half of a sub-block times its
// multiplier 2 * scale + 1), one float term per block, 1/8 at the end (ggml's
// generic ggml_vec_dot_iq2_xs_q8_K).
float dot_iq2_xs_q8_K_scalar(int64_t n, const BlockIQ2_XS* w, const BlockQ8_K* x);
// Two integer sums per block, sum(q8 * grid) and sum(q8 * shift sign), each
// half's multiplied by its 2 * scale + 1; one float term per block,
// d * d8 * (sum1 + sum2 / 8) (ggml's generic ggml_vec_dot_iq1_m_q8_K).
float dot_iq1_m_q8_K_scalar(int64_t n, const BlockIQ1_M* w, const BlockQ8_K* x);
// sum(q8 * grid) and the shift term from the activation's 16-sums, each
// sub-block's times 2 * scale + 1; d * d8 * (sum + sum_shift / 8) per block
// (ggml's generic ggml_vec_dot_iq1_s_q8_K).
float dot_iq1_s_q8_K_scalar(int64_t n, const BlockIQ1_S* w, const BlockQ8_K* x);
// The avx2 level's, which the AVX-512 levels share (dot_avx2.cpp).
float dot_q6_K_q8_K_avx2(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x);
float dot_iq2_xs_q8_K_avx2(int64_t n, const BlockIQ2_XS* w, const BlockQ8_K* x);
float dot_iq1_m_q8_K_avx2(int64_t n, const BlockIQ1_M* w, const BlockQ8_K* x);
float dot_iq1_s_q8_K_avx2(int64_t n, const BlockIQ1_S* w, const BlockQ8_K* x);
// IQ3_XXS / IQ3_S: one integer sum per block (ggml's generic kernels), the
// avx2 level's shared by the AVX-512 levels.
float dot_iq3_xxs_q8_K_scalar(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x);
float dot_iq3_s_q8_K_scalar(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x);
float dot_iq3_xxs_q8_K_avx2(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x);
float dot_iq3_s_q8_K_avx2(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x);
// Q3_K and Q5_K as Q6_K and Q4_K: one integer sum per block, one float term
// (Q5_K's min through the activation's 16-sums). The AVX-512 levels share
// the avx2 level's kernels.
float dot_q3_K_q8_K_scalar(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x);
float dot_q5_K_q8_K_scalar(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x);
float dot_q3_K_q8_K_avx2(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x);
float dot_q5_K_q8_K_avx2(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x);
// IQ4_NL: one float term per block (ggml's generic kernel). IQ4_XS: one
// integer sum per block (each sub-block's sum times ls - 32), one float term
// per block (ggml's SIMD order, not its generic kernel's per-sub-block terms).
float dot_iq4_nl_q8_0_scalar(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x);
float dot_iq4_xs_q8_K_scalar(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x);
float dot_iq4_nl_q8_0_avx2(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x);
float dot_iq4_xs_q8_K_avx2(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x);
// The 32-element formats, one integer sum per block and ggml's generic float
// order per block: Q4_0 (sum * d_w) * d_x; Q5_0 (d_w * d_x) * sum; Q4_1 and
// Q5_1 (d_w * d_x) * sum + m_w * s_x.
float dot_q4_0_q8_0_scalar(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x);
float dot_q4_1_q8_1_scalar(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x);
float dot_q5_0_q8_0_scalar(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x);
float dot_q5_1_q8_1_scalar(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x);
// The avx2 level's, which the AVX-512 levels share (dot_avx2.cpp).
float dot_q4_0_q8_0_avx2(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x);
float dot_q4_1_q8_1_avx2(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x);
float dot_q5_0_q8_0_avx2(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x);
float dot_q5_1_q8_1_avx2(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x);
// IQ2_S: one integer sum per block (each 16-value half of a sub-block times
// its multiplier 2 * scale + 1), one float term per block, 1/8 at the end
// (ggml's generic ggml_vec_dot_iq2_s_q8_K; its AVX2 kernel accumulates the
// block terms in 8 FMA lanes instead). The avx2 level's is shared by the
// AVX-512 levels.
float dot_iq2_s_q8_K_scalar(int64_t n, const BlockIQ2_S* w, const BlockQ8_K* x);
float dot_iq2_s_q8_K_avx2(int64_t n, const BlockIQ2_S* w, const BlockQ8_K* x);

// The same dots in the float order of ggml's x86 CPU kernels (AVX2 and up),
// for --quality (dot_ggml_x86.cpp). Bit-identical to what llama.cpp computes
// on these CPUs, whatever ISA this engine runs at.
float dot_q8_0_q8_0_ggml_x86(int64_t n, const BlockQ8_0* w, const BlockQ8_0* x);
// F32 / F16 weights (x already f16-rounded for F16): a routed expert's row
// goes through mul_mat_id, i.e. ggml_vec_dot_f32 / _f16; any other matrix
// through llamafile's tinyBLAS (a batch of >= 2 tokens; llama.cpp's decode
// of a single token uses vec_dot there too, which this does not follow).
float dot_f32_ggml_x86(int64_t n, const float* w, const float* x, bool expert);
// Routed experts of the quantised mixes: Q4_K, Q2_K and MXFP4 as ggml's
// repacked 8x8 gemv computes them; IQ2_XXS as ggml's IQP batch kernel does.
float dot_q4_K_q8_K_ggml_x86(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x);
float dot_q2_K_q8_K_ggml_x86(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x);
float dot_mxfp4_q8_0_ggml_x86(int64_t n, const BlockMXFP4* w, const BlockQ8_0* x);
float dot_iq2_xxs_q8_K_ggml_x86(int64_t n, const BlockIQ2_XXS* w, const BlockQ8_K* x);
// Q6_K, Q5_K, Q3_K (any matrix): ggml's AVX2 vec_dot, 8 integer lanes per block.
float dot_q6_K_q8_K_ggml_x86(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x);
float dot_q5_K_q8_K_ggml_x86(int64_t n, const BlockQ5_K* w, const BlockQ8_K* x);
float dot_q3_K_q8_K_ggml_x86(int64_t n, const BlockQ3_K* w, const BlockQ8_K* x);
// IQ3_XXS, IQ3_S, IQ4_XS (any matrix): ggml's IQP panel path (batches of >= 8 tokens).
float dot_iq3_xxs_q8_K_ggml_x86(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x);
float dot_iq3_s_q8_K_ggml_x86(int64_t n, const BlockIQ3_S* w, const BlockQ8_K* x);
float dot_iq4_xs_q8_K_ggml_x86(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x);
// IQ3_XXS, IQ4_XS where ggml runs the AVX2 vec_dot (< 8 tokens, grouped 3-D matrices).
float vec_dot_iq3_xxs_q8_K_ggml_x86(int64_t n, const BlockIQ3_XXS* w, const BlockQ8_K* x);
float vec_dot_iq4_xs_q8_K_ggml_x86(int64_t n, const BlockIQ4_XS* w, const BlockQ8_K* x);
// Q4_0 and IQ4_NL as ggml's x86 repack computes them (rows % 8 == 0), Q5_0
// as tinyBLAS / the AVX2 vec_dot, Q4_1 and Q5_1 as the AVX2 vec_dot.
float dot_q4_0_q8_0_ggml_x86(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x);
float dot_iq4_nl_q8_0_ggml_x86(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x);
// Q4_0, IQ4_NL matrices ggml does not repack: tinyBLAS's 8-lane form.
float tinyblas_q4_0_q8_0_ggml_x86(int64_t n, const BlockQ4_0* w, const BlockQ8_0* x);
float tinyblas_iq4_nl_q8_0_ggml_x86(int64_t n, const BlockIQ4_NL* w, const BlockQ8_0* x);
float dot_q5_0_q8_0_ggml_x86(int64_t n, const BlockQ5_0* w, const BlockQ8_0* x);
float dot_q4_1_q8_1_ggml_x86(int64_t n, const BlockQ4_1* w, const BlockQ8_1* x);
float dot_q5_1_q8_1_ggml_x86(int64_t n, const BlockQ5_1* w, const BlockQ8_1* x);
float dot_f16_ggml_x86(int64_t n, const uint16_t* w, const float* x, bool expert);
// BF16 weights against bf16-rounded activations, in the order of the ggml build
// llama.cpp runs on this CPU (vdpbf16ps with AVX512-BF16, else 16-lane FMAs).
float dot_bf16_ggml_x86(int64_t n, const uint16_t* w, const float* x, bool expert);
// ggml_vec_dot_f32 (ggml_order::vec_dot_f32) of two f32 rows.
float vec_dot_f32_ggml_x86(int64_t n, const float* x, const float* y);
// acc[i] = fma(x[i], s, acc[i]) for i < n (exact per element, so any vector
// width gives the same bits).
void fma_into(int64_t n, const float* x, float s, float* acc);
// The float dots above run their lanes in AVX2 registers when the CPU has
// AVX2/FMA/F16C (dot_ggml_avx2.cpp, bit-identical to the scalar replicas) and
// DS4_ISA does not force scalar.

}  // namespace ds4::quant
