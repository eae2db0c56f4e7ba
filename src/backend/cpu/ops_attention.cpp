#include "backend/cpu/ops_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>

#include "quant/ggml_order.h"

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
                         float scale, std::span<float> scores, std::span<float> out, Numerics n,
                         std::span<const int64_t> cells) {
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

  // Quality: ggml's CPU attention with flash attention off, op by op in its
  // float order (ggml_order.h). kq: ggml_vec_dot_f32 (q is a permuted,
  // non-contiguous operand, so no tinyBLAS). soft_max_ext with sinks: scale,
  // max (sink included), ggml_v_expf in blocks of 16 cells whose
  // reduce_add sums go into a double, + expf(sink - max), one float
  // reciprocal multiplied in. kqv: tinyBLAS over the cells, 16 lanes by cell
  // index (fma), reduce_add. Cells are the KV-cache slots of a one-batch
  // llama.cpp graph (raw rows at their position, compressed rows after);
  // masked cells add exact zeros, so only each row's lane and block matter.
  assert(cells.empty() || cells.size() == n_rows);
  auto cell = [&](std::size_t r) { return cells.empty() ? static_cast<int64_t>(r) : cells[r]; };
  std::span<float> p = scores.first(n_rows);
  float max = -INFINITY;
  for (std::size_t r = 0; r < n_rows; ++r) {
    p[r] = quant::ggml_order::vec_dot_f32(static_cast<int64_t>(dim), rows[r], q.data()) * scale;
    max = p[r] > max ? p[r] : max;
  }
  max = max > sink ? max : sink;
  double sum = 0.0;
  for (std::size_t r = 0; r < n_rows;) {
    const int64_t block = cell(r) / 16;
    float lanes[16] = {};
    for (; r < n_rows && cell(r) / 16 == block; ++r) {
      p[r] = quant::ggml_order::v_expf(p[r] - max);
      lanes[cell(r) % 16] = p[r];
    }
    sum += static_cast<double>(quant::ggml_order::reduce_add16(lanes));
  }
  sum += static_cast<double>(std::exp(sink - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : p) v *= inv;
  for (std::size_t d = 0; d < dim; ++d) {
    float acc[16] = {};
    for (std::size_t r = 0; r < n_rows; ++r) {
      float& a = acc[cell(r) % 16];
      a = std::fma(rows[r][d], p[r], a);
    }
    out[d] = quant::ggml_order::reduce_add16(acc);
  }
}

}  // namespace ds4::cpu
