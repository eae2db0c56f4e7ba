#include "backend/cpu/ops_indexer.h"

#include <algorithm>
#include <cassert>
#include <cstddef>

#include "backend/cpu/ops_topk.h"
#include "core/fp16.h"

namespace ds4::cpu {

namespace {

// sum_h max(0, dot(row, q_h)) * weights[h] for one dim-wide f32 row.
float score_row(const float* row, std::span<const float> q, std::span<const float> weights, std::size_t dim) {
  float s = 0.0f;
  for (std::size_t h = 0; h < weights.size(); ++h) {
    const float* qh = q.data() + h * dim;
    float dot = 0.0f;
    for (std::size_t i = 0; i < dim; ++i) dot += row[i] * qh[i];
    s += std::max(dot, 0.0f) * weights[h];
  }
  return s;
}

}  // namespace

void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const float* const> rows, std::span<float> scores) {
  const auto dim = static_cast<std::size_t>(head_dim);
  assert(q.size() == weights.size() * dim && scores.size() == rows.size());
  for (std::size_t c = 0; c < rows.size(); ++c) scores[c] = score_row(rows[c], q, weights, dim);
}

void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const uint16_t* const> rows, std::span<float> scores) {
  const auto dim = static_cast<std::size_t>(head_dim);
  assert(q.size() == weights.size() * dim && scores.size() == rows.size());
  std::vector<float> row(dim);  // one row at a time: no copy of the whole cache
  for (std::size_t c = 0; c < rows.size(); ++c) {
    std::transform(rows[c], rows[c] + dim, row.begin(), f16_to_f32);
    scores[c] = score_row(row.data(), q, weights, dim);
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
