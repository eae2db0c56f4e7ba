// matvec / matmul against an independent computation: the weight rows and the
// activation in the form each weight type is dotted with (built here with the
// quant:: quantizers directly, not through ActivationCache), both dequantized
// and dotted in double. Also: results independent of the thread count,
// matmul == per-token matvec bit for bit, expert selection on 3-D tensors.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/matvec.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "model/deepseek4_weights.h"
#include "quant/quant.h"
#include "unit/test_quant_util.h"

namespace ds4::cpu {
namespace {

constexpr int64_t kCols = 512;  // two Q8_K super-blocks
constexpr int64_t kRows = 37;   // not a multiple of the 16-row chunk
constexpr int64_t kExperts = 3;

const GgmlType kTypes[] = {GgmlType::F32,     GgmlType::F16,    GgmlType::BF16,    GgmlType::Q8_0,  GgmlType::Q4_0,
                           GgmlType::Q4_1,    GgmlType::Q5_0,   GgmlType::Q5_1,    GgmlType::Q2_K,  GgmlType::Q3_K,
                           GgmlType::Q4_K,    GgmlType::Q5_K,   GgmlType::Q6_K,    GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                           GgmlType::IQ1_S,   GgmlType::IQ1_M,  GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ4_NL,
                           GgmlType::IQ4_XS,  GgmlType::MXFP4,  GgmlType::IQ2_S};

bool takes_q8_1(GgmlType type) { return type == GgmlType::Q4_1 || type == GgmlType::Q5_1; }

std::vector<quant::BlockQ8_1> q8_1_activation(Numerics numerics, const std::vector<float>& x) {
  std::vector<quant::BlockQ8_1> q(x.size() / quant::kQK8_1);
  if (numerics == Numerics::Quality) {
    quant::quantize_row_q8_1_act_ggml_x86(x.data(), q.data(), static_cast<int64_t>(x.size()));
  } else {
    quant::quantize_row_q8_1_act(x.data(), q.data(), static_cast<int64_t>(x.size()));
  }
  return q;
}

// A quantized weight tensor [kCols, kRows, n_experts] and the view on it.
struct Weight {
  std::vector<uint8_t> bytes;
  model::TensorView view;
};

Weight make_weight(GgmlType type, int64_t rows, int64_t experts, uint32_t seed) {
  Weight w;
  const uint64_t row_bytes = *ggml_nbytes(type, kCols);
  w.bytes.resize(row_bytes * static_cast<uint64_t>(rows * experts));
  const std::vector<float> src = quant::test::gaussian(static_cast<size_t>(kCols * rows * experts), seed);
  for (int64_t e = 0; e < experts; ++e) {
    quant::quantize_rows(type, src.data() + e * rows * kCols, w.bytes.data() + e * rows * row_bytes, rows, kCols);
  }
  w.view.name = "test.weight";
  w.view.type = type;
  w.view.ne = {static_cast<uint64_t>(kCols), static_cast<uint64_t>(rows), static_cast<uint64_t>(experts), 1};
  w.view.data = w.bytes.data();
  w.view.nbytes = w.bytes.size();
  w.view.row_bytes = row_bytes;
  w.view.n_rows = static_cast<uint64_t>(rows * experts);
  return w;
}

// The activation as the dot sees it, dequantized, spelled out per weight type
// from the table in matvec.h.
std::vector<float> activation_as_dotted(GgmlType type, Numerics numerics, const std::vector<float>& x) {
  const bool quality = numerics == Numerics::Quality;
  std::vector<float> out(x.size());
  switch (type) {
    case GgmlType::F32: return x;
    case GgmlType::F16:
      if (!quality) return x;
      for (size_t i = 0; i < x.size(); ++i) out[i] = f16_to_f32(f32_to_f16(x[i]));
      return out;
    case GgmlType::BF16:
      if (!quality) return x;
      for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return out;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: {
      // d * q; the offset term's s is accounted for in expect_matches_reference.
      const std::vector<quant::BlockQ8_1> q = q8_1_activation(numerics, x);
      for (size_t i = 0; i < x.size(); ++i) out[i] = f16_to_f32(q[i / 32].d) * q[i / 32].qs[i % 32];
      return out;
    }
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0: {
      std::vector<quant::BlockQ8_0> q(x.size() / quant::kQK8_0);
      if (quality) {
        quant::quantize_row_q8_0_act_ggml_x86(x.data(), q.data(), kCols);
      } else {
        quant::quantize_row_q8_0_act(x.data(), q.data(), kCols);
      }
      quant::dequantize_row(GgmlType::Q8_0, q.data(), out.data(), kCols);
      return out;
    }
    default: {
      std::vector<quant::BlockQ8_K> q(x.size() / quant::kQK_K);
      quant::quantize_row_q8_K(x.data(), q.data(), kCols);
      quant::dequantize_row(GgmlType::Q8_K, q.data(), out.data(), kCols);
      return out;
    }
  }
}

// Checks y (rows of matrix `expert`) against double dots of the dequantized
// weight rows with the dequantized activation. The bound covers float
// accumulation: 64 ulp of sum |x_i| * max |w| (scale and min terms of the
// K-quants can each exceed |w_i|, hence the row max). Q4_1 / Q5_1 rows take
// their offset m against the activation's stored s = f16(d * sum q) rather
// than the sum of its dequantized values (ggml's definition of that dot).
void expect_matches_reference(const Weight& w, int64_t expert, const std::vector<float>& x, Numerics numerics,
                              const std::vector<float>& y, const std::string& what) {
  const std::vector<float> a = activation_as_dotted(w.view.type, numerics, x);
  std::vector<float> row(static_cast<size_t>(kCols));
  const int64_t rows = static_cast<int64_t>(w.view.ne[1]);
  for (int64_t r = 0; r < rows; ++r) {
    quant::dequantize_row(w.view.type, w.view.row(static_cast<uint64_t>(expert * rows + r)), row.data(), kCols);
    double ref = 0, sum_abs_x = 0, max_w = 0;
    for (int64_t i = 0; i < kCols; ++i) {
      ref += static_cast<double>(row[i]) * a[i];
      sum_abs_x += std::fabs(a[i]);
      max_w = std::max(max_w, std::fabs(static_cast<double>(row[i])));
    }
    if (takes_q8_1(w.view.type)) {
      const std::vector<quant::BlockQ8_1> q = q8_1_activation(numerics, x);
      const uint8_t* bytes = w.view.row(static_cast<uint64_t>(expert * rows + r));
      const uint32_t block_bytes = ggml_type_traits(w.view.type).block_bytes;
      for (size_t b = 0; b < q.size(); ++b) {
        uint16_t m;  // right after d in both block_q4_1 and block_q5_1
        std::memcpy(&m, bytes + b * block_bytes + 2, sizeof m);
        double block_sum = 0;
        for (size_t i = 32 * b; i < 32 * b + 32; ++i) block_sum += a[i];
        ref += static_cast<double>(f16_to_f32(m)) * (static_cast<double>(f16_to_f32(q[b].s)) - block_sum);
      }
    }
    const double tol = 64 * FLT_EPSILON * sum_abs_x * max_w;
    EXPECT_NEAR(y[static_cast<size_t>(r)], ref, tol) << what << " row " << r;
  }
}

std::string label(GgmlType type, Numerics numerics) {
  return std::string(ggml_type_name(type)) + (numerics == Numerics::Quality ? "/quality" : "/default");
}

TEST(Matvec, EveryTypeMatchesDequantizedDoubleDot) {
  for (GgmlType type : kTypes) {
    const Weight w = make_weight(type, kRows, 1, 11);
    const std::vector<float> x = quant::test::gaussian(kCols, 12);
    for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
      std::vector<float> y(kRows);
      matvec(w.view, -1, x.data(), y.data(), numerics, nullptr);
      expect_matches_reference(w, 0, x, numerics, y, label(type, numerics));
    }
  }
}

TEST(Matvec, ResultIsIndependentOfThreadCount) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (GgmlType type : kTypes) {
    // 1061 rows: decode's guided claims split them into many unequal chunks
    // and a ragged last one.
    for (int64_t rows : {int64_t{1}, int64_t{17}, kRows, int64_t{64}, int64_t{1061}}) {
      const Weight w = make_weight(type, rows, 1, 21);
      const std::vector<float> x = quant::test::gaussian(kCols, 22);
      for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
        std::vector<float> y0(rows), y1(rows), y2(rows), y3(rows);
        matvec(w.view, -1, x.data(), y0.data(), numerics, nullptr);
        matvec(w.view, -1, x.data(), y1.data(), numerics, &pool1);
        matvec(w.view, -1, x.data(), y2.data(), numerics, &pool2);
        matvec(w.view, -1, x.data(), y3.data(), numerics, &pool3);
        const size_t bytes = static_cast<size_t>(rows) * sizeof(float);
        EXPECT_EQ(std::memcmp(y0.data(), y1.data(), bytes), 0) << label(type, numerics) << " rows " << rows;
        EXPECT_EQ(std::memcmp(y0.data(), y2.data(), bytes), 0) << label(type, numerics) << " rows " << rows;
        EXPECT_EQ(std::memcmp(y0.data(), y3.data(), bytes), 0) << label(type, numerics) << " rows " << rows;
      }
    }
  }
}

TEST(Matmul, EqualsOneMatvecPerTokenBitForBit) {
  ThreadPool pool(3);
  constexpr int64_t kTokens = 5;
  for (GgmlType type : kTypes) {
    const Weight w = make_weight(type, kRows, 1, 31);
    const std::vector<float> X = quant::test::gaussian(kCols * kTokens, 32);
    for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> Y(kRows * kTokens), y(kRows);
        matmul(w.view, -1, X.data(), kTokens, Y.data(), numerics, p);
        for (int64_t t = 0; t < kTokens; ++t) {
          matvec(w.view, -1, X.data() + t * kCols, y.data(), numerics, nullptr);
          EXPECT_EQ(std::memcmp(y.data(), Y.data() + t * kRows, kRows * sizeof(float)), 0)
              << label(type, numerics) << " token " << t;
        }
      }
    }
  }
}

TEST(Matvec, ExpertOfThreeDimensionalTensor) {
  ThreadPool pool(2);
  for (GgmlType type : kTypes) {
    const Weight w = make_weight(type, kRows, kExperts, 41);
    const std::vector<float> x = quant::test::gaussian(kCols, 42);
    for (int64_t e = 0; e < kExperts; ++e) {
      std::vector<float> y(kRows);
      matvec(w.view, static_cast<int>(e), x.data(), y.data(), Numerics::Default, &pool);
      expect_matches_reference(w, e, x, Numerics::Default, y,
                               label(type, Numerics::Default) + " expert " + std::to_string(e));
      // Same as a 2-D view on that expert's rows alone.
      model::TensorView alone = w.view;
      alone.data = w.view.matrix(static_cast<uint64_t>(e));
      alone.ne[2] = 1;
      alone.n_rows = kRows;
      alone.nbytes = w.view.matrix_bytes();
      std::vector<float> y2(kRows);
      matvec(alone, -1, x.data(), y2.data(), Numerics::Default, nullptr);
      EXPECT_EQ(std::memcmp(y.data(), y2.data(), kRows * sizeof(float)), 0) << label(type, Numerics::Default);
    }
  }
}

// Several products in one run (every expert against its own activation, then
// a 2-D matrix of another shape and type): each output is its own matvec,
// for every type, pool size and a matrix large enough for several guided
// claims per product (and one of few rows).
TEST(Matvec, ProductsInOneRunEqualOneMatvecEach) {
  ThreadPool pool2(2), pool3(3);
  for (GgmlType type : kTypes) {
    for (int64_t rows : {kRows, int64_t{300}}) {
      const Weight w = make_weight(type, rows, kExperts, 61);
      const Weight other = make_weight(type == GgmlType::Q8_0 ? GgmlType::Q4_K : GgmlType::Q8_0, kRows, 1, 63);
      const std::vector<float> X = quant::test::gaussian(kCols * kExperts, 62);
      for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
        ActivationCache other_x;
        other_x.reset(X.data(), kCols, numerics);
        ActivationBatch batch;
        batch.reset(X.data(), kExperts, kCols, kCols, numerics);
        batch.prepare(type, nullptr);
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
          const int64_t ldy = rows + 5;
          std::vector<float> Y(static_cast<size_t>(ldy * kExperts), -1.0f), y(static_cast<size_t>(rows));
          std::vector<float> other_y(static_cast<size_t>(kRows));
          std::vector<MatvecJob> jobs;
          for (int64_t e = 0; e < kExperts; ++e)
            jobs.push_back({&w.view, static_cast<int>(e), batch.rows(type)[e], Y.data() + e * ldy});
          jobs.push_back({&other.view, -1, other_x.get(other.view.type), other_y.data()});
          matvec_many(jobs, numerics, p);
          std::vector<float> other_want(static_cast<size_t>(kRows));
          matvec(other.view, -1, X.data(), other_want.data(), numerics, nullptr);
          EXPECT_EQ(other_want, other_y) << label(type, numerics);
          for (int64_t e = 0; e < kExperts; ++e) {
            matvec(w.view, static_cast<int>(e), X.data() + e * kCols, y.data(), numerics, nullptr);
            EXPECT_EQ(std::memcmp(y.data(), Y.data() + e * ldy, static_cast<size_t>(rows) * sizeof(float)), 0)
                << label(type, numerics) << " rows " << rows << " expert " << e;
            for (int64_t r = rows; r < ldy && e + 1 < kExperts; ++r) {
              EXPECT_EQ(Y[static_cast<size_t>(e * ldy + r)], -1.0f) << "padding written";
            }
          }
        }
      }
    }
  }
}

TEST(Matvec, QualityF16IsF16WeightsTimesF16RoundedActivation) {
  const Weight w = make_weight(GgmlType::F16, kRows, 1, 51);
  // Values that f16 rounds visibly: not representable in 11 bits.
  std::vector<float> x = quant::test::gaussian(kCols, 52);
  for (auto& v : x) v *= 1.000123f;
  std::vector<float> yq(kRows), yd(kRows);
  matvec(w.view, -1, x.data(), yq.data(), Numerics::Quality, nullptr);
  matvec(w.view, -1, x.data(), yd.data(), Numerics::Default, nullptr);
  int differ = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    const uint16_t* row = reinterpret_cast<const uint16_t*>(w.view.row(static_cast<uint64_t>(r)));
    double ref = 0, abs_sum = 0;
    for (int64_t i = 0; i < kCols; ++i) {
      // Both factors have 11-bit significands: the product is exact in float.
      const double p = static_cast<double>(f16_to_f32(row[i])) * f16_to_f32(f32_to_f16(x[i]));
      ref += p;
      abs_sum += std::fabs(p);
    }
    // Float accumulation of exact products: a few ulp of the absolute sum.
    EXPECT_NEAR(yq[r], ref, 16 * FLT_EPSILON * abs_sum) << "row " << r;
    differ += yq[r] != yd[r];
  }
  EXPECT_GT(differ, 0) << "quality F16 should round the activation, default should not";
}

TEST(ActivationCache, Q8_0RoundingFollowsNumerics) {
  // Element 1 of each block is set to 63.5 * d, a rounding tie in exact
  // arithmetic, where ds4's x*(1/d) and ggml's x*(127/amax) can round apart
  // (quant.h). Seeds are tried until the two variants give different codes,
  // so the comparisons below can tell them apart.
  std::vector<float> x(kCols);
  std::vector<quant::BlockQ8_0> ds4_codes(kCols / 32), ggml_codes(kCols / 32);
  bool variants_differ = false;
  for (uint32_t seed = 0; seed < 64 && !variants_differ; ++seed) {
    x = quant::test::gaussian(kCols, 70 + seed);
    for (int64_t b = 0; b < kCols / 32; ++b) {
      // x[1] = 63.5 * (amax/127) sits on a rounding tie in exact arithmetic.
      const float amax = std::fabs(x[b * 32]) + 3.0f;
      x[b * 32] = amax;
      x[b * 32 + 1] = 63.5f * (amax / 127.0f);
    }
    quant::quantize_row_q8_0_act(x.data(), ds4_codes.data(), kCols);
    quant::quantize_row_q8_0_act_ggml_x86(x.data(), ggml_codes.data(), kCols);
    variants_differ =
        std::memcmp(ds4_codes.data(), ggml_codes.data(), ds4_codes.size() * sizeof(quant::BlockQ8_0)) != 0;
  }
  ASSERT_TRUE(variants_differ) << "test data does not separate the two Q8_0 roundings";
  ActivationCache cache;
  cache.reset(x.data(), kCols, Numerics::Default);
  EXPECT_EQ(std::memcmp(cache.get(GgmlType::Q8_0), ds4_codes.data(), ds4_codes.size() * sizeof(quant::BlockQ8_0)), 0);
  EXPECT_EQ(cache.built(GgmlType::MXFP4),
            cache.built(GgmlType::Q8_0));  // one Q8_0 form serves both
  cache.reset(x.data(), kCols, Numerics::Quality);
  EXPECT_EQ(cache.built(GgmlType::Q8_0), nullptr);
  EXPECT_EQ(std::memcmp(cache.get(GgmlType::MXFP4), ggml_codes.data(), ggml_codes.size() * sizeof(quant::BlockQ8_0)),
            0);
  EXPECT_EQ(cache.get(GgmlType::F32), x.data());
}

TEST(ActivationCache, Q8_1FollowsNumericsAndServesQ4_1AndQ5_1) {
  const std::vector<float> x = quant::test::gaussian(kCols, 90);
  for (Numerics numerics : {Numerics::Default, Numerics::Quality}) {
    const std::vector<quant::BlockQ8_1> want = q8_1_activation(numerics, x);
    ActivationCache cache;
    cache.reset(x.data(), kCols, numerics);
    EXPECT_EQ(cache.built(GgmlType::Q4_1), nullptr);
    EXPECT_EQ(std::memcmp(cache.get(GgmlType::Q4_1), want.data(), want.size() * sizeof(quant::BlockQ8_1)), 0);
    EXPECT_EQ(cache.built(GgmlType::Q5_1), cache.built(GgmlType::Q4_1));
    EXPECT_EQ(cache.built(GgmlType::Q4_0), nullptr);  // Q4_0 / Q5_0 take Q8_0
    EXPECT_EQ(cache.get(GgmlType::Q5_0), cache.get(GgmlType::Q8_0));
  }
}

TEST(Matvec, RejectsBadInput) {
  const Weight w3 = make_weight(GgmlType::Q8_0, kRows, kExperts, 61);
  const std::vector<float> x(kCols, 1.0f);
  std::vector<float> y(kRows);
  EXPECT_THROW(matvec(w3.view, -1, x.data(), y.data(), Numerics::Default, nullptr), Error);
  EXPECT_THROW(matvec(w3.view, static_cast<int>(kExperts), x.data(), y.data(), Numerics::Default, nullptr), Error);
  // A ternary type (never in DeepSeek files): no dot kernel.
  model::TensorView tq2_0 = make_weight(GgmlType::Q8_0, kRows, 1, 62).view;
  tq2_0.type = GgmlType::TQ2_0;
  tq2_0.row_bytes = *ggml_nbytes(GgmlType::TQ2_0, kCols);
  EXPECT_THROW(matvec(tq2_0, -1, x.data(), y.data(), Numerics::Default, nullptr), Error);
  EXPECT_THROW(activation_form(GgmlType::TQ1_0, Numerics::Quality), Error);
}

}  // namespace
}  // namespace ds4::cpu
