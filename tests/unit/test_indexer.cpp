// The lightning indexer against a double-precision transcription of
// MODEL.md 4.6 on the tiny synthetic model (f32 mix, top_k 4): every index
// row is allowed while there are at most top_k, after that exactly the top_k
// rows by the transcription's scores (positions whose k-th and (k+1)-th
// scores are nearly tied are skipped and counted). Index rows come from the
// indexer-role Compressor (tested in test_compressor), f16-rounded as the
// cache stores them. The transcription borrows rope_thetas for the angles
// and, in Default numerics, the FP4 round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/compressor.h"
#include "backend/cpu/indexer.h"
#include "backend/cpu/ops_qat.h"
#include "backend/cpu/ops_rope.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/gguf_writer.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_model.h"
#include "model/quant_mix.h"
#include "model/synthetic_tokenizer.h"
#include "model/synthetic_weights.h"
#include "quant/quant.h"
#include "support/synthetic_model.h"

namespace ds4::cpu {
namespace {

constexpr int kPositions = 300;
constexpr int kLayer = 1;  // ratio 4

class IndexerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new test::SyntheticModel(model::preset_tiny(), model::QuantMix::F32, /*seed=*/17);
  }
  static void TearDownTestSuite() { delete model_; }
  static const model::Deepseek4HParams& hp() { return model_->hparams(); }
  static const model::LayerWeights& layer(int il) { return model_->layer(il); }

  static test::SyntheticModel* model_;
};
test::SyntheticModel* IndexerTest::model_ = nullptr;

std::vector<float> random_vector(std::mt19937& rng, uint32_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// out = W x in double, W row-major rows x cols.
std::vector<double> matvec_double(const std::vector<float>& w, const std::vector<float>& x) {
  const size_t cols = x.size(), rows = w.size() / cols;
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < cols; ++i) y[r] += static_cast<double>(w[r * cols + i]) * x[i];
  return y;
}

// MODEL.md 4.6 scores in double.
class ReferenceIndexer {
 public:
  ReferenceIndexer(const model::LayerWeights& lw, const model::Deepseek4HParams& hp, Numerics n)
      : hp_(hp), numerics_(n), q_b_(test::dequantize_tensor(lw.indexer_q_b)), proj_(test::dequantize_tensor(lw.indexer_proj)),
        rope_(rope_params(hp, lw.compress_ratio, n)) {}

  std::vector<double> scores(const std::vector<float>& qr, const std::vector<float>& xn, int64_t pos,
                             const std::vector<std::vector<float>>& rows) const {
    const int H = static_cast<int>(hp_.indexer_n_head), D = static_cast<int>(hp_.indexer_head_dim);
    const int n_rot = static_cast<int>(hp_.n_rot);
    std::vector<double> q = matvec_double(q_b_, qr);
    std::vector<float> theta(static_cast<size_t>(n_rot / 2));
    rope_thetas(rope_, pos, theta);
    for (int h = 0; h < H; ++h) {
      double* head = q.data() + static_cast<size_t>(h) * D;
      for (int p = 0; p < n_rot / 2; ++p) {
        const int a = D - n_rot + 2 * p;
        const double c = std::cos(static_cast<double>(theta[static_cast<size_t>(p)]));
        const double s = std::sin(static_cast<double>(theta[static_cast<size_t>(p)]));
        const double x0 = head[a], x1 = head[a + 1];
        head[a] = x0 * c - x1 * s;
        head[a + 1] = x0 * s + x1 * c;
      }
      // Sylvester Hadamard, orthonormal.
      std::vector<double> rot(static_cast<size_t>(D), 0.0);
      for (int i = 0; i < D; ++i)
        for (int j = 0; j < D; ++j)
          rot[static_cast<size_t>(i)] += (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) * head[j];
      for (int i = 0; i < D; ++i) head[i] = rot[static_cast<size_t>(i)] / std::sqrt(static_cast<double>(D));
      if (numerics_ == Numerics::Default) {
        std::vector<float> f(head, head + D);
        fp4_e2m1_round_trip(f);
        std::copy(f.begin(), f.end(), head);
      }
    }
    std::vector<double> w = matvec_double(proj_, xn);
    for (double& v : w) v /= std::sqrt(static_cast<double>(H * D));
    std::vector<double> out(rows.size(), 0.0);
    for (size_t c = 0; c < rows.size(); ++c)
      for (int h = 0; h < H; ++h) {
        double dot = 0.0;
        for (int i = 0; i < D; ++i) dot += q[static_cast<size_t>(h * D + i)] * rows[c][static_cast<size_t>(i)];
        out[c] += w[static_cast<size_t>(h)] * std::max(0.0, dot);
      }
    return out;
  }

 private:
  const model::Deepseek4HParams& hp_;
  Numerics numerics_;
  std::vector<float> q_b_, proj_;
  RopeParams rope_;
};

TEST_F(IndexerTest, AllowedRowsAreAllThenTheTopKOfTheTranscription) {
  for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
    const char* nname = numerics == Numerics::Default ? "default" : "quality";
    SCOPED_TRACE(nname);
    Compressor index_comp(layer(kLayer), hp(), CompressorRole::Indexer, numerics);
    Indexer indexer(layer(kLayer), hp(), numerics);
    ReferenceIndexer ref(layer(kLayer), hp(), numerics);
    const int top_k = indexer.top_k();
    ASSERT_EQ(top_k, static_cast<int>(hp().indexer_top_k));
    std::mt19937 rng(23);
    std::vector<std::vector<float>> rows;
    int all_checked = 0, topk_checked = 0, near_ties = 0, mismatches = 0;
    for (int pos = 0; pos < kPositions; ++pos) {
      const std::vector<float> xn = random_vector(rng, hp().n_embd);
      const std::vector<float> qr = random_vector(rng, hp().q_lora_rank);
      if (auto r = index_comp.step(xn, pos)) {
        for (float& v : *r) v = f16_round(v);
        rows.push_back(std::move(*r));
      }
      ASSERT_EQ(rows.size(), static_cast<size_t>((pos + 1) / 4));
      std::vector<const float*> ptrs;
      for (const auto& row : rows) ptrs.push_back(row.data());
      const std::vector<int32_t> got = indexer.allowed(qr, xn, pos, ptrs);
      const int n = static_cast<int>(rows.size());
      if (n <= top_k) {
        std::vector<int32_t> all(static_cast<size_t>(n));
        std::iota(all.begin(), all.end(), 0);
        ASSERT_EQ(got, all) << "pos " << pos;
        ++all_checked;
        continue;
      }
      const std::vector<double> s = ref.scores(qr, xn, pos, rows);
      std::vector<int32_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return s[static_cast<size_t>(a)] > s[static_cast<size_t>(b)];
      });
      const double kth = s[static_cast<size_t>(order[static_cast<size_t>(top_k - 1)])];
      const double next = s[static_cast<size_t>(order[static_cast<size_t>(top_k)])];
      if (kth - next < 1e-4 * std::max(1.0, std::abs(kth))) {
        ++near_ties;
        continue;
      }
      std::vector<int32_t> want(order.begin(), order.begin() + top_k);
      std::sort(want.begin(), want.end());
      ASSERT_TRUE(std::is_sorted(got.begin(), got.end()));
      ++topk_checked;
      if (got != want) {
        ++mismatches;
        // Default rounds queries to FP4: a value within float error of a grid
        // boundary may round the other way and move a score. Quality must agree.
        EXPECT_EQ(numerics, Numerics::Default) << "pos " << pos;
      }
    }
    EXPECT_EQ(all_checked, 4 * (top_k + 1) - 1);  // positions 0 .. 4*(top_k+1)-2
    EXPECT_GT(topk_checked, kPositions / 2);
    EXPECT_LE(mismatches, topk_checked / 100);
    std::printf("%s: %d all-rows positions, %d top-k positions checked, %d near ties skipped, %d mismatches\n",
                nname, all_checked, topk_checked, near_ties, mismatches);
  }
}

TEST_F(IndexerTest, HeadWeightsCarryTheScale) {
  Indexer indexer(layer(kLayer), hp(), Numerics::Quality);
  std::mt19937 rng(3);
  const std::vector<float> xn = random_vector(rng, hp().n_embd);
  std::vector<float> w(static_cast<size_t>(indexer.n_head()));
  indexer.head_weights(xn, w);
  const std::vector<double> want = matvec_double(test::dequantize_tensor(layer(kLayer).indexer_proj), xn);
  const double scale = 1.0 / std::sqrt(static_cast<double>(indexer.n_head() * indexer.head_dim()));
  for (size_t h = 0; h < w.size(); ++h) EXPECT_NEAR(w[h], want[h] * scale, 1e-5 * std::max(1.0, std::abs(want[h])));
}

TEST_F(IndexerTest, LayersWithoutAnIndexerAreRefused) {
  EXPECT_THROW(Indexer(layer(0), hp(), Numerics::Default), Error);
  EXPECT_THROW(Indexer(layer(2), hp(), Numerics::Default), Error);
}

}  // namespace
}  // namespace ds4::cpu
