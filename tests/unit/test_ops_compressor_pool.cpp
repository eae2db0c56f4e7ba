// Compressor pooling: per-column softmax over candidate rows against double
// math, the empty previous lane of the first ratio-4 window, and all-empty
// columns.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops_compressor_pool.h"

namespace ds4::cpu {
namespace {

constexpr Numerics kBoth[] = {Numerics::Default, Numerics::Quality};

struct Frontier {
  std::vector<std::vector<float>> score, kv;
  std::vector<const float*> sp, kp;
};

Frontier make(int rows, int d, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  Frontier f;
  for (int r = 0; r < rows; ++r) {
    f.score.emplace_back(d);
    f.kv.emplace_back(d);
    for (float& v : f.score.back()) v = nd(rng);
    for (float& v : f.kv.back()) v = nd(rng);
  }
  for (int r = 0; r < rows; ++r) {
    f.sp.push_back(f.score[r].data());
    f.kp.push_back(f.kv[r].data());
  }
  return f;
}

double pool_double(const Frontier& f, int j) {
  double m = -1e300;
  for (const auto& s : f.score) m = std::max(m, double(s[j]));
  double den = 0.0, num = 0.0;
  for (std::size_t r = 0; r < f.score.size(); ++r) {
    const double w = std::exp(double(f.score[r][j]) - m);
    den += w;
    num += w * f.kv[r][j];
  }
  return num / den;
}

TEST(OpsCompressorPool, MatchesDoubleForBothRatios) {
  for (int rows : {8, 128}) {
    const int d = 64;
    const Frontier f = make(rows, d, static_cast<unsigned>(rows));
    const int n_prev = rows == 8 ? 4 : 0;
    for (Numerics n : kBoth) {
      std::vector<float> out(d);
      compressor_pool(f.sp, f.kp, n_prev, out, n);
      for (int j = 0; j < d; ++j)
        EXPECT_NEAR(out[j], pool_double(f, j), 2e-6 * (1 + std::fabs(pool_double(f, j))));
    }
  }
}

TEST(OpsCompressorPool, EmptyPreviousLaneHasNoWeight) {
  // First ratio-4 window: lane A rows carry score -1e30 (ds4) or -inf (llama.cpp).
  Frontier f = make(8, 16, 3);
  for (float empty : {kPoolEmptyScore, -INFINITY}) {
    for (int r = 0; r < 4; ++r) std::fill(f.score[r].begin(), f.score[r].end(), empty);
    Frontier cur = make(4, 16, 3);
    for (int r = 0; r < 4; ++r) {
      cur.score[r] = f.score[4 + r];
      cur.kv[r] = f.kv[4 + r];
      cur.sp[r] = cur.score[r].data();
      cur.kp[r] = cur.kv[r].data();
    }
    for (Numerics n : kBoth) {
      std::vector<float> out(16);
      compressor_pool(f.sp, f.kp, 4, out, n);
      for (int j = 0; j < 16; ++j)
        EXPECT_NEAR(out[j], pool_double(cur, j), 2e-6 * (1 + std::fabs(out[j])));
    }
  }
}

TEST(OpsCompressorPool, AllEmptyColumnPoolsToZeroAndOneCandidateIsCopied) {
  Frontier f = make(8, 4, 5);
  for (auto& s : f.score) s[0] = kPoolEmptyScore;                         // column 0: nothing
  for (int r = 0; r < 8; ++r) f.score[r][1] = r == 6 ? 0.0f : -INFINITY;  // column 1: only row 6
  for (Numerics n : kBoth) {
    std::vector<float> out(4, 9.0f);
    compressor_pool(f.sp, f.kp, 4, out, n);
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], f.kv[6][1]);
  }
}

}  // namespace
}  // namespace ds4::cpu
