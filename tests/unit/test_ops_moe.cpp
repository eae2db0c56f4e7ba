// MoE routing and clamped SwiGLU: the bias steers selection only, weights are
// unbiased scores normalised over the selected and scaled, ties go to the
// lower expert, hash layers take tid2eid in table order.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <string>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "backend/cpu/ops_activation.h"
#include "backend/cpu/ops_moe.h"
#include "backend/cpu/ops_topk.h"
#include "quant/dot.h"

namespace ds4::cpu {
namespace {

constexpr Numerics kBoth[] = {Numerics::Default, Numerics::Quality};

TEST(OpsMoe, SoftplusBranches) {
  for (Numerics n : kBoth) {
    EXPECT_EQ(softplus(25.0f, n), 25.0f);
    EXPECT_NEAR(softplus(0.0f, n), std::log(2.0), 1e-7);
    EXPECT_NEAR(softplus(3.0f, n), std::log1p(std::exp(3.0)), 1e-6);
    EXPECT_NEAR(softplus(-5.0f, n), std::log1p(std::exp(-5.0)), 1e-7);
  }
  // Below -20 ds4 returns exp(x), which keeps relative precision; ggml's
  // log(1 + exp(x)) rounds 1 + e^-30 to 1 and returns 0.
  EXPECT_NEAR(softplus(-30.0f, Numerics::Default), std::exp(-30.0), 1e-6 * std::exp(-30.0));
  EXPECT_EQ(softplus(-30.0f, Numerics::Quality), 0.0f);
  // log1p vs log(1 + .) at small exp(x): ds4 keeps relative precision.
  EXPECT_NEAR(softplus(-12.0f, Numerics::Default), std::log1p(std::exp(-12.0)),
              1e-6 * std::exp(-12.0));
}

TEST(OpsMoe, RouterScoresAreSqrtSoftplus) {
  std::vector<float> logits = {-3.0f, 0.0f, 1.0f, 30.0f}, scores(4);
  for (Numerics n : kBoth) {
    router_scores(logits, scores, n);
    for (int e = 0; e < 4; ++e) {
      const double sp = logits[e] > 20 ? logits[e] : std::log1p(std::exp(double(logits[e])));
      EXPECT_NEAR(scores[e], std::sqrt(sp), 1e-6);
    }
  }
}

TEST(OpsMoe, TopKDescendingTiesToLowerIndex) {
  std::vector<float> s = {1.0f, 3.0f, 2.0f, 3.0f, std::numeric_limits<float>::quiet_NaN(),
                          2.0f, 0.5f};
  std::array<int32_t, 5> out{};
  top_k_desc(s, out);
  EXPECT_EQ(out, (std::array<int32_t, 5>{1, 3, 2, 5, 0}));
  std::vector<float> equal(10, 0.25f);
  std::array<int32_t, 4> o4{};
  top_k_desc(equal, o4);
  EXPECT_EQ(o4, (std::array<int32_t, 4>{0, 1, 2, 3}));
}

TEST(OpsMoe, BiasSelectsButDoesNotWeight) {
  // 8 experts, k = 2. Unbiased best are 0 and 1; bias promotes 6 and 7.
  std::vector<float> scores = {0.9f, 0.8f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  std::vector<float> bias = {0, 0, 0, 0, 0, 0, 1.0f, 1.0f};
  std::array<int32_t, 2> ids{};
  std::array<float, 2> w{};
  for (Numerics n : kBoth) {
    route_top_k(scores, bias, 1.5f, ids, w, n);
    EXPECT_EQ(ids, (std::array<int32_t, 2>{7, 6}));
    EXPECT_NEAR(w[0], 0.6 / 1.1 * 1.5, 1e-6);
    EXPECT_NEAR(w[1], 0.5 / 1.1 * 1.5, 1e-6);
    route_top_k(scores, {}, 1.5f, ids, w, n);  // no bias tensor
    EXPECT_EQ(ids, (std::array<int32_t, 2>{0, 1}));
    EXPECT_NEAR(w[0] + w[1], 1.5, 1e-6);
  }
}

TEST(OpsMoe, TieInBiasedScoreGoesToLowerExpert) {
  // 0.5 + 0.25 == 0.25 + 0.5 exactly: experts 2 and 5 tie for the second slot.
  std::vector<float> scores = {0.1f, 2.0f, 0.5f, 0.0f, 0.0f, 0.25f};
  std::vector<float> bias = {0.0f, 0.0f, 0.25f, 0.0f, 0.0f, 0.5f};
  std::array<int32_t, 2> ids{};
  std::array<float, 2> w{};
  route_top_k(scores, bias, 1.0f, ids, w, Numerics::Default);
  EXPECT_EQ(ids, (std::array<int32_t, 2>{1, 2}));
}

TEST(OpsMoe, WeightSumFloor) {
  std::vector<float> scores = {1e-6f, 2e-6f, 0.0f};
  std::array<int32_t, 2> ids = {0, 1};
  std::array<float, 2> w{};
  for (Numerics n : kBoth) {
    expert_weights(scores, ids, 1.5f, w, n);
    // The sum 3e-6 is below 2^-14, so the floor divides instead.
    EXPECT_NEAR(w[0], 1e-6 / 6.103515625e-5 * 1.5, 1e-6 * w[0]);
    EXPECT_NEAR(w[1], 2e-6 / 6.103515625e-5 * 1.5, 1e-6 * w[1]);
  }
}

TEST(OpsMoe, HashRoutingUsesTableOrder) {
  std::vector<float> scores(256);
  for (int e = 0; e < 256; ++e) scores[e] = 0.01f * float(e % 17 + 1);
  const std::array<int32_t, 6> row = {200, 3, 77, 3 + 128, 9, 255};
  std::array<int32_t, 6> ids{};
  std::array<float, 6> w{};
  for (Numerics n : kBoth) {
    route_hash(scores, row, 1.5f, ids, w, n);
    EXPECT_EQ(ids, row);
    double sum = 0.0;
    for (int32_t e : row) sum += scores[e];
    for (int s = 0; s < 6; ++s) EXPECT_NEAR(w[s], scores[row[s]] / sum * 1.5, 1e-6);
  }
  const std::array<int32_t, 6> bad = {0, 1, 2, 3, 4, 256};
  EXPECT_THROW(route_hash(scores, bad, 1.5f, ids, w, Numerics::Default), std::out_of_range);
}

TEST(OpsMoe, SwigluClampGateAboveOnlyUpBothSides) {
  const std::vector<float> gate = {15.0f, -15.0f, 1.0f, 12.0f, -3.0f};
  const std::vector<float> up = {1.0f, 1.0f, -12.0f, 12.0f, 0.5f};
  std::vector<float> out(5);
  auto silu_d = [](double g) { return g / (1.0 + std::exp(-g)); };
  for (Numerics n : kBoth) {
    swiglu_clamp(gate, up, 10.0f, 1.0f, out, n);
    EXPECT_NEAR(out[0], silu_d(10.0) * 1.0, 1e-5);   // gate clamped to 10
    EXPECT_NEAR(out[1], silu_d(-15.0) * 1.0, 1e-9);  // gate not clamped below
    EXPECT_NEAR(out[2], silu_d(1.0) * -10.0, 1e-5);  // up clamped to -10
    EXPECT_NEAR(out[3], silu_d(10.0) * 10.0, 1e-4);  // both clamped
    EXPECT_NEAR(out[4], silu_d(-3.0) * 0.5, 1e-6);
    // No clamp when the limit is (near) zero.
    swiglu_clamp(gate, up, 0.0f, 1.0f, out, n);
    EXPECT_NEAR(out[0], silu_d(15.0), 1e-5);
  }
}

TEST(OpsMoe, ExpertWeightPlacement) {
  EXPECT_TRUE(expert_weight_before_down(Numerics::Default));
  EXPECT_FALSE(expert_weight_before_down(Numerics::Quality));
  const std::vector<float> gate = {0.5f, 2.0f}, up = {1.0f, -3.0f};
  std::vector<float> plain(2), weighted(2);
  swiglu_clamp(gate, up, 10.0f, 1.0f, plain, Numerics::Default);
  swiglu_clamp(gate, up, 10.0f, 0.375f, weighted, Numerics::Default);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(weighted[i], plain[i] * 0.375f);
  EXPECT_THROW(swiglu_clamp(gate, up, 10.0f, 0.375f, weighted, Numerics::Quality),
               std::invalid_argument);
}

// A SIMD Default SwiGLU (glibc's expf algorithm in double lanes) gives the
// scalar loop's bits: across a sweep of every 4099th float bit pattern as the
// gate (all exponents, both signs, NaN, infinities, denormals, both sides of
// glibc's |x| >= 88 special path), random ups, with and without the clamp,
// weights 1 and 0.375, lengths that leave a masked tail.
void expect_swiglu_matches_scalar(void (*simd)(const float*, const float*, size_t, float, float, float*)) {
  std::vector<float> gate;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099) gate.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  // Densely around where glibc's special path starts (|x| = 88) and ends.
  for (uint32_t bits = 0xc2af0000u; bits < 0xc2b10000u; bits += 3) gate.push_back(std::bit_cast<float>(bits));
  for (uint32_t bits = 0xc2cf0000u; bits < 0xc2d10000u; bits += 3) gate.push_back(std::bit_cast<float>(bits));
  for (float v : {-88.0f, -87.99999f, -88.00001f, -103.2f, -103.3f, -103.9f, -104.0f, 88.7f, 88.73f, -0.0f, 0.0f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()})
    gate.push_back(v);
  gate.resize(gate.size() / 16 * 16 + 7);  // a masked tail of 7
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> up(gate.size());
  for (float& u : up) u = normal(rng);
  std::vector<float> got(gate.size());
  for (const float limit : {0.0f, 10.0f}) {
    for (const float weight : {1.0f, 0.375f}) {
      simd(gate.data(), up.data(), gate.size(), limit, weight, got.data());
      for (size_t i = 0; i < gate.size(); ++i) {
        float g = gate[i], u = up[i];
        if (limit > 1.0e-6f) {
          g = std::min(g, limit);
          u = std::clamp(u, -limit, limit);
        }
        const float want = silu(g, Numerics::Default) * u * weight;
        if (std::isnan(want) && std::isnan(got[i])) continue;
        if (std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want)) continue;
        FAIL() << "gate " << gate[i] << " (0x" << std::hex << std::bit_cast<uint32_t>(gate[i]) << std::dec << ") up " << up[i]
            << " limit " << limit << " weight " << weight << ": " << got[i] << " vs scalar " << want;
      }
    }
  }
}

TEST(OpsMoe, SwigluAvx512MatchesTheScalarLoopBitForBit) {
  if (!quant::dot_level_available("avx512")) GTEST_SKIP() << "this CPU has no AVX-512";
  expect_swiglu_matches_scalar(swiglu_clamp_default_avx512);
}

TEST(OpsMoe, SwigluAvx2MatchesTheScalarLoopBitForBit) {
  if (!quant::dot_level_available("avx2")) GTEST_SKIP() << "this CPU has no AVX2";
  expect_swiglu_matches_scalar(swiglu_clamp_default_avx2);
}

TEST(OpsMoe, SiluAndSigmoidForms) {
  for (float x : {-50.0f, -3.0f, 0.0f, 0.7f, 9.0f}) {
    const double s = 1.0 / (1.0 + std::exp(-double(x)));
    EXPECT_NEAR(sigmoid_plain(x), s, 1e-7 + 1e-6 * s);
    EXPECT_NEAR(sigmoid_two_branch(x), s, 1e-7 + 1e-6 * s);
    for (Numerics n : kBoth) EXPECT_NEAR(silu(x, n), x * s, 1e-6 * (1 + std::fabs(x * s)));
  }
}

}  // namespace
}  // namespace ds4::cpu
