// Where the MoE sublayer gets a routed expert's three matrices (DESIGN.md
// "Expert source"). Without a source the matrices are read from the model's
// mapping (every expert resident); the SSD streaming cache
// (expert_cache.h) is a source that holds some experts in RAM and reads the
// others from the file on demand. The kernels never know which: they get
// views of the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "model/deepseek4_weights.h"

namespace ds4::cpu {

// One routed expert's matrices: matrix `index` of each view (0 for a view of
// that expert alone).
struct ExpertMatrices {
  model::TensorView gate, up, down;
  int index = 0;
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // Starts making experts of `layer` readable: at least one of `experts`
  // (distinct ids) when it is not empty, at most all. The source may reorder
  // `experts`; the first n (the return value) get their views in out[0..n):
  // the first *ready of them are readable at once (cached), the rest after
  // wait() (being read meanwhile, so the caller can compute the ready ones).
  // ds4::Error naming the tensor when an expert cannot be read.
  virtual size_t acquire(const model::LayerWeights& layer, std::span<int> experts, std::span<ExpertMatrices> out,
                         size_t* ready) = 0;
  // Blocks until every expert of the last acquire is readable.
  virtual void wait() = 0;
  // The acquired experts are no longer needed.
  virtual void release() = 0;
  // n tokens are about to be evaluated (the pass's size; for the
  // source's selection statistics).
  virtual void begin_tokens(int64_t n) { (void)n; }
};

}  // namespace ds4::cpu
