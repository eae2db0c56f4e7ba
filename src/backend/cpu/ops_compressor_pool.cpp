#include "backend/cpu/ops_compressor_pool.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>

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

float pool_quality(std::span<const float* const> s, std::span<const float* const> v, std::size_t j,
                   float max) {
  double esum = 0.0;
  for (std::size_t r = 0; r < s.size(); ++r) esum += static_cast<double>(std::exp(s[r][j] - max));
  const float inv = static_cast<float>(1.0 / esum);
  double acc = 0.0;
  for (std::size_t r = 0; r < s.size(); ++r) {
    const float p = std::exp(s[r][j] - max) * inv;
    acc += static_cast<double>(v[r][j] * p);
  }
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
