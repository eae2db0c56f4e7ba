// Kernel of backend/cuda/compressor_pool.h: a thread per (pooled row,
// column), reading its candidates' column in the CPU's order (adjacent
// threads read adjacent floats of each candidate slice).
#include <string>

#include "backend/cpu/ops_compressor_pool.h"
#include "backend/cuda/compressor_pool.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;
// cpu::kPoolEmptyScore / 2: a column whose best score is not above it has
// no candidate and pools to 0.
constexpr float kEmptyThreshold = cpu::kPoolEmptyScore * 0.5f;

__global__ void pool_kernel(PoolRows p, bool quality) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= p.n_out * p.dim) return;
  const int64_t o = i / p.dim, j = i % p.dim;
  const float* const* s = p.score_rows + o * p.n_cand;
  const float* const* v = p.kv_rows + o * p.n_cand;
  float max = -INFINITY;
  for (int r = 0; r < p.n_cand; ++r) max = fmaxf(max, s[r][j]);
  float result = 0.0f;
  if (!(max > kEmptyThreshold)) {
    result = 0.0f;
  } else if (quality) {
    // ggml soft_max then mul and sum_rows: the exp sum in double, one float
    // reciprocal, the products added in double.
    double esum = 0.0;
    for (int r = 0; r < p.n_cand; ++r) esum += static_cast<double>(expf(s[r][j] - max));
    const float inv = static_cast<float>(1.0 / esum);
    double acc = 0.0;
    for (int r = 0; r < p.n_cand; ++r) acc += static_cast<double>(v[r][j] * (expf(s[r][j] - max) * inv));
    result = static_cast<float>(acc);
  } else {
    float denom = 0.0f, sum = 0.0f;
    if (p.n_prev > 0) {
      for (int r = 0; r < p.n_prev; ++r) {
        const float wp = expf(s[r][j] - max);
        const float wc = expf(s[p.n_prev + r][j] - max);
        denom += wp + wc;
        sum += wp * v[r][j];
        sum += wc * v[p.n_prev + r][j];
      }
    } else {
      for (int r = 0; r < p.n_cand; ++r) {
        const float w = expf(s[r][j] - max);
        denom += w;
        sum += w * v[r][j];
      }
    }
    result = denom > 0.0f ? sum / denom : 0.0f;
  }
  p.out[i] = result;
}

}  // namespace

void compressor_pool_rows(const PoolRows& rows, backend::Numerics numerics, cudaStream_t stream) {
  if (rows.n_cand < 1 || static_cast<size_t>(rows.n_cand) > cpu::kPoolMaxRows)
    throw Error("compressor pool: " + std::to_string(rows.n_cand) + " candidates per row (1.." +
                std::to_string(cpu::kPoolMaxRows) + " allowed)");
  if (rows.n_prev != 0 && 2 * rows.n_prev != rows.n_cand)
    throw Error("compressor pool: a previous lane of " + std::to_string(rows.n_prev) + " rows for " +
                std::to_string(rows.n_cand) + " candidates");
  const int64_t n = rows.n_out * rows.dim;
  if (n == 0) return;
  pool_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      rows, numerics == backend::Numerics::Quality);
  cuda_check_launch("compressor_pool", current_device());
}

}  // namespace ds4::cuda
