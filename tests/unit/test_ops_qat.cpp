// FP8-E4M3 / FP4-E2M1 round trips and Hadamard-128: known answers worked out
// by hand from the definitions in MODEL.md section 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops_qat.h"

namespace ds4::cpu {
namespace {

TEST(OpsQat, E4m3CodeTable) {
  EXPECT_EQ(e4m3_value(0), 0.0f);
  EXPECT_EQ(e4m3_value(1), 0x1p-9f);      // smallest subnormal
  EXPECT_EQ(e4m3_value(7), 7 * 0x1p-9f);  // largest subnormal
  EXPECT_EQ(e4m3_value(8), 0x1p-6f);      // smallest normal
  EXPECT_EQ(e4m3_value(56), 1.0f);        // e = 7, m = 0
  EXPECT_EQ(e4m3_value(57), 1.125f);
  EXPECT_EQ(e4m3_value(126), 448.0f);  // e = 15, m = 6: largest finite
  for (int c = 1; c <= 126; ++c) EXPECT_LT(e4m3_value(c - 1), e4m3_value(c)) << c;
}

TEST(OpsQat, E4m3RoundsToNearestTiesToEvenCode) {
  // Every code value is a fixed point, with either sign.
  for (int c = 0; c <= 126; ++c) {
    EXPECT_EQ(e4m3_round(e4m3_value(c)), e4m3_value(c));
    EXPECT_EQ(e4m3_round(-e4m3_value(c)), -e4m3_value(c));
  }
  // Every midpoint goes to the even code of its two neighbours.
  for (int c = 0; c < 126; ++c) {
    const float mid = 0.5f * (e4m3_value(c) + e4m3_value(c + 1));
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(e4m3_round(mid), e4m3_value(even)) << "between codes " << c << " and " << c + 1;
  }
  EXPECT_EQ(e4m3_round(1.0625f), 1.0f);              // 56|57 tie -> 56
  EXPECT_EQ(e4m3_round(1.1875f), 1.25f);             // 57|58 tie -> 58
  EXPECT_EQ(e4m3_round(1.07f), 1.125f);              // not a tie: nearest
  EXPECT_EQ(e4m3_round(0x1p-10f), 0.0f);             // 0|1 tie -> 0 (subnormal)
  EXPECT_EQ(e4m3_round(3 * 0x1p-10f), 2 * 0x1p-9f);  // 1|2 tie -> 2
  EXPECT_EQ(e4m3_round(460.0f), 448.0f);             // clamp to the largest finite
  EXPECT_EQ(e4m3_round(-1000.0f), -448.0f);
}

// The rounding against its definition: the nearest of the 127 code values by
// exhaustive search (ties to the even code), for every float in [0, 480]
// whose low 9 mantissa bits are zero or a sampled pattern, with either sign.
TEST(OpsQat, E4m3RoundMatchesTheNearestCodeBySearch) {
  std::array<float, 127> values{};
  for (int c = 0; c <= 126; ++c) values[static_cast<size_t>(c)] = e4m3_value(c);
  auto nearest = [&](float v) {
    const float a = std::fmin(std::fabs(v), 448.0f);
    // The first code >= a and the one below it: whichever is nearer.
    const int hi = static_cast<int>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
    int best = hi;
    if (hi > 0) {
      const float up = values[static_cast<size_t>(hi)] - a, down = a - values[static_cast<size_t>(hi - 1)];
      if (down < up || (down == up && (hi - 1) % 2 == 0)) best = hi - 1;
    }
    return v < 0.0f ? -values[static_cast<size_t>(best)] : values[static_cast<size_t>(best)];
  };
  std::mt19937 rng(7);
  int checked = 0;
  for (uint32_t top = 0; top < (std::bit_cast<uint32_t>(480.0f) >> 9); ++top) {
    const uint32_t bits = top << 9 | (rng() & 0x1ff);
    for (const uint32_t b : {top << 9, bits}) {
      const float v = std::bit_cast<float>(b);
      ASSERT_EQ(e4m3_round(v), nearest(v)) << v;
      ASSERT_EQ(e4m3_round(-v), nearest(-v)) << -v;
      ++checked;
    }
  }
  EXPECT_GT(checked, 2000000);
}

TEST(OpsQat, Fp8RoundTripPowerOfTwoScale) {
  // amax 1: 1/448 -> log2 = -8.8 -> scale 2^-8. 0.3 * 256 = 76.8 lies in
  // [64, 128) where E4M3 steps by 8 -> 80 -> 80/256.
  std::vector<float> x(64, 0.0f);
  x[0] = 1.0f;
  x[1] = 0.3f;
  x[2] = -0.3f;
  x[3] = 0.01f;  // 2.56 in [2, 4), step 0.25 -> 2.5 -> 2.5/256
  fp8_e4m3_round_trip(x);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 80.0f / 256.0f);
  EXPECT_EQ(x[2], -80.0f / 256.0f);
  EXPECT_EQ(x[3], 2.5f / 256.0f);
  EXPECT_EQ(x[4], 0.0f);
}

TEST(OpsQat, Fp8AmaxExactly448KeepsScaleOne) {
  std::vector<float> x(64, 0.0f);
  x[0] = 448.0f;
  x[1] = 300.0f;  // [256, 448) steps by 32: 288 or 320, 300 -> 288
  x[2] = 304.0f;  // tie 288|320: codes 121 (odd) and 122 (even) -> 320
  fp8_e4m3_round_trip(x);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], 288.0f);
  EXPECT_EQ(x[2], 320.0f);
}

TEST(OpsQat, Fp8AmaxFloorAndSubnormals) {
  // amax 1e-6 is below the 1e-4 floor: scale = 2^ceil(log2(1e-4/448)) = 2^-22.
  // 1e-9 / 2^-22 = 0.0042 is subnormal in E4M3 (step 2^-9): code 2 -> 2^-30.
  // Without the floor the scale would be 2^-28 and the result 0.28125 * 2^-28.
  std::vector<float> x(64, 0.0f);
  x[0] = 1.0e-6f;
  x[1] = 1.0e-9f;
  fp8_e4m3_round_trip(x);
  EXPECT_EQ(x[1], 0x1p-30f);
  // 1e-6 / 2^-22 = 4.19 -> 4 (step 0.5 in [4, 8)).
  EXPECT_EQ(x[0], 4.0f * 0x1p-22f);

  std::vector<float> zeros(64, 0.0f);
  fp8_e4m3_round_trip(zeros);
  for (float v : zeros) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u);
}

TEST(OpsQat, Fp8BlocksAreIndependentAndOnlyThePrefixIsTouched) {
  // A 512 row: the caller passes the 448 non-rope dims; 448..511 stay bitwise.
  std::vector<float> row(512);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : row) v = nd(rng);
  row[64] = 100.0f;  // a large value in block 1 does not change block 0's scale
  const std::vector<float> before = row;
  fp8_e4m3_round_trip(std::span<float>(row).first(448));
  for (int i = 448; i < 512; ++i) EXPECT_EQ(row[i], before[i]);
  std::vector<float> block0(before.begin(), before.begin() + 64);
  fp8_e4m3_round_trip(block0);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(row[i], block0[i]);
  // Round trip error is at most half an E4M3 step: relative 1/16 of a normal value.
  for (int i = 0; i < 448; ++i)
    EXPECT_LE(std::fabs(row[i] - before[i]), std::fabs(before[i]) / 16 + 1e-3f);
  // Idempotent.
  std::vector<float> again = row;
  fp8_e4m3_round_trip(std::span<float>(again).first(448));
  EXPECT_EQ(again, row);
}

TEST(OpsQat, E2m1RoundsToNearestTiesToEvenIndex) {
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (float g : grid) {
    EXPECT_EQ(e2m1_round(g), g);
    EXPECT_EQ(e2m1_round(-g), -g);
  }
  EXPECT_EQ(e2m1_round(0.25f), 0.0f);  // idx 0|1 -> 0
  EXPECT_EQ(e2m1_round(0.75f), 1.0f);  // idx 1|2 -> 2
  EXPECT_EQ(e2m1_round(1.25f), 1.0f);  // idx 2|3 -> 2
  EXPECT_EQ(e2m1_round(1.75f), 2.0f);  // idx 3|4 -> 4
  EXPECT_EQ(e2m1_round(2.5f), 2.0f);   // idx 4|5 -> 4
  EXPECT_EQ(e2m1_round(3.5f), 4.0f);   // idx 5|6 -> 6
  EXPECT_EQ(e2m1_round(5.0f), 4.0f);   // idx 6|7 -> 6
  EXPECT_EQ(e2m1_round(-2.5f), -2.0f);
  EXPECT_EQ(e2m1_round(5.1f), 6.0f);
  EXPECT_EQ(e2m1_round(9.0f), 6.0f);  // clamp
}

TEST(OpsQat, Fp4RoundTripKnownAnswers) {
  // amax 6 -> scale 1.
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;
  x[1] = 2.5f;
  x[2] = -0.75f;
  x[3] = 0.2f;
  fp4_e2m1_round_trip(x);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[2], -1.0f);
  EXPECT_EQ(x[3], 0.0f);
  // amax 1: 1/6 -> log2 = -2.58 -> scale 2^-2; 1 -> 4, 0.3 -> 1.2 -> 1 -> 0.25.
  std::vector<float> y(32, 0.0f);
  y[0] = 1.0f;
  y[1] = 0.3f;
  fp4_e2m1_round_trip(y);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.25f);
}

TEST(OpsQat, Fp4AmaxFloor) {
  // All zeros stay zeros (the floor keeps the scale a positive normal).
  std::vector<float> z(32, 0.0f);
  fp4_e2m1_round_trip(z);
  for (float v : z) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u);
  // amax 1e-39 is below the 6*2^-126 floor: scale 2^-126, 1e-39/2^-126 = 0.085
  // -> 0. Without the floor the scale would be 2^-132 and 1e-39 -> 6 * 2^-132.
  std::vector<float> t(32, 0.0f);
  t[0] = 1.0e-39f;
  fp4_e2m1_round_trip(t);
  EXPECT_EQ(t[0], 0.0f);
  // At the floor exactly: 6*2^-126 / 2^-126 = 6.
  std::vector<float> f(32, 0.0f);
  f[0] = 6.0f * 0x1p-126f;
  fp4_e2m1_round_trip(f);
  EXPECT_EQ(f[0], 6.0f * 0x1p-126f);
}

TEST(OpsQat, HadamardKnownTransforms) {
  const float inv = 1.0f / std::sqrt(128.0f);
  // Unit vector e_k -> column k of the Sylvester matrix: (-1)^popcount(i & k) / sqrt(128).
  for (int k : {0, 1, 5, 64, 127}) {
    std::array<float, 128> x{};
    x[k] = 1.0f;
    hadamard128(x);
    for (int i = 0; i < 128; ++i) {
      const float sign = (std::popcount(static_cast<unsigned>(i & k)) % 2) ? -1.0f : 1.0f;
      EXPECT_NEAR(x[i], sign * inv, 1e-7f) << "k=" << k << " i=" << i;
    }
  }
  // A constant c -> c * sqrt(128) at index 0, zero elsewhere.
  std::array<float, 128> c;
  c.fill(0.5f);
  hadamard128(c);
  EXPECT_NEAR(c[0], 0.5f * std::sqrt(128.0f), 1e-5f);
  for (int i = 1; i < 128; ++i) EXPECT_EQ(c[i], 0.0f);
}

TEST(OpsQat, HadamardIsItsOwnInverse) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::array<float, 128> x;
  for (float& v : x) v = nd(rng);
  const auto orig = x;
  hadamard128(x);
  double energy_in = 0.0, energy_out = 0.0;
  for (int i = 0; i < 128; ++i) {
    energy_in += double(orig[i]) * orig[i];
    energy_out += double(x[i]) * x[i];
  }
  EXPECT_NEAR(energy_out, energy_in, 1e-4 * energy_in);  // orthonormal
  hadamard128(x);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(x[i], orig[i], 1e-5f);
}

TEST(OpsQat, IndexerQatIsHadamardThenFp4) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::array<float, 128> x;
  for (float& v : x) v = nd(rng);
  auto expect = x;
  hadamard128(expect);
  fp4_e2m1_round_trip(expect);
  indexer_qat(x);
  EXPECT_EQ(x, expect);
}

}  // namespace
}  // namespace ds4::cpu
