#include "backend/cpu/ops_compressor_pool.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>

#include "quant/ggml_order.h"

namespace ds4::cpu {
namespace {

constexpr float kEmptyThreshold = kPoolEmptyScore * 0.5f;

float pool_default(std::span<const float* const> s, std::span<const float* const> v, int n_prev,
                   std::size_t j, float max) {
  float denom = 0.0f;
  float sum = 0.0f;
  const std::size_t n_rows = s.size();
  if (n_prev > 0) {
    for (int r = 0; r < n_prev; ++r) {
      const float wp = std::exp(s[r][j] - max);
      const float wc = std::exp(s[n_prev + r][j] - max);
      denom += wp + wc;
      sum += wp * v[r][j];
      sum += wc * v[n_prev + r][j];
    }
  } else {
    for (std::size_t r = 0; r < n_rows; ++r) {
      const float w = std::exp(s[r][j] - max);
      denom += w;
      sum += w * v[r][j];
    }
  }
  return denom > 0.0f ? sum / denom : 0.0f;
}

// ggml_soft_max over the rows of column j (ggml_vec_soft_max_f32, AVX-512:
// ggml_v_expf on whole blocks of 16 rows, each block's reduce_add added to a
// double, then expf one by one for the rest), one float reciprocal, then
// ggml_mul and ggml_sum_rows (a double sum of the float products).
float pool_quality(std::span<const float* const> s, std::span<const float* const> v, std::size_t j,
                   float max) {
  const std::size_t n = s.size();
  const std::size_t n16 = n & ~std::size_t{15};
  float e[kPoolMaxRows];
  assert(n <= kPoolMaxRows);
  double esum = 0.0;
  for (std::size_t r = 0; r < n16; r += 16) {
    float lanes[16];
    for (int l = 0; l < 16; ++l) lanes[l] = e[r + l] = quant::ggml_order::v_expf(s[r + l][j] - max);
    esum += static_cast<double>(quant::ggml_order::reduce_add16(lanes));
  }
  for (std::size_t r = n16; r < n; ++r) esum += static_cast<double>(e[r] = std::exp(s[r][j] - max));
  const float inv = static_cast<float>(1.0 / esum);
  double acc = 0.0;
  for (std::size_t r = 0; r < n; ++r) acc += static_cast<double>(v[r][j] * (e[r] * inv));
  return static_cast<float>(acc);
}

}  // namespace

void compressor_pool(std::span<const float* const> score_rows,
                     std::span<const float* const> kv_rows, int n_prev, std::span<float> out,
                     Numerics n) {
  assert(score_rows.size() == kv_rows.size());
  assert(n_prev == 0 || 2 * static_cast<std::size_t>(n_prev) == score_rows.size());
  for (std::size_t j = 0; j < out.size(); ++j) {
    float max = -INFINITY;
    for (const float* s : score_rows) max = std::max(max, s[j]);
    if (!(max > kEmptyThreshold)) {
      out[j] = 0.0f;
      continue;
    }
    out[j] = n == Numerics::Default ? pool_default(score_rows, kv_rows, n_prev, j, max)
                                    : pool_quality(score_rows, kv_rows, j, max);
  }
}

}  // namespace ds4::cpu
