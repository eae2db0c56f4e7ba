// Hyper-connection split/Sinkhorn, pre-sum, post and head weights against
// straightforward double-precision transcriptions of MODEL.md 4.2-4.3, 4.9.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops_hc.h"

namespace ds4::cpu {
namespace {

constexpr float kEps = 1e-6f;

struct Inputs {
  std::array<float, 24> mix, base;
  std::array<float, 3> scale;
};

Inputs random_inputs(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Inputs in;
  for (float& v : in.mix) v = nd(rng);
  for (float& v : in.base) v = 0.5f * nd(rng);
  for (float& v : in.scale) v = 0.5f + std::fabs(nd(rng));
  return in;
}

struct SplitD {
  double pre[4], post[4], comb[16];
};

double sigmoid_d(double z) { return 1.0 / (1.0 + std::exp(-z)); }

SplitD split_double(const Inputs& in, int iters) {
  SplitD s;
  for (int i = 0; i < 4; ++i) {
    s.pre[i] = sigmoid_d(double(in.mix[i]) * in.scale[0] + in.base[i]) + kEps;
    s.post[i] = 2.0 * sigmoid_d(double(in.mix[4 + i]) * in.scale[1] + in.base[4 + i]);
  }
  double m[4][4];
  for (int i = 0; i < 4; ++i) {
    double mx = -1e300;
    for (int j = 0; j < 4; ++j) {
      m[i][j] = double(in.mix[8 + 4 * i + j]) * in.scale[2] + in.base[8 + 4 * i + j];
      mx = std::max(mx, m[i][j]);
    }
    double sum = 0.0;
    for (int j = 0; j < 4; ++j) sum += std::exp(m[i][j] - mx);
    for (int j = 0; j < 4; ++j) m[i][j] = std::exp(m[i][j] - mx) / sum + kEps;
  }
  auto cols = [&] {
    for (int j = 0; j < 4; ++j) {
      double sum = 0.0;
      for (int i = 0; i < 4; ++i) sum += m[i][j];
      for (int i = 0; i < 4; ++i) m[i][j] /= (sum + kEps);
    }
  };
  auto rows = [&] {
    for (int i = 0; i < 4; ++i) {
      double sum = 0.0;
      for (int j = 0; j < 4; ++j) sum += m[i][j];
      for (int j = 0; j < 4; ++j) m[i][j] /= (sum + kEps);
    }
  };
  cols();
  for (int it = 1; it < iters; ++it) {
    rows();
    cols();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) s.comb[4 * i + j] = m[i][j];
  return s;
}

TEST(OpsHc, SplitMatchesDoubleTranscription) {
  for (unsigned seed = 0; seed < 50; ++seed) {
    const Inputs in = random_inputs(seed);
    const SplitD ref = split_double(in, 20);
    for (Numerics n : {Numerics::Default, Numerics::Quality}) {
      const HcSplit s = hc_split_sinkhorn(in.mix, in.scale, in.base, kEps, n);
      for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(s.pre[i], ref.pre[i], 1e-6);
        EXPECT_NEAR(s.post[i], ref.post[i], 2e-6);
      }
      for (int k = 0; k < 16; ++k)
        EXPECT_NEAR(s.comb[k], ref.comb[k], 1e-5) << "seed " << seed << " k " << k;
    }
  }
}

TEST(OpsHc, SinkhornIsDoublyStochastic) {
  for (unsigned seed = 100; seed < 120; ++seed) {
    const Inputs in = random_inputs(seed);
    for (Numerics n : {Numerics::Default, Numerics::Quality}) {
      const HcSplit s = hc_split_sinkhorn(in.mix, in.scale, in.base, kEps, n);
      for (int i = 0; i < 4; ++i) {
        float row = 0.0f, col = 0.0f;
        for (int j = 0; j < 4; ++j) {
          row += s.comb[4 * i + j];
          col += s.comb[4 * j + i];
          EXPECT_GT(s.comb[4 * i + j], 0.0f);
        }
        EXPECT_NEAR(col, 1.0f, 1e-5f);  // the last pass normalises columns
        EXPECT_NEAR(row, 1.0f, 1e-3f);
      }
    }
  }
}

TEST(OpsHc, NumericsDifferOnlyInLastBits) {
  const Inputs in = random_inputs(7);
  const HcSplit d = hc_split_sinkhorn(in.mix, in.scale, in.base, kEps, Numerics::Default);
  const HcSplit q = hc_split_sinkhorn(in.mix, in.scale, in.base, kEps, Numerics::Quality);
  EXPECT_EQ(d.pre, q.pre);
  EXPECT_EQ(d.post, q.post);
  for (int k = 0; k < 16; ++k) EXPECT_NEAR(d.comb[k], q.comb[k], 1e-6f);
}

TEST(OpsHc, RowSoftmaxIsOverContiguousGroups) {
  // Zero scale/base except one large logit at mix[8 + 4*1 + 2] (source 1,
  // destination 2): with one Sinkhorn pass (iters = 1) only the row softmax
  // and one column pass happen, so comb[1][2] dominates its row.
  std::array<float, 24> mix{}, base{};
  std::array<float, 3> scale = {1.0f, 1.0f, 1.0f};
  mix[8 + 4 * 1 + 2] = 10.0f;
  const HcSplit s = hc_split_sinkhorn(mix, scale, base, kEps, Numerics::Default, 1);
  EXPECT_GT(s.comb[4 * 1 + 2],
            0.9f * (s.comb[4 * 1 + 0] + s.comb[4 * 1 + 1] + s.comb[4 * 1 + 2] + s.comb[4 * 1 + 3]));
  EXPECT_EQ(s.pre[0], 0.5f + kEps);
  EXPECT_EQ(s.post[0], 1.0f);
}

TEST(OpsHc, PreSumAndPostMatchDoubleTranscription) {
  constexpr std::size_t d = 64;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> state(4 * d), f(d), x(d), out(4 * d);
  for (float& v : state) v = nd(rng);
  for (float& v : f) v = nd(rng);
  const Inputs in = random_inputs(9);
  const HcSplit s = hc_split_sinkhorn(in.mix, in.scale, in.base, kEps, Numerics::Default);

  hc_weighted_sum(state, s.pre, x);
  for (std::size_t e = 0; e < d; ++e) {
    double acc = 0.0;
    for (int i = 0; i < 4; ++i) acc += double(s.pre[i]) * state[i * d + e];
    EXPECT_NEAR(x[e], acc, 1e-5);
  }

  hc_post(f, state, s, out);
  for (int j = 0; j < 4; ++j) {
    for (std::size_t e = 0; e < d; ++e) {
      // H'[j] = post[j] f + sum_i M[i][j] H[i]  (not M[j][i], trap T1).
      double acc = double(s.post[j]) * f[e];
      for (int i = 0; i < 4; ++i) acc += double(s.comb[4 * i + j]) * state[i * d + e];
      EXPECT_NEAR(out[j * d + e], acc, 1e-5);
    }
  }
}

TEST(OpsHc, HeadWeights) {
  std::array<float, 4> mix = {0.0f, 2.0f, -3.0f, -40.0f}, base = {0.0f, 0.5f, -0.25f, 0.0f};
  const float scale = 1.5f;
  for (Numerics n : {Numerics::Default, Numerics::Quality}) {
    const auto w = hc_head_weights(mix, scale, base, kEps, n);
    for (int i = 0; i < 4; ++i) {
      const double z = double(mix[i]) * scale + base[i];
      EXPECT_NEAR(w[i], sigmoid_d(z) + kEps, 1e-7 + 1e-6 * sigmoid_d(z));
    }
    EXPECT_EQ(w[0], 0.5f + kEps);
  }
  // Far negative: ds4's two-branch form keeps relative precision.
  const auto wd = hc_head_weights(mix, scale, base, 0.0f, Numerics::Default);
  EXPECT_NEAR(wd[3], std::exp(-60.0), 1e-6 * std::exp(-60.0));
}

}  // namespace
}  // namespace ds4::cpu
