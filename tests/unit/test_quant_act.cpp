// Activation quantizers: known answers from the definitions in quant.h /
// MODEL.md §3 (Q8_0 per 32, Q8_K per 256).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/quant.h"
#include "test_quant_util.h"

namespace ds4::quant {
namespace {

// A Q8_0 block whose max is 127, so d = 1 and every variant multiplies by 1:
// only the tie rule differs.
TEST(QuantActQ8_0, TiesToEvenVersusAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  const float ties[] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.5f, -126.5f};
  for (int i = 0; i < 7; ++i) x[1 + i] = ties[i];
  BlockQ8_0 ds4b, ggml_ref, ggml_x86;
  quantize_row_q8_0_act(x.data(), &ds4b, 32);
  quantize_row_q8_0_act_ggml(x.data(), &ggml_ref, 32);
  quantize_row_q8_0_act_ggml_x86(x.data(), &ggml_x86, 32);
  const int even[] = {0, 2, 2, 0, -2, 4, -126};
  const int away[] = {1, 2, 3, -1, -3, 4, -127};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(ds4b.qs[1 + i], even[i]) << ties[i];
    EXPECT_EQ(ggml_x86.qs[1 + i], even[i]) << ties[i];
    EXPECT_EQ(ggml_ref.qs[1 + i], away[i]) << ties[i];
  }
  for (const BlockQ8_0* b : {&ds4b, &ggml_ref, &ggml_x86}) {
    EXPECT_EQ(b->qs[0], 127);
    EXPECT_EQ(b->d, f32_to_f16(1.0f));
  }
  // The generic quantize_row(Q8_0) is ggml's reference (ties away).
  BlockQ8_0 weights;
  quantize_row(GgmlType::Q8_0, x.data(), &weights, 32);
  EXPECT_EQ(weights.qs[1], 1);
}

TEST(QuantActQ8_0, ScaleAndZeroBlock) {
  std::vector<float> x(64);
  for (int i = 0; i < 32; ++i) x[i] = -0.1f * static_cast<float>(i);  // amax ~3.1 at x[31]
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;
  BlockQ8_0 b[2];
  quantize_row_q8_0_act(x.data(), b, 64);
  const float d = std::fabs(x[31]) / 127.0f;
  EXPECT_EQ(b[0].d, f32_to_f16(d));
  EXPECT_EQ(b[0].qs[31], -127);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b[0].qs[i], static_cast<int>(std::nearbyint(x[i] * (1.0f / d)))) << i;
  EXPECT_EQ(b[1].d, 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b[1].qs[i], 0);
}

// ggml's x86 path multiplies by 127/amax, ds4 by 1/(amax/127): the two
// reciprocals differ in the last bit for some amax, which moves values near
// a rounding midpoint to different codes.
TEST(QuantActQ8_0, X86ReciprocalDiffersFromDs4) {
  float amax = 1.0f;
  float x_split = 0.0f;
  for (int it = 0; it < 100000 && x_split == 0.0f; ++it, amax = std::nextafter(amax, 2.0f)) {
    const float id_ds4 = 1.0f / (amax / 127.0f);
    const float id_x86 = 127.0f / amax;
    if (id_ds4 == id_x86) continue;
    for (int k = 0; k < 126 && x_split == 0.0f; ++k) {
      float x = (static_cast<float>(k) + 0.5f) / id_ds4;
      for (int step = 0; step < 4; ++step, x = std::nextafter(x, 0.0f)) {
        if (std::nearbyint(x * id_ds4) != std::nearbyint(x * id_x86)) {
          x_split = x;
          break;
        }
      }
    }
    if (x_split != 0.0f) break;
  }
  ASSERT_NE(x_split, 0.0f) << "no amax with differing reciprocals found";
  std::vector<float> x(32, 0.0f);
  x[0] = amax;
  x[1] = x_split;
  BlockQ8_0 a, b;
  quantize_row_q8_0_act(x.data(), &a, 32);
  quantize_row_q8_0_act_ggml_x86(x.data(), &b, 32);
  EXPECT_EQ(a.d, b.d);
  EXPECT_EQ(std::abs(a.qs[1] - b.qs[1]), 1);
  EXPECT_EQ(a.qs[1], static_cast<int>(std::nearbyint(x_split * (1.0f / (amax / 127.0f)))));
}

// Q8_1 (quant.h): each variant's codes and f16 scale are its Q8_0
// counterpart's; s = f16(d * sum of the codes) with d = amax/127 unrounded.
TEST(QuantActQ8_1, CodesFromQ8_0VariantAndScaledSum) {
  const std::vector<float> x = test::gaussian(256, 5);
  std::vector<BlockQ8_0> ds4_q8_0(8), x86_q8_0(8);
  std::vector<BlockQ8_1> ds4_q8_1(8), x86_q8_1(8);
  quantize_row_q8_0_act(x.data(), ds4_q8_0.data(), 256);
  quantize_row_q8_0_act_ggml_x86(x.data(), x86_q8_0.data(), 256);
  quantize_row_q8_1_act(x.data(), ds4_q8_1.data(), 256);
  quantize_row_q8_1_act_ggml_x86(x.data(), x86_q8_1.data(), 256);
  for (int b = 0; b < 8; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
    const float d = amax / 127.0f;
    for (const auto& [q8_0, q8_1] : {std::pair{&ds4_q8_0[b], &ds4_q8_1[b]}, std::pair{&x86_q8_0[b], &x86_q8_1[b]}}) {
      EXPECT_EQ(q8_1->d, q8_0->d) << b;
      EXPECT_EQ(std::memcmp(q8_1->qs, q8_0->qs, 32), 0) << b;
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += q8_1->qs[j];
      EXPECT_EQ(q8_1->s, f32_to_f16(d * static_cast<float>(sum))) << b;
    }
  }
}

TEST(QuantActQ8_1, KnownBlockAndZeroBlock) {
  std::vector<float> x(64, 0.0f);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j) - 4.0f;  // amax 27 at x[31]
  for (auto quantize : {&quantize_row_q8_1_act, &quantize_row_q8_1_act_ggml_x86}) {
    BlockQ8_1 b[2];
    quantize(x.data(), b, 64);
    EXPECT_EQ(b[0].qs[31], 127);
    EXPECT_EQ(b[0].qs[4], 0);
    EXPECT_EQ(b[0].qs[0], static_cast<int>(std::nearbyint(-4.0f * 127.0f / 27.0f)));
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += b[0].qs[j];
    EXPECT_GT(sum, 0);
    EXPECT_EQ(b[0].s, f32_to_f16(27.0f / 127.0f * static_cast<float>(sum)));
    EXPECT_EQ(b[1].d, 0);
    EXPECT_EQ(b[1].s, 0);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b[1].qs[j], 0);
  }
}

TEST(QuantActQ8_K, MaxElementMapsToMinus127AndTiesToEven) {
  std::vector<float> x(256, 0.0f);
  x[5] = -127.0f;  // the max magnitude, negative: iscale = 1
  const float v[] = {2.5f, 3.5f, -2.5f, 0.5f, 1.25f, 126.5f};
  const int q[] = {2, 4, -2, 0, 1, 126};
  for (int i = 0; i < 6; ++i) x[10 + i] = v[i];
  BlockQ8_K b;
  quantize_row_q8_K(x.data(), &b, 256);
  EXPECT_EQ(b.d, 1.0f);
  EXPECT_EQ(b.qs[5], -127);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.qs[10 + i], q[i]) << v[i];

  // A positive maximum also maps to -127 (the scale is negative).
  for (float& e : x) e = 0.0f;
  x[200] = 4.0f;
  x[201] = -2.0f;
  quantize_row_q8_K(x.data(), &b, 256);
  EXPECT_EQ(b.qs[200], -127);
  EXPECT_EQ(b.qs[201], 64);  // -127/4 * -2 = 63.5 -> 64 (even)
  EXPECT_EQ(b.d, 1.0f / (-127.0f / 4.0f));
}

TEST(QuantActQ8_K, FirstMaximumWinsTies) {
  std::vector<float> x(256, 0.0f);
  x[3] = -5.0f;
  x[10] = 5.0f;
  BlockQ8_K b;
  quantize_row_q8_K(x.data(), &b, 256);
  EXPECT_EQ(b.qs[3], -127);
  EXPECT_EQ(b.qs[10], 127);
  EXPECT_GT(b.d, 0.0f);  // d = -max/127 with max = -5
  x[3] = 5.0f;
  x[10] = -5.0f;
  quantize_row_q8_K(x.data(), &b, 256);
  EXPECT_EQ(b.qs[3], -127);
  EXPECT_EQ(b.qs[10], 127);
  EXPECT_LT(b.d, 0.0f);
}

TEST(QuantActQ8_K, BsumsAndZeroBlock) {
  auto x = test::gaussian(512, 7);
  for (int i = 256; i < 512; ++i) x[i] = 0.0f;
  BlockQ8_K b[2];
  quantize_row_q8_K(x.data(), b, 512);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += b[0].qs[16 * g + j];
    EXPECT_EQ(b[0].bsums[g], sum) << g;
  }
  // Codes follow the definition element by element.
  float max = 0, amax = 0;
  for (int j = 0; j < 256; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < 256; ++j) EXPECT_EQ(b[0].qs[j], static_cast<int>(std::nearbyint(iscale * x[j]))) << j;
  EXPECT_EQ(b[0].d, 1 / iscale);
  EXPECT_EQ(b[1].d, 0.0f);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(b[1].qs[j], 0);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(b[1].bsums[g], 0);
  // Dequantize is d*q.
  std::vector<float> y(512);
  dequantize_row(GgmlType::Q8_K, b, y.data(), 512);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], b[0].d * b[0].qs[j]);
}


// A SIMD copy of ds4's Q8_0 activation quantizer against the scalar one, bit
// for bit: random blocks over many magnitudes, exact .5 ties, a zero block, a
// block of one repeated value, and blocks holding NaN or inf (the scalar's own
// path) at the start, middle and end of a block.
void expect_q8_0_act_equals_scalar(void (*simd_quantize)(const float*, BlockQ8_0*, int64_t)) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  constexpr int64_t kBlocks = 4096;
  std::vector<float> x(static_cast<size_t>(kBlocks) * 32);
  for (int64_t b = 0; b < kBlocks; ++b) {
    const float scale = std::ldexp(1.0f, static_cast<int>(b % 60) - 40);
    for (int j = 0; j < 32; ++j) x[static_cast<size_t>(b * 32 + j)] = normal(rng) * scale;
  }
  // Ties: amax 127 makes id exactly 1, so k + 0.5 must round to even.
  for (int j = 0; j < 32; ++j) x[32 + j] = j == 0 ? 127.0f : static_cast<float>(j) - 16.5f;
  for (int j = 0; j < 32; ++j) x[64 + j] = 0.0f;
  for (int j = 0; j < 32; ++j) x[96 + j] = -3.25f;
  x[128 + 7] = std::numeric_limits<float>::quiet_NaN();
  x[160 + 31] = std::numeric_limits<float>::infinity();
  x[192 + 0] = -std::numeric_limits<float>::infinity();
  x[192 + 5] = std::numeric_limits<float>::quiet_NaN();
  x[224 + 0] = std::numeric_limits<float>::quiet_NaN();
  x[224 + 1] = 1e30f;  // the block maximum, after the NaN
  x[256 + 0] = 1e30f;  // the block maximum, before the NaN (the scalar forgets it)
  x[256 + 9] = std::numeric_limits<float>::quiet_NaN();
  std::vector<BlockQ8_0> scalar(kBlocks), simd(kBlocks);
  quantize_row_q8_0_act_scalar(x.data(), scalar.data(), static_cast<int64_t>(x.size()));
  simd_quantize(x.data(), simd.data(), static_cast<int64_t>(x.size()));
  for (int64_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(scalar[b].d, simd[b].d) << "block " << b;
    ASSERT_EQ(0, std::memcmp(scalar[b].qs, simd[b].qs, 32)) << "block " << b;
  }
  // The dispatching entry point gives the same bits.
  std::vector<BlockQ8_0> dispatched(kBlocks);
  quantize_row_q8_0_act(x.data(), dispatched.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(0, std::memcmp(dispatched.data(), scalar.data(), sizeof(BlockQ8_0) * kBlocks));
}

TEST(QuantActQ8_0, Avx512EqualsScalarBitForBit) {
  if (!dot_level_available("avx512")) GTEST_SKIP() << "this CPU has no AVX-512";
  expect_q8_0_act_equals_scalar(quantize_row_q8_0_act_avx512);
}

TEST(QuantActQ8_0, Avx2EqualsScalarBitForBit) {
  if (!dot_level_available("avx2")) GTEST_SKIP() << "this CPU has no AVX2";
  expect_q8_0_act_equals_scalar(quantize_row_q8_0_act_avx2);
}

// A SIMD copy of quantize_row_q8_K against the scalar one, bit for bit:
// random blocks over many magnitudes, the largest |x| held by both signs
// (the first one decides the scale's sign), exact .5 ties (max -127 makes
// iscale 1), a zero block, a block of one repeated value, and blocks with NaN
// or inf (the scalar's own path).
void expect_q8_K_equals_scalar(void (*simd_quantize)(const float*, BlockQ8_K*, int64_t)) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  constexpr int64_t kBlocks = 1024;
  constexpr size_t kN = 256;
  std::vector<float> x(static_cast<size_t>(kBlocks) * kN);
  for (int64_t b = 0; b < kBlocks; ++b) {
    const float scale = std::ldexp(1.0f, static_cast<int>(b % 60) - 40);
    for (size_t j = 0; j < kN; ++j) x[static_cast<size_t>(b) * kN + j] = normal(rng) * scale;
  }
  auto block = [&](int b) { return x.data() + static_cast<size_t>(b) * kN; };
  for (size_t j = 0; j < kN; ++j) block(1)[j] = j == 3 ? -127.0f : static_cast<float>(static_cast<int>(j % 200) - 100) + 0.5f;
  for (size_t j = 0; j < kN; ++j) block(2)[j] = 0.0f;
  for (size_t j = 0; j < kN; ++j) block(3)[j] = -3.25f;
  block(4)[100] = 9.0f;   // the maximum first positive ...
  block(4)[200] = -9.0f;  // ... then negative
  block(5)[17] = -9.0f;
  block(5)[250] = 9.0f;
  block(6)[7] = std::numeric_limits<float>::quiet_NaN();
  block(7)[255] = std::numeric_limits<float>::infinity();
  block(8)[0] = -std::numeric_limits<float>::infinity();
  block(8)[5] = std::numeric_limits<float>::quiet_NaN();
  for (size_t j = 0; j < kN; ++j) block(9)[j] = j == 40 ? 1e-40f : 0.0f;  // a denormal maximum
  std::vector<BlockQ8_K> scalar(kBlocks), simd(kBlocks);
  quantize_row_q8_K_scalar(x.data(), scalar.data(), static_cast<int64_t>(x.size()));
  simd_quantize(x.data(), simd.data(), static_cast<int64_t>(x.size()));
  for (int64_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(std::bit_cast<uint32_t>(scalar[b].d), std::bit_cast<uint32_t>(simd[b].d)) << "block " << b;
    ASSERT_EQ(0, std::memcmp(scalar[b].qs, simd[b].qs, sizeof(scalar[b].qs))) << "block " << b;
    ASSERT_EQ(0, std::memcmp(scalar[b].bsums, simd[b].bsums, sizeof(scalar[b].bsums))) << "block " << b;
  }
  // Ties went to even; the mixed-sign maxima took their first element's sign.
  EXPECT_EQ(scalar[1].qs[0], -100);  // -99.5
  EXPECT_EQ(scalar[1].qs[1], -98);   // -98.5
  EXPECT_LT(scalar[4].d, 0.0f);
  EXPECT_GT(scalar[5].d, 0.0f);
  std::vector<BlockQ8_K> dispatched(kBlocks);
  quantize_row_q8_K(x.data(), dispatched.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(0, std::memcmp(dispatched.data(), scalar.data(), sizeof(BlockQ8_K) * kBlocks));
}

TEST(QuantActQ8_K, Avx512EqualsScalarBitForBit) {
  if (!dot_level_available("avx512")) GTEST_SKIP() << "this CPU has no AVX-512";
  expect_q8_K_equals_scalar(quantize_row_q8_K_avx512);
}

TEST(QuantActQ8_K, Avx2EqualsScalarBitForBit) {
  if (!dot_level_available("avx2")) GTEST_SKIP() << "this CPU has no AVX2";
  expect_q8_K_equals_scalar(quantize_row_q8_K_avx2);
}

}  // namespace
}  // namespace ds4::quant
