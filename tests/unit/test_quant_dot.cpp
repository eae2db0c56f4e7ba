// Scalar dot kernels against (a) a double-precision dot of the dequantized
// operands and (b) an integer-sum recomputation written here from the block
// layouts (SYSTEMS.md §1.2-1.4), combined in ggml's generic float order, which
// must match exactly. Also the ISA dispatch table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/dot.h"
#include "quant/iq2_xxs_tables.h"
#include "quant/quant.h"
#include "test_quant_util.h"

namespace ds4::quant {
namespace {

const int kBlockCounts[] = {1, 3, 7, 17};

// Per element: the weight's scale part and min part (so tolerances can be
// set against the magnitudes the kernel actually sums).
struct Reference {
  float exact_order = 0;  // recomputation in the scalar reference's float order
  double magnitude = 0;   // sum |scale part * x| + |min part * x|
};

double double_dot(GgmlType wt, const void* w, GgmlType xt, const void* x, int64_t n) {
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  dequantize_row(wt, w, a.data(), n);
  dequantize_row(xt, x, b.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// ---- independent recomputations ----

Reference ref_q8_0(int nb, const BlockQ8_0* w, const BlockQ8_0* x) {
  Reference r;
  for (int i = 0; i < nb; ++i) {
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += w[i].qs[j] * x[i].qs[j];
    const float dw = f16_to_f32(w[i].d), dx = f16_to_f32(x[i].d);
    r.exact_order += static_cast<float>(isum) * (dw * dx);
    for (int j = 0; j < 32; ++j) r.magnitude += std::fabs(static_cast<double>(dw) * w[i].qs[j] * dx * x[i].qs[j]);
  }
  return r;
}

Reference ref_mxfp4(int nb, const BlockMXFP4* w, const BlockQ8_0* x) {
  const int doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  Reference r;
  for (int i = 0; i < nb; ++i) {
    const float half_scale = std::ldexp(1.0f, w[i].e - 128);  // 2^(e-127) / 2
    const float d = f16_to_f32(x[i].d) * half_scale;
    int isum = 0;
    for (int k = 0; k < 32; ++k) {
      const int nib = k < 16 ? (w[i].qs[k] & 15) : (w[i].qs[k - 16] >> 4);
      isum += doubled[nib] * x[i].qs[k];
      r.magnitude += std::fabs(static_cast<double>(d) * doubled[nib] * x[i].qs[k]);
    }
    r.exact_order += d * static_cast<float>(isum);
  }
  return r;
}

Reference ref_q2_K(int nb, const BlockQ2_K* w, const BlockQ8_K* x) {
  Reference r;
  for (int i = 0; i < nb; ++i) {
    int isum = 0, min_sum = 0;
    const float dall = x[i].d * f16_to_f32(w[i].d);
    const float dmin = x[i].d * f16_to_f32(w[i].dmin);
    for (int k = 0; k < 256; ++k) {
      const int h = k / 128, p = (k % 128) / 32, part = (k % 32) / 16, l = k % 16;
      const int code = (w[i].qs[32 * h + 16 * part + l] >> (2 * p)) & 3;
      const int sc = w[i].scales[k / 16] & 15, m = w[i].scales[k / 16] >> 4;
      isum += sc * code * x[i].qs[k];
      min_sum += m * x[i].qs[k];
      r.magnitude += std::fabs(static_cast<double>(dall) * sc * code * x[i].qs[k]) +
                     std::fabs(static_cast<double>(dmin) * m * x[i].qs[k]);
    }
    r.exact_order += dall * static_cast<float>(isum) - dmin * static_cast<float>(min_sum);
  }
  return r;
}

Reference ref_q4_K(int nb, const BlockQ4_K* w, const BlockQ8_K* x) {
  // Default numerics' order: one integer sum and one float term per block.
  Reference r;
  for (int i = 0; i < nb; ++i) {
    const uint8_t* s = w[i].scales;
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = j < 4 ? (s[j] & 63) : ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
      mn[j] = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
    const float dall = x[i].d * f16_to_f32(w[i].d);
    const float dmin = x[i].d * f16_to_f32(w[i].dmin);
    int isum = 0, min_sum = 0;
    for (int k = 0; k < 256; ++k) {
      const int sub = k / 32;
      const uint8_t byte = w[i].qs[32 * (sub / 2) + k % 32];
      const int code = sub % 2 ? byte >> 4 : byte & 15;
      isum += sc[sub] * code * x[i].qs[k];
      min_sum += mn[sub] * x[i].qs[k];
      r.magnitude += std::fabs(static_cast<double>(dall) * sc[sub] * code * x[i].qs[k]) +
                     std::fabs(static_cast<double>(dmin) * mn[sub] * x[i].qs[k]);
    }
    r.exact_order += dall * static_cast<float>(isum) - dmin * static_cast<float>(min_sum);
  }
  return r;
}

Reference ref_iq2_xxs(int nb, const BlockIQ2_XXS* w, const BlockQ8_K* x) {
  Reference r;
  float sum = 0;
  for (int i = 0; i < nb; ++i) {
    const float d = f16_to_f32(w[i].d) * x[i].d;
    int block_sum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t w0 = w[i].qs[4 * ib] | (static_cast<uint32_t>(w[i].qs[4 * ib + 1]) << 16);
      const uint32_t w1 = w[i].qs[4 * ib + 2] | (static_cast<uint32_t>(w[i].qs[4 * ib + 3]) << 16);
      const int ls = 2 * static_cast<int>(w1 >> 28) + 1;
      int sub = 0;
      for (int g = 0; g < 4; ++g) {
        const uint64_t grid = kIq2xxsGrid[(w0 >> (8 * g)) & 255];
        const int sign_index = (w1 >> (7 * g)) & 127;
        const int parity = std::popcount(static_cast<unsigned>(sign_index)) & 1;
        for (int j = 0; j < 8; ++j) {
          const int mag = static_cast<int>((grid >> (8 * j)) & 255);
          const bool neg = j < 7 ? ((sign_index >> j) & 1) : parity;
          const int q8 = x[i].qs[32 * ib + 8 * g + j];
          sub += (neg ? -mag : mag) * q8;
          r.magnitude += std::fabs(0.125 * d * ls * mag * q8);
        }
      }
      block_sum += sub * ls;
    }
    sum += d * static_cast<float>(block_sum);
  }
  r.exact_order = 0.125f * sum;
  return r;
}

// ---- operands ----

struct KOperands {
  std::vector<float> w, x;
  std::vector<BlockQ8_K> xq;
};

KOperands k_operands(int nb, uint32_t seed) {
  KOperands o;
  o.w = test::gaussian(static_cast<size_t>(nb) * 256, seed);
  o.x = test::gaussian(static_cast<size_t>(nb) * 256, seed + 1000);
  o.xq.resize(static_cast<size_t>(nb));
  quantize_row_q8_K(o.x.data(), o.xq.data(), nb * 256);
  return o;
}

// Random bytes with a finite, moderate f16 scale at each listed offset.
template <class Block>
std::vector<Block> random_blocks(int nb, uint32_t seed, std::initializer_list<size_t> f16_offsets) {
  std::mt19937 rng(seed);
  std::vector<Block> b(static_cast<size_t>(nb));
  auto* bytes = reinterpret_cast<uint8_t*>(b.data());
  for (size_t i = 0; i < b.size() * sizeof(Block); ++i) bytes[i] = static_cast<uint8_t>(rng());
  for (Block& blk : b) {
    for (size_t off : f16_offsets) {
      const uint16_t d = f32_to_f16(std::ldexp(1.0f + (rng() % 1000) / 1000.0f, static_cast<int>(rng() % 8) - 6));
      std::memcpy(reinterpret_cast<uint8_t*>(&blk) + off, &d, 2);
    }
  }
  return b;
}

template <class Fn>
void expect_close_and_exact(float got, const Reference& ref, double exact, Fn describe) {
  EXPECT_EQ(got, ref.exact_order) << describe();
  EXPECT_LE(std::fabs(got - exact), 2e-6 * ref.magnitude + 1e-30) << describe() << " exact=" << exact;
}

TEST(QuantDot, Q8_0) {
  for (int nb : kBlockCounts) {
    const auto w = test::gaussian(static_cast<size_t>(nb) * 32, 10 + nb);
    const auto x = test::gaussian(static_cast<size_t>(nb) * 32, 20 + nb);
    std::vector<BlockQ8_0> wq(static_cast<size_t>(nb)), xq(static_cast<size_t>(nb));
    quantize_row(GgmlType::Q8_0, w.data(), wq.data(), nb * 32);
    quantize_row_q8_0_act(x.data(), xq.data(), nb * 32);
    const float got = dot_q8_0_q8_0_scalar(nb * 32, wq.data(), xq.data());
    expect_close_and_exact(got, ref_q8_0(nb, wq.data(), xq.data()),
                           double_dot(GgmlType::Q8_0, wq.data(), GgmlType::Q8_0, xq.data(), nb * 32),
                           [&] { return "nb=" + std::to_string(nb); });
  }
}

TEST(QuantDot, Mxfp4) {
  for (int nb : kBlockCounts) {
    const auto w = test::gaussian(static_cast<size_t>(nb) * 32, 30 + nb);
    const auto x = test::gaussian(static_cast<size_t>(nb) * 32, 40 + nb);
    std::vector<BlockMXFP4> wq(static_cast<size_t>(nb));
    std::vector<BlockQ8_0> xq(static_cast<size_t>(nb));
    quantize_row(GgmlType::MXFP4, w.data(), wq.data(), nb * 32);
    quantize_row_q8_0_act(x.data(), xq.data(), nb * 32);
    for (int variant = 0; variant < 2; ++variant) {
      if (variant == 1) {  // every code and a spread of exponents
        wq = random_blocks<BlockMXFP4>(nb, 50 + nb, {});
        for (BlockMXFP4& b : wq) b.e = static_cast<uint8_t>(110 + b.e % 30);
      }
      const float got = dot_mxfp4_q8_0_scalar(nb * 32, wq.data(), xq.data());
      expect_close_and_exact(got, ref_mxfp4(nb, wq.data(), xq.data()),
                             double_dot(GgmlType::MXFP4, wq.data(), GgmlType::Q8_0, xq.data(), nb * 32),
                             [&] { return "nb=" + std::to_string(nb) + " variant=" + std::to_string(variant); });
    }
  }
}

TEST(QuantDot, Q2_K) {
  for (int nb : kBlockCounts) {
    const KOperands o = k_operands(nb, 60 + nb);
    std::vector<BlockQ2_K> wq(static_cast<size_t>(nb));
    quantize_row(GgmlType::Q2_K, o.w.data(), wq.data(), nb * 256);
    for (int variant = 0; variant < 2; ++variant) {
      if (variant == 1) wq = random_blocks<BlockQ2_K>(nb, 70 + nb, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)});
      const float got = dot_q2_K_q8_K_scalar(nb * 256, wq.data(), o.xq.data());
      expect_close_and_exact(got, ref_q2_K(nb, wq.data(), o.xq.data()),
                             double_dot(GgmlType::Q2_K, wq.data(), GgmlType::Q8_K, o.xq.data(), nb * 256),
                             [&] { return "nb=" + std::to_string(nb) + " variant=" + std::to_string(variant); });
    }
  }
}

TEST(QuantDot, Q4_K) {
  for (int nb : kBlockCounts) {
    const KOperands o = k_operands(nb, 80 + nb);
    std::vector<BlockQ4_K> wq(static_cast<size_t>(nb));
    quantize_row(GgmlType::Q4_K, o.w.data(), wq.data(), nb * 256);
    for (int variant = 0; variant < 2; ++variant) {
      if (variant == 1) wq = random_blocks<BlockQ4_K>(nb, 90 + nb, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)});
      const float got = dot_q4_K_q8_K_scalar(nb * 256, wq.data(), o.xq.data());
      expect_close_and_exact(got, ref_q4_K(nb, wq.data(), o.xq.data()),
                             double_dot(GgmlType::Q4_K, wq.data(), GgmlType::Q8_K, o.xq.data(), nb * 256),
                             [&] { return "nb=" + std::to_string(nb) + " variant=" + std::to_string(variant); });
    }
  }
}

TEST(QuantDot, Iq2xxs) {
  for (int nb : kBlockCounts) {
    const KOperands o = k_operands(nb, 100 + nb);
    std::vector<BlockIQ2_XXS> wq(static_cast<size_t>(nb));
    quantize_row(GgmlType::IQ2_XXS, o.w.data(), wq.data(), nb * 256);
    for (int variant = 0; variant < 2; ++variant) {
      if (variant == 1) wq = random_blocks<BlockIQ2_XXS>(nb, 110 + nb, {offsetof(BlockIQ2_XXS, d)});
      const float got = dot_iq2_xxs_q8_K_scalar(nb * 256, wq.data(), o.xq.data());
      expect_close_and_exact(got, ref_iq2_xxs(nb, wq.data(), o.xq.data()),
                             double_dot(GgmlType::IQ2_XXS, wq.data(), GgmlType::Q8_K, o.xq.data(), nb * 256),
                             [&] { return "nb=" + std::to_string(nb) + " variant=" + std::to_string(variant); });
    }
  }
}

TEST(QuantDot, PlainTypes) {
  for (int n : {1, 7, 33, 4097}) {
    const auto w = test::gaussian(static_cast<size_t>(n), 120 + n);
    const auto x = test::gaussian(static_cast<size_t>(n), 130 + n);
    std::vector<uint16_t> wh(static_cast<size_t>(n)), wb(static_cast<size_t>(n));
    quantize_row(GgmlType::F16, w.data(), wh.data(), n);
    quantize_row(GgmlType::BF16, w.data(), wb.data(), n);
    double mag16 = 0, magb = 0, mag32 = 0, e16 = 0, eb = 0, e32 = 0;
    float seq16 = 0, seqb = 0;  // the documented order: index order, f32 accumulator
    for (int i = 0; i < n; ++i) {
      const double a16 = f16_to_f32(wh[i]), ab = bf16_to_f32(wb[i]);
      e16 += a16 * x[i];
      eb += ab * x[i];
      e32 += static_cast<double>(w[i]) * x[i];
      mag16 += std::fabs(a16 * x[i]);
      magb += std::fabs(ab * x[i]);
      mag32 += std::fabs(static_cast<double>(w[i]) * x[i]);
      seq16 += f16_to_f32(wh[i]) * x[i];
      seqb += bf16_to_f32(wb[i]) * x[i];
    }
    const double f32_bound = n * 0x1p-24;  // sequential f32 accumulation
    EXPECT_LE(std::fabs(dot_f16_f32_scalar(n, wh.data(), x.data()) - e16), f32_bound * mag16) << n;
    EXPECT_LE(std::fabs(dot_bf16_f32_scalar(n, wb.data(), x.data()) - eb), f32_bound * magb) << n;
    EXPECT_LE(std::fabs(dot_f32_f32_scalar(n, w.data(), x.data()) - e32), 0x1p-24 * mag32) << n;
    EXPECT_EQ(dot_f16_f32_scalar(n, wh.data(), x.data()), seq16) << n;
    EXPECT_EQ(dot_bf16_f32_scalar(n, wb.data(), x.data()), seqb) << n;
    EXPECT_EQ(dot_f32_f32_scalar(n, w.data(), x.data()), static_cast<float>(e32)) << n;
  }
}

// ---- dispatch ----

TEST(QuantDotDispatch, ScalarFirstAndComplete) {
  const auto levels = dot_kernels_available();
  ASSERT_FALSE(levels.empty());
  EXPECT_STREQ(levels.front()->isa, "scalar");
  EXPECT_EQ(levels.front(), &dot_kernels_scalar());
  for (const DotKernels* k : levels) {
    EXPECT_NE(k->q8_0_q8_0, nullptr) << k->isa;
    EXPECT_NE(k->q2_K_q8_K, nullptr) << k->isa;
    EXPECT_NE(k->q4_K_q8_K, nullptr) << k->isa;
    EXPECT_NE(k->iq2_xxs_q8_K, nullptr) << k->isa;
    EXPECT_NE(k->mxfp4_q8_0, nullptr) << k->isa;
    EXPECT_NE(k->f16_f32, nullptr) << k->isa;
    EXPECT_NE(k->bf16_f32, nullptr) << k->isa;
    EXPECT_NE(k->f32_f32, nullptr) << k->isa;
  }
  bool found = false;
  for (const DotKernels* k : levels) found |= k == &dot_kernels();
  EXPECT_TRUE(found) << "dot_kernels() is not an available level";
}

TEST(QuantDotDispatch, ForcingALevel) {
  const auto levels = dot_kernels_available();
  for (const char* name : {"scalar", "avx2", "avx512", "avx512vnni", "avx512vbmi"}) {
    bool available = false;
    for (const DotKernels* k : levels) available |= std::string(k->isa) == name;
    if (available) {
      EXPECT_STREQ(dot_kernels_for(name).isa, name);
    } else {
      EXPECT_THROW(dot_kernels_for(name), Error) << name;
    }
  }
  EXPECT_THROW(dot_kernels_for("sse9"), Error);
}

// dot_kernels() reads DS4_ISA once per process, so these run in a fresh one.
TEST(QuantDotDispatch, EnvironmentVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("DS4_ISA", "scalar", 1);
        std::exit(std::strcmp(dot_kernels().isa, "scalar") == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("DS4_ISA", "not-an-isa", 1);
        try {
          dot_kernels();
        } catch (const Error&) {
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "");
}

// Every SIMD level against the scalar reference, on the same operands. The
// integer sums are exact; only the float combination order may differ.
TEST(QuantDotDispatch, EveryLevelAgreesWithScalar) {
  const DotKernels& s = dot_kernels_scalar();
  for (const DotKernels* k : dot_kernels_available()) {
    for (int nb : kBlockCounts) {
      const KOperands o = k_operands(nb, 140 + nb);
      const int n = nb * 256;
      std::vector<BlockQ2_K> q2(static_cast<size_t>(nb));
      std::vector<BlockQ4_K> q4(static_cast<size_t>(nb));
      std::vector<BlockIQ2_XXS> iq(static_cast<size_t>(nb));
      std::vector<BlockQ8_0> q8w(static_cast<size_t>(n / 32)), q8x(static_cast<size_t>(n / 32));
      std::vector<BlockMXFP4> fp4(static_cast<size_t>(n / 32));
      quantize_row(GgmlType::Q2_K, o.w.data(), q2.data(), n);
      quantize_row(GgmlType::Q4_K, o.w.data(), q4.data(), n);
      quantize_row(GgmlType::IQ2_XXS, o.w.data(), iq.data(), n);
      quantize_row(GgmlType::Q8_0, o.w.data(), q8w.data(), n);
      quantize_row(GgmlType::MXFP4, o.w.data(), fp4.data(), n);
      quantize_row_q8_0_act(o.x.data(), q8x.data(), n);
      std::vector<uint16_t> h(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      quantize_row(GgmlType::F16, o.w.data(), h.data(), n);
      quantize_row(GgmlType::BF16, o.w.data(), b.data(), n);
      auto near = [&](float a, float ref, double mag, const char* what) {
        EXPECT_LE(std::fabs(a - ref), 4e-6 * mag) << k->isa << " " << what << " nb=" << nb;
      };
      near(k->q2_K_q8_K(n, q2.data(), o.xq.data()), s.q2_K_q8_K(n, q2.data(), o.xq.data()),
           ref_q2_K(nb, q2.data(), o.xq.data()).magnitude, "q2_K");
      near(k->q4_K_q8_K(n, q4.data(), o.xq.data()), s.q4_K_q8_K(n, q4.data(), o.xq.data()),
           ref_q4_K(nb, q4.data(), o.xq.data()).magnitude, "q4_K");
      near(k->iq2_xxs_q8_K(n, iq.data(), o.xq.data()), s.iq2_xxs_q8_K(n, iq.data(), o.xq.data()),
           ref_iq2_xxs(nb, iq.data(), o.xq.data()).magnitude, "iq2_xxs");
      near(k->q8_0_q8_0(n, q8w.data(), q8x.data()), s.q8_0_q8_0(n, q8w.data(), q8x.data()),
           ref_q8_0(n / 32, q8w.data(), q8x.data()).magnitude, "q8_0");
      near(k->mxfp4_q8_0(n, fp4.data(), q8x.data()), s.mxfp4_q8_0(n, fp4.data(), q8x.data()),
           ref_mxfp4(n / 32, fp4.data(), q8x.data()).magnitude, "mxfp4");
      double mag = 0;
      for (int i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(o.w[i]) * o.x[i]);
      const double plain_tol = n * 0x1p-23 * mag;
      near(k->f16_f32(n, h.data(), o.x.data()), s.f16_f32(n, h.data(), o.x.data()), plain_tol / 4e-6, "f16");
      near(k->bf16_f32(n, b.data(), o.x.data()), s.bf16_f32(n, b.data(), o.x.data()), plain_tol / 4e-6, "bf16");
      near(k->f32_f32(n, o.w.data(), o.x.data()), s.f32_f32(n, o.w.data(), o.x.data()), plain_tol / 4e-6, "f32");
    }
  }
}

}  // namespace
}  // namespace ds4::quant
