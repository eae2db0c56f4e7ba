// Prefill's routed-expert products on a GPU: each active expert evaluated
// once over the rows of its (token, slot) pairs, the rows gathered into
// expert order first and the results scattered back to pair order (pair p =
// token p / k, slot p % k). On the int8 tensor cores (the GEMM runner's
// int8_for): the rows quantized once and every expert in one launch, a task
// per 64 rows of an expert (matmul_int8_tasks); otherwise an expert at a
// time through cuBLAS (gemm.h). Deterministic: no atomics, each expert's
// rows in token order (backend/expert_groups.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemm.h"
#include "backend/expert_groups.h"
#include "core/ggml_type.h"

namespace ds4::cuda {

class ExpertProducts {
 public:
  // One batch's grouping (made on the host from its expert ids; it must
  // outlive this object); uploads its row maps on `stream`, which the GEMM
  // runner given to run() must queue on too. others >= 0: the group of pairs
  // whose experts another GPU holds (tensor parallel); their rows are zero.
  ExpertProducts(const backend::ExpertGroups& groups, int k, cudaStream_t stream, int others = -1);

  // y (pairs x rows, pair order) = for each pair p, the matrix ids[p] of the
  // 3-D weight w (n_expert matrices of rows x cols, back to back) times
  // source row p / k of src (by_token: the gate and up products over the
  // normed tokens) or row p (the down product over the pairs' activations);
  // src rows are cols floats.
  void run(GemmRunner& gemm, GgmlType type, const void* w, int64_t rows, int64_t cols, const float* src, bool by_token,
           float* y);

 private:
  void zero_others(int64_t rows);
  void cublas_experts(GemmRunner& gemm, GgmlType type, const void* w, int64_t matrix_bytes, int64_t rows, int64_t cols);

  const backend::ExpertGroups& groups_;
  cudaStream_t stream_;
  int others_;
  int64_t n_pairs_;
  DeviceBuffer token_of_row_, pair_of_row_;  // sorted row -> source row
  DeviceBuffer int8_tasks_;                  // Int8Task per 64 rows of an active expert (not others)
  int n_int8_tasks_ = 0;
  DeviceBuffer gathered_, products_;         // scratch, grown on demand
};

}  // namespace ds4::cuda
