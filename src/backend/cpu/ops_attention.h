// Attention of one query head over a list of rows that are both key and
// value, with a learned sink logit that joins the softmax max and denominator
// but has no value row (MODEL.md 4.7, trap T12).
#pragma once

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
void attention_with_sink(std::span<const float> q, std::span<const float* const> rows, float sink,
                         float scale, std::span<float> scores, std::span<float> out, Numerics n,
                         std::span<const int64_t> cells = {});

// Cell of compressed row 0 in attention_with_sink's Quality layout: past
// every raw cell, a multiple of 16.
inline constexpr int64_t kCompressedCellBase = int64_t{1} << 40;

}  // namespace ds4::cpu
