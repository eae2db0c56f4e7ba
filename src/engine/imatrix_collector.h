// Collects an importance matrix from the matrix inputs a backend reports
// (backend/matrix_inputs.h), by llama-imatrix's rules, so that its file and
// ours mean the same and drive either quantizer alike:
//   - routed experts (llama.cpp's MUL_MAT_ID): every batch; per expert the
//     sum of squared inputs per column and the rows routed to it;
//   - every other product (MUL_MAT): only weights named blk.* (and
//     output.weight when asked), only chunks of at least 16 tokens
//     (llama-imatrix skips smaller batches); one sum per column of each
//     matrix (a grouped product: each group's columns in turn) and a single
//     count, the rows each matrix met.
// Sums accumulate in float, row by row, as llama-imatrix's do.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/matrix_inputs.h"
#include "model/imatrix.h"

namespace ds4::engine {

class ImatrixCollector final : public backend::MatrixInputs {
 public:
  // process_output: collect the vocab head (output.weight) too.
  explicit ImatrixCollector(bool process_output = false) : process_output_(process_output) {}

  void met(const model::TensorView& w, backend::MatrixSlice slice, std::span<const float* const> rows,
           int64_t chunk_tokens) override;

  // ds4::Error naming the first tensor whose inputs were not finite (inf or
  // NaN activations; llama-imatrix stops there too). met() only notes it:
  // it runs on the backend's pool threads.
  void check() const;
  // What was collected, as an imatrix (no datasets or chunk metadata: the
  // caller sets them); check()s first. A grouped product (attn_output_a) is
  // written as llama-imatrix writes it, each group's columns in turn under
  // one count, with per_group; otherwise as the mean of its groups' sums
  // under that count (the mean importance over the groups), the only form
  // llama-quantize accepts for it (it refuses its own llama-imatrix's:
  // "imatrix size ... is different from tensor size").
  model::Imatrix result(bool per_group = false) const;
  // Entries so far (tests).
  size_t size() const;
  // The most rows any matrix met (llama-imatrix's chunk counter is this
  // over the chunk size).
  int64_t most_rows() const;

 private:
  struct Sums {
    int64_t width = 0;  // inputs per matrix
    int groups = 0;     // a grouped product's groups (0: not grouped)
    std::vector<float> values;  // n_mat x width
    std::vector<int64_t> counts;  // n_mat (routed experts) or 1
  };
  Sums& entry(const std::string& name, int64_t width, int n_mat, size_t n_counts);

  bool process_output_;
  mutable std::mutex mutex_;
  std::map<std::string, Sums> sums_;
  std::string non_finite_;  // the first tensor with a non-finite input
};

}  // namespace ds4::engine
