#include "engine/imatrix_collector.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "core/error.h"
#include "model/deepseek4_weights.h"

namespace ds4::engine {

namespace {

constexpr int64_t kMinDenseRows = 16;  // llama-imatrix ignores smaller batches of a MUL_MAT

bool all_finite(const float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    if (!std::isfinite(x[j])) return false;
  return true;
}

}  // namespace

ImatrixCollector::Sums& ImatrixCollector::entry(const std::string& name, int64_t width, int n_mat, size_t n_counts) {
  Sums& e = sums_[name];
  if (e.values.empty()) {
    e.width = width;
    e.values.assign(static_cast<size_t>(width) * static_cast<size_t>(n_mat), 0.0f);
    e.counts.assign(n_counts, 0);
  } else if (e.width != width || e.values.size() != static_cast<size_t>(width) * static_cast<size_t>(n_mat) ||
             e.counts.size() != n_counts) {
    throw Error("imatrix: " + name + " met inputs of another shape (" + std::to_string(width) + " x " +
                std::to_string(n_mat) + " after " + std::to_string(e.width) + " x " +
                std::to_string(e.values.size() / static_cast<size_t>(e.width)) + ")");
  }
  return e;
}

void ImatrixCollector::met(const model::TensorView& w, backend::MatrixSlice slice,
                           std::span<const float* const> rows, int64_t chunk_tokens) {
  const std::string_view name = w.name;
  const bool expert = slice.kind == backend::MatrixSlice::Kind::Expert;
  if (!expert) {
    const bool wanted = name.starts_with("blk.") || (process_output_ && name == "output.weight");
    if (!wanted || chunk_tokens < kMinDenseRows) return;
  }
  const auto width = static_cast<int64_t>(w.ne[0]);
  const int n_mat = slice.kind == backend::MatrixSlice::Kind::Whole ? 1 : slice.count;
  std::lock_guard lock(mutex_);
  Sums& e = entry(std::string(name), width, n_mat, expert ? static_cast<size_t>(n_mat) : 1);
  if (slice.kind == backend::MatrixSlice::Kind::Group) e.groups = n_mat;
  float* acc = e.values.data() + static_cast<size_t>(slice.index) * static_cast<size_t>(width);
  for (const float* x : rows) {
    for (int64_t j = 0; j < width; ++j) acc[j] += x[j] * x[j];
  }
  // A grouped product counts its rows once (llama-imatrix: rows / groups).
  if (expert)
    e.counts[static_cast<size_t>(slice.index)] += static_cast<int64_t>(rows.size());
  else if (slice.index == 0)
    e.counts[0] += static_cast<int64_t>(rows.size());
  if (non_finite_.empty() && !all_finite(acc, width)) non_finite_ = std::string(name);
}

void ImatrixCollector::check() const {
  std::lock_guard lock(mutex_);
  if (!non_finite_.empty())
    throw Error("imatrix: the inputs of " + non_finite_ +
                " are not finite (inf or NaN activations: the model overflows on this text)");
}

model::Imatrix ImatrixCollector::result(bool per_group) const {
  check();
  std::lock_guard lock(mutex_);
  model::Imatrix m;
  for (const auto& [name, e] : sums_) {
    model::ImatrixEntry& out = m.entries[name];
    out.counts.reserve(e.counts.size());
    if (e.groups > 1 && !per_group) {
      const auto width = static_cast<size_t>(e.width);
      out.sums.assign(width, 0.0f);
      for (int g = 0; g < e.groups; ++g)
        for (size_t j = 0; j < width; ++j) out.sums[j] += e.values[static_cast<size_t>(g) * width + j];
      // The mean over the groups under the rows' count: the same importance
      // as summing and counting each group, with the count still the rows
      // (chunk counters and combining stay honest).
      for (float& v : out.sums) v /= static_cast<float>(e.groups);
      out.counts.push_back(static_cast<float>(e.counts[0]));
      continue;
    }
    out.sums = e.values;
    for (const int64_t c : e.counts) out.counts.push_back(static_cast<float>(c));
  }
  return m;
}

int64_t ImatrixCollector::most_rows() const {
  std::lock_guard lock(mutex_);
  int64_t most = 0;
  for (const auto& [name, e] : sums_)
    for (const int64_t c : e.counts) most = std::max(most, c);
  return most;
}

size_t ImatrixCollector::size() const {
  std::lock_guard lock(mutex_);
  return sums_.size();
}

}  // namespace ds4::engine
