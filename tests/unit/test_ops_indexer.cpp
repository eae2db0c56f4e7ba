// Indexer scores sum_h w_h * ReLU(q_h . k) and the top-k row selection.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backend/cpu/ops_indexer.h"
#include "core/fp16.h"

namespace ds4::cpu {
namespace {

TEST(OpsIndexer, ScoresAreWeightedReluDots) {
  // Two heads of dim 2: q0 = (1, 0), q1 = (0, 1); weights (2, -1).
  const std::vector<float> q = {1.0f, 0.0f, 0.0f, 1.0f};
  const std::vector<float> w = {2.0f, -1.0f};
  const float r0[] = {3.0f, 4.0f};   // 2*3 - 1*4 = 2
  const float r1[] = {-3.0f, 4.0f};  // ReLU drops head 0: -4
  const float r2[] = {3.0f, -4.0f};  // ReLU drops head 1: 6
  const float* rows[] = {r0, r1, r2};
  std::vector<float> s(3);
  indexer_scores(q, w, 2, rows, s);
  EXPECT_EQ(s[0], 2.0f);
  EXPECT_EQ(s[1], -4.0f);
  EXPECT_EQ(s[2], 6.0f);
}

// Random per-head queries (heads x dim) and head weights carrying the
// 1/sqrt(heads * dim) factor, as Indexer::query / head_weights produce them.
std::pair<std::vector<float>, std::vector<float>> random_query(int heads, int dim, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(heads * dim)), w(static_cast<size_t>(heads));
  for (float& v : q) v = nd(rng);
  for (float& v : w) v = nd(rng) / std::sqrt(float(heads * dim));
  return {q, w};
}

TEST(OpsIndexer, ScoresMatchDouble) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int heads = 64, dim = 128, n_rows = 40;
  const auto [q, w] = random_query(heads, dim, rng);
  std::vector<std::vector<float>> store(n_rows, std::vector<float>(dim));
  std::vector<const float*> rows;
  for (auto& r : store) {
    for (float& v : r) v = nd(rng);
    rows.push_back(r.data());
  }
  std::vector<float> s(n_rows);
  indexer_scores(q, w, dim, rows, s);
  for (int c = 0; c < n_rows; ++c) {
    double acc = 0.0;
    for (int h = 0; h < heads; ++h) {
      double dot = 0.0;
      for (int i = 0; i < dim; ++i) dot += double(store[c][i]) * q[h * dim + i];
      acc += std::max(dot, 0.0) * w[h];
    }
    EXPECT_NEAR(s[c], acc, 1e-5);
  }
}

// A Default cache's f16 rows scored in place give the scores of the same rows
// converted to f32 first, bit for bit.
TEST(OpsIndexer, F16RowsScoreExactlyAsTheirF32Conversion) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int heads = 8, dim = 128, n_rows = 33;
  const auto [q, w] = random_query(heads, dim, rng);
  std::vector<std::vector<uint16_t>> halves(n_rows, std::vector<uint16_t>(dim));
  std::vector<std::vector<float>> floats(n_rows, std::vector<float>(dim));
  std::vector<const uint16_t*> hrows;
  std::vector<const float*> frows;
  for (int c = 0; c < n_rows; ++c) {
    for (int i = 0; i < dim; ++i) {
      halves[c][i] = f32_to_f16(nd(rng));
      floats[c][i] = f16_to_f32(halves[c][i]);
    }
    hrows.push_back(halves[c].data());
    frows.push_back(floats[c].data());
  }
  std::vector<float> sh(n_rows), sf(n_rows);
  indexer_scores(q, w, dim, hrows, sh);
  indexer_scores(q, w, dim, frows, sf);
  EXPECT_EQ(std::memcmp(sh.data(), sf.data(), sizeof(float) * sh.size()), 0);
}

TEST(OpsIndexer, SelectionKeepsAllUpToTopKElseBestInIndexOrder) {
  const std::vector<float> few = {0.3f, -1.0f, 2.0f};
  EXPECT_EQ(indexer_select(few, 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(indexer_select(few, 512), (std::vector<int32_t>{0, 1, 2}));
  // Ties at the cut go to the lower index; the result is in increasing order.
  const std::vector<float> s = {1.0f, 5.0f, 2.0f, 5.0f, 2.0f, 0.0f};
  EXPECT_EQ(indexer_select(s, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(indexer_select(s, 1), (std::vector<int32_t>{1}));
}

}  // namespace
}  // namespace ds4::cpu
