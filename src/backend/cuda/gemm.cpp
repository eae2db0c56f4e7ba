#include "backend/cuda/gemm.h"

#include <cublas_v2.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cublas_library.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/quant_kernels.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

void cublas_check(cublasStatus_t status, const char* call, int device) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const CublasLibrary& l = cublas_library();
  throw Error(std::string(call) + " on GPU " + std::to_string(device) + ": " + l.status_string(status) + " (" +
              l.status_name(status) + ")");
}

}  // namespace

GemmRunner::GemmRunner(cudaStream_t stream, size_t weight_scratch_bytes)
    : stream_(stream), weight_scratch_limit_(weight_scratch_bytes) {
  cuda_check(cudaGetDevice(&device_), "cudaGetDevice", -1);
  const CublasLibrary& l = cublas_library();
  cublasHandle_t handle = nullptr;
  cublas_check(l.create(&handle), "cublasCreate", device_);
  handle_ = handle;
  cublas_check(l.set_stream(handle_, stream_), "cublasSetStream", device_);
  // The default mode: tensor cores for the f16 / bf16 products, and F32
  // products in f32 (TF32 only when asked for, which this never does).
  cublas_check(l.set_math_mode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", device_);
}

GemmRunner::~GemmRunner() {
  if (handle_) (void)cublas_library().destroy(handle_);
}

void* GemmRunner::scratch(DeviceBuffer& buffer, size_t bytes) {
  if (buffer.size() < bytes) {
    buffer = DeviceBuffer();  // free before growing
    buffer = DeviceBuffer(bytes);
  }
  return buffer.data();
}

void GemmRunner::use_int8_tensor_cores(backend::Numerics numerics) {
  int8_ = true;
  numerics_ = numerics;
}

bool GemmRunner::int8_for(GgmlType type) const { return int8_ && int8_tensor_core_type(type); }

namespace {

// The activation form of an int8-product weight type.
ActQuant int8_form(GgmlType type, backend::Numerics numerics) {
  ActQuant form;
  if (!int8_tensor_core_type(type) || !activation_quant(type, numerics, form))
    throw Error("matmul: " + std::string(ggml_type_name(type)) + " weights do not take the int8 tensor cores");
  return form;
}

}  // namespace

const void* GemmRunner::quantize_for(GgmlType type, const float* x, int64_t n_tokens, int64_t cols) {
  if (!int8_) throw Error("matmul: the int8 tensor cores are off");
  const ActQuant form = int8_form(type, numerics_);
  void* acts = scratch(quantized_scratch_, static_cast<size_t>(n_tokens * activation_row_bytes(form, cols)));
  quantize_activations(form, x, acts, n_tokens, cols, stream_);
  return acts;
}

void GemmRunner::matmul(GgmlType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens,
                        float* y, int64_t ldy) {
  if (rows == 0 || n_tokens == 0) return;
  if (ldy < rows) throw Error("matmul: output stride " + std::to_string(ldy) + " is below the row count");
  if (int8_for(type)) {
    matmul_int8(type, w, rows, cols, quantize_for(type, x, n_tokens, cols), n_tokens, y, ldy, stream_);
    return;
  }
  cublas_matmul(type, w, rows, cols, x, n_tokens, y, ldy);
}

void GemmRunner::cublas_matmul(GgmlType type, const void* w, int64_t rows, int64_t cols, const float* x,
                               int64_t n_tokens, float* y, int64_t ldy) {
  const float one = 1.0f, zero = 0.0f;
  // Column-major view: W is cols x rows (lda = cols), X is cols x n_tokens,
  // Y is rows x n_tokens (ldc = ldy): Y = W^T X.
  if (type == GgmlType::F32) {
    cublas_check(
        cublas_library().sgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n_tokens),
                               static_cast<int>(cols), &one, static_cast<const float*>(w), static_cast<int>(cols), x,
                               static_cast<int>(cols), &zero, y, static_cast<int>(ldy)),
        "cublasSgemm", device_);
    return;
  }
  const bool bf16 = type == GgmlType::BF16 || type == GgmlType::MXFP4;
  const DequantTo to = bf16 ? DequantTo::BF16 : DequantTo::F16;
  const cudaDataType data_type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  void* acts = scratch(act_scratch_, static_cast<size_t>(n_tokens * cols) * 2);
  dequantize(GgmlType::F32, x, acts, to, n_tokens * cols, stream_);
  // Rows [r0, r0 + n) of W and of Y^T: the weights from row r0, Y from
  // column r0 of its column-major view.
  auto product = [&](const void* weights, int64_t r0, int64_t n) {
    cublas_check(
        cublas_library().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(n_tokens),
                                 static_cast<int>(cols), &one, weights, data_type, static_cast<int>(cols), acts,
                                 data_type, static_cast<int>(cols), &zero, y + r0, CUDA_R_32F, static_cast<int>(ldy),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx", device_);
  };
  if (type == GgmlType::F16 || type == GgmlType::BF16) {
    product(w, 0, rows);
    return;
  }
  const int64_t row_bytes = static_cast<int64_t>(*ggml_nbytes(type, static_cast<uint64_t>(cols)));
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(weight_scratch_limit_) / (2 * cols));
  void* buffer = scratch(weight_scratch_, static_cast<size_t>(std::min(chunk, rows) * cols) * 2);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    dequantize(type, static_cast<const uint8_t*>(w) + r0 * row_bytes, buffer, to, n * cols, stream_);
    product(buffer, r0, n);
  }
}

}  // namespace ds4::cuda
