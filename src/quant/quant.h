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
// Q8_K, Q2_K, Q4_K, Q6_K, IQ2_XXS, MXFP4, Q4_0, Q4_1, Q5_0 or Q5_1 -> f32. Throws ds4::Error for other types
// or a bad n.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// f32 -> type, for every type dequantize_row supports except Q8_K (use
// quantize_row_q8_K). `importance` (length n, may be null) weights each
// element's squared error like ggml's imatrix quant_weights; used by Q2_K,
// Q4_K, Q6_K, IQ2_XXS and Q4_0 ... Q5_1, ignored by the others (the row is
// the unit for Q4_0 ... Q5_1: their weights use the row's mean square).
// Without importance Q2_K/Q4_K/Q4_0 ... Q5_1 use ggml's plain reference
// quantizers; IQ2_XXS (which ggml refuses without an
// imatrix) uses uniform importance, since one row carries no column
// statistics (ds4's column weight-energy fallback is in quantize_rows). Throws
// ds4::Error for unsupported types or a bad n. Bit-identical to ggml's
// quantize_q2_K / quantize_q4_K / quantize_q6_K / quantize_iq2_xxs /
// quantize_q4_0 / _q4_1 / _q5_0 / _q5_1 / quantize_row_*_ref.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n,
                  const float* importance = nullptr);
bool quantize_supported(GgmlType type);

// nrows rows of n_per_row elements (n_per_row a multiple of the block size;
// rows are stored back to back). `importance` has one entry per column
// (n_per_row), shared by all rows like an imatrix. IQ2_XXS without
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
void dequantize_row_mxfp4(const BlockMXFP4* x, float* y, int64_t n);

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);  // ggml's quantize_row_q8_0_ref
void quantize_row_q2_K(const float* x, BlockQ2_K* y, int64_t n, const float* importance);
void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n, const float* importance);
void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n, const float* importance);
// The 256 signed values q - 32 (-32..31) of a Q6_K block, in element order.
void q6_K_values(const BlockQ6_K& b, int8_t* q);
void quantize_row_iq2_xxs(const float* x, BlockIQ2_XXS* y, int64_t n, const float* importance);
void quantize_row_mxfp4(const float* x, BlockMXFP4* y, int64_t n);
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

}  // namespace ds4::quant
