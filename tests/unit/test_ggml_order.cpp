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
#include <initializer_list>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/dot_ggml_avx2.h"
#include "quant/dot_ggml_bf16_avx512.h"
#include "quant/dot_ggml_quant.h"
#include "quant/ggml_order.h"
#include "quant/legacy_codes.h"
#include "quant/quant.h"

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
// Random blocks of a weight or activation type: every byte random, then the
// float scale fields set to modest finite values (random bytes there would be
// NaN or huge), Q8_K's block sums made consistent with its codes. The codes
// span their whole range (Q8 activations include -128).
template <typename Block>
std::vector<Block> random_blocks(size_t n, std::mt19937& rng) {
  std::vector<Block> v(n);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> scale(0.0f, 0.05f);
  auto* raw = reinterpret_cast<uint8_t*>(v.data());
  for (size_t i = 0; i < n * sizeof(Block); ++i) raw[i] = static_cast<uint8_t>(byte(rng));
  for (Block& b : v) {
    if constexpr (std::is_same_v<Block, BlockQ8_K>) {
      b.d = scale(rng);
      for (int g = 0; g < kQK_K / 16; ++g) {
        int s = 0;
        for (int e = 0; e < 16; ++e) s += b.qs[16 * g + e];
        b.bsums[g] = static_cast<int16_t>(s);
      }
    } else if constexpr (std::is_same_v<Block, BlockMXFP4>) {
      b.e = static_cast<uint8_t>(120 + byte(rng) % 16);
    } else {
      b.d = f32_to_f16(scale(rng));
    }
    if constexpr (requires { b.dmin; }) b.dmin = f32_to_f16(scale(rng));
    if constexpr (requires { b.m; }) b.m = f32_to_f16(scale(rng));
    if constexpr (requires { b.s; }) b.s = f32_to_f16(scale(rng));
  }
  return v;
}

// One dot's AVX2 copy (dot_ggml_quant_avx2.cpp) against the portable copy of
// the same source compiled into this test, over 1..8 blocks of random data.
template <typename W, typename X>
void expect_copies_equal(const char* name, float (*avx2)(int64_t, const W*, const X*),
                         float (*portable)(int64_t, const W*, const X*), int64_t block_elems) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 64; ++trial) {
    const size_t nb = 1 + static_cast<size_t>(trial % 8);
    const std::vector<W> w = random_blocks<W>(nb, rng);
    const std::vector<X> x = random_blocks<X>(nb, rng);
    const int64_t n = static_cast<int64_t>(nb) * block_elems;
    ASSERT_EQ(bits(avx2(n, w.data(), x.data())), bits(portable(n, w.data(), x.data())))
        << name << ", " << nb << " blocks, trial " << trial;
  }
}

// The quantized --quality dots compiled for AVX2 equal their portable copies
// bit for bit (the same operations: exact integer sums, explicit fma), Q8_0's
// hand-written lanes included.
TEST(GgmlOrder, Avx2QuantizedDotsEqualThePortableCopies) {
  const auto f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  namespace a = ggml_avx2;
  namespace p = ggml_quant;
#define DS4_EXPECT_COPIES_EQUAL(fn, elems) expect_copies_equal(#fn, &a::fn, &p::fn, elems)
  DS4_EXPECT_COPIES_EQUAL(dot_q8_0_q8_0, kQK8_0);
  DS4_EXPECT_COPIES_EQUAL(dot_q4_K_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_q2_K_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_mxfp4_q8_0, kQKMxfp4);
  DS4_EXPECT_COPIES_EQUAL(dot_iq2_xxs_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_q6_K_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_q5_K_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_q3_K_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_iq3_xxs_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_iq3_s_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_iq4_xs_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(vec_dot_iq3_xxs_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(vec_dot_iq4_xs_q8_K, kQK_K);
  DS4_EXPECT_COPIES_EQUAL(dot_q4_0_q8_0, kQK8_0);
  DS4_EXPECT_COPIES_EQUAL(dot_iq4_nl_q8_0, kQK8_0);
  DS4_EXPECT_COPIES_EQUAL(tinyblas_q4_0_q8_0, kQK8_0);
  DS4_EXPECT_COPIES_EQUAL(tinyblas_iq4_nl_q8_0, kQK8_0);
  DS4_EXPECT_COPIES_EQUAL(dot_q5_0_q8_0, kQK8_0);
  DS4_EXPECT_COPIES_EQUAL(dot_q4_1_q8_1, kQK8_1);
  DS4_EXPECT_COPIES_EQUAL(dot_q5_1_q8_1, kQK8_1);
#undef DS4_EXPECT_COPIES_EQUAL
}

// Q8_0's lanes where a pair of products reaches 2 * 128 * 128 (codes -128):
// the exact sum, which an int16 (maddubs) pair would have saturated.
TEST(GgmlOrder, Avx2Q8_0DotIsExactAtTheCodeExtremes) {
  const auto f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  BlockQ8_0 w{}, x{};
  w.d = x.d = f32_to_f16(1.0f);
  for (int j = 0; j < kQK8_0; ++j) w.qs[j] = x.qs[j] = -128;
  EXPECT_EQ(ggml_avx2::dot_q8_0_q8_0(kQK8_0, &w, &x), 32.0f * 128 * 128);
  EXPECT_EQ(bits(ggml_avx2::dot_q8_0_q8_0(kQK8_0, &w, &x)), bits(ggml_quant::dot_q8_0_q8_0(kQK8_0, &w, &x)));
}

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

// The BF16 dots with the instruction itself equal the replicas, denormal
// and odd-length rows included.
TEST(GgmlOrder, Avx512Bf16DotsEqualTheScalarReplicas) {
  if (!cpu_features().avx512bf16) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> mag(-12.0f, 12.0f);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const auto to_float = [](uint16_t v) { return bf16_to_f32(v); };
  for (int64_t n : {0, 1, 31, 32, 33, 64, 65, 96, 127, 128, 200, 512, 1000, 4096}) {
    const auto un = static_cast<size_t>(n);
    std::vector<uint16_t> w(un);
    std::vector<float> x(un);
    for (int trial = 0; trial < 20; ++trial) {
      for (size_t i = 0; i < un; ++i) {
        w[i] = f32_to_bf16(g(rng) * std::exp2(mag(rng)));
        x[i] = bf16_to_f32(f32_to_bf16(g(rng) * std::exp2(mag(rng) / 2)));
      }
      if (trial == 3 && n > 2) {
        w[1] = 0x0003;                       // a denormal weight
        x[2] = bf16_to_f32(0x8005);          // a denormal activation
      }
      ASSERT_EQ(bits(ggml_avx512bf16::vec_dot_dpbf16(n, w.data(), x.data())),
                bits(ggml_order::vec_dot_bf16(n, w.data(), x.data(), true, to_float)))
          << "vec_dot n " << n << " trial " << trial;
      if (n % 32 == 0) {
        ASSERT_EQ(bits(ggml_avx512bf16::tinyblas_dpbf16(n, w.data(), x.data())),
                  bits(ggml_order::tinyblas_dpbf16(n, w.data(), x.data(), to_float)))
            << "tinyblas n " << n << " trial " << trial;
      }
    }
  }
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

// ---- The K-quant / legacy vec_dot replicas on hand-worked blocks ----
//
// Sparse blocks whose 8 integer lanes are worked out by hand from ggml's AVX2
// kernels (element e of each 32-element run in lane (e % 32) / 4), then
// scaled and summed in hsum_float_8's order: the replicas must give exactly
// that. A replica that grouped the integers differently (say by sub-block,
// or Q6_K's -32 per element instead of through the group sums) gets other
// lanes, and the scale 0.1 rounds each lane differently.

// hsum_float_8 of round(d * lane[k]) (one block: fma(d, lane, 0)).
float documented_hsum(const int32_t (&lane)[8], float d) {
  float a[8];
  for (int k = 0; k < 8; ++k) a[k] = d * static_cast<float>(lane[k]);
  return ((a[4] + a[0]) + (a[6] + a[2])) + ((a[5] + a[1]) + (a[7] + a[3]));
}

BlockQ8_K sparse_q8_K(float d, std::initializer_list<std::pair<int, int>> values) {
  BlockQ8_K x{};
  x.d = d;
  for (const auto& [e, v] : values) x.qs[e] = static_cast<int8_t>(v);
  for (int g = 0; g < kQK_K / 16; ++g)
    for (int e = 16 * g; e < 16 * g + 16; ++e) x.bsums[g] = static_cast<int16_t>(x.bsums[g] + x.qs[e]);
  return x;
}

// Element e's 6-bit code (layout in quant/blocks.h).
void set_q6_K_code(BlockQ6_K& b, int e, int code) {
  const int h = e / 128, l = e % 32, k = (e % 128) / 32, shift = 4 * (k / 2);
  uint8_t& lo = b.ql[64 * h + 32 * (k % 2) + l];
  lo = static_cast<uint8_t>((lo & ~(0xF << shift)) | ((code & 0xF) << shift));
  uint8_t& hi = b.qh[32 * h + l];
  hi = static_cast<uint8_t>((hi & ~(3 << (2 * k))) | (((code >> 4) & 3) << (2 * k)));
}

TEST(GgmlOrder, Q6_KReplicaFollowsTheAvx2Lanes) {
  BlockQ6_K w{};
  for (int e = 0; e < kQK_K; ++e) set_q6_K_code(w, e, 32);  // value 0
  set_q6_K_code(w, 4, 40);
  set_q6_K_code(w, 37, 0);
  set_q6_K_code(w, 200, 63);
  for (auto& s : w.scales) s = 1;
  w.scales[0] = 3;
  w.scales[2] = -2;
  w.scales[12] = 5;
  w.d = f32_to_f16(1.0f);
  int8_t q[kQK_K];
  q6_K_values(w, q);
  ASSERT_EQ(q[4], 8);
  ASSERT_EQ(q[37], -32);
  ASSERT_EQ(q[200], 31);
  const BlockQ8_K x = sparse_q8_K(0.1f, {{4, 100}, {37, -50}, {200, 7}});
  // Codes times scales: elements 4 and 37 in lane 1 (3*40*100 + 0), 200 in
  // lane 2 (5*63*7). Then 32 * scale * group sum off lane e / 32: lane 0
  // -32*3*100, lane 1 -32*(-2)*(-50), lane 6 -32*5*7.
  const int32_t lane[8] = {-9600, 12000 - 3200, 2205, 0, 0, 0, -1120, 0};
  EXPECT_EQ(bits(dot_q6_K_q8_K_ggml_x86(kQK_K, &w, &x)), bits(documented_hsum(lane, 0.1f)));
}

// Element e's 5-bit code (layout in quant/blocks.h).
void set_q5_K_code(BlockQ5_K& b, int e, int code) {
  const int s = e / 32, l = e % 32, shift = 4 * (s % 2);
  uint8_t& q = b.qs[32 * (s / 2) + l];
  q = static_cast<uint8_t>((q & ~(0xF << shift)) | ((code & 0xF) << shift));
  b.qh[l] = static_cast<uint8_t>((b.qh[l] & ~(1 << s)) | (((code >> 4) & 1) << s));
}

TEST(GgmlOrder, Q5_KReplicaAddsTheMinTermAfterTheLanes) {
  BlockQ5_K w{};
  // Sub-blocks 0..3: scale 1, min 2; 4..7: scale 1, min 1.
  for (int j = 0; j < 4; ++j) {
    w.scales[j] = 1;
    w.scales[4 + j] = 2;
    w.scales[8 + j] = 0x11;
  }
  w.d = f32_to_f16(1.0f);
  w.dmin = f32_to_f16(0.5f);
  set_q5_K_code(w, 5, 31);
  set_q5_K_code(w, 70, 17);
  set_q5_K_code(w, 255, 1);
  uint8_t q[kQK_K];
  q5_K_codes(w, q);
  ASSERT_EQ(q[5], 31);
  ASSERT_EQ(q[70], 17);
  ASSERT_EQ(q[255], 1);
  const BlockQ8_K x = sparse_q8_K(0.1f, {{5, 90}, {70, -20}, {255, 127}});
  // Elements 5 and 70 in lane 1 (31*90 + 17*(-20)), 255 in lane 7; the mins
  // 2*90 + 2*(-20) + 1*127 = 267 go to the scalar term -0.1*0.5 * 267.
  const int32_t lane[8] = {0, 2450, 0, 0, 0, 0, 0, 127};
  const float summs = (-0.1f * 0.5f) * 267.0f;
  EXPECT_EQ(bits(dot_q5_K_q8_K_ggml_x86(kQK_K, &w, &x)), bits(documented_hsum(lane, 0.1f) + summs));
}

TEST(GgmlOrder, Q4_1ReplicaAddsTheOffsetTermAfterTheLanes) {
  BlockQ4_1 w{};
  w.d = f32_to_f16(1.0f);
  w.m = f32_to_f16(0.25f);
  int codes[32] = {};
  codes[3] = 15;
  codes[20] = 7;
  legacy::pack_nibbles(codes, w.qs);
  BlockQ8_1 x{};
  x.d = f32_to_f16(0.1f);
  x.s = f32_to_f16(3.0f);
  x.qs[3] = 50;
  x.qs[20] = -9;
  // Element 3 in lane 0 (15*50), 20 in lane 5 (7*(-9)); then m * s.
  const int32_t lane[8] = {750, 0, 0, 0, 0, -63, 0, 0};
  const float d = f16_to_f32(x.d);
  EXPECT_EQ(bits(dot_q4_1_q8_1_ggml_x86(kQK8_1, &w, &x)), bits(documented_hsum(lane, d) + 0.25f * 3.0f));
}

TEST(GgmlOrder, RepackedQ4_0ReplicaTakesOneFmaPerBlock) {
  // Two blocks: acc = fma(isum_1, d_1, fma(isum_0, d_0, 0)), not 8 lanes.
  BlockQ4_0 w[2]{};
  BlockQ8_0 x[2]{};
  int codes[32];
  for (int& c : codes) c = 8;  // value 0
  codes[0] = 15;   // +7
  codes[31] = 0;   // -8
  for (auto& b : w) {
    b.d = f32_to_f16(1.0f);
    legacy::pack_nibbles(codes, b.qs);
  }
  x[0].d = f32_to_f16(0.1f);
  x[1].d = f32_to_f16(0.3f);
  x[0].qs[0] = 101;   // 7 * 101
  x[0].qs[31] = 3;    // -8 * 3
  x[1].qs[0] = -77;   // 7 * -77
  const float expected = std::fma(-539.0f, f16_to_f32(x[1].d), f16_to_f32(x[0].d) * 683.0f);
  EXPECT_EQ(bits(dot_q4_0_q8_0_ggml_x86(2 * kQK8_0, w, x)), bits(expected));
}

}  // namespace
}  // namespace ds4::quant
