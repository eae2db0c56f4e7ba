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
  // With ready null, returns when all n are readable. ds4::Error naming the
  // tensor when an expert cannot be read.
  virtual size_t acquire(const model::LayerWeights& layer, std::span<int> experts, std::span<ExpertMatrices> out,
                         size_t* ready) = 0;
  // Blocks until more than `ready` of the last acquire's experts are readable
  // (counted from the front of its out) and returns how many are: its n once
  // all are. ds4::Error naming the tensor when a read fails (the acquire is
  // released then).
  virtual size_t wait(size_t ready) = 0;
  // Experts [from, to) of the last acquire are no longer needed (their room
  // may be reused before release()).
  virtual void done_with(size_t from, size_t to) { (void)from, (void)to; }
  // The acquired experts are no longer needed.
  virtual void release() = 0;
  // n tokens are about to be evaluated (the pass's size; for the
  // source's selection statistics). Earlier prefetches stop being protected.
  virtual void begin_tokens(int64_t n) { (void)n; }
  // Whether prefetch() would start anything now (room for it, a way to read
  // in the background): callers skip working out predictions otherwise.
  virtual bool wants_prefetch() const { return false; }
  // A hint: experts of `layer` likely acquired soon, most likely first. The
  // source may start reading some of them without blocking; it never fails
  // (a read that fails is tried again, and reported, by the acquire).
  virtual void prefetch(const model::LayerWeights& layer, std::span<const int> experts) { (void)layer, (void)experts; }
};

}  // namespace ds4::cpu
