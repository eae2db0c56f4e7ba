// backend/cuda/compressor.h: the plan's rows as device addresses, one
// launch each for adding ape, pooling, the finishing ops and the frontier's
// gather.
#include <string>
#include <vector>

#include "backend/cpu/ops_compressor_pool.h"
#include "backend/cpu/ops_qat.h"
#include "backend/cuda/compressor.h"
#include "backend/cuda/compressor_pool.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/qat.h"
#include "backend/cuda/stream_scratch.h"
#include "core/error.h"

namespace ds4::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// score[i][j] += ape[(first_pos + i) % ratio][j]: the CPU's one float add.
__global__ void add_ape_kernel(float* score, const float* ape, int64_t first_pos, int ratio, int64_t n, int width) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= n * width) return;
  const int64_t token = i / width;
  const int j = static_cast<int>(i % width);
  score[i] += ape[((first_pos + token) % ratio) * width + j];
}

// dst row r = the width floats at src[r].
__global__ void gather_rows_kernel(const float* const* src, float* dst, int rows, int width) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * width) return;
  dst[i] = src[i / width][i % width];
}

__global__ void fill_kernel(float* x, int64_t n, float value) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i < n) x[i] = value;
}

DeviceBuffer upload_floats(std::span<const float> host) {
  DeviceBuffer buffer(host.size() * sizeof(float));
  buffer.upload(host.data(), host.size() * sizeof(float));
  return buffer;
}

}  // namespace

DeviceCompressor::DeviceCompressor(const model::LayerWeights& layer, const model::Deepseek4HParams& hp,
                                   cpu::CompressorRole role, backend::Numerics numerics)
    : host_(layer, hp, role, numerics),
      numerics_(numerics),
      eps_(hp.rms_eps),
      n_rot_(static_cast<int>(hp.n_rot)),
      rope_(cpu::rope_params(hp, layer.compress_ratio, numerics)),
      ape_(upload_floats(host_.ape())),
      norm_(upload_floats(host_.norm())) {}

DeviceCompressor::Frontier DeviceCompressor::new_frontier(cudaStream_t stream) const {
  Frontier f;
  const size_t bytes = static_cast<size_t>(state_rows()) * static_cast<size_t>(state_width()) * sizeof(float);
  for (int b = 0; b < 2; ++b) {
    f.kv_[b] = DeviceBuffer(bytes);
    f.score_[b] = DeviceBuffer(bytes);
  }
  reset(f, stream);
  return f;
}

void DeviceCompressor::reset(Frontier& frontier, cudaStream_t stream) const {
  const int64_t n = static_cast<int64_t>(state_rows()) * state_width();
  frontier.current_ = 0;
  cuda_check(cudaMemsetAsync(frontier.kv_[0].data(), 0, static_cast<size_t>(n) * sizeof(float), stream),
             "cudaMemsetAsync", frontier.kv_[0].device());
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(frontier.score_[0].as<float>(), n, cpu::kPoolEmptyScore);
  cuda_check_launch("compressor frontier fill", frontier.score_[0].device());
}

backend::CompressorPlan DeviceCompressor::push_batch(Frontier& frontier, const float* kv, float* score,
                                                     int64_t first_pos, int64_t n, float* out,
                                                     cudaStream_t stream) const {
  backend::CompressorPlan plan = backend::plan_compressor_batch(ratio(), dim(), first_pos, n);
  if (n == 0) return plan;
  const int width = state_width(), n_cand = plan.n_cand();
  const int device = current_device();
  add_ape_kernel<<<blocks_for(n * width), kThreads, 0, stream>>>(score, ape_.as<float>(), first_pos, ratio(), n, width);
  cuda_check_launch("compressor add_ape", device);

  const backend::PlanAddresses a = backend::plan_addresses(plan, frontier.kv(), frontier.score(), kv, score);
  // One table: pooling's score and kv addresses, then the frontier's sources.
  const size_t pool_bytes = a.score.size() * sizeof(const float*);
  const size_t source_bytes = static_cast<size_t>(n_cand) * sizeof(const float*);
  const StreamScratch table(2 * pool_bytes + 2 * source_bytes, stream);
  table.upload(0, a.score.data(), pool_bytes);
  table.upload(pool_bytes, a.kv.data(), pool_bytes);
  table.upload(2 * pool_bytes, a.frontier_score.data(), source_bytes);
  table.upload(2 * pool_bytes + source_bytes, a.frontier_kv.data(), source_bytes);

  if (plan.n_windows() > 0) {
    PoolRows pool;
    pool.score_rows = table.as<const float* const>(0);
    pool.kv_rows = table.as<const float* const>(pool_bytes);
    pool.n_cand = n_cand;
    pool.n_prev = plan.n_prev();
    pool.n_out = plan.n_windows();
    pool.dim = dim();
    pool.out = out;
    compressor_pool_rows(pool, numerics_, stream);
    finish_rows(plan, out, stream);
  }
  // The new frontier in the other buffers (the old one is read above, in
  // stream order, before it is written again by a later batch).
  const int next = 1 - frontier.current_;
  gather_rows_kernel<<<blocks_for(static_cast<int64_t>(n_cand) * width), kThreads, 0, stream>>>(
      table.as<const float* const>(2 * pool_bytes), frontier.score_[next].as<float>(), n_cand, width);
  cuda_check_launch("compressor frontier", device);
  gather_rows_kernel<<<blocks_for(static_cast<int64_t>(n_cand) * width), kThreads, 0, stream>>>(
      table.as<const float* const>(2 * pool_bytes + source_bytes), frontier.kv_[next].as<float>(), n_cand, width);
  cuda_check_launch("compressor frontier", device);
  frontier.current_ = next;
  return plan;
}

void DeviceCompressor::finish_rows(const backend::CompressorPlan& plan, float* out, cudaStream_t stream) const {
  const int64_t rows = plan.n_windows();
  rms_norm_rows(out, norm_.as<float>(), out, rows, dim(), eps_, numerics_, stream);
  // RoPE at each window's first position, from the CPU's cos/sin cache.
  const int n_pairs = rope_.n_rot / 2;
  std::vector<float> cos_sin(static_cast<size_t>(2 * rows * n_pairs));
  bool fused = false;
  for (int64_t w = 0; w < rows; ++w) {
    const cpu::RopeCache cache = cpu::rope_cache(rope_, plan.window_start[static_cast<size_t>(w)], false);
    fused = cache.fused;
    for (int k = 0; k < n_pairs; ++k) {
      cos_sin[static_cast<size_t>(w * n_pairs + k)] = cache.cos[static_cast<size_t>(k)];
      cos_sin[static_cast<size_t>((rows + w) * n_pairs + k)] = cache.sin[static_cast<size_t>(k)];
    }
  }
  const StreamScratch tables(cos_sin.size() * sizeof(float), stream);
  tables.upload(0, cos_sin.data(), cos_sin.size() * sizeof(float));
  const size_t sin_offset = static_cast<size_t>(rows * n_pairs) * sizeof(float);
  rope_heads_rows(out, tables.as<float>(), tables.as<float>(sin_offset), rows, 1, dim(), n_pairs, fused, stream);
  if (role() == cpu::CompressorRole::Attention) {
    if (numerics_ == backend::Numerics::Default) fp8_e4m3_round_trip_rows(out, rows, dim(), dim() - n_rot_, stream);
  } else {
    hadamard128_rows(out, rows, dim(), 1, numerics_ == backend::Numerics::Default, stream);
  }
}

void DeviceCompressor::download(const Frontier& frontier, std::span<float> kv, std::span<float> score) const {
  const size_t n = static_cast<size_t>(state_rows()) * static_cast<size_t>(state_width());
  if (kv.size() != n || score.size() != n)
    throw Error("compressor frontier: " + std::to_string(kv.size()) + " / " + std::to_string(score.size()) +
                " floats given for " + std::to_string(n));
  frontier.kv_[frontier.current_].download(kv.data(), n * sizeof(float));
  frontier.score_[frontier.current_].download(score.data(), n * sizeof(float));
}

void DeviceCompressor::upload(Frontier& frontier, std::span<const float> kv, std::span<const float> score) const {
  const size_t n = static_cast<size_t>(state_rows()) * static_cast<size_t>(state_width());
  if (kv.size() != n || score.size() != n)
    throw Error("compressor frontier: " + std::to_string(kv.size()) + " / " + std::to_string(score.size()) +
                " floats given for " + std::to_string(n));
  frontier.kv_[frontier.current_].upload(kv.data(), n * sizeof(float));
  frontier.score_[frontier.current_].upload(score.data(), n * sizeof(float));
}

}  // namespace ds4::cuda
