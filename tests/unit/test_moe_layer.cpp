// MoeLayer against an independent double-precision transcription of MODEL.md
// 4.8 on the tiny synthetic model, in the f32, q8_0 and ds4-q2 mixes, on a
// hash-routed layer and on biased top-k layers, in both numerics.
//
// The transcription dequantises every weight with quant::dequantize_row and
// does its own RMSNorm, router, selection, weights, SwiGLU clamp and dot
// products in double. For quantised weights it reproduces the activation
// rounding the dot kernels see: the (float-cast) activation goes through the
// same quantiser the matvec uses (Q8_0: ds4 or ggml-x86 rounding by numerics;
// Q8_K for Q2_K/IQ2_XXS; f16 rounding for F16 weights in Quality) and back.
// Its activation differs from the layer's float one by float rounding, which
// can move an element across a quantisation boundary (one code step); the
// tolerance of the quantised mixes covers a few such flips, the f32 mix's is
// float accumulation noise only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/moe_layer.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/gguf_writer.h"
#include "core/thread_pool.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_model.h"
#include "model/quant_mix.h"
#include "model/synthetic_tokenizer.h"
#include "model/synthetic_weights.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "support/synthetic_model.h"

namespace ds4::cpu {
namespace {

constexpr int kSamples = 50;
constexpr double kNearTie = 1e-5;

const model::Deepseek4Model& tiny_model(model::QuantMix mix) {
  static std::map<model::QuantMix, std::unique_ptr<test::SyntheticModel>> models;
  std::unique_ptr<test::SyntheticModel>& m = models[mix];
  if (!m) m = std::make_unique<test::SyntheticModel>(model::preset_tiny(), mix, /*seed=*/23);
  return m->model();
}

// A weight matrix (or every expert of a 3-D one) dequantised, row-major.
struct Matrix {
  GgmlType type = GgmlType::F32;
  int64_t cols = 0, rows = 0;  // rows of one expert matrix
  std::vector<float> data;
  explicit Matrix(const model::TensorView& t)
      : type(t.type), cols(static_cast<int64_t>(t.ne[0])), rows(static_cast<int64_t>(t.ne[1])) {
    data.resize(t.ne[0] * t.n_rows);
    for (uint64_t r = 0; r < t.n_rows; ++r)
      quant::dequantize_row(t.type, t.row(r), data.data() + r * t.ne[0], cols);
  }
  const float* row(int expert, int64_t r) const {
    return data.data() + (static_cast<int64_t>(std::max(expert, 0)) * rows + r) * cols;
  }
};

// The activation a dot kernel for a `weight` matrix sees, from x.
std::vector<double> activation_as_seen(const std::vector<double>& x, GgmlType weight, Numerics n) {
  const int64_t len = static_cast<int64_t>(x.size());
  std::vector<float> f(x.begin(), x.end());
  switch (weight) {
    case GgmlType::F32: break;
    case GgmlType::F16:
      if (n == Numerics::Quality)
        for (float& v : f) v = f16_round(v);
      break;
    case GgmlType::Q8_0:
    case GgmlType::MXFP4: {
      std::vector<quant::BlockQ8_0> q(static_cast<size_t>(len / quant::kQK8_0));
      if (n == Numerics::Quality)
        quant::quantize_row_q8_0_act_ggml_x86(f.data(), q.data(), len);
      else
        quant::quantize_row_q8_0_act(f.data(), q.data(), len);
      quant::dequantize_row_q8_0(q.data(), f.data(), len);
      break;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q4_K:
    case GgmlType::IQ2_XXS: {
      std::vector<quant::BlockQ8_K> q(static_cast<size_t>(len / quant::kQK_K));
      quant::quantize_row_q8_K(f.data(), q.data(), len);
      quant::dequantize_row_q8_K(q.data(), f.data(), len);
      break;
    }
    default: ADD_FAILURE() << "no activation form for this weight type"; break;
  }
  return {f.begin(), f.end()};
}

std::vector<double> matvec_ref(const Matrix& m, int expert, const std::vector<double>& x, Numerics n) {
  const std::vector<double> a = activation_as_seen(x, m.type, n);
  std::vector<double> y(static_cast<size_t>(m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    const float* w = m.row(expert, r);
    double s = 0.0;
    for (int64_t i = 0; i < m.cols; ++i) s += static_cast<double>(w[i]) * a[static_cast<size_t>(i)];
    y[static_cast<size_t>(r)] = s;
  }
  return y;
}

struct RefResult {
  std::vector<double> out;
  std::vector<int32_t> ids;
  std::vector<double> weights;
  bool near_tie = false;  // the top-k order or set is decided by < kNearTie
};

// MODEL.md 4.8 in double.
class ReferenceMoe {
 public:
  ReferenceMoe(const model::LayerWeights& lw, const model::Deepseek4HParams& hp)
      : lw_(lw), hp_(hp), router_(lw.ffn_gate_inp), gate_(lw.ffn_gate_exps), up_(lw.ffn_up_exps),
        down_(lw.ffn_down_exps), sgate_(lw.ffn_gate_shexp), sup_(lw.ffn_up_shexp), sdown_(lw.ffn_down_shexp) {
    norm_.resize(hp.n_embd);
    quant::dequantize_row(lw.ffn_norm.type, lw.ffn_norm.data, norm_.data(), hp.n_embd);
    bias_.assign(hp.n_expert, 0.0f);
    if (lw.exp_probs_b.present()) quant::dequantize_row(lw.exp_probs_b.type, lw.exp_probs_b.data, bias_.data(), hp.n_expert);
  }

  RefResult forward(const std::vector<float>& x, int32_t token, Numerics n) const {
    RefResult r;
    const size_t d = x.size();
    double ss = 0.0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double rs = 1.0 / std::sqrt(ss / static_cast<double>(d) + hp_.rms_eps);
    std::vector<double> xn(d);
    for (size_t i = 0; i < d; ++i) xn[i] = x[i] * rs * norm_[i];

    const std::vector<double> logit = matvec_ref(router_, -1, xn, n);
    std::vector<double> p(logit.size());
    for (size_t e = 0; e < p.size(); ++e) p[e] = std::sqrt(std::log1p(std::exp(logit[e])));

    const int k = static_cast<int>(hp_.n_expert_used);
    if (hp_.is_hash_layer(lw_.index)) {
      r.ids.resize(static_cast<size_t>(k));
      std::memcpy(r.ids.data(), lw_.ffn_gate_tid2eid.row(static_cast<uint64_t>(token)), sizeof(int32_t) * k);
    } else {
      std::vector<double> sel(p.size());
      for (size_t e = 0; e < p.size(); ++e) sel[e] = p[e] + bias_[e];
      std::vector<int32_t> order(p.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sel[a] > sel[b]; });
      for (int s = 0; s < k && s + 1 < static_cast<int>(order.size()); ++s)
        if (sel[order[s]] - sel[order[s + 1]] < kNearTie) r.near_tie = true;
      r.ids.assign(order.begin(), order.begin() + k);
    }
    double sum = 0.0;
    for (int32_t e : r.ids) sum += p[e];
    sum = std::max(sum, 6.103515625e-5);
    for (int32_t e : r.ids) r.weights.push_back(p[e] / sum * hp_.expert_weights_scale);

    r.out.assign(d, 0.0);
    for (int s = 0; s < k; ++s) {
      const double wt = r.weights[static_cast<size_t>(s)];
      const bool before = n == Numerics::Default;
      const std::vector<double> y = expert(gate_, up_, down_, r.ids[static_cast<size_t>(s)], xn,
                                           hp_.swiglu_clamp_exp.at(lw_.index), before ? wt : 1.0, n);
      for (size_t i = 0; i < d; ++i) r.out[i] += before ? y[i] : y[i] * wt;
    }
    const std::vector<double> sh = expert(sgate_, sup_, sdown_, -1, xn, hp_.clamp_shexp(lw_.index), 1.0, n);
    for (size_t i = 0; i < d; ++i) r.out[i] += sh[i];
    return r;
  }

 private:
  static std::vector<double> expert(const Matrix& g, const Matrix& u, const Matrix& dn, int e,
                                    const std::vector<double>& xn, double limit, double wt, Numerics n) {
    std::vector<double> gv = matvec_ref(g, e, xn, n), uv = matvec_ref(u, e, xn, n);
    std::vector<double> mid(gv.size());
    for (size_t i = 0; i < gv.size(); ++i) {
      double a = gv[i], b = uv[i];
      if (limit > 1e-6) {
        a = std::min(a, limit);
        b = std::clamp(b, -limit, limit);
      }
      mid[i] = a / (1.0 + std::exp(-a)) * b * wt;
    }
    return matvec_ref(dn, e, mid, n);
  }

  const model::LayerWeights& lw_;
  const model::Deepseek4HParams& hp_;
  Matrix router_, gate_, up_, down_, sgate_, sup_, sdown_;
  std::vector<float> norm_, bias_;
};

struct Sample {
  std::vector<float> x;
  int32_t token;
};

std::vector<Sample> samples(const model::Deepseek4HParams& hp, uint32_t seed) {
  std::mt19937 rng(seed);
  // Wide inputs so that some gate/up values reach the clamp.
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(hp.n_vocab) - 1);
  std::vector<Sample> out(kSamples);
  for (Sample& s : out) {
    s.x.resize(hp.n_embd);
    for (float& v : s.x) v = u(rng);
    s.token = tok(rng);
  }
  return out;
}

double max_abs(std::span<const double> v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

struct Case {
  model::QuantMix mix;
  double rtol;       // max |got - ref| / max |ref| of every sample
  int max_flipped;   // samples allowed above kTight (a quantisation-boundary flip)
};
// Float-accumulation level: what a sample with no flipped activation code meets.
constexpr double kTight = 2e-5;

class MoeLayerTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeLayerTest, MatchesDoubleTranscription) {
  const Case c = GetParam();
  const model::Deepseek4Model& m = tiny_model(c.mix);
  const model::Deepseek4HParams& hp = m.hparams();
  // Layer 1: hash routed; layers 3 and 4: biased top-k.
  for (int il : {1, 3, 4}) {
    const model::LayerWeights& lw = m.weights().layers.at(static_cast<size_t>(il));
    ASSERT_EQ(hp.is_hash_layer(static_cast<uint32_t>(il)), il < 2);
    if (il >= 2) {
      ASSERT_TRUE(lw.exp_probs_b.present());
    }
    const ReferenceMoe ref(lw, hp);
    for (Numerics n : {Numerics::Default, Numerics::Quality}) {
      MoeLayer layer(lw, hp, n);
      EXPECT_EQ(layer.hash_routed(), il < 2);
      int near_ties = 0, compared = 0, flipped = 0;
      double worst = 0.0, worst_w = 0.0;
      std::vector<float> out(hp.n_embd);
      for (const Sample& s : samples(hp, 100u + static_cast<uint32_t>(il))) {
        const RefResult r = ref.forward(s.x, s.token, n);
        layer.forward(s.x, s.token, out, nullptr);
        if (r.near_tie) {
          ++near_ties;
          continue;
        }
        ++compared;
        ASSERT_EQ(std::vector<int32_t>(layer.selected_ids().begin(), layer.selected_ids().end()), r.ids)
            << "layer " << il << " token " << s.token;
        for (size_t j = 0; j < r.weights.size(); ++j)
          worst_w = std::max(worst_w, std::fabs(layer.selected_weights()[j] - r.weights[j]) / r.weights[j]);
        const double scale = max_abs(r.out);
        ASSERT_GT(scale, 0.0);
        double err = 0.0;
        for (size_t i = 0; i < out.size(); ++i) err = std::max(err, std::fabs(out[i] - r.out[i]));
        worst = std::max(worst, err / scale);
        if (err > kTight * scale) ++flipped;
        EXPECT_LE(err, c.rtol * scale) << "layer " << il << " token " << s.token << " numerics "
                                       << (n == Numerics::Default ? "default" : "quality");
      }
      std::printf("[ mix %s layer %d %s ] compared %d, near ties skipped %d, above %.0e %d, max rel err %.3g, weight rel err %.3g\n",
                  std::string(model::quant_mix_name(c.mix)).c_str(), il,
                  n == Numerics::Default ? "default" : "quality", compared, near_ties, kTight, flipped, worst, worst_w);
      EXPECT_GE(compared, kSamples - 5);
      EXPECT_LE(flipped, c.max_flipped);
      // Router scores and weights see the router's activation form only.
      EXPECT_LE(worst_w, c.mix == model::QuantMix::F32 ? 1e-5 : 1e-3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mixes, MoeLayerTest,
                         ::testing::Values(Case{model::QuantMix::F32, kTight, 0}, Case{model::QuantMix::Q8_0, 1e-2, 5},
                                           Case{model::QuantMix::Ds4Q2, 1e-2, 5}),
                         [](const auto& info) {
                           std::string s(model::quant_mix_name(info.param.mix));
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// In the f32 mix the two numerics differ only in float rounding (softplus,
// sums, SiLU form, where the weight is applied).
TEST(MoeLayer, DefaultAndQualityAgreeToRounding) {
  const model::Deepseek4Model& m = tiny_model(model::QuantMix::F32);
  const model::Deepseek4HParams& hp = m.hparams();
  for (int il : {1, 4}) {
    const model::LayerWeights& lw = m.weights().layers.at(static_cast<size_t>(il));
    MoeLayer def(lw, hp, Numerics::Default), qual(lw, hp, Numerics::Quality);
    std::vector<float> a(hp.n_embd), b(hp.n_embd);
    int differing_selection = 0;
    double worst = 0.0;
    for (const Sample& s : samples(hp, 7u)) {
      def.forward(s.x, s.token, a, nullptr);
      qual.forward(s.x, s.token, b, nullptr);
      if (!std::equal(def.selected_ids().begin(), def.selected_ids().end(), qual.selected_ids().begin())) {
        ++differing_selection;  // only possible on a near tie
        continue;
      }
      double scale = 0.0, err = 0.0;
      for (size_t i = 0; i < a.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
        err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
      }
      worst = std::max(worst, err / scale);
    }
    std::printf("[ layer %d ] default vs quality max rel diff %.3g, differing selections %d\n", il, worst,
                differing_selection);
    EXPECT_LE(worst, 5e-6);
    EXPECT_LE(differing_selection, 1);
  }
}

TEST(MoeLayer, BadTokenIdOnHashLayerThrows) {
  const model::Deepseek4Model& m = tiny_model(model::QuantMix::F32);
  const model::Deepseek4HParams& hp = m.hparams();
  MoeLayer hash(m.weights().layers.at(0), hp, Numerics::Default);
  std::vector<float> x(hp.n_embd, 0.5f), out(hp.n_embd);
  EXPECT_THROW(hash.forward(x, -1, out, nullptr), Error);
  EXPECT_THROW(hash.forward(x, static_cast<int32_t>(hp.n_vocab), out, nullptr), Error);
  EXPECT_NO_THROW(hash.forward(x, static_cast<int32_t>(hp.n_vocab) - 1, out, nullptr));
  // Top-k layers do not read the token.
  MoeLayer topk(m.weights().layers.at(3), hp, Numerics::Default);
  EXPECT_NO_THROW(topk.forward(x, -1, out, nullptr));
  // Wrong widths.
  std::vector<float> short_x(hp.n_embd - 1);
  EXPECT_THROW(hash.forward(short_x, 0, out, nullptr), Error);
}

// A pool and an aliased output change nothing, bit for bit.
TEST(MoeLayer, PoolAndAliasingAreBitExact) {
  const model::Deepseek4Model& m = tiny_model(model::QuantMix::Ds4Q2);
  const model::Deepseek4HParams& hp = m.hparams();
  ThreadPool pool(3);
  for (Numerics n : {Numerics::Default, Numerics::Quality}) {
    MoeLayer layer(m.weights().layers.at(4), hp, n);
    for (const Sample& s : samples(hp, 9u)) {
      std::vector<float> a(hp.n_embd), b = s.x;
      layer.forward(s.x, s.token, a, nullptr);
      layer.forward(b, s.token, b, &pool);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace ds4::cpu
