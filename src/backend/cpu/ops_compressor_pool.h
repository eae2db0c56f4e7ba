// The compressor's gated pooling: for every column j, a softmax over the
// candidate rows' scores weights the candidates' kv values (MODEL.md 4.5,
// trap T8). Ratio 128: one lane of 128 rows. Ratio 4: the previous window's
// lane A (4 rows) and the current window's lane B (4 rows), 8 candidates.
#pragma once

#include <cstddef>
#include <span>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

// Scores at or below this count as "no candidate" (ds4 initialises empty
// frontier rows to -1e30; -inf works too).
inline constexpr float kPoolEmptyScore = -1.0e30f;
// Most rows one pooled column can have (ratio 128 x coff 1; ratio 4 x coff 2 = 8).
inline constexpr std::size_t kPoolMaxRows = 256;

// out[j] = sum_r softmax_r(score_r[j]) * kv_r[j] for j < out.size().
// score_rows / kv_rows: pointers to the candidates' D-wide slices (the caller
// offsets lane B by D), the first n_prev of them the previous-window lane.
// A column whose candidates are all empty pools to 0.
// Default (ds4 compressor_pool_decode_state): float sums; with a previous lane
// the candidates are visited in pairs (prev r, cur r) and the denominator adds
// each pair's sum; result sum / denom.
// Quality (ggml soft_max + mul + sum_rows over prev rows then current rows):
// p = exp(s - max) * (float)(1 / double sum), then sum of kv * p in double.
void compressor_pool(std::span<const float* const> score_rows,
                     std::span<const float* const> kv_rows, int n_prev, std::span<float> out,
                     Numerics n);

}  // namespace ds4::cpu
