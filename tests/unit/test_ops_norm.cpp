// RMSNorm in both numerics against double-precision transcriptions of ds4's
// and ggml's formulas, plus hand-computed answers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops_norm.h"

namespace ds4::cpu {
namespace {

constexpr float kEps = 1e-6f;

std::vector<float> random_vec(std::size_t n, unsigned seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(OpsNorm, KnownAnswer) {
  // mean(x^2) = 4 -> scale = 1/sqrt(4 + 1e-6) = 0.5 to within an ulp.
  std::vector<float> x(16, 2.0f), w(16, 3.0f), y(16);
  for (Numerics n : {Numerics::Default, Numerics::Quality}) {
    EXPECT_NEAR(rms_norm_scale(x, kEps, n), 0.5f, 1e-7f);
    rms_norm(x, w, y, kEps, n);
    for (float v : y) EXPECT_NEAR(v, 3.0f, 1e-6f);
  }
  // Zero input: scale 1/sqrt(eps) = 1000, output zero.
  std::vector<float> z(8, 0.0f), zy(8, 1.0f);
  rms_norm_unweighted(z, zy, kEps, Numerics::Default);
  for (float v : zy) EXPECT_EQ(v, 0.0f);
  EXPECT_NEAR(rms_norm_scale(z, kEps, Numerics::Default), 1000.0f, 1e-2f);
}

TEST(OpsNorm, MatchesBothFormulasBitwise) {
  for (std::size_t n : {128u, 512u, 4096u, 16384u}) {
    const auto x = random_vec(n, static_cast<unsigned>(n), 3.0f);
    const auto w = random_vec(n, static_cast<unsigned>(n) + 1, 1.0f);
    // ds4: exact products summed in double.
    double ss_exact = 0.0, ss_float = 0.0;
    for (float v : x) {
      ss_exact += static_cast<double>(v) * static_cast<double>(v);
      ss_float += static_cast<double>(v * v);
    }
    const float s_def = 1.0f / std::sqrt(static_cast<float>(ss_exact / n) + kEps);
    const float s_q = 1.0f / std::sqrt(static_cast<float>(ss_float / n) + kEps);
    EXPECT_EQ(rms_norm_scale(x, kEps, Numerics::Default), s_def);
    EXPECT_EQ(rms_norm_scale(x, kEps, Numerics::Quality), s_q);

    std::vector<float> y(n), yu(n);
    rms_norm(x, w, y, kEps, Numerics::Default);
    rms_norm_unweighted(x, yu, kEps, Numerics::Quality);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(y[i], x[i] * s_def * w[i]);
      EXPECT_EQ(yu[i], x[i] * s_q);
    }
    // The two numerics agree to float rounding of the sum.
    EXPECT_NEAR(s_def, s_q, 1e-6f * s_def);
  }
}

TEST(OpsNorm, InPlace) {
  auto x = random_vec(512, 5, 1.0f);
  std::vector<float> expect(512);
  rms_norm_unweighted(x, expect, kEps, Numerics::Default);
  rms_norm_unweighted(x, x, kEps, Numerics::Default);
  EXPECT_EQ(x, expect);
}

}  // namespace
}  // namespace ds4::cpu
