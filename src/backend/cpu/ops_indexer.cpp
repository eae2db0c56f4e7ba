#include "backend/cpu/ops_indexer.h"

#include <algorithm>
#include <cassert>
#include <cstddef>

#include "backend/cpu/ops_topk.h"

namespace ds4::cpu {

void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const float* const> rows, std::span<float> scores) {
  const std::size_t n_head = weights.size();
  const auto dim = static_cast<std::size_t>(head_dim);
  assert(q.size() == n_head * dim && scores.size() == rows.size());
  for (std::size_t c = 0; c < rows.size(); ++c) {
    float s = 0.0f;
    for (std::size_t h = 0; h < n_head; ++h) {
      const float* qh = q.data() + h * dim;
      float dot = 0.0f;
      for (std::size_t i = 0; i < dim; ++i) dot += rows[c][i] * qh[i];
      s += std::max(dot, 0.0f) * weights[h];
    }
    scores[c] = s;
  }
}

std::vector<int32_t> indexer_select(std::span<const float> scores, int top_k, Numerics numerics) {
  const auto n = static_cast<int32_t>(scores.size());
  std::vector<int32_t> ids;
  if (n <= top_k) {
    ids.resize(static_cast<std::size_t>(n));
    for (int32_t c = 0; c < n; ++c) ids[static_cast<std::size_t>(c)] = c;
    return ids;
  }
  ids.resize(static_cast<std::size_t>(top_k));
  if (numerics == Numerics::Quality)
    top_k_ggml(scores, ids);
  else
    top_k_desc(scores, ids);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace ds4::cpu
