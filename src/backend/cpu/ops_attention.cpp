#include "backend/cpu/ops_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>

namespace ds4::cpu {
namespace {

float dot(std::span<const float> a, const float* b) {
  float acc = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) acc += a[i] * b[i];
  return acc;
}

}  // namespace

void softmax_with_sink(std::span<float> scores, float sink) {
  float max = -INFINITY;
  for (float s : scores) max = std::max(max, s);
  max = std::max(max, sink);
  double sum = 0.0;
  for (float& s : scores) {
    s = std::exp(s - max);
    sum += static_cast<double>(s);
  }
  sum += static_cast<double>(std::exp(sink - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (float& s : scores) s *= inv;
}

void attention_with_sink(std::span<const float> q, std::span<const float* const> rows, float sink,
                         float scale, std::span<float> scores, std::span<float> out, Numerics n) {
  const std::size_t dim = q.size();
  const std::size_t n_rows = rows.size();
  assert(out.size() == dim && scores.size() >= n_rows);
  std::fill(out.begin(), out.end(), 0.0f);

  if (n == Numerics::Default) {
    float max = sink;
    for (std::size_t r = 0; r < n_rows; ++r) {
      scores[r] = dot(q, rows[r]) * scale;
      max = std::max(max, scores[r]);
    }
    float denom = std::exp(sink - max);
    for (std::size_t r = 0; r < n_rows; ++r) {
      const float w = std::exp(scores[r] - max);
      denom += w;
      for (std::size_t d = 0; d < dim; ++d) out[d] += w * rows[r][d];
    }
    const float inv = 1.0f / denom;
    for (float& v : out) v *= inv;
    return;
  }

  std::span<float> p = scores.first(n_rows);
  for (std::size_t r = 0; r < n_rows; ++r) p[r] = dot(q, rows[r]) * scale;
  softmax_with_sink(p, sink);
  for (std::size_t r = 0; r < n_rows; ++r) {
    for (std::size_t d = 0; d < dim; ++d) out[d] += p[r] * rows[r][d];
  }
}

}  // namespace ds4::cpu
