// The scalar replicas of ggml's AVX-512 float order (quant/ggml_order.h)
// against the AVX-512 instructions themselves where this CPU has them
// (GCC's _mm512_reduce_add_ps, a 4 x 16-lane _mm512_fmadd_ps dot), and
// ggml_v_expf's replica against exp: accurate to a few ulp, exact on the
// special values. End-to-end exactness against llama.cpp is in
// tests/reference/test_reference_forward.cpp.
#include <gtest/gtest.h>
#include <immintrin.h>

// GCC 12's own _mm512_reduce_add_ps trips -Wuninitialized inside its header
// (a dummy operand of a masked extract); not our code.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/dot_ggml_avx2.h"
#include "quant/ggml_order.h"

namespace ds4::quant {
namespace {

bool have_avx512() {
  const auto f = cpu_features();
  return f.avx512f && f.avx512dq;
}

__attribute__((target("avx512f,avx512dq"))) float hw_reduce(const float *a) {
  return _mm512_reduce_add_ps(_mm512_loadu_ps(a));
}

__attribute__((target("avx512f,avx512dq"))) float hw_dot(int64_t n, const float *x, const float *y) {
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      s[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), _mm512_loadu_ps(y + i + 16 * j), s[j]);
  s[0] = _mm512_add_ps(s[0], s[2]);
  s[1] = _mm512_add_ps(s[1], s[3]);
  s[0] = _mm512_add_ps(s[0], s[1]);
  float sum = _mm512_reduce_add_ps(s[0]);
  for (int64_t i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(GgmlOrder, ReduceAndDotMatchTheInstructions) {
  if (!have_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mag(-30.0f, 30.0f);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    float a[16];
    // Wide magnitudes make every summation order give a different result.
    for (float &v : a) v = g(rng) * std::exp2(mag(rng));
    ASSERT_EQ(bits(ggml_order::reduce_add16(a)), bits(hw_reduce(a))) << "trial " << trial;
  }
  for (int64_t n : {16, 64, 128, 200, 512, 1000}) {
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int trial = 0; trial < 50; ++trial) {
      for (auto &v : x) v = g(rng) * std::exp2(mag(rng) / 3);
      for (auto &v : y) v = g(rng);
      ASSERT_EQ(bits(ggml_order::vec_dot_f32(n, x.data(), y.data())), bits(hw_dot(n, x.data(), y.data())))
          << "n " << n;
    }
  }
}

// The avx2 lanes (dot_ggml_avx2.cpp) against the scalar replicas, bit for
// bit: every length class (whole 64-chunks, 16-remainders, odd tails), wide
// magnitudes (so any other order or a missing fma would show), infinities.
TEST(GgmlOrder, Avx2LanesEqualTheScalarReplicas) {
  const auto f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> mag(-12.0f, 12.0f);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const auto to_float = [](uint16_t h) { return f16_to_f32(h); };
  for (int64_t n : {0, 1, 7, 16, 17, 48, 63, 64, 65, 80, 127, 128, 200, 512, 1000, 4096}) {
    const auto un = static_cast<size_t>(n);
    std::vector<float> w(un), x(un), acc(un), want(un);
    std::vector<uint16_t> h(un);
    for (int trial = 0; trial < 20; ++trial) {
      for (auto &v : w) v = g(rng) * std::exp2(mag(rng));
      for (auto &v : x) v = g(rng) * std::exp2(mag(rng) / 2);
      for (size_t i = 0; i < un; ++i) h[i] = f32_to_f16(w[i] * 1e-3f);
      if (trial == 1 && n > 0) w[un / 2] = INFINITY;
      ASSERT_EQ(bits(ggml_avx2::vec_dot_f32(n, w.data(), x.data())),
                bits(ggml_order::vec_dot_f32(n, w.data(), x.data())))
          << "vec_dot_f32 n " << n << " trial " << trial;
      ASSERT_EQ(bits(ggml_avx2::vec_dot_f16(n, h.data(), x.data())),
                bits(ggml_order::vec_dot_f16(n, h.data(), x.data(), to_float)))
          << "vec_dot_f16 n " << n << " trial " << trial;
      if (n % 16 == 0) {
        ASSERT_EQ(bits(ggml_avx2::tinyblas_f32(n, w.data(), x.data())),
                  bits(ggml_order::tinyblas_dot(n, w.data(), x.data(), [](float v) { return v; })))
            << "tinyblas f32 n " << n << " trial " << trial;
        ASSERT_EQ(bits(ggml_avx2::tinyblas_f16(n, h.data(), x.data())),
                  bits(ggml_order::tinyblas_dot(n, h.data(), x.data(), to_float)))
            << "tinyblas f16 n " << n << " trial " << trial;
        // BF16 weights against bf16-exact activations.
        std::vector<uint16_t> hb(un);
        std::vector<float> xb(un);
        for (size_t i = 0; i < un; ++i) {
          hb[i] = f32_to_bf16(w[i]);
          xb[i] = bf16_to_f32(f32_to_bf16(x[i]));
        }
        ASSERT_EQ(bits(ggml_avx2::tinyblas_bf16(n, hb.data(), xb.data())),
                  bits(ggml_order::tinyblas_dot(n, hb.data(), xb.data(), [](uint16_t v) { return bf16_to_f32(v); })))
            << "tinyblas bf16 n " << n << " trial " << trial;
      }
      for (size_t i = 0; i < un; ++i) acc[i] = want[i] = g(rng);
      const float s = g(rng) * 100.0f;
      ggml_avx2::fma_into(n, w.data(), s, acc.data());
      for (size_t i = 0; i < un; ++i) want[i] = std::fma(w[i], s, want[i]);
      for (size_t i = 0; i < un; ++i) ASSERT_EQ(bits(acc[i]), bits(want[i])) << "fma_into n " << n << " i " << i;
    }
  }
  // The dispatched entry points take the same path as the replicas they name.
  std::vector<float> w(96), x(96);
  for (auto &v : w) v = g(rng) * std::exp2(mag(rng));
  for (auto &v : x) v = g(rng);
  EXPECT_EQ(bits(vec_dot_f32_ggml_x86(96, w.data(), x.data())), bits(ggml_order::vec_dot_f32(96, w.data(), x.data())));
  EXPECT_EQ(bits(dot_f32_ggml_x86(96, w.data(), x.data(), false)),
            bits(ggml_order::tinyblas_dot(96, w.data(), x.data(), [](float v) { return v; })));
}

// vdpbf16ps as the Intel SDM states it: per lane the odd pair, then the even
// pair, each an fma (the bf16 products are exact), denormal inputs read as
// zero, denormal results flushed to zero.
TEST(GgmlOrder, Dpbf16LaneFollowsTheInstructionDefinition) {
  using ggml_order::dpbf16_lane;
  const float big = std::exp2(24.0f);
  // Two roundings, not one: 2^24 + 1 + 1 is 2^24 + 2 exactly, but each step
  // rounds 2^24 + 1 back to 2^24 (ties to even).
  EXPECT_EQ(dpbf16_lane(big, 1.0f, 1.0f, 1.0f, 1.0f), big);
  // Odd pair first: from 2^24, + 1 (rounds back to 2^24) then - 2^24 gives
  // 0; - 2^24 then + 1 gives 1.
  EXPECT_EQ(dpbf16_lane(big, big, -1.0f, 1.0f, 1.0f), 0.0f);
  EXPECT_EQ(dpbf16_lane(big, 1.0f, 1.0f, big, -1.0f), 1.0f);
  // DAZ: the smallest bf16 denormal (bits 0x0001) times 2^100 would be a
  // normal 2^-33 without it.
  const float denormal = bf16_to_f32(0x0001);
  ASSERT_EQ(std::fpclassify(denormal), FP_SUBNORMAL);
  EXPECT_EQ(dpbf16_lane(0.0f, 0.0f, 0.0f, denormal, std::exp2(100.0f)), 0.0f);
  EXPECT_EQ(dpbf16_lane(0.0f, std::exp2(100.0f), denormal, 0.0f, 0.0f), 0.0f);
  // FTZ: 2^-70 * 2^-70 is a float denormal; the lane keeps (signed) zero.
  const float r = dpbf16_lane(0.0f, std::exp2(-70.0f), -std::exp2(-70.0f), 0.0f, 0.0f);
  EXPECT_EQ(r, 0.0f);
  EXPECT_TRUE(std::signbit(r));
  // Normal values: an ordinary fma chain.
  EXPECT_EQ(dpbf16_lane(0.5f, 3.0f, 0.25f, -2.0f, 1.5f), std::fma(3.0f, 0.25f, std::fma(-2.0f, 1.5f, 0.5f)));
}

__attribute__((target("avx512f,avx512bf16"))) float hw_dpbf16_lane0(float acc, const uint16_t *w, const uint16_t *x) {
  // Lane 0 of one vdpbf16ps over 32 bf16 pairs, the others zero.
  alignas(64) uint16_t a[32] = {}, b[32] = {};
  a[0] = w[0];
  a[1] = w[1];
  b[0] = x[0];
  b[1] = x[1];
  const __m512 r = _mm512_dpbf16_ps(_mm512_set1_ps(acc), (__m512bh)_mm512_load_si512(a), (__m512bh)_mm512_load_si512(b));
  return _mm512_cvtss_f32(r);
}

// The replica against the instruction itself, on a CPU with AVX512-BF16
// (first run on a Zen 5: 200000 random lanes, specials included, identical).
TEST(GgmlOrder, Dpbf16LaneMatchesTheInstruction) {
  if (!cpu_features().avx512bf16) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> u16(0, 0xffff);
  std::normal_distribution<float> g(0.0f, 1.0f);
  int mismatches = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    uint16_t w[2], x[2];
    for (int k = 0; k < 2; ++k) {
      // Mostly ordinary values, now and then any bit pattern (denormals,
      // infinities, NaN).
      w[k] = trial % 7 == 0 ? static_cast<uint16_t>(u16(rng)) : f32_to_bf16(g(rng));
      x[k] = trial % 11 == 0 ? static_cast<uint16_t>(u16(rng)) : f32_to_bf16(g(rng));
    }
    const float acc = trial % 5 == 0 ? 0.0f : g(rng) * 4.0f;
    const float want = hw_dpbf16_lane0(acc, w, x);
    const float got = ggml_order::dpbf16_lane(acc, bf16_to_f32(w[0]), bf16_to_f32(x[0]), bf16_to_f32(w[1]),
                                              bf16_to_f32(x[1]));
    if (std::isnan(want) && std::isnan(got)) continue;
    if (bits(want) != bits(got) && ++mismatches <= 5) {
      ADD_FAILURE() << "acc " << acc << " w " << w[0] << "," << w[1] << " x " << x[0] << "," << x[1] << ": hw "
                    << want << " replica " << got;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(GgmlOrder, ExpfIsAccurateAndExactOnSpecialValues) {
  EXPECT_EQ(ggml_order::v_expf(-INFINITY), 0.0f);
  EXPECT_EQ(ggml_order::v_expf(0.0f), 1.0f);
  EXPECT_EQ(ggml_order::v_expf(-200.0f), 0.0f);  // |n| > 192: flushed to 0
  EXPECT_EQ(ggml_order::v_expf(200.0f), INFINITY);
  EXPECT_TRUE(std::isnan(ggml_order::v_expf(std::numeric_limits<float>::quiet_NaN())));
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.01337f) {
    const double e = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(ggml_order::v_expf(x) - e) / e);
  }
  EXPECT_LT(worst, 4e-7);  // a few ulp: ggml's polynomial, not a correctly rounded exp
  EXPECT_GT(worst, 0.0);   // and not libm's expf either
}

}  // namespace
}  // namespace ds4::quant
