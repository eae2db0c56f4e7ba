// Type-dispatched reference dequantize/quantize entry points and the
// activation quantizers that feed the dot kernels (see dot.h).
//
// dequantize_row reproduces ggml's dequantize_row_* bit for bit (same float
// operation order), including non-finite and subnormal scales.
// quantize_row implements the published ggml reference quantizers (our own
// code, same float operation order, so the bytes equal ggml's); results are
// deterministic and the functions are thread-safe.
#pragma once

#include <cstdint>

#include "core/ggml_type.h"
#include "quant/blocks.h"

namespace ds4::quant {

// n elements (a multiple of the type's block size) of F32, F16, BF16, Q8_0,
// Q8_K, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M, IQ4_NL, IQ4_XS or MXFP4 -> f32. Throws ds4::Error for other types
// or a bad n.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// f32 -> type, for every type dequantize_row supports except Q8_K (use
// quantize_row_q8_K). `importance` (length n, may be null) weights each
// element's squared error like ggml's imatrix quant_weights; used by Q2_K,
// Q4_0 ... Q5_1, Q2_K ... Q6_K and the IQ types, ignored by the others (the row is the unit for
// Q4_0 ... Q5_1: their weights use the row's mean square). Without importance Q4_0 ... Q5_1 and
// the K-quants use ggml's plain reference quantizers; IQ1_M, IQ3_XXS, IQ3_S, IQ4_NL and IQ4_XS
// weight each element by x^2 and IQ2_S by x^2 + sigma2/4 as ggml does; IQ2_XXS, IQ2_XS and
// IQ1_S (which ggml refuses without an imatrix) use uniform importance, since one row carries no column
// statistics (ds4's column weight-energy fallback is in quantize_rows). Throws
// ds4::Error for unsupported types or a bad n. Bit-identical to ggml's
// quantize_q4_0 .. quantize_q5_1 / quantize_q2_K .. quantize_q6_K / quantize_iq2_xxs /
// quantize_iq2_xs / quantize_iq2_s / quantize_iq3_xxs / quantize_iq3_s / quantize_iq1_s / quantize_iq1_m /
// quantize_iq4_nl / quantize_iq4_xs / quantize_row_*_ref.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n,
                  const float* importance = nullptr);
bool quantize_supported(GgmlType type);

// nrows rows of n_per_row elements (n_per_row a multiple of the block size;
// rows are stored back to back). `importance` has one entry per column
// (n_per_row), shared by all rows like an imatrix. IQ2_XXS and IQ2_XS without
// importance uses ds4's weight-energy fallback over these rows:
// importance[col] = sum over rows of w[row][col]^2.
void quantize_rows(GgmlType type, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                   const float* importance = nullptr);

// importance[col] = sum_rows w[row][col]^2 (ds4's fallback when no imatrix).
void weight_energy_importance(const float* w, int64_t nrows, int64_t n_per_row, float* importance);

// Per-format entry points (n a multiple of the block size; no checks).
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n);
void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_iq2_xxs(const BlockIQ2_XXS* x, float* y, int64_t n);
void dequantize_row_iq2_xs(const BlockIQ2_XS* x, float* y, int64_t n);
void dequantize_row_iq2_s(const BlockIQ2_S* x, float* y, int64_t n);
void dequantize_row_iq1_m(const BlockIQ1_M* x, float* y, int64_t n);
void dequantize_row_iq1_s(const BlockIQ1_S* x, float* y, int64_t n);
void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n);
void dequantize_row_iq3_xxs(const BlockIQ3_XXS* x, float* y, int64_t n);
void dequantize_row_iq3_s(const BlockIQ3_S* x, float* y, int64_t n);

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);  // ggml's quantize_row_q8_0_ref
void quantize_row_q2_K(const float* x, BlockQ2_K* y, int64_t n, const float* importance);
void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n, const float* importance);
void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n, const float* importance);
// The 256 signed values q - 32 (-32..31) of a Q6_K block, in element order.
void q6_K_values(const BlockQ6_K& b, int8_t* q);
void quantize_row_iq2_xxs(const float* x, BlockIQ2_XXS* y, int64_t n, const float* importance);
void quantize_row_iq2_xs(const float* x, BlockIQ2_XS* y, int64_t n, const float* importance);
// IQ2_S: ggml's quantize_iq2_s; without importance each element is weighted
// by x^2 + sigma2/4 (sigma2: twice the block's mean square), as ggml does.
void quantize_row_iq2_s(const float* x, BlockIQ2_S* y, int64_t n, const float* importance);
// Without importance IQ1_M weights each element by x^2, as ggml's quantizer does
// (ggml's tools refuse IQ1_M without an imatrix).
void quantize_row_iq1_m(const float* x, BlockIQ1_M* y, int64_t n, const float* importance);
// IQ1_S without importance: uniform weights (ggml refuses it without an imatrix).
void quantize_row_iq1_s(const float* x, BlockIQ1_S* y, int64_t n, const float* importance);
// An IQ1_M block's fields decoded: the super-block scale, each 16-value
// half's multiplier 2 * scale + 1, each group's grid index and shift sign.
struct Iq1MUnpacked {
  float d;
  int8_t multiplier[kQK_K / 16];
  uint16_t index[kQK_K / 8];
  uint8_t shift_negative[kQK_K / 8];  // 1: the group's values are shifted by -1/8
};
void iq1_m_unpack(const BlockIQ1_M& b, Iq1MUnpacked& u);
void quantize_row_mxfp4(const float* x, BlockMXFP4* y, int64_t n);
// IQ3_XXS / IQ3_S: ggml's quantize_iq3_xxs / quantize_iq3_s; without
// importance each element is weighted by x^2 (ggml allows both without an
// imatrix, unlike IQ2_XXS).
void quantize_row_iq3_xxs(const float* x, BlockIQ3_XXS* y, int64_t n, const float* importance);
void quantize_row_iq3_s(const float* x, BlockIQ3_S* y, int64_t n, const float* importance);
void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n);
void quantize_row_q3_K(const float* x, BlockQ3_K* y, int64_t n, const float* importance);
// The 16 signed sub-block scales sc - 32 (-32..31) and the 256 signed values
// q - 4 (-4..3) of a Q3_K block, in element order.
void q3_K_scales(const BlockQ3_K& b, int8_t* sc);
void q3_K_values(const BlockQ3_K& b, int8_t* q);
void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n);
void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n, const float* importance);
// The 256 codes 0..31 of a Q5_K block, in element order.
void q5_K_codes(const BlockQ5_K& b, uint8_t* q);
void dequantize_row_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n, const float* importance);
void dequantize_row_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n);
void quantize_row_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n, const float* importance);
// The 8 sub-block scales ls - 32 (-32..31) of an IQ4_XS block.
void iq4_xs_scales(const BlockIQ4_XS& b, int* sc);
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_row_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n, const float* importance);
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, const float* importance);
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n, const float* importance);
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n, const float* importance);

// ---- Activation quantizers ----
//
// Q8_0 activations come in three variants that differ only at exact
// rounding ties and in the last ulp of the reciprocal scale:
//   ds4 (quantize_row_q8_0_act):   d = amax/127, id = d ? 1/d : 0,
//                                  q = clamp(lrintf(x*id), -128, 127)  (ties to even)
//   ggml generic / reference (quantize_row_q8_0_act_ggml, == quantize_row_q8_0):
//                                  d = amax/127, id = d ? 1/d : 0, q = roundf(x*id)  (ties away from 0)
//   ggml x86 AVX/AVX2 path, what llama.cpp runs on x86 (quantize_row_q8_0_act_ggml_x86):
//                                  d = amax/127, id = amax ? 127/amax : 0,
//                                  q = round-half-even(x*id)
// In every variant the stored scale is f16(d).
void quantize_row_q8_0_act(const float* x, BlockQ8_0* y, int64_t n);
// Its three implementations (quantize_row_q8_0_act picks by the dot kernels'
// level), bit-identical; the AVX-512 and AVX2 ones only where the CPU has them.
void quantize_row_q8_0_act_scalar(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_0_act_avx512(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_0_act_avx2(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_0_act_ggml(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_0_act_ggml_x86(const float* x, BlockQ8_0* y, int64_t n);

// Q8_1 (for Q4_1 / Q5_1 weights): the Q8_0 codes and f16(d) of the matching
// Q8_0 variant, plus s = f16(d * sum of the 32 codes) with d = amax/127 in
// f32 (before rounding to f16), as ggml's quantize_row_q8_1:
//   ds4 (quantize_row_q8_1_act): the codes of quantize_row_q8_0_act;
//   ggml x86 (quantize_row_q8_1_act_ggml_x86), what llama.cpp runs on x86
//   (AVX/AVX2 path): the codes of quantize_row_q8_0_act_ggml_x86, the sum
//   taken over the converted int32 values before the saturating packs.
// ggml's generic/reference quantize_row_q8_1_ref rounds like
// quantize_row_q8_0_act_ggml (ties away from zero); not needed here.
void quantize_row_q8_1_act(const float* x, BlockQ8_1* y, int64_t n);
void quantize_row_q8_1_act_ggml_x86(const float* x, BlockQ8_1* y, int64_t n);

// Q8_K: M = the signed element with the largest |x| (first on ties),
// iscale = -127/M, q = clamp(lrintf(iscale*x), -128, 127), d = 1/iscale,
// bsums = sums of 16 consecutive q; an all-zero block gives d = 0, q = 0.
// Identical to ggml's quantize_row_q8_K_ref (its nearest_int is also ties to
// even, and M maps to exactly -127), which is also what ggml runs on x86.
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);
// Its implementations (quantize_row_q8_K picks by the dot kernels' level),
// bit-identical; the AVX-512 and AVX2 ones only where the CPU has them.
void quantize_row_q8_K_scalar(const float* x, BlockQ8_K* y, int64_t n);
void quantize_row_q8_K_avx512(const float* x, BlockQ8_K* y, int64_t n);
void quantize_row_q8_K_avx2(const float* x, BlockQ8_K* y, int64_t n);

}  // namespace ds4::quant
