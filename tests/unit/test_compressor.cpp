// The stateful compressor against a straightforward double-precision
// transcription of MODEL.md 4.5 that keeps every token's projections and
// pools each window from that history (no frontier), on the tiny synthetic
// model in the f32 mix. The transcription computes its own matvecs, softmax
// pooling, RMSNorm, rotation and Hadamard; it borrows rope_thetas for the
// angles and, in Default numerics, the FP8/FP4 round trips (ops tested on
// their own).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/compressor.h"
#include "backend/cpu/ops_compressor_pool.h"
#include "backend/cpu/ops_qat.h"
#include "backend/cpu/ops_rope.h"
#include "core/error.h"
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

constexpr int kPositions = 600;

class CompressorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new test::SyntheticModel(model::preset_tiny(), model::QuantMix::F32, /*seed=*/11);
  }
  static void TearDownTestSuite() { delete model_; }
  static const model::Deepseek4HParams& hp() { return model_->hparams(); }
  static const model::LayerWeights& layer(int il) { return model_->layer(il); }

  static test::SyntheticModel* model_;
};
test::SyntheticModel* CompressorTest::model_ = nullptr;

std::vector<std::vector<float>> random_inputs(int n, int width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<float>> xs(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(width)));
  for (auto& x : xs)
    for (float& v : x) v = u(rng);
  return xs;
}

// y = H y / sqrt(n), H[i][j] = (-1)^popcount(i & j) (Sylvester order).
void hadamard_double(std::vector<double>& y) {
  const size_t n = y.size();
  std::vector<double> out(n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) out[i] += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * y[j];
  for (size_t i = 0; i < n; ++i) y[i] = out[i] / std::sqrt(static_cast<double>(n));
}

// MODEL.md 4.5 from the whole token history, in double.
class ReferenceCompressor {
 public:
  ReferenceCompressor(const model::LayerWeights& lw, const model::Deepseek4HParams& hp, CompressorRole role,
                      Numerics n)
      : role_(role), numerics_(n), hp_(hp) {
    const model::CompressorWeights& w = role == CompressorRole::Attention ? lw.attn_compressor : lw.indexer_compressor;
    ratio_ = static_cast<int>(lw.compress_ratio);
    coff_ = ratio_ == 4 ? 2 : 1;
    dim_ = static_cast<int>(role == CompressorRole::Attention ? hp.head_dim : hp.indexer_head_dim);
    n_embd_ = static_cast<int>(hp.n_embd);
    kv_ = test::dequantize_tensor(w.kv);
    gate_ = test::dequantize_tensor(w.gate);
    ape_ = test::dequantize_tensor(w.ape);
    norm_ = test::dequantize_tensor(w.norm);
    rope_ = rope_params(hp, lw.compress_ratio, n);
  }

  // Records token `pos` (must be the next one); returns the row it completes.
  std::optional<std::vector<double>> step(const std::vector<float>& xn) {
    const int width = coff_ * dim_;
    const int64_t pos = static_cast<int64_t>(kv_hist_.size());
    std::vector<double> kv(static_cast<size_t>(width)), sc(static_cast<size_t>(width));
    for (int j = 0; j < width; ++j) {
      double a = 0.0, b = 0.0;
      for (int i = 0; i < n_embd_; ++i) {
        a += static_cast<double>(kv_[static_cast<size_t>(j) * n_embd_ + i]) * xn[static_cast<size_t>(i)];
        b += static_cast<double>(gate_[static_cast<size_t>(j) * n_embd_ + i]) * xn[static_cast<size_t>(i)];
      }
      kv[static_cast<size_t>(j)] = a;
      sc[static_cast<size_t>(j)] = b + ape_[static_cast<size_t>(pos % ratio_) * width + j];
    }
    kv_hist_.push_back(kv);
    sc_hist_.push_back(sc);
    if ((pos + 1) % ratio_ != 0) return std::nullopt;
    return row((pos + 1) / ratio_ - 1);
  }

 private:
  std::vector<double> row(int64_t c) {
    const int64_t first = c * ratio_;
    std::vector<double> y(static_cast<size_t>(dim_));
    for (int j = 0; j < dim_; ++j) {
      // (score, value) candidates of column j.
      std::vector<std::pair<double, double>> cand;
      if (ratio_ == 4) {
        for (int64_t t = first - 4; t < first; ++t)
          if (t >= 0) cand.emplace_back(sc_hist_[static_cast<size_t>(t)][static_cast<size_t>(j)],
                                        kv_hist_[static_cast<size_t>(t)][static_cast<size_t>(j)]);
        for (int64_t t = first; t < first + 4; ++t)
          cand.emplace_back(sc_hist_[static_cast<size_t>(t)][static_cast<size_t>(dim_ + j)],
                            kv_hist_[static_cast<size_t>(t)][static_cast<size_t>(dim_ + j)]);
      } else {
        for (int64_t t = first; t < first + ratio_; ++t)
          cand.emplace_back(sc_hist_[static_cast<size_t>(t)][static_cast<size_t>(j)],
                            kv_hist_[static_cast<size_t>(t)][static_cast<size_t>(j)]);
      }
      double m = -INFINITY;
      for (auto& [s, v] : cand) m = std::max(m, s);
      double num = 0.0, den = 0.0;
      for (auto& [s, v] : cand) {
        num += std::exp(s - m) * v;
        den += std::exp(s - m);
      }
      y[static_cast<size_t>(j)] = num / den;
    }
    double ss = 0.0;
    for (double v : y) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / dim_ + static_cast<double>(hp_.rms_eps));
    for (int j = 0; j < dim_; ++j) y[static_cast<size_t>(j)] *= scale * norm_[static_cast<size_t>(j)];

    const int n_rot = static_cast<int>(hp_.n_rot);
    std::vector<float> theta(static_cast<size_t>(n_rot / 2));
    rope_thetas(rope_, first, theta);
    for (int p = 0; p < n_rot / 2; ++p) {
      const size_t a = static_cast<size_t>(dim_ - n_rot + 2 * p);
      const double c = std::cos(static_cast<double>(theta[static_cast<size_t>(p)]));
      const double s = std::sin(static_cast<double>(theta[static_cast<size_t>(p)]));
      const double x0 = y[a], x1 = y[a + 1];
      y[a] = x0 * c - x1 * s;
      y[a + 1] = x0 * s + x1 * c;
    }
    if (role_ == CompressorRole::Indexer) hadamard_double(y);
    if (numerics_ == Numerics::Default) {
      std::vector<float> f(y.begin(), y.end());
      if (role_ == CompressorRole::Attention)
        fp8_e4m3_round_trip(std::span<float>(f).first(static_cast<size_t>(dim_ - n_rot)));
      else
        fp4_e2m1_round_trip(f);
      y.assign(f.begin(), f.end());
    }
    return y;
  }

  CompressorRole role_;
  Numerics numerics_;
  const model::Deepseek4HParams& hp_;
  int ratio_ = 0, coff_ = 1, dim_ = 0, n_embd_ = 0;
  std::vector<float> kv_, gate_, ape_, norm_;
  RopeParams rope_;
  std::vector<std::vector<double>> kv_hist_, sc_hist_;
};

struct Case {
  int layer;
  CompressorRole role;
  Numerics numerics;
};

std::string name(const Case& c) {
  return "layer " + std::to_string(c.layer) + (c.role == CompressorRole::Attention ? " attention" : " indexer") +
         (c.numerics == Numerics::Default ? " default" : " quality");
}

const Case kCases[] = {
    {1, CompressorRole::Attention, Numerics::Default}, {1, CompressorRole::Attention, Numerics::Quality},
    {1, CompressorRole::Indexer, Numerics::Default},   {1, CompressorRole::Indexer, Numerics::Quality},
    {2, CompressorRole::Attention, Numerics::Default}, {2, CompressorRole::Attention, Numerics::Quality},
};

TEST_F(CompressorTest, RowsAtWindowEndsMatchTheTranscription) {
  const auto xs = random_inputs(kPositions, static_cast<int>(hp().n_embd), 5);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    Compressor comp(layer(c.layer), hp(), c.role, c.numerics);
    ReferenceCompressor ref(layer(c.layer), hp(), c.role, c.numerics);
    const int ratio = comp.ratio();
    int emitted = 0, elements = 0, quantisation_flips = 0;
    for (int pos = 0; pos < kPositions; ++pos) {
      const std::optional<std::vector<float>> got = comp.step(xs[static_cast<size_t>(pos)], pos);
      const std::optional<std::vector<double>> want = ref.step(xs[static_cast<size_t>(pos)]);
      ASSERT_EQ(got.has_value(), (pos + 1) % ratio == 0) << "pos " << pos;
      ASSERT_EQ(want.has_value(), got.has_value());
      if (got) {
        ++emitted;
        ASSERT_EQ(got->size(), static_cast<size_t>(comp.dim()));
        double rms = 0.0;
        for (double v : *want) rms += v * v;
        rms = std::sqrt(rms / static_cast<double>(want->size()));
        const double tol = 1e-4 * std::max(1.0, rms);
        for (size_t j = 0; j < got->size(); ++j) {
          ++elements;
          const double d = std::abs((*got)[j] - (*want)[j]);
          if (d <= tol) continue;
          // Default rounds to FP8/FP4 grids: a value within float error of a
          // rounding boundary may land one grid step away. Allow that, rarely.
          ASSERT_EQ(c.numerics, Numerics::Default) << "pos " << pos << " dim " << j << ": " << (*got)[j] << " vs "
                                                   << (*want)[j];
          EXPECT_LE(d, 0.5 * std::abs((*want)[j]) + 1e-3) << "pos " << pos << " dim " << j;
          ++quantisation_flips;
        }
      }
      ASSERT_EQ(emitted, (pos + 1) / ratio) << "pos " << pos;
    }
    EXPECT_LE(quantisation_flips, elements / 1000) << quantisation_flips << " of " << elements;
    std::printf("%s: %d rows, %d elements off by a grid step\n", name(c).c_str(), emitted, quantisation_flips);
  }
}

TEST_F(CompressorTest, FirstOverlappedRowHasAnEmptyPreviousLane) {
  Compressor comp(layer(1), hp(), CompressorRole::Attention, Numerics::Quality);
  ASSERT_EQ(comp.ratio(), 4);
  ASSERT_EQ(comp.state_rows(), 8);
  const auto xs = random_inputs(8, static_cast<int>(hp().n_embd), 9);
  const int width = comp.state_width();
  for (int pos = 0; pos < 3; ++pos) {
    EXPECT_FALSE(comp.step(xs[static_cast<size_t>(pos)], pos));
    for (int i = 0; i < 4 * width; ++i) ASSERT_LE(comp.state_score()[static_cast<size_t>(i)], kPoolEmptyScore);
    for (int i = 0; i < 4 * width; ++i) ASSERT_EQ(comp.state_kv()[static_cast<size_t>(i)], 0.0f);
  }
  const std::vector<float> cur_score(comp.state_score().begin() + 4 * width, comp.state_score().end());
  ASSERT_TRUE(comp.step(xs[3], 3));
  // The completed window became the previous one.
  const std::vector<float> prev_score(comp.state_score().begin(), comp.state_score().begin() + 4 * width);
  for (int i = 0; i < 3 * width; ++i) EXPECT_EQ(prev_score[static_cast<size_t>(i)], cur_score[static_cast<size_t>(i)]);
}

TEST_F(CompressorTest, ResetStartsOverBitForBit) {
  const auto xs = random_inputs(64, static_cast<int>(hp().n_embd), 13);
  Compressor comp(layer(1), hp(), CompressorRole::Indexer, Numerics::Default);
  std::vector<std::vector<float>> first, second;
  for (int pos = 0; pos < 64; ++pos)
    if (auto r = comp.step(xs[static_cast<size_t>(pos)], pos)) first.push_back(*r);
  comp.reset();
  for (float s : comp.state_score()) ASSERT_EQ(s, kPoolEmptyScore);
  for (float v : comp.state_kv()) ASSERT_EQ(v, 0.0f);
  for (int pos = 0; pos < 64; ++pos)
    if (auto r = comp.step(xs[static_cast<size_t>(pos)], pos)) second.push_back(*r);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first.size(), 16u);
}

TEST_F(CompressorTest, LayersWithoutACompressorAreRefused) {
  EXPECT_THROW(Compressor(layer(0), hp(), CompressorRole::Attention, Numerics::Default), Error);
  EXPECT_THROW(Compressor(layer(2), hp(), CompressorRole::Indexer, Numerics::Default), Error);
}

}  // namespace
}  // namespace ds4::cpu
