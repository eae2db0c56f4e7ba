// The attention sublayer (MODEL.md 4.4, 4.7) and its per-layer KV state on
// the tiny synthetic model in the f32 mix, against a double-precision
// transcription written here: its own norms, matvecs, rotations (angles from
// rope_thetas), window, attention with sink, inverse rotation and grouped
// output LoRA from the stored attn_output_a layout. Compressed and index rows
// come from separate Compressor instances and the selection from Indexer,
// both tested on their own (test_compressor, test_indexer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention_layer.h"
#include "backend/cpu/compressor.h"
#include "backend/cpu/indexer.h"
#include "backend/cpu/layer_kv_state.h"
#include "backend/cpu/ops_rope.h"
#include "core/fp16.h"
#include "core/gguf_writer.h"
#include "core/thread_pool.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_model.h"
#include "model/quant_mix.h"
#include "model/synthetic_tokenizer.h"
#include "model/synthetic_weights.h"
#include "quant/quant.h"
#include "support/synthetic_model.h"

namespace ds4::cpu {
namespace {

constexpr int kPositions = 320;       // > 2 windows of 128, > n_swa many times over
constexpr int kLayers[] = {0, 1, 2};  // ratio 0, 4, 128 in preset_tiny

class AttentionLayerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new test::SyntheticModel(model::preset_tiny(), model::QuantMix::F32, /*seed=*/23);
  }
  static void TearDownTestSuite() { delete model_; }
  static const model::Deepseek4HParams& hp() { return model_->hparams(); }
  static const model::LayerWeights& layer(int il) { return model_->layer(il); }

  static test::SyntheticModel* model_;
};
test::SyntheticModel* AttentionLayerTest::model_ = nullptr;

std::vector<std::vector<float>> random_inputs(int n, int width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<float>> xs(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(width)));
  for (auto &x : xs)
    for (float &v : x) v = u(rng);
  return xs;
}

using Vec = std::vector<double>;

// y = W x for a row-major rows x cols f32 matrix.
Vec matvec_d(const std::vector<float> &w, const Vec &x) {
  const size_t cols = x.size(), rows = w.size() / cols;
  Vec y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < cols; ++i) y[r] += static_cast<double>(w[r * cols + i]) * x[i];
  return y;
}

// RMSNorm of x[off, off+n) in place, weighted when w is non-empty.
void rms_norm_d(Vec &x, size_t off, size_t n, const std::vector<float> &w, double eps) {
  double ss = 0.0;
  for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) x[off + i] *= r * (w.empty() ? 1.0 : static_cast<double>(w[i]));
}

// Rotates interleaved pairs of the n_rot dims ending at off + head_dim.
void rotate_d(Vec &x, size_t end, const std::vector<float> &theta, bool inverse) {
  const size_t start = end - 2 * theta.size();
  for (size_t k = 0; k < theta.size(); ++k) {
    const double c = std::cos(static_cast<double>(theta[k]));
    const double s = (inverse ? -1.0 : 1.0) * std::sin(static_cast<double>(theta[k]));
    const double a = x[start + 2 * k], b = x[start + 2 * k + 1];
    x[start + 2 * k] = a * c - b * s;
    x[start + 2 * k + 1] = a * s + b * c;
  }
}

// MODEL.md 4.4 in double, Quality numerics (no QAT, f32 storage).
class ReferenceAttention {
 public:
  ReferenceAttention(const model::LayerWeights &lw, const model::Deepseek4HParams &hp) : hp_(hp) {
    ratio_ = static_cast<int>(lw.compress_ratio);
    attn_norm_ = test::dequantize_tensor(lw.attn_norm);
    q_a_ = test::dequantize_tensor(lw.attn_q_a);
    q_a_norm_ = test::dequantize_tensor(lw.attn_q_a_norm);
    q_b_ = test::dequantize_tensor(lw.attn_q_b);
    kv_ = test::dequantize_tensor(lw.attn_kv);
    kv_norm_ = test::dequantize_tensor(lw.attn_kv_norm);
    sinks_ = test::dequantize_tensor(lw.attn_sinks);
    out_a_ = test::dequantize_tensor(lw.attn_output_a);
    out_b_ = test::dequantize_tensor(lw.attn_output_b);
    rope_ = rope_params(hp, lw.compress_ratio, Numerics::Quality);
    if (ratio_ != 0) comp_.emplace(lw, hp, CompressorRole::Attention, Numerics::Quality);
    if (ratio_ == 4) {
      index_comp_.emplace(lw, hp, CompressorRole::Indexer, Numerics::Quality);
      indexer_.emplace(lw, hp, Numerics::Quality);
    }
  }

  Vec step(const std::vector<float> &x, int64_t pos) {
    const size_t H = hp_.n_head, hd = hp_.head_dim, nr = hp_.n_rot, G = hp_.o_groups, ol = hp_.o_lora_rank;
    const double eps = hp_.rms_eps;
    Vec xn(x.begin(), x.end());
    rms_norm_d(xn, 0, xn.size(), attn_norm_, eps);
    Vec qr = matvec_d(q_a_, xn);
    rms_norm_d(qr, 0, qr.size(), q_a_norm_, eps);
    Vec q = matvec_d(q_b_, qr);
    for (size_t h = 0; h < H; ++h) rms_norm_d(q, h * hd, hd, {}, eps);
    Vec kv = matvec_d(kv_, xn);
    rms_norm_d(kv, 0, hd, kv_norm_, eps);
    std::vector<float> theta(nr / 2);
    rope_thetas(rope_, pos, theta);
    for (size_t h = 0; h < H; ++h) rotate_d(q, (h + 1) * hd, theta, false);
    rotate_d(kv, hd, theta, false);

    window_.push_back(kv);
    if (window_.size() > hp_.n_swa) window_.pop_front();
    const std::vector<float> xnf(xn.begin(), xn.end()), qrf(qr.begin(), qr.end());
    if (comp_)
      if (auto r = comp_->step(xnf, pos)) comp_rows_.emplace_back(r->begin(), r->end());
    allowed_.clear();
    if (index_comp_) {
      if (auto r = index_comp_->step(xnf, pos)) index_rows_.push_back(*r);
      std::vector<const float *> ptrs;
      for (const auto &r : index_rows_) ptrs.push_back(r.data());
      allowed_ = indexer_->allowed(qrf, xnf, pos, ptrs);
      std::sort(allowed_.begin(), allowed_.end());
    } else {
      for (size_t c = 0; c < comp_rows_.size(); ++c) allowed_.push_back(static_cast<int32_t>(c));
    }
    std::vector<const Vec *> rows;
    for (const Vec &r : window_) rows.push_back(&r);
    for (int32_t c : allowed_) rows.push_back(&comp_rows_[static_cast<size_t>(c)]);

    heads_.assign(H * hd, 0.0);
    for (size_t h = 0; h < H; ++h) {
      std::vector<double> s;
      for (const Vec *r : rows) {
        double d = 0.0;
        for (size_t i = 0; i < hd; ++i) d += q[h * hd + i] * (*r)[i];
        s.push_back(d / std::sqrt(static_cast<double>(hd)));
      }
      const double sink = sinks_[h];
      double m = sink;
      for (double v : s) m = std::max(m, v);
      double den = std::exp(sink - m);
      for (double v : s) den += std::exp(v - m);
      for (size_t r = 0; r < rows.size(); ++r)
        for (size_t i = 0; i < hd; ++i) heads_[h * hd + i] += std::exp(s[r] - m) / den * (*rows[r])[i];
      rotate_d(heads_, (h + 1) * hd, theta, true);
    }

    // attn_output_a rows: output j of group g is row g*ol + j, over group g's
    // heads.
    const size_t gin = H * hd / G;
    Vec low(G * ol, 0.0);
    for (size_t g = 0; g < G; ++g)
      for (size_t j = 0; j < ol; ++j)
        for (size_t i = 0; i < gin; ++i)
          low[g * ol + j] += static_cast<double>(out_a_[(g * ol + j) * gin + i]) * heads_[g * gin + i];
    kv_last_ = kv;
    return matvec_d(out_b_, low);
  }

  const std::vector<int32_t> &allowed() const { return allowed_; }
  const Vec &heads() const { return heads_; }

 private:
  const model::Deepseek4HParams &hp_;
  int ratio_ = 0;
  std::vector<float> attn_norm_, q_a_, q_a_norm_, q_b_, kv_, kv_norm_, sinks_, out_a_, out_b_;
  RopeParams rope_;
  std::optional<Compressor> comp_, index_comp_;
  std::optional<Indexer> indexer_;
  std::deque<Vec> window_;
  std::vector<Vec> comp_rows_;
  std::vector<std::vector<float>> index_rows_;
  std::vector<int32_t> allowed_;
  Vec heads_, kv_last_;
};

double rms(const Vec &v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST_F(AttentionLayerTest, QualityMatchesTheTranscriptionAtEveryPosition) {
  const auto xs = random_inputs(kPositions, static_cast<int>(hp().n_embd), 7);
  for (int il : kLayers) {
    SCOPED_TRACE("layer " + std::to_string(il));
    AttentionLayer layer_(layer(il), hp(), Numerics::Quality);
    LayerKvState state(layer(il), hp(), Numerics::Quality);
    ReferenceAttention ref(layer(il), hp());
    std::vector<float> out(hp().n_embd);
    double worst = 0.0;
    size_t max_rows = 0;
    for (int pos = 0; pos < kPositions; ++pos) {
      layer_.forward(xs[static_cast<size_t>(pos)], pos, state, out);
      const Vec want = ref.step(xs[static_cast<size_t>(pos)], pos);
      ASSERT_EQ(std::vector<int32_t>(layer_.last_allowed().begin(), layer_.last_allowed().end()), ref.allowed())
          << "pos " << pos;
      max_rows = std::max(max_rows, ref.allowed().size());
      const double scale = std::max(1e-3, rms(want));
      for (size_t i = 0; i < out.size(); ++i) {
        const double rel = std::abs(out[i] - want[i]) / scale;
        worst = std::max(worst, rel);
        ASSERT_LE(rel, 2e-5) << "pos " << pos << " dim " << i << ": " << out[i] << " vs " << want[i];
      }
    }
    std::printf(
        "layer %d (ratio %d): worst |out - ref| / rms(ref) = %.3g, up "
        "to %zu compressed rows attended\n",
        il, layer(il).compress_ratio == 0 ? 0 : static_cast<int>(layer(il).compress_ratio), worst, max_rows);
    if (layer(il).compress_ratio == 4) {
      EXPECT_EQ(max_rows, hp().indexer_top_k);  // the indexer did select
    }
    if (layer(il).compress_ratio == 128) {
      EXPECT_EQ(max_rows, static_cast<size_t>(kPositions / 128));
    }
  }
}

TEST_F(AttentionLayerTest, PositionZeroIsTheClosedForm) {
  // One row (the token's own, stored), no compressed rows, RoPE identity:
  // o_h = kv * e^s / (e^s + e^sink), s = q_h . kv / sqrt(hd).
  const auto xs = random_inputs(1, static_cast<int>(hp().n_embd), 3);
  const size_t hd = hp().head_dim;
  for (Numerics n : {Numerics::Quality, Numerics::Default})
    for (int il : kLayers) {
      SCOPED_TRACE("layer " + std::to_string(il) + (n == Numerics::Default ? " default" : " quality"));
      AttentionLayer l(layer(il), hp(), n);
      LayerKvState state(layer(il), hp(), n);
      std::vector<float> out(hp().n_embd);
      l.forward(xs[0], 0, state, out);
      ASSERT_EQ(state.raw_count(), 1);
      ASSERT_EQ(state.n_compressed(), 0);
      std::vector<float> kv_scratch(hd);
      const float *kv = state.raw_row(0, kv_scratch.data());
      const std::vector<float> sk = test::dequantize_tensor(layer(il).attn_sinks);
      for (size_t h = 0; h < hp().n_head; ++h) {
        double s = 0.0;
        for (size_t i = 0; i < hd; ++i) s += static_cast<double>(l.last_q()[h * hd + i]) * kv[i];
        s /= std::sqrt(static_cast<double>(hd));
        const double p = 1.0 / (1.0 + std::exp(static_cast<double>(sk[h]) - s));
        for (size_t i = 0; i < hd; ++i)
          ASSERT_NEAR(l.last_heads()[h * hd + i], kv[i] * p, 1e-6 * (1.0 + std::abs(kv[i]))) << "head " << h;
      }
    }
}

TEST_F(AttentionLayerTest, WindowKeepsTheNewestRowsInOrder) {
  const int n_swa = static_cast<int>(hp().n_swa);
  const auto xs = random_inputs(3 * n_swa + 3, static_cast<int>(hp().n_embd), 5);
  for (Numerics n : {Numerics::Quality, Numerics::Default}) {
    AttentionLayer l(layer(0), hp(), n);
    LayerKvState state(layer(0), hp(), n);
    std::vector<float> out(hp().n_embd);
    std::vector<std::vector<float>> kvs;
    std::vector<float> scratch(hp().head_dim);
    for (int pos = 0; pos < static_cast<int>(xs.size()); ++pos) {
      l.forward(xs[static_cast<size_t>(pos)], pos, state, out);
      kvs.emplace_back(l.last_kv().begin(), l.last_kv().end());
      ASSERT_EQ(state.raw_count(), std::min(pos + 1, n_swa));
      for (int i = 0; i < state.raw_count(); ++i) {
        const int64_t p = pos - state.raw_count() + 1 + i;
        ASSERT_EQ(state.raw_pos(i), p);
        for (size_t j = 0; j < hp().head_dim; ++j) {
          const float v = kvs[static_cast<size_t>(p)][j];
          ASSERT_EQ(state.raw_row(i, scratch.data())[j], n == Numerics::Default ? f16_round(v) : v)
              << "pos " << pos << " row " << i;
        }
      }
    }
  }
}

TEST_F(AttentionLayerTest, DefaultStaysNearQuality) {
  const auto xs = random_inputs(kPositions, static_cast<int>(hp().n_embd), 11);
  for (int il : kLayers) {
    SCOPED_TRACE("layer " + std::to_string(il));
    AttentionLayer lq(layer(il), hp(), Numerics::Quality), ld(layer(il), hp(), Numerics::Default);
    LayerKvState sq(layer(il), hp(), Numerics::Quality), sd(layer(il), hp(), Numerics::Default);
    std::vector<float> oq(hp().n_embd), od(hp().n_embd);
    double worst = 0.0;
    int other_selection = 0;
    for (int pos = 0; pos < kPositions; ++pos) {
      lq.forward(xs[static_cast<size_t>(pos)], pos, sq, oq);
      ld.forward(xs[static_cast<size_t>(pos)], pos, sd, od);
      for (float v : od) ASSERT_TRUE(std::isfinite(v));
      // FP4 index rows move the indexer's top-k (tiny top_k = 4): where the
      // two numerics attend to different rows, outputs may differ fully.
      if (!std::ranges::equal(lq.last_allowed(), ld.last_allowed())) {
        ++other_selection;
        continue;
      }
      double d = 0.0, r = 0.0;
      for (size_t i = 0; i < oq.size(); ++i) {
        d += (od[i] - oq[i]) * static_cast<double>(od[i] - oq[i]);
        r += static_cast<double>(oq[i]) * oq[i];
      }
      worst = std::max(worst, std::sqrt(d / std::max(r, 1e-30)));
    }
    std::printf(
        "layer %d: worst rms(default - quality) / rms(quality) = %.3g "
        "(%d of %d positions select other rows)\n",
        il, worst, other_selection, kPositions);
    EXPECT_LT(worst, 0.1);
    EXPECT_GE(kPositions - other_selection,
              kPositions / 4);  // enough positions compared
  }
}

TEST_F(AttentionLayerTest, ResetAndPoolDoNotChangeResults) {
  const auto xs = random_inputs(40, static_cast<int>(hp().n_embd), 13);
  ThreadPool pool(2);
  for (Numerics n : {Numerics::Quality, Numerics::Default}) {
    AttentionLayer l(layer(1), hp(), n);
    LayerKvState state(layer(1), hp(), n);
    std::vector<std::vector<float>> first, second, pooled;
    std::vector<float> out(hp().n_embd);
    for (int pos = 0; pos < 40; ++pos) {
      l.forward(xs[static_cast<size_t>(pos)], pos, state, out);
      first.push_back(out);
    }
    state.reset();
    EXPECT_EQ(state.raw_count(), 0);
    EXPECT_EQ(state.n_compressed(), 0);
    EXPECT_EQ(state.n_index(), 0);
    for (int pos = 0; pos < 40; ++pos) {
      l.forward(xs[static_cast<size_t>(pos)], pos, state, out);
      second.push_back(out);
    }
    state.reset();
    for (int pos = 0; pos < 40; ++pos) {
      l.forward(xs[static_cast<size_t>(pos)], pos, state, out, &pool);
      pooled.push_back(out);
    }
    EXPECT_EQ(first, second);
    EXPECT_EQ(first, pooled);
  }
}

// Rows take 2 bytes a value in Default (f16), 4 in Quality (f32); positions
// and compressor frontiers are the same in both.
TEST_F(AttentionLayerTest, ByteAccounting) {
  const auto xs = random_inputs(37, static_cast<int>(hp().n_embd), 17);
  const size_t hd = hp().head_dim, id = hp().indexer_head_dim, swa = hp().n_swa;
  for (Numerics n : {Numerics::Default, Numerics::Quality})
    for (int il : kLayers) {
      SCOPED_TRACE("layer " + std::to_string(il) + (n == Numerics::Default ? " default" : " quality"));
      const size_t e = n == Numerics::Default ? 2 : 4;
      EXPECT_EQ(kv_elem_bytes(n), e);
      const int ratio = static_cast<int>(layer(il).compress_ratio);
      AttentionLayer l(layer(il), hp(), n);
      LayerKvState state(layer(il), hp(), n, /*reserve_ctx=*/64);
      std::vector<float> out(hp().n_embd);
      for (int pos = 0; pos < 37; ++pos) l.forward(xs[static_cast<size_t>(pos)], pos, state, out);
      const size_t rows = ratio ? static_cast<size_t>(37 / ratio) : 0;
      EXPECT_EQ(state.raw_bytes(), swa * hd * e + swa * 8);
      EXPECT_EQ(state.compressed_bytes(), rows * hd * e);
      EXPECT_EQ(state.index_bytes(), ratio == 4 ? rows * id * e : 0);
      const size_t frontier = ratio == 4 ? 2 * (8 * 2 * hd + 8 * 2 * id) * 4 : ratio == 128 ? 2 * 128 * hd * 4 : 0;
      EXPECT_EQ(state.frontier_bytes(), frontier);
      EXPECT_EQ(state.bytes(), state.raw_bytes() + state.compressed_bytes() + state.index_bytes() + frontier);
    }
}

// The same tokens leave half the row bytes in Default that they leave in
// Quality: rows are f16 there.
TEST_F(AttentionLayerTest, DefaultRowsTakeHalfTheBytesOfQuality) {
  const auto xs = random_inputs(40, static_cast<int>(hp().n_embd), 23);
  for (int il : kLayers) {
    SCOPED_TRACE("layer " + std::to_string(il));
    AttentionLayer ld(layer(il), hp(), Numerics::Default), lq(layer(il), hp(), Numerics::Quality);
    LayerKvState sd(layer(il), hp(), Numerics::Default), sq(layer(il), hp(), Numerics::Quality);
    std::vector<float> out(hp().n_embd);
    for (int pos = 0; pos < 40; ++pos) {
      ld.forward(xs[static_cast<size_t>(pos)], pos, sd, out);
      lq.forward(xs[static_cast<size_t>(pos)], pos, sq, out);
    }
    ASSERT_EQ(sd.n_compressed(), sq.n_compressed());
    EXPECT_EQ(2 * sd.compressed_bytes(), sq.compressed_bytes());
    EXPECT_EQ(2 * sd.index_bytes(), sq.index_bytes());
    const size_t positions = hp().n_swa * sizeof(int64_t);
    EXPECT_EQ(2 * (sd.raw_bytes() - positions), sq.raw_bytes() - positions);
    EXPECT_EQ(sd.frontier_bytes(), sq.frontier_bytes());
    EXPECT_EQ(2 * (sd.bytes() - sd.frontier_bytes() - positions), sq.bytes() - sq.frontier_bytes() - positions);
  }
}

TEST_F(AttentionLayerTest, StoredRowsAreF16InDefaultOnly) {
  const auto xs = random_inputs(8, static_cast<int>(hp().n_embd), 19);
  for (Numerics n : {Numerics::Quality, Numerics::Default}) {
    AttentionLayer l(layer(1), hp(), n);
    LayerKvState state(layer(1), hp(), n);
    std::vector<float> out(hp().n_embd);
    bool any_unrounded = false;
    std::vector<float> scratch(hp().head_dim);
    for (int pos = 0; pos < 8; ++pos) l.forward(xs[static_cast<size_t>(pos)], pos, state, out);
    ASSERT_EQ(state.n_compressed(), 2);
    EXPECT_EQ(state.index_rows().is_f16(), n == Numerics::Default);
    for (int64_t c = 0; c < 2; ++c) {
      for (size_t j = 0; j < hp().head_dim; ++j) {
        const float v = state.compressed_row(c, scratch.data())[j];
        if (f16_round(v) != v) any_unrounded = true;
      }
      for (size_t j = 0; j < hp().indexer_head_dim; ++j) {
        const float v = state.index_row(c, scratch.data())[j];
        if (f16_round(v) != v) any_unrounded = true;
        if (n == Numerics::Default) {
          ASSERT_EQ(f16_to_f32(state.index_rows().f16_row(c)[j]), v);
        }
      }
    }
    EXPECT_EQ(any_unrounded, n == Numerics::Quality);
  }
}

}  // namespace
}  // namespace ds4::cpu
