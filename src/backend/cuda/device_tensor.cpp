#include "backend/cuda/device_tensor.h"

#include <string>
#include <vector>

#include "backend/cuda/quant_kernels.h"
#include "core/error.h"
#include "quant/quant.h"

namespace ds4::cuda {

namespace {

// ds4::Error naming `t` unless it is present, its type has device kernels
// and it is n_mats matrices of `rows` rows.
void check_view(const model::TensorView& t, int64_t rows, int64_t n_mats) {
  const std::string name(t.name);
  if (!t.present()) throw Error("tensor " + name + " is absent");
  if (!weight_type_supported(t.type))
    throw Error("tensor " + name + " has type " + std::string(ggml_type_name(t.type)) + ", which has no GPU kernels");
  if (rows < 1 || n_mats < 1 || static_cast<uint64_t>(rows * n_mats) != t.n_rows)
    throw Error("tensor " + name + ": " + std::to_string(t.n_rows) + " rows are not " + std::to_string(n_mats) +
                " matrices of " + std::to_string(rows));
}

DeviceTensor shape_of(const model::TensorView& t, int64_t rows, int64_t n_mats) {
  DeviceTensor d;
  d.type = t.type;
  d.cols = static_cast<int64_t>(t.ne[0]);
  d.rows = rows;
  d.n_mats = n_mats;
  d.matrix_bytes = t.row_bytes * static_cast<uint64_t>(rows);
  return d;
}

}  // namespace

DeviceTensor upload_tensor(const model::TensorView& t, int64_t rows, int64_t n_mats) {
  check_view(t, rows, n_mats);
  DeviceTensor d = shape_of(t, rows, n_mats);
  d.data = DeviceBuffer(static_cast<size_t>(t.nbytes));
  d.data.upload(t.data, static_cast<size_t>(t.nbytes));
  return d;
}

DeviceTensor upload_expert_share(const model::TensorView& t, int64_t rows, int64_t n_mats, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error("tensor " + std::string(t.name) + ": share " + std::to_string(rank) + " of " + std::to_string(size));
  if (size == 1) return upload_tensor(t, rows, n_mats);
  check_view(t, rows, n_mats);
  const int64_t owned = (n_mats - rank + size - 1) / size;  // matrices rank, rank + size, ...
  DeviceTensor d = shape_of(t, rows, owned);
  const auto bytes = static_cast<int64_t>(d.matrix_bytes);
  d.data = DeviceBuffer(static_cast<size_t>(bytes * owned));
  for (int64_t e = rank, local = 0; e < n_mats; e += size, ++local)
    cuda_check(cudaMemcpy(d.data.as<uint8_t>() + local * bytes, t.data + e * bytes, static_cast<size_t>(bytes),
                          cudaMemcpyHostToDevice),
               "cudaMemcpy to the GPU", d.data.device());
  return d;
}

DeviceTensor upload_matrix(const model::TensorView& t) { return upload_tensor(t, static_cast<int64_t>(t.n_rows)); }

DeviceBuffer upload_f32(const model::TensorView& t, uint64_t n) {
  if (!t.present() || t.ne[0] * t.n_rows != n)
    throw Error("tensor " + std::string(t.name) + " does not hold " + std::to_string(n) + " values");
  std::vector<float> host(static_cast<size_t>(n));
  quant::dequantize_row(t.type, t.data, host.data(), static_cast<int64_t>(n));
  DeviceBuffer d(host.size() * sizeof(float));
  d.upload(host.data(), host.size() * sizeof(float));
  return d;
}

DeviceProducts::DeviceProducts(cudaStream_t stream, backend::Numerics numerics, PrefillProducts prefill)
    : gemm_(stream), numerics_(numerics) {
  if (prefill == PrefillProducts::Int8TensorCores) gemm_.use_int8_tensor_cores(numerics);
}

void DeviceProducts::run(const DeviceTensor& w, int64_t m, const float* x, int64_t n, float* y, int64_t ldy) {
  if (m < 0 || m >= w.n_mats) throw Error("product: matrix " + std::to_string(m) + " of " + std::to_string(w.n_mats));
  if (n == 0) return;
  const void* matrix = w.matrix(m);
  if (n > kMatvecTokens) {
    gemm_.matmul(w.type, matrix, w.rows, w.cols, x, n, y, ldy);
    return;
  }
  // Few tokens: the decode kernels on the activation form the CPU uses.
  ActQuant form;
  const void* acts = x;
  if (activation_quant(w.type, numerics_, form)) {
    const auto bytes = static_cast<size_t>(n * activation_row_bytes(form, w.cols));
    if (act_.size() < bytes) act_ = DeviceBuffer(bytes);
    quantize_activations(form, x, act_.data(), n, w.cols, stream());
    acts = act_.data();
  }
  if (n == 1)
    matvec(w.type, matrix, w.rows, w.cols, acts, y, MatvecOrder::Fast, stream());
  else
    matvec_batch(w.type, matrix, w.rows, w.cols, acts, static_cast<int>(n), y, ldy, stream());
}

}  // namespace ds4::cuda
