#include "backend/cpu/indexer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/matvec.h"
#include "backend/cpu/ops_indexer.h"
#include "backend/cpu/ops_qat.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace ds4::cpu {

Indexer::Indexer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, Numerics numerics)
    : q_b_(layer.indexer_q_b),
      proj_(layer.indexer_proj),
      numerics_(numerics),
      n_head_(static_cast<int>(hp.indexer_n_head)),
      head_dim_(static_cast<int>(hp.indexer_head_dim)),
      top_k_(static_cast<int>(hp.indexer_top_k)),
      rope_(rope_params(hp, layer.compress_ratio, numerics)) {
  const std::string where = "indexer of layer " + std::to_string(layer.index) + ": ";
  if (layer.compress_ratio != 4 || !q_b_.present() || !proj_.present()) throw Error(where + "layer has no indexer");
  if (head_dim_ != kHadamardSize) throw Error(where + "key length " + std::to_string(head_dim_) + " is not 128");
  if (q_b_.ne[1] != static_cast<uint64_t>(n_head_ * head_dim_) || proj_.ne[1] != static_cast<uint64_t>(n_head_))
    throw Error(where + "weight shapes do not match the indexer heads");
}

void Indexer::query(std::span<const float> qr, int64_t pos, std::span<float> q, ThreadPool* pool) const {
  matvec(q_b_, -1, qr.data(), q.data(), numerics_, pool);
  finish_query(q, pos);
}

void Indexer::finish_query(std::span<float> q, int64_t pos) const {
  const RopeCache cache = rope_cache(rope_, pos, /*inverse=*/false);
  rope_heads(q, n_head_, head_dim_, cache);
  for (int h = 0; h < n_head_; ++h) {
    std::span<float, kHadamardSize> head(q.data() + static_cast<size_t>(h) * head_dim_, kHadamardSize);
    // Quality: llama.cpp rotates but does not round (the rotation cancels in the dot).
    if (numerics_ == Numerics::Default)
      indexer_qat(head);
    else
      hadamard128(head);
  }
}

void Indexer::head_weights(std::span<const float> xn, std::span<float> w, ThreadPool* pool) const {
  matvec(proj_, -1, xn.data(), w.data(), numerics_, pool);
  finish_weights(w);
}

void Indexer::finish_weights(std::span<float> w) const {
  const float scale = 1.0f / std::sqrt(static_cast<float>(n_head_ * head_dim_));
  for (float& v : w) v *= scale;
}

void Indexer::project(ActivationBatch& qr, ActivationBatch& xn, float* QB, float* PW, ThreadPool* pool) const {
  matmul(q_b_, -1, qr, QB, static_cast<int64_t>(n_head_) * head_dim_, pool);
  matmul(proj_, -1, xn, PW, n_head_, pool);
}

template <class Row>
std::vector<int32_t> Indexer::select(std::span<const float> q, std::span<const float> w,
                                     std::span<const Row* const> rows, ThreadPool* pool) const {
  const size_t n = rows.size();
  std::vector<float> scores(n);
  // Rows are scored independently: split them over the pool in 64-row runs
  // (whole cache lines of scores per task).
  constexpr size_t kRun = 64;
  const int n_runs = static_cast<int>((n + kRun - 1) / kRun);
  auto score = [&](int task, int n_tasks) {
    for (size_t at = static_cast<size_t>(task) * kRun; at < n; at += static_cast<size_t>(n_tasks) * kRun) {
      const size_t m = std::min(kRun, n - at);
      indexer_scores(q, w, head_dim_, rows.subspan(at, m), std::span<float>(scores).subspan(at, m), numerics_);
    }
  };
  const int threads = pool ? pool->size() : 1;
  if (pool && threads > 1 && n_runs > 1) {
    pool->run(std::min(threads, n_runs), score);
  } else {
    score(0, 1);
  }
  return indexer_select(scores, top_k_, numerics_);
}

template <class Row>
std::vector<int32_t> Indexer::allowed_rows(std::span<const float> qr, std::span<const float> xn, int64_t pos,
                                           std::span<const Row* const> rows, ThreadPool* pool) const {
  const int n = static_cast<int>(rows.size());
  if (n <= top_k_) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int c = 0; c < n; ++c) all[static_cast<size_t>(c)] = c;
    return all;
  }
  std::vector<float> q(static_cast<size_t>(n_head_) * head_dim_), w(static_cast<size_t>(n_head_));
  query(qr, pos, q, pool);
  head_weights(xn, w, pool);
  return select(std::span<const float>(q), std::span<const float>(w), rows, pool);
}

std::vector<int32_t> Indexer::allowed(std::span<const float> qr, std::span<const float> xn, int64_t pos,
                                      std::span<const float* const> rows, ThreadPool* pool) const {
  return allowed_rows(qr, xn, pos, rows, pool);
}

std::vector<int32_t> Indexer::allowed(std::span<const float> qr, std::span<const float> xn, int64_t pos,
                                      std::span<const uint16_t* const> rows, ThreadPool* pool) const {
  return allowed_rows(qr, xn, pos, rows, pool);
}

template <class Row>
std::vector<int32_t> Indexer::allowed_projected_rows(float* qb, float* pw, int64_t pos,
                                                     std::span<const Row* const> rows, ThreadPool* pool) const {
  if (static_cast<int>(rows.size()) <= top_k_) {
    std::vector<int32_t> all(rows.size());
    for (size_t c = 0; c < rows.size(); ++c) all[c] = static_cast<int32_t>(c);
    return all;
  }
  const std::span<float> q(qb, static_cast<size_t>(n_head_) * head_dim_), w(pw, static_cast<size_t>(n_head_));
  finish_query(q, pos);
  finish_weights(w);
  return select(std::span<const float>(q), std::span<const float>(w), rows, pool);
}

std::vector<int32_t> Indexer::allowed_projected(float* qb, float* pw, int64_t pos, std::span<const float* const> rows,
                                                ThreadPool* pool) const {
  return allowed_projected_rows(qb, pw, pos, rows, pool);
}

std::vector<int32_t> Indexer::allowed_projected(float* qb, float* pw, int64_t pos,
                                                std::span<const uint16_t* const> rows, ThreadPool* pool) const {
  return allowed_projected_rows(qb, pw, pos, rows, pool);
}

}  // namespace ds4::cpu
