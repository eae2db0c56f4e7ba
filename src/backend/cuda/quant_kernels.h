// The weight formats on a GPU (device pointers, asynchronous on `stream`):
// activation quantizers, dequantizers and matrix-vector products for every
// weight type the CPU backend runs (backend/cpu/matvec.h lists the pairs).
//
// Numerics: activation codes and dequantized values equal the CPU's bit for
// bit. A product row's block terms equal the CPU scalar kernel's; the fast
// kernel adds them in another order (a warp per row), the reference-order
// kernel adds them as the CPU does (a thread per row) and so equals
// quant::dot_kernels_scalar() bit for bit: the kernels' check.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/numerics.h"
#include "core/ggml_type.h"

namespace ds4::cuda {

// The activation forms of the quantized weight types.
enum class ActQuant {
  Q8_0,         // ds4's rounding (quant::quantize_row_q8_0_act)
  Q8_0_GgmlX86, // ggml's x86 rounding (quantize_row_q8_0_act_ggml_x86)
  Q8_1,         // quantize_row_q8_1_act
  Q8_1_GgmlX86, // quantize_row_q8_1_act_ggml_x86
  Q8_K,         // quantize_row_q8_K
};

// The form a weight of `type` is dotted with in `numerics`, as the CPU's
// activation_form; false for F32, F16 and BF16 (dotted with floats) and for
// types without a kernel.
bool activation_quant(GgmlType weight_type, backend::Numerics numerics, ActQuant& out);
// Bytes of one quantized row of n_cols values (a whole number of blocks).
int64_t activation_row_bytes(ActQuant form, int64_t n_cols);
// n_rows rows of n_cols floats (row stride n_cols) -> n_rows quantized rows
// back to back.
void quantize_activations(ActQuant form, const float* x, void* y, int64_t n_rows, int64_t n_cols,
                          cudaStream_t stream);

// Types with a device dequantizer and matrix-vector product: F32, F16, BF16
// and every quantized type of quant/blocks.h.
bool weight_type_supported(GgmlType type);

enum class DequantTo { F32, F16, BF16 };
// n values (whole blocks) of `type` at w -> y as f32 (bit-identical to
// quant::dequantize_row), or rounded to f16 / bf16 (nearest even).
void dequantize(GgmlType type, const void* w, void* y, DequantTo to, int64_t n, cudaStream_t stream);

enum class MatvecOrder { Fast, Reference };
// y[r] = row r of W . act for r < rows: W is rows x cols of `type`, rows back
// to back; act is one row in the form the type is dotted with (quantized:
// activation_quant's; F32/F16/BF16: cols floats).
void matvec(GgmlType type, const void* w, int64_t rows, int64_t cols, const void* act, float* y, MatvecOrder order,
            cudaStream_t stream);

// Batched decode: y[a * ldy + r] = row r of W . activation a for a < n_acts,
// the activations back to back in the weight's form (quantized rows of cols
// values, or cols floats each). Every weight block is read once for up to 4
// activations, and each result equals matvec's fast order for that
// activation alone, bit for bit, whatever n_acts is.
void matvec_batch(GgmlType type, const void* w, int64_t rows, int64_t cols, const void* acts, int n_acts, float* y,
                  int64_t ldy, cudaStream_t stream);

// Decode's routed experts: for each of n_pairs token-slot pairs p, y[p *
// ldy + r] = row r of expert matrix ids[p] (device memory; each matrix rows
// x cols, back to back) . activation p (quantized rows back to back). Each
// result equals matvec's fast order on that expert's matrix, bit for bit;
// a negative id gives that pair zeros (another GPU's expert under tensor
// parallel). The quantized types only (the routed experts' types).
void matvec_experts(GgmlType type, const void* w, int64_t rows, int64_t cols, const int32_t* ids, int n_pairs,
                    const void* acts, float* y, int64_t ldy, cudaStream_t stream);

// Prefill on the int8 tensor cores (mmq.cu): every quantized type but IQ1_M.
bool int8_tensor_core_type(GgmlType type);
// y[t * ldy + r] = row r of W . activation t for t < n_tokens, the
// activations quantized in the weight's form back to back (as
// matvec_batch's). Each result equals matvec's reference order, and so the
// CPU scalar kernel, bit for bit: the same integer sums and float terms,
// added in block order.
void matmul_int8(GgmlType type, const void* w, int64_t rows, int64_t cols, const void* acts, int64_t n_tokens, float* y,
                 int64_t ldy, cudaStream_t stream);

// Up to kInt8TaskTokens consecutive activation rows against one matrix of a
// 3-D weight: one thread block column of matmul_int8_tasks.
struct Int8Task {
  int32_t matrix;    // which matrix
  int32_t token0;    // its first activation row (and output row)
  int32_t n_tokens;  // 1 .. kInt8TaskTokens
};
inline constexpr int kInt8TaskTokens = 64;
// Many products in one launch (prefill's routed experts): for each task of
// tasks[0 .. n_tasks) (device memory) and i < its n_tokens, y[(token0 + i) *
// ldy + r] = row r of matrix `matrix` (rows x cols each, matrix_bytes apart
// from w) . activation token0 + i (quantized rows back to back). Each result
// equals matmul_int8's, bit for bit. n_tasks <= 65535.
void matmul_int8_tasks(GgmlType type, const void* w, int64_t matrix_bytes, int64_t rows, int64_t cols, const void* acts,
                       const Int8Task* tasks, int n_tasks, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace ds4::cuda
