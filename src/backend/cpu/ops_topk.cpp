#include "backend/cpu/ops_topk.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <vector>

namespace ds4::cpu {

void top_k_desc(std::span<const float> scores, std::span<int32_t> out) {
  assert(out.size() <= scores.size());
  std::vector<int32_t> idx(scores.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  // Strict weak order: numbers by value descending, NaN last, index ascending.
  const auto before = [&](int32_t a, int32_t b) {
    const float sa = scores[a];
    const float sb = scores[b];
    const bool na = std::isnan(sa);
    const bool nb = std::isnan(sb);
    if (na != nb) return nb;
    if (!na && sa != sb) return sa > sb;
    return a < b;
  };
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(out.size()), idx.end(),
                    before);
  std::copy_n(idx.begin(), out.size(), out.begin());
}

namespace {
std::vector<int32_t> iota_indices(std::size_t n) {
  std::vector<int32_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
  return idx;
}
}  // namespace

void top_k_ggml(std::span<const float> scores, std::span<int32_t> out) {
  assert(out.size() <= scores.size());
  auto idx = iota_indices(scores.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(out.size()), idx.end(),
                    [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  std::copy_n(idx.begin(), out.size(), out.begin());
}

void argsort_top_k_ggml(std::span<const float> scores, std::span<int32_t> out) {
  assert(out.size() <= scores.size());
  auto idx = iota_indices(scores.size());
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  std::copy_n(idx.begin(), out.size(), out.begin());
}

}  // namespace ds4::cpu
