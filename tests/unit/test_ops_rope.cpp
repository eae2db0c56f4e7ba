// RoPE: identity at position 0, the per-pair angle at position 1 with the
// YaRN ramp, inverse after forward, and the iterative f32 angle product at
// large positions against a double-precision formula.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops_rope.h"
#include "model/deepseek4_hparams.h"

namespace ds4::cpu {
namespace {

model::Deepseek4HParams flash() { return model::preset_flash(); }

// Double-precision angle of pair k at pos: pos * base^(-2k/64), with YaRN
// keep = 1 - clamp((k - lo) / (hi - lo), 0, 1): theta = pos_k * (keep + (1-keep)/16).
double theta_double(double pos, int k, double base, bool yarn) {
  const double extrap = pos * std::pow(base, -2.0 * k / 64.0);
  if (!yarn) return extrap;
  const double keep = 1.0 - std::min(1.0, std::max(0.0, (k - 15.0) / 10.0));
  return extrap * (keep + (1.0 - keep) / 16.0);
}

TEST(OpsRope, YarnCorrectionDimsAreFifteenAndTwentyFive) {
  const auto d = rope_yarn_corr_dims(64, 65536, 160000.0f, 32.0f, 1.0f);
  EXPECT_EQ(d[0], 15.0f);
  EXPECT_EQ(d[1], 25.0f);
  for (Numerics n : {Numerics::Default, Numerics::Quality}) {
    const RopeParams p = rope_params(flash(), 4, n);
    EXPECT_EQ(p.freq_base, 160000.0f);
    EXPECT_EQ(p.freq_scale, 1.0f / 16.0f);
    EXPECT_EQ(p.ext_factor, 1.0f);
    EXPECT_EQ(p.corr_lo, 15.0f);
    EXPECT_EQ(p.corr_hi, 25.0f);
    const RopeParams p0 = rope_params(flash(), 0, n);
    EXPECT_EQ(p0.freq_base, 10000.0f);
    EXPECT_EQ(p0.freq_scale, 1.0f);
    EXPECT_EQ(p0.ext_factor, 0.0f);
  }
}

TEST(OpsRope, NoYarnMagnitudeScale) {
  // attn_factor * (1 + 0.1 ln 16) must be exactly 1 so cos/sin are unscaled.
  const RopeParams p = rope_params(flash(), 128, Numerics::Default);
  const RopeCache c = rope_cache(p, 0, false);
  for (int k = 0; k < 32; ++k) {
    EXPECT_EQ(c.cos[k], 1.0f);
    EXPECT_EQ(c.sin[k], 0.0f);
  }
  EXPECT_EQ(p.attn_factor * (1.0f + 0.1f * std::log(16.0f)), 1.0f);
}

TEST(OpsRope, QualityWithoutYarnTypeDividesEveryPair) {
  auto hp = flash();
  hp.rope_scaling_type = "none";
  const RopeParams q = rope_params(hp, 4, Numerics::Quality);
  EXPECT_EQ(q.ext_factor, 0.0f);
  EXPECT_EQ(q.freq_scale, 1.0f / 16.0f);
  std::array<float, 32> t{};
  rope_thetas(q, 1, t);
  EXPECT_EQ(t[0], 1.0f / 16.0f);
  // Default (ds4) keeps YaRN on regardless of the string.
  EXPECT_EQ(rope_params(hp, 4, Numerics::Default).ext_factor, 1.0f);
}

TEST(OpsRope, IdentityAtPositionZero) {
  for (uint32_t ratio : {0u, 4u, 128u}) {
    const RopeParams p = rope_params(flash(), ratio, Numerics::Default);
    std::mt19937 rng(ratio);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(64 * 512);
    for (float& v : x) v = nd(rng);
    const auto orig = x;
    rope_heads(x, 64, 512, rope_cache(p, 0, false));
    EXPECT_EQ(x, orig);
  }
}

TEST(OpsRope, AngleAtPositionOne) {
  for (uint32_t ratio : {0u, 4u}) {
    const RopeParams p = rope_params(flash(), ratio, Numerics::Default);
    const double base = ratio ? 160000.0 : 10000.0;
    std::array<float, 32> t{};
    rope_thetas(p, 1, t);
    for (int k = 0; k < 32; ++k) {
      const double expect = theta_double(1.0, k, base, ratio != 0);
      EXPECT_NEAR(t[k], expect, 4e-6 * expect) << "ratio " << ratio << " pair " << k;
    }
    if (ratio) {
      // Pairs 0..15 unscaled, 25..31 divided by 16, linear between.
      EXPECT_EQ(t[0], 1.0f);
      EXPECT_NEAR(t[20], theta_double(1, 20, base, false) * (0.5 + 0.5 / 16), 1e-6 * t[20]);
      EXPECT_NEAR(t[31], theta_double(1, 31, base, false) / 16,
                  1e-6 * theta_double(1, 31, base, false) / 16);
    }
  }
}

TEST(OpsRope, RotatesPairsByTheAngle) {
  const RopeParams p = rope_params(flash(), 0, Numerics::Default);
  std::vector<float> tail(64);
  for (int k = 0; k < 32; ++k) {
    tail[2 * k] = 1.0f;
    tail[2 * k + 1] = 0.0f;
  }
  const int64_t pos = 7;
  rope_apply(tail, rope_cache(p, pos, false));
  std::array<float, 32> t{};
  rope_thetas(p, pos, t);
  for (int k = 0; k < 32; ++k) {
    EXPECT_FLOAT_EQ(tail[2 * k], std::cos(t[k]));
    EXPECT_FLOAT_EQ(tail[2 * k + 1], std::sin(t[k]));
  }
}

TEST(OpsRope, InverseUndoesForward) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (uint32_t ratio : {0u, 4u}) {
    const RopeParams p = rope_params(flash(), ratio, Numerics::Default);
    for (int64_t pos : {1, 3, 127, 4095, 65535, 1048575}) {
      std::vector<float> x(128);
      for (float& v : x) v = nd(rng);
      const auto orig = x;
      rope_heads(x, 1, 128, rope_cache(p, pos, false));
      rope_heads(x, 1, 128, rope_cache(p, pos, true));
      for (int i = 0; i < 64; ++i) EXPECT_EQ(x[i], orig[i]);  // non-rope dims untouched
      for (int i = 64; i < 128; ++i) EXPECT_NEAR(x[i], orig[i], 1e-5f) << pos;
    }
  }
}

TEST(OpsRope, IterativeAngleAtLargePositions) {
  // The f32 product accumulates about one rounding per pair (plus the error
  // of powf's base), so the bound grows with k; a per-pair pow evaluation
  // would not be bit-identical, which is why ds4 and ggml both iterate.
  for (uint32_t ratio : {0u, 4u}) {
    const RopeParams p = rope_params(flash(), ratio, Numerics::Default);
    const double base = ratio ? 160000.0 : 10000.0;
    for (int64_t pos : {65535, 1048575}) {
      std::array<float, 32> t{};
      rope_thetas(p, pos, t);
      for (int k = 0; k < 32; ++k) {
        const double expect = theta_double(static_cast<double>(pos), k, base, ratio != 0);
        const double tol = 2.0 * (k + 2) * 0x1p-24 * expect;
        EXPECT_NEAR(t[k], expect, tol) << "ratio " << ratio << " pos " << pos << " pair " << k;
      }
    }
  }
}

}  // namespace
}  // namespace ds4::cpu
