#include "backend/cuda/expert_products.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "backend/cuda/ops.h"
#include "backend/cuda/quant_kernels.h"
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
  std::vector<int32_t> tasks;  // Int8Task fields, back to back
  for (int32_t e : groups.active) {
    if (e == others) continue;
    const int64_t begin = groups.start[static_cast<size_t>(e)], end = groups.start[static_cast<size_t>(e) + 1];
    for (int64_t t = begin; t < end; t += kInt8TaskTokens)
      tasks.insert(tasks.end(),
                   {e, static_cast<int32_t>(t), static_cast<int32_t>(std::min<int64_t>(kInt8TaskTokens, end - t))});
  }
  static_assert(sizeof(Int8Task) == 3 * sizeof(int32_t));
  n_int8_tasks_ = static_cast<int>(tasks.size() / 3);
  int8_tasks_ = upload_indices(tasks, stream);
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
  if (gemm.int8_for(type)) {
    // The rows quantized once, every expert in one launch (in launches of at
    // most 65535 tasks); the others' rows zero.
    const void* quantized = gemm.quantize_for(type, gathered_.as<float>(), n_pairs_, cols);
    if (others_ >= 0) zero_others(rows);
    const auto* tasks = int8_tasks_.as<Int8Task>();
    for (int first = 0; first < n_int8_tasks_; first += 65535)
      matmul_int8_tasks(type, w, matrix_bytes, rows, cols, quantized, tasks + first,
                        std::min(65535, n_int8_tasks_ - first), products_.as<float>(), rows, stream_);
  } else {
    cublas_experts(gemm, type, w, matrix_bytes, rows, cols);
  }
  scatter_rows(products_.as<float>(), pair_of_row_.as<int32_t>(), y, n_pairs_, rows, stream_);
}

void ExpertProducts::zero_others(int64_t rows) {
  const int64_t begin = groups_.start[static_cast<size_t>(others_)];
  const int64_t count = groups_.start[static_cast<size_t>(others_) + 1] - begin;
  cuda_check(cudaMemsetAsync(products_.as<float>() + begin * rows, 0, static_cast<size_t>(count * rows) * sizeof(float),
                             stream_),
             "cudaMemsetAsync", products_.device());
}

void ExpertProducts::cublas_experts(GemmRunner& gemm, GgmlType type, const void* w, int64_t matrix_bytes, int64_t rows,
                                    int64_t cols) {
  for (int32_t e : groups_.active) {
    const int64_t begin = groups_.start[static_cast<size_t>(e)];
    const int64_t count = groups_.start[static_cast<size_t>(e) + 1] - begin;
    if (e == others_) {
      zero_others(rows);
      continue;
    }
    gemm.matmul(type, static_cast<const uint8_t*>(w) + e * matrix_bytes, rows, cols,
                gathered_.as<float>() + begin * cols, count, products_.as<float>() + begin * rows, rows);
  }
}

}  // namespace ds4::cuda
