#include "backend/cpu/ops_indexer.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstring>

#include "backend/cpu/ops_topk.h"
#include "core/fp16.h"
#include "quant/dot.h"

namespace ds4::cpu {

extern const IndexerScoreKernels kIndexerScoresAvx2;    // ops_indexer_avx2.cpp
extern const IndexerScoreKernels kIndexerScoresAvx512;  // ops_indexer_avx512.cpp

namespace {

// sum_h max(0, dot(row, q_h)) * weights[h] for one dim-wide f32 row.
float score_row(const float* row, const float* q, const float* weights, size_t n_head, size_t dim) {
  float s = 0.0f;
  for (size_t h = 0; h < n_head; ++h) {
    const float* qh = q + h * dim;
    float dot = 0.0f;
    for (size_t i = 0; i < dim; ++i) dot += row[i] * qh[i];
    s += std::max(dot, 0.0f) * weights[h];
  }
  return s;
}

void scores_scalar_f32(const float* q, const float* weights, size_t n_head, size_t dim, const float* const* rows,
                       size_t n_rows, float* scores) {
  for (size_t c = 0; c < n_rows; ++c) scores[c] = score_row(rows[c], q, weights, n_head, dim);
}

// Each row converted to f32 (exact) once, then scored as the f32 rows are.
void scores_scalar_f16(const float* q, const float* weights, size_t n_head, size_t dim, const uint16_t* const* rows,
                       size_t n_rows, float* scores) {
  std::vector<float> row(dim);  // one row at a time: no copy of the whole cache
  for (size_t c = 0; c < n_rows; ++c) {
    std::transform(rows[c], rows[c] + dim, row.begin(), f16_to_f32);
    scores[c] = score_row(row.data(), q, weights, n_head, dim);
  }
}

const IndexerScoreKernels kIndexerScoresScalar = {"scalar", scores_scalar_f32, scores_scalar_f16};

const IndexerScoreKernels& kernels_of_level(const char* dot_isa) {
  if (std::strncmp(dot_isa, "avx512", 6) == 0) return kIndexerScoresAvx512;  // avx512, avx512vnni, avx512vbmi
  if (std::strcmp(dot_isa, "avx2") == 0) return kIndexerScoresAvx2;
  return kIndexerScoresScalar;
}

const IndexerScoreKernels& kernels_of(Numerics numerics) {
  return numerics == Numerics::Quality ? kIndexerScoresScalar : indexer_score_kernels();
}

}  // namespace

const IndexerScoreKernels& indexer_score_kernels_for(const char* isa) {
  return kernels_of_level(quant::dot_kernels_for(isa).isa);
}

const IndexerScoreKernels& indexer_score_kernels() {
  static const IndexerScoreKernels& chosen = kernels_of_level(quant::dot_kernels().isa);
  return chosen;
}

void indexer_scores(const IndexerScoreKernels& k, std::span<const float> q, std::span<const float> weights,
                    int head_dim, std::span<const float* const> rows, std::span<float> scores) {
  const auto dim = static_cast<size_t>(head_dim);
  assert(q.size() == weights.size() * dim && scores.size() == rows.size());
  k.scores_f32(q.data(), weights.data(), weights.size(), dim, rows.data(), rows.size(), scores.data());
}

void indexer_scores(const IndexerScoreKernels& k, std::span<const float> q, std::span<const float> weights,
                    int head_dim, std::span<const uint16_t* const> rows, std::span<float> scores) {
  const auto dim = static_cast<size_t>(head_dim);
  assert(q.size() == weights.size() * dim && scores.size() == rows.size());
  k.scores_f16(q.data(), weights.data(), weights.size(), dim, rows.data(), rows.size(), scores.data());
}

void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const float* const> rows, std::span<float> scores, Numerics numerics) {
  indexer_scores(kernels_of(numerics), q, weights, head_dim, rows, scores);
}

void indexer_scores(std::span<const float> q, std::span<const float> weights, int head_dim,
                    std::span<const uint16_t* const> rows, std::span<float> scores, Numerics numerics) {
  indexer_scores(kernels_of(numerics), q, weights, head_dim, rows, scores);
}

std::vector<int32_t> indexer_select(std::span<const float> scores, int top_k, Numerics numerics) {
  const auto n = static_cast<int32_t>(scores.size());
  std::vector<int32_t> ids;
  if (n <= top_k) {
    ids.resize(static_cast<std::size_t>(n));
    for (int32_t c = 0; c < n; ++c) ids[static_cast<std::size_t>(c)] = c;
    return ids;
  }
  ids.resize(static_cast<std::size_t>(top_k));
  if (numerics == Numerics::Quality)
    top_k_ggml(scores, ids);
  else
    top_k_desc(scores, ids);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace ds4::cpu
