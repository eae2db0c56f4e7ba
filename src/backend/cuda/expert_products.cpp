#include "backend/cuda/expert_products.h"

#include <optional>
#include <vector>

#include "backend/cuda/ops.h"
#include "core/error.h"

namespace ds4::cuda {

namespace {

DeviceBuffer upload_indices(const std::vector<int32_t>& host, cudaStream_t stream) {
  DeviceBuffer buffer(host.size() * sizeof(int32_t));
  if (!host.empty())
    cuda_check(cudaMemcpyAsync(buffer.data(), host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync to the GPU", buffer.device());
  // The host vector may go before the copy runs: wait for it.
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", buffer.device());
  return buffer;
}

void grow(DeviceBuffer& buffer, size_t bytes) {
  if (buffer.size() < bytes) {
    buffer = DeviceBuffer();
    buffer = DeviceBuffer(bytes);
  }
}

}  // namespace

ExpertProducts::ExpertProducts(const backend::ExpertGroups& groups, int k, cudaStream_t stream, int others)
    : groups_(groups), stream_(stream), others_(others), n_pairs_(static_cast<int64_t>(groups.pair_of_row.size())) {
  if (k < 1) throw Error("expert products: " + std::to_string(k) + " experts per token");
  std::vector<int32_t> token_of_row(groups.pair_of_row.size());
  for (size_t r = 0; r < token_of_row.size(); ++r) token_of_row[r] = groups.pair_of_row[r] / k;
  token_of_row_ = upload_indices(token_of_row, stream);
  pair_of_row_ = upload_indices(groups.pair_of_row, stream);
}

void ExpertProducts::run(GemmRunner& gemm, GgmlType type, const void* w, int64_t rows, int64_t cols, const float* src,
                         bool by_token, float* y) {
  if (n_pairs_ == 0) return;
  if (gemm.stream() != stream_) throw Error("expert products: the GEMM runner queues on another stream");
  const std::optional<uint64_t> row_bytes = ggml_nbytes(type, static_cast<uint64_t>(cols));
  if (!row_bytes) throw Error("expert products: a row of " + std::to_string(cols) + " values is not whole blocks");
  const int64_t matrix_bytes = static_cast<int64_t>(*row_bytes) * rows;
  grow(gathered_, static_cast<size_t>(n_pairs_ * cols) * sizeof(float));
  grow(products_, static_cast<size_t>(n_pairs_ * rows) * sizeof(float));
  gather_rows(src, (by_token ? token_of_row_ : pair_of_row_).as<int32_t>(), gathered_.as<float>(), n_pairs_, cols,
              stream_);
  // The int8 kernel's activations quantized once for every expert.
  const bool int8 = gemm.int8_for(type);
  const auto* quantized =
      int8 ? static_cast<const uint8_t*>(gemm.quantize_for(type, gathered_.as<float>(), n_pairs_, cols)) : nullptr;
  const int64_t quantized_row_bytes = int8 ? gemm.quantized_row_bytes(type, cols) : 0;
  for (int32_t e : groups_.active) {
    const int64_t begin = groups_.start[static_cast<size_t>(e)];
    const int64_t count = groups_.start[static_cast<size_t>(e) + 1] - begin;
    if (e == others_) {
      cuda_check(cudaMemsetAsync(products_.as<float>() + begin * rows, 0,
                                 static_cast<size_t>(count * rows) * sizeof(float), stream_),
                 "cudaMemsetAsync", products_.device());
      continue;
    }
    const uint8_t* matrix = static_cast<const uint8_t*>(w) + e * matrix_bytes;
    float* out = products_.as<float>() + begin * rows;
    if (int8)
      gemm.matmul_quantized(type, matrix, rows, cols, quantized + begin * quantized_row_bytes, count, out, rows);
    else
      gemm.matmul(type, matrix, rows, cols, gathered_.as<float>() + begin * cols, count, out, rows);
  }
  scatter_rows(products_.as<float>(), pair_of_row_.as<int32_t>(), y, n_pairs_, rows, stream_);
}

}  // namespace ds4::cuda
