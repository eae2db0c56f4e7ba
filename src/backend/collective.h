// What a backend needs from a group of processes that evaluate one model
// together in tensor parallel (docs/distributed.md): every rank holds the
// same sessions and runs the same calls in lockstep, each on its share of
// the weights, and the shares' results are combined here. Open MPI provides
// it across hosts (dist/mpi_collective.h); tests use threads.
//
// Every call is collective: each rank makes the same calls in the same order
// with the same sizes, or the group waits forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ds4::backend {

class Collective {
 public:
  virtual ~Collective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data (n floats on every rank) becomes the ranks' sum added in rank
  // order, ((x0 + x1) + x2) + ..., the same bits on every rank and in every
  // run (a library's all-reduce picks its own grouping of the additions).
  virtual void sum(float *data, size_t n) = 0;
  // Every rank's `mine` (counts[rank] floats) laid end to end in rank order
  // into all (the sum of counts), on every rank.
  virtual void gather(const float *mine, std::span<const size_t> counts, float *all) = 0;
  // Rank 0's bytes on every rank (the others' are replaced).
  virtual void broadcast(std::vector<uint8_t> &bytes) = 0;
  // Rank 0's flag on every rank.
  virtual bool agree(bool rank0_value) = 0;

  // Ends the whole group with `why` (the ranks are out of step: waiting on
  // would be forever). Never returns.
  [[noreturn]] virtual void abort(const std::string &why) = 0;

  // Collective calls made so far: a failure between two of them leaves the
  // group out of step (docs/distributed.md).
  uint64_t calls() const { return calls_; }

 protected:
  void count_call() { ++calls_; }

 private:
  uint64_t calls_ = 0;
};

// Which share of the weights a rank evaluates: routed expert e belongs to
// rank e % size; the shared expert to rank 0; the vocab head's rows are cut
// into size contiguous ranges (vocab_rows).
struct TensorShare {
  int rank = 0;
  int size = 1;

  bool owns_expert(int e) const { return e % size == rank; }
  bool owns_shared_expert() const { return rank == 0; }
  // Rows [first, second) of an n_vocab-row head for rank r.
  static std::pair<int64_t, int64_t> vocab_rows(int64_t n_vocab, int r, int size) {
    return {n_vocab * r / size, n_vocab * (r + 1) / size};
  }
};

}  // namespace ds4::backend
