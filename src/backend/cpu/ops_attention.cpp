#include "backend/cpu/ops_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/ggml_order.h"

namespace ds4::cpu {

extern const AttentionRowKernels kAttentionRowsAvx2;    // ops_attention_avx2.cpp
extern const AttentionRowKernels kAttentionRowsAvx512;  // ops_attention_avx512.cpp

namespace {

// Every f16 value as f32: the scalar level reads each f16 row element once
// per head, and a table lookup costs far less than f16_to_f32's branches.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_f32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

struct F32Identity {
  float operator()(float v) const { return v; }
};
struct F16Lookup {
  const float* table = f16_table();
  float operator()(uint16_t h) const { return table[h]; }
};
template <class Row>
using ToF32 = std::conditional_t<std::is_same_v<Row, float>, F32Identity, F16Lookup>;

// The scalar level: ds4's own loops (one running sum per dot, mul then add).
template <class Row>
void dots_scalar(const float* q, const Row* const* rows, size_t n_rows, size_t dim, float scale, float* scores) {
  const ToF32<Row> to_f32;
  for (size_t r = 0; r < n_rows; ++r) {
    const Row* row = rows[r];
    float acc = 0.0f;
    for (size_t i = 0; i < dim; ++i) acc += q[i] * to_f32(row[i]);
    scores[r] = acc * scale;
  }
}

template <class Row>
void weighted_sum_scalar(const Row* const* rows, const float* w, size_t n_rows, size_t dim, float* out) {
  const ToF32<Row> to_f32;
  std::fill(out, out + dim, 0.0f);
  for (size_t r = 0; r < n_rows; ++r) {
    const Row* row = rows[r];
    const float wr = w[r];
    for (size_t d = 0; d < dim; ++d) out[d] += wr * to_f32(row[d]);
  }
}

void dots2_scalar(const float* q0, const float* q1, const uint16_t* const* rows, size_t n_rows, size_t dim,
                  float scale, float* scores0, float* scores1) {
  dots_scalar<uint16_t>(q0, rows, n_rows, dim, scale, scores0);
  dots_scalar<uint16_t>(q1, rows, n_rows, dim, scale, scores1);
}

void weighted_sum2_scalar(const uint16_t* const* rows, const float* w0, const float* w1, size_t n_rows, size_t dim,
                          float* out0, float* out1) {
  weighted_sum_scalar<uint16_t>(rows, w0, n_rows, dim, out0);
  weighted_sum_scalar<uint16_t>(rows, w1, n_rows, dim, out1);
}

const AttentionRowKernels kAttentionRowsScalar = {"scalar",
                                                  dots_scalar<float>,
                                                  dots_scalar<uint16_t>,
                                                  weighted_sum_scalar<float>,
                                                  weighted_sum_scalar<uint16_t>,
                                                  dots2_scalar,
                                                  weighted_sum2_scalar};

const AttentionRowKernels& kernels_of_level(const char* dot_isa) {
  if (std::strncmp(dot_isa, "avx512", 6) == 0) return kAttentionRowsAvx512;  // avx512, avx512vnni, avx512vbmi
  if (std::strcmp(dot_isa, "avx2") == 0) return kAttentionRowsAvx2;
  return kAttentionRowsScalar;
}

// ds4 layer_attention_rows_one: scores, their max with the sink, exp weights
// summed in row order after the sink term, the weighted row sum, then one
// multiply by 1/denominator.
// Scores -> exp weights (in place); returns their denominator.
float exp_weights(float* scores, size_t n_rows, float sink) {
  float max = sink;
  for (size_t r = 0; r < n_rows; ++r) max = std::max(max, scores[r]);
  float denom = std::exp(sink - max);
  for (size_t r = 0; r < n_rows; ++r) {
    scores[r] = std::exp(scores[r] - max);
    denom += scores[r];
  }
  return denom;
}

void scale_out(float* out, size_t dim, float denom) {
  const float inv = 1.0f / denom;
  for (size_t d = 0; d < dim; ++d) out[d] *= inv;
}

template <class Row>
void attention_default(const float* q, const Row* const* rows, size_t n_rows, size_t dim, float sink, float scale,
                       float* scores, float* out,
                       void (*dots)(const float*, const Row* const*, size_t, size_t, float, float*),
                       void (*weighted_sum)(const Row* const*, const float*, size_t, size_t, float*)) {
  dots(q, rows, n_rows, dim, scale, scores);
  const float denom = exp_weights(scores, n_rows, sink);
  weighted_sum(rows, scores, n_rows, dim, out);
  scale_out(out, dim, denom);
}

}  // namespace

const AttentionRowKernels& attention_row_kernels_for(const char* isa) {
  return kernels_of_level(quant::dot_kernels_for(isa).isa);
}

const AttentionRowKernels& attention_row_kernels() {
  static const AttentionRowKernels& chosen = kernels_of_level(quant::dot_kernels().isa);
  return chosen;
}

void attention_with_sink_default(const AttentionRowKernels& k, std::span<const float> q,
                                 std::span<const float* const> rows, float sink, float scale, std::span<float> scores,
                                 std::span<float> out) {
  assert(out.size() == q.size() && scores.size() >= rows.size());
  attention_default(q.data(), rows.data(), rows.size(), q.size(), sink, scale, scores.data(), out.data(), k.dots_f32,
                    k.weighted_sum_f32);
}

void attention_with_sink_default(const AttentionRowKernels& k, std::span<const float> q,
                                 std::span<const uint16_t* const> rows, float sink, float scale,
                                 std::span<float> scores, std::span<float> out) {
  assert(out.size() == q.size() && scores.size() >= rows.size());
  attention_default(q.data(), rows.data(), rows.size(), q.size(), sink, scale, scores.data(), out.data(), k.dots_f16,
                    k.weighted_sum_f16);
}

void attention_with_sink_f16(std::span<const float> q, std::span<const uint16_t* const> rows, float sink,
                             float scale, std::span<float> scores, std::span<float> out) {
  attention_with_sink_default(attention_row_kernels(), q, rows, sink, scale, scores, out);
}

void attention_with_sink_default_pair(const AttentionRowKernels& k, std::span<const float> q0,
                                      std::span<const float> q1, std::span<const uint16_t* const> rows, float sink0,
                                      float sink1, float scale, std::span<float> scores0, std::span<float> scores1,
                                      std::span<float> out0, std::span<float> out1) {
  const size_t n_rows = rows.size(), dim = q0.size();
  assert(q1.size() == dim && out0.size() == dim && out1.size() == dim);
  assert(scores0.size() >= n_rows && scores1.size() >= n_rows);
  k.dots2_f16(q0.data(), q1.data(), rows.data(), n_rows, dim, scale, scores0.data(), scores1.data());
  const float denom0 = exp_weights(scores0.data(), n_rows, sink0);
  const float denom1 = exp_weights(scores1.data(), n_rows, sink1);
  k.weighted_sum2_f16(rows.data(), scores0.data(), scores1.data(), n_rows, dim, out0.data(), out1.data());
  scale_out(out0.data(), dim, denom0);
  scale_out(out1.data(), dim, denom1);
}

void attention_with_sink_f16_pair(std::span<const float> q0, std::span<const float> q1,
                                  std::span<const uint16_t* const> rows, float sink0, float sink1, float scale,
                                  std::span<float> scores0, std::span<float> scores1, std::span<float> out0,
                                  std::span<float> out1) {
  attention_with_sink_default_pair(attention_row_kernels(), q0, q1, rows, sink0, sink1, scale, scores0, scores1, out0,
                                   out1);
}

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
  if (n == Numerics::Default) {
    attention_with_sink_default(attention_row_kernels(), q, rows, sink, scale, scores, out);
    return;
  }
  const std::size_t dim = q.size();
  const std::size_t n_rows = rows.size();
  assert(out.size() == dim && scores.size() >= n_rows);
  std::fill(out.begin(), out.end(), 0.0f);

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
    p[r] = quant::vec_dot_f32_ggml_x86(static_cast<int64_t>(dim), rows[r], q.data()) * scale;
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
  // Lane l of element d is row l of `lanes`; each cell's fma goes into its
  // lane's row whole (fma_into), cells in order as before.
  thread_local std::vector<float> lanes;
  lanes.assign(16 * dim, 0.0f);
  for (std::size_t r = 0; r < n_rows; ++r) {
    float* lane = lanes.data() + static_cast<std::size_t>(cell(r) % 16) * dim;
    quant::fma_into(static_cast<int64_t>(dim), rows[r], p[r], lane);
  }
  for (std::size_t d = 0; d < dim; ++d) {
    float acc[16];
    for (std::size_t l = 0; l < 16; ++l) acc[l] = lanes[l * dim + d];
    out[d] = quant::ggml_order::reduce_add16(acc);
  }
}

}  // namespace ds4::cpu
