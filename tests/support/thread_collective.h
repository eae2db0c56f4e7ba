// backend::Collective over threads of one process, for tests of tensor
// parallel: rank r is the thread holding ThreadCollective(group, r). The
// sums add the parts in rank order, as the MPI one does.
#pragma once

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backend/collective.h"

namespace ds4::test {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size)
      : size_(size), barrier_(size), floats_(static_cast<size_t>(size)), bytes_(nullptr) {}
  int size() const { return size_; }

 private:
  friend class ThreadCollective;
  int size_;
  std::barrier<> barrier_;
  std::vector<const float *> floats_;  // each rank's operand of the call under way
  const std::vector<uint8_t> *bytes_;
  bool flag_ = false;
};

class ThreadCollective final : public backend::Collective {
 public:
  ThreadCollective(ThreadGroup &group, int rank) : g_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size_; }

  void sum(float *data, size_t n) override {
    count_call();
    g_.floats_[static_cast<size_t>(rank_)] = data;
    g_.barrier_.arrive_and_wait();
    scratch_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      float acc = g_.floats_[0][i];
      for (size_t r = 1; r < g_.floats_.size(); ++r) acc += g_.floats_[r][i];
      scratch_[i] = acc;
    }
    g_.barrier_.arrive_and_wait();  // every rank has read every part
    std::memcpy(data, scratch_.data(), n * sizeof(float));
  }

  void gather(const float *mine, std::span<const size_t> counts, float *all) override {
    count_call();
    g_.floats_[static_cast<size_t>(rank_)] = mine;
    g_.barrier_.arrive_and_wait();
    size_t at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      std::memcpy(all + at, g_.floats_[r], counts[r] * sizeof(float));
      at += counts[r];
    }
    g_.barrier_.arrive_and_wait();
  }

  void broadcast(std::vector<uint8_t> &bytes) override {
    count_call();
    if (rank_ == 0) g_.bytes_ = &bytes;
    g_.barrier_.arrive_and_wait();
    if (rank_ != 0) bytes = *g_.bytes_;
    g_.barrier_.arrive_and_wait();
  }

  bool agree(bool rank0_value) override {
    count_call();
    if (rank_ == 0) g_.flag_ = rank0_value;
    g_.barrier_.arrive_and_wait();
    const bool v = g_.flag_;
    g_.barrier_.arrive_and_wait();
    return v;
  }

  [[noreturn]] void abort(const std::string &why) override {
    std::fprintf(stderr, "thread rank %d: %s\n", rank_, why.c_str());
    std::abort();
  }

 private:
  ThreadGroup &g_;
  int rank_;
  std::vector<float> scratch_;
};

}  // namespace ds4::test
