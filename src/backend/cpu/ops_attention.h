// Attention of one query head over a list of rows that are both key and
// value, with a learned sink logit that joins the softmax max and denominator
// but has no value row (MODEL.md 4.7, trap T12).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

// p[r] = exp(s[r] - m) / (exp(sink - m) + sum_r exp(s[r] - m)), m = max(sink,
// max_r s[r]), in place, in ggml's soft_max_f32 order: exps in float, their
// sum and the sink term in double, one float reciprocal multiplied in.
// (Quality numerics; Default never materialises the probabilities.)
void softmax_with_sink(std::span<float> scores, float sink);

// out[0..dim) = sum_r p[r] * rows[r][0..dim), s[r] = dot(q, rows[r]) * scale.
// rows: pointers to dim-wide rows in attention order (raw window, then
// allowed compressed rows). scores: scratch of rows.size() floats.
// Default (ds4 layer_attention_rows_one): one pass accumulating exp-weighted
// rows and the float denominator (sink term first), then * (1/denominator).
// Quality: llama.cpp's CPU graph in its exact float order (see the .cpp),
// which depends on each row's KV-cache cell in a one-batch graph: cells[r]
// must increase with r (raw rows: their position; compressed row c:
// kCompressedCellBase + c). Empty cells = 0, 1, 2, ...
// Default computes the dots and the weighted row sum with the vector kernels
// of attention_row_kernels() (below).
void attention_with_sink(std::span<const float> q, std::span<const float* const> rows, float sink,
                         float scale, std::span<float> scores, std::span<float> out, Numerics n,
                         std::span<const int64_t> cells = {});

// Default numerics over rows stored as f16 (IEEE half bits, as KvRows keeps
// them), read in place. Bit-identical to attention_with_sink(..., Default)
// over the exactly converted f32 rows.
void attention_with_sink_f16(std::span<const float> q, std::span<const uint16_t* const> rows, float sink,
                             float scale, std::span<float> scores, std::span<float> out);
// Two heads (q0, q1; their sinks, scores and outputs) over the same f16 rows
// at once: exactly attention_with_sink_f16 for each, reading the rows once.
void attention_with_sink_f16_pair(std::span<const float> q0, std::span<const float> q1,
                                  std::span<const uint16_t* const> rows, float sink0, float sink1, float scale,
                                  std::span<float> scores0, std::span<float> scores1, std::span<float> out0,
                                  std::span<float> out1);

// The two vector kernels of Default attention for one ISA level
// (ops_attention.cpp, ops_attention_avx2.cpp, ops_attention_avx512.cpp), each
// one template over f32 and f16 rows so both row types round alike.
// dots: scores[r] = dot(q, rows[r]) * scale. weighted_sum: out[d] =
// sum_r w[r] * rows[r][d], rows in order, each element one running sum.
// Results depend only on the inputs and the level, never on how rows or
// columns are grouped. The scalar level is ds4's plain loop (one running dot
// sum, mul then add); the SIMD levels use FMAs and several dot lanes, so they
// differ from it by float rounding only.
struct AttentionRowKernels {
  const char* isa;  // "scalar", "avx2", "avx512"
  void (*dots_f32)(const float* q, const float* const* rows, size_t n_rows, size_t dim, float scale, float* scores);
  void (*dots_f16)(const float* q, const uint16_t* const* rows, size_t n_rows, size_t dim, float scale,
                   float* scores);
  void (*weighted_sum_f32)(const float* const* rows, const float* w, size_t n_rows, size_t dim, float* out);
  void (*weighted_sum_f16)(const uint16_t* const* rows, const float* w, size_t n_rows, size_t dim, float* out);
  // Two heads over the same f16 rows (each row read once for both); the
  // results are the one-head kernels' for each head, bit for bit.
  void (*dots2_f16)(const float* q0, const float* q1, const uint16_t* const* rows, size_t n_rows, size_t dim,
                    float scale, float* scores0, float* scores1);
  void (*weighted_sum2_f16)(const uint16_t* const* rows, const float* w0, const float* w1, size_t n_rows, size_t dim,
                            float* out0, float* out1);
};

// The level the dot kernels run at (quant::dot_kernels(), so DS4_ISA picks
// both; avx512vnni and avx512vbmi run the avx512 kernels). Chosen once.
const AttentionRowKernels& attention_row_kernels();
// The kernels of the dot level named `isa` (quant::dot_kernels_for: ds4::Error
// if unknown, not built or not runnable here).
const AttentionRowKernels& attention_row_kernels_for(const char* isa);

// attention_with_sink's Default branch with the given kernels (tests compare
// levels; the entry points above pass attention_row_kernels()).
void attention_with_sink_default(const AttentionRowKernels& k, std::span<const float> q,
                                 std::span<const float* const> rows, float sink, float scale, std::span<float> scores,
                                 std::span<float> out);
void attention_with_sink_default(const AttentionRowKernels& k, std::span<const float> q,
                                 std::span<const uint16_t* const> rows, float sink, float scale,
                                 std::span<float> scores, std::span<float> out);
void attention_with_sink_default_pair(const AttentionRowKernels& k, std::span<const float> q0,
                                      std::span<const float> q1, std::span<const uint16_t* const> rows, float sink0,
                                      float sink1, float scale, std::span<float> scores0, std::span<float> scores1,
                                      std::span<float> out0, std::span<float> out1);

// Cell of compressed row 0 in attention_with_sink's Quality layout: past
// every raw cell, a multiple of 16.
inline constexpr int64_t kCompressedCellBase = int64_t{1} << 40;

}  // namespace ds4::cpu
