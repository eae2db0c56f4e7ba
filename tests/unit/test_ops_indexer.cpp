// Indexer scores sum_h w_h * ReLU(q_h . k) and the top-k row selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/ops_indexer.h"
#include "core/fp16.h"
#include "quant/dot.h"

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

// ---- Default kernels, every ISA level ----

std::vector<const IndexerScoreKernels*> levels() {
  std::vector<const IndexerScoreKernels*> out;
  for (const quant::DotKernels* dots : quant::dot_kernels_available()) out.push_back(&indexer_score_kernels_for(dots->isa));
  return out;
}

// n_rows rows of dim f16 values, as f16 bits and as their exact f32 values.
struct F16Rows {
  std::vector<std::vector<uint16_t>> bits;
  std::vector<std::vector<float>> values;
  std::vector<const uint16_t*> bit_ptrs;
  std::vector<const float*> value_ptrs;
};

// Gaussian values (as the cache holds them) or, with any_bits, any finite f16
// (subnormals, both zeros, +-65504).
F16Rows make_rows(std::size_t n_rows, std::size_t dim, std::mt19937& rng, bool any_bits = false) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  F16Rows rows;
  rows.bits.resize(n_rows);
  for (auto& r : rows.bits) {
    while (r.size() < dim) {
      const uint16_t h = any_bits ? static_cast<uint16_t>(bits(rng)) : f32_to_f16(nd(rng));
      if ((h & 0x7c00u) != 0x7c00u) r.push_back(h);
    }
  }
  for (const auto& r : rows.bits) {
    rows.values.emplace_back();
    for (uint16_t h : r) rows.values.back().push_back(f16_to_f32(h));
  }
  for (const auto& r : rows.bits) rows.bit_ptrs.push_back(r.data());
  for (const auto& r : rows.values) rows.value_ptrs.push_back(r.data());
  return rows;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  return true;
}

// (heads, dim): the Flash indexer (64 x 128), heads short of / past a vector
// or a head block, dims with tails shorter than a vector.
const std::pair<int, int> kShapes[] = {{64, 128}, {1, 128}, {5, 7}, {17, 40}, {70, 129}, {8, 1}, {33, 16}};
const std::size_t kRowCounts[] = {1, 2, 3, 4, 5, 9, 64, 300};

TEST(OpsIndexerDefault, EveryLevelMatchesDouble) {
  // Within 1e-5 of the score's magnitude sum_h |w_h| sum_i |row_i q_h,i|.
  std::mt19937 rng(11);
  for (const IndexerScoreKernels* k : levels()) {
    for (const auto& [heads, dim] : kShapes) {
      for (std::size_t n_rows : kRowCounts) {
        SCOPED_TRACE(std::string(k->isa) + " heads " + std::to_string(heads) + " dim " + std::to_string(dim) +
                     " rows " + std::to_string(n_rows));
        const auto [q, w] = random_query(heads, dim, rng);
        const F16Rows rows = make_rows(n_rows, static_cast<std::size_t>(dim), rng);
        std::vector<float> s(n_rows, 9.0f);
        indexer_scores(*k, q, w, dim, rows.bit_ptrs, s);
        for (std::size_t c = 0; c < n_rows; ++c) {
          double expect = 0.0, magnitude = 0.0;
          for (int h = 0; h < heads; ++h) {
            double dot = 0.0, abs_dot = 0.0;
            for (int i = 0; i < dim; ++i) {
              const double p = double(rows.values[c][static_cast<std::size_t>(i)]) * q[static_cast<std::size_t>(h * dim + i)];
              dot += p;
              abs_dot += std::fabs(p);
            }
            expect += std::max(dot, 0.0) * w[static_cast<std::size_t>(h)];
            magnitude += std::fabs(w[static_cast<std::size_t>(h)]) * abs_dot;
          }
          ASSERT_NEAR(s[c], expect, 1e-5 * magnitude) << "row " << c;
        }
      }
    }
  }
}

TEST(OpsIndexerDefault, F16RowsBitIdenticalToTheirF32Values) {
  std::mt19937 rng(12);
  for (const IndexerScoreKernels* k : levels()) {
    for (const auto& [heads, dim] : kShapes) {
      for (bool any_bits : {false, true}) {
        SCOPED_TRACE(std::string(k->isa) + " heads " + std::to_string(heads) + " dim " + std::to_string(dim));
        auto [q, w] = random_query(heads, dim, rng);
        if (any_bits)
          for (float& v : q) v *= 1e-4f;  // no dot overflows at +-65504
        const F16Rows rows = make_rows(37, static_cast<std::size_t>(dim), rng, any_bits);
        std::vector<float> s16(37), s32(37);
        indexer_scores(*k, q, w, dim, rows.bit_ptrs, s16);
        indexer_scores(*k, q, w, dim, rows.value_ptrs, s32);
        EXPECT_TRUE(same_bits(s16, s32));
      }
    }
  }
}

TEST(OpsIndexerDefault, SplittingRowsDoesNotChangeScores) {
  // The indexer splits rows over threads in runs: a row's score is the same
  // scored alone, in any run, or with all rows at once.
  std::mt19937 rng(13);
  const int heads = 64, dim = 128;
  const std::size_t n_rows = 203;
  const auto [q, w] = random_query(heads, dim, rng);
  const F16Rows rows = make_rows(n_rows, dim, rng);
  for (const IndexerScoreKernels* k : levels()) {
    SCOPED_TRACE(k->isa);
    std::vector<float> all(n_rows), alone(n_rows), runs(n_rows);
    indexer_scores(*k, q, w, dim, rows.bit_ptrs, all);
    for (std::size_t c = 0; c < n_rows; ++c)
      indexer_scores(*k, q, w, dim, std::span<const uint16_t* const>(rows.bit_ptrs).subspan(c, 1),
                     std::span<float>(alone).subspan(c, 1));
    std::uniform_int_distribution<std::size_t> len(1, 70);
    for (std::size_t at = 0; at < n_rows;) {
      const std::size_t m = std::min(len(rng), n_rows - at);
      indexer_scores(*k, q, w, dim, std::span<const uint16_t* const>(rows.bit_ptrs).subspan(at, m),
                     std::span<float>(runs).subspan(at, m));
      at += m;
    }
    EXPECT_TRUE(same_bits(all, alone));
    EXPECT_TRUE(same_bits(all, runs));
  }
}

TEST(OpsIndexerDefault, AQueryBufferRewrittenInPlaceIsReadAfresh) {
  // The vector levels keep each thread's last transposed query while q and
  // the weights keep their bits; the caller reuses its buffers token after
  // token, so a rewrite in place (one element of q, or of the weights) must
  // be seen: the scores equal those of fresh copies of the new values.
  std::mt19937 rng(17);
  const int heads = 64, dim = 128;
  const std::size_t n_rows = 9;
  auto [q, w] = random_query(heads, dim, rng);
  const F16Rows rows = make_rows(n_rows, dim, rng);
  for (const IndexerScoreKernels* k : levels()) {
    SCOPED_TRACE(k->isa);
    std::vector<float> before(n_rows), after(n_rows), fresh(n_rows);
    auto score_fresh = [&](const std::vector<float>& q2, const std::vector<float>& w2) {
      const std::vector<float> other_q = random_query(heads, dim, rng).first;
      indexer_scores(*k, other_q, w2, dim, rows.bit_ptrs, fresh);  // replaces the kept query
      const std::vector<float> q_copy = q2, w_copy = w2;
      indexer_scores(*k, q_copy, w_copy, dim, rows.bit_ptrs, fresh);
    };
    indexer_scores(*k, q, w, dim, rows.bit_ptrs, before);
    q[static_cast<std::size_t>(heads * dim - 1)] += 4.0f;  // the last element of the last head
    indexer_scores(*k, q, w, dim, rows.bit_ptrs, after);
    score_fresh(q, w);
    EXPECT_FALSE(same_bits(before, after));
    EXPECT_TRUE(same_bits(after, fresh));

    before = after;
    w[static_cast<std::size_t>(heads - 1)] *= -3.0f;
    indexer_scores(*k, q, w, dim, rows.bit_ptrs, after);
    score_fresh(q, w);
    EXPECT_FALSE(same_bits(before, after));
    EXPECT_TRUE(same_bits(after, fresh));
  }
}

TEST(OpsIndexerDefault, ZeroRowsScoreZeroAndNoRowsWriteNothing) {
  std::mt19937 rng(14);
  const int heads = 64, dim = 128;
  const auto [q, w] = random_query(heads, dim, rng);
  const std::vector<uint16_t> zeros(dim, 0);
  const std::vector<const uint16_t*> rows(5, zeros.data());
  for (const IndexerScoreKernels* k : levels()) {
    SCOPED_TRACE(k->isa);
    std::vector<float> s(5, 9.0f);
    indexer_scores(*k, q, w, dim, rows, s);
    for (float v : s) EXPECT_EQ(v, 0.0f);
    std::vector<float> none;
    indexer_scores(*k, q, w, dim, std::span<const uint16_t* const>(), none);
  }
}

TEST(OpsIndexerDefault, QualityKeepsTheScalarLoops) {
  // Quality (and the scalar level) is one running float sum per dot (mul,
  // add) and the heads summed in order, whatever level Default runs at.
  std::mt19937 rng(15);
  const int heads = 64, dim = 128;
  const std::size_t n_rows = 21;
  const auto [q, w] = random_query(heads, dim, rng);
  const F16Rows rows = make_rows(n_rows, dim, rng);
  std::vector<float> expect(n_rows);
  for (std::size_t c = 0; c < n_rows; ++c) {
    float s = 0.0f;
    for (int h = 0; h < heads; ++h) {
      float dot = 0.0f;
      for (int i = 0; i < dim; ++i) {
        const float prod = rows.values[c][static_cast<std::size_t>(i)] * q[static_cast<std::size_t>(h * dim + i)];
        dot = dot + prod;
      }
      const float term = std::max(dot, 0.0f) * w[static_cast<std::size_t>(h)];
      s = s + term;
    }
    expect[c] = s;
  }
  std::vector<float> quality(n_rows), quality16(n_rows), scalar(n_rows);
  indexer_scores(q, w, dim, rows.value_ptrs, quality, Numerics::Quality);
  indexer_scores(q, w, dim, rows.bit_ptrs, quality16, Numerics::Quality);
  indexer_scores(indexer_score_kernels_for("scalar"), q, w, dim, rows.bit_ptrs, scalar);
  EXPECT_TRUE(same_bits(quality, expect));
  EXPECT_TRUE(same_bits(quality16, expect));
  EXPECT_TRUE(same_bits(scalar, expect));
}

TEST(OpsIndexerDefault, DefaultUsesTheDotLevel) {
  // One variable (DS4_ISA) picks the dot kernels and these.
  const std::string dot_isa = quant::dot_kernels().isa;
  const IndexerScoreKernels& k = indexer_score_kernels();
  EXPECT_EQ(std::string(k.isa), dot_isa.rfind("avx512", 0) == 0 ? "avx512" : dot_isa);
  EXPECT_EQ(&k, &indexer_score_kernels_for(dot_isa.c_str()));

  std::mt19937 rng(16);
  const int heads = 64, dim = 128;
  const auto [q, w] = random_query(heads, dim, rng);
  const F16Rows rows = make_rows(19, dim, rng);
  std::vector<float> expect(19), s(19), s16(19);
  indexer_scores(k, q, w, dim, rows.bit_ptrs, expect);
  indexer_scores(q, w, dim, rows.value_ptrs, s, Numerics::Default);
  indexer_scores(q, w, dim, rows.bit_ptrs, s16);
  EXPECT_TRUE(same_bits(s, expect));
  EXPECT_TRUE(same_bits(s16, expect));
}

TEST(OpsIndexerDefault, UnknownLevelIsAnError) { EXPECT_ANY_THROW(indexer_score_kernels_for("sse9")); }

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
