// Attention with a sink: the position-0 closed form o = v e^s / (e^s + e^sink),
// a plain softmax when the sink is -inf, and many rows against double math.
// Default numerics at every ISA level this CPU runs: against double math,
// f16 rows bit-identical to their f32 values, the scalar level bit-identical
// to ds4's plain loop, and results independent of how rows and columns group.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops_attention.h"
#include "core/fp16.h"
#include "quant/dot.h"

namespace ds4::cpu {
namespace {

std::vector<float> random_vec(std::size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(OpsAttention, OneRowClosedForm) {
  std::mt19937 rng(1);
  const auto q = random_vec(512, rng);
  const auto kv = random_vec(512, rng);
  const float scale = 1.0f / std::sqrt(512.0f);
  double s = 0.0;
  for (int i = 0; i < 512; ++i) s += double(q[i]) * kv[i];
  s *= scale;
  for (float sink : {-2.0f, 0.0f, 1.5f, float(s)}) {
    const double frac = std::exp(s) / (std::exp(s) + std::exp(double(sink)));
    for (Numerics n : {Numerics::Default, Numerics::Quality}) {
      std::vector<float> out(512), scratch(1);
      const float* rows[] = {kv.data()};
      attention_with_sink(q, rows, sink, scale, scratch, out, n);
      for (int i = 0; i < 512; ++i)
        EXPECT_NEAR(out[i], kv[i] * frac, 2e-6 * (1 + std::fabs(kv[i])));
    }
  }
}

TEST(OpsAttention, SinkOnlyInDenominator) {
  // sink = -inf: an ordinary softmax; huge sink: everything goes to the sink.
  std::vector<float> p = {1.0f, 2.0f, 3.0f};
  softmax_with_sink(p, -INFINITY);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(p[0], std::exp(1.0) / z, 1e-7);
  EXPECT_NEAR(p[2], std::exp(3.0) / z, 1e-7);
  std::vector<float> p2 = {1.0f, 2.0f};
  softmax_with_sink(p2, 200.0f);
  EXPECT_EQ(p2[0], 0.0f);
  EXPECT_EQ(p2[1], 0.0f);
  // Sink equal to both scores: each row gets 1/3.
  std::vector<float> p3 = {0.5f, 0.5f};
  softmax_with_sink(p3, 0.5f);
  EXPECT_NEAR(p3[0], 1.0 / 3.0, 1e-7);
}

TEST(OpsAttention, ManyRowsMatchDouble) {
  std::mt19937 rng(2);
  const int dim = 512, n_rows = 200;
  const auto q = random_vec(dim, rng, 2.0f);
  std::vector<std::vector<float>> store;
  std::vector<const float*> rows;
  for (int r = 0; r < n_rows; ++r) store.push_back(random_vec(dim, rng));
  for (auto& r : store) rows.push_back(r.data());
  const float scale = 1.0f / std::sqrt(float(dim));
  const float sink = 0.7f;

  std::vector<double> s(n_rows);
  double m = sink;
  for (int r = 0; r < n_rows; ++r) {
    double acc = 0.0;
    for (int i = 0; i < dim; ++i) acc += double(q[i]) * rows[r][i];
    s[r] = acc * scale;
    m = std::max(m, s[r]);
  }
  double den = std::exp(sink - m);
  for (double v : s) den += std::exp(v - m);
  std::vector<double> expect(dim, 0.0);
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < dim; ++i) expect[i] += std::exp(s[r] - m) / den * rows[r][i];

  for (Numerics n : {Numerics::Default, Numerics::Quality}) {
    std::vector<float> out(dim), scratch(n_rows);
    attention_with_sink(q, rows, sink, scale, scratch, out, n);
    for (int i = 0; i < dim; ++i) EXPECT_NEAR(out[i], expect[i], 1e-5) << i;
  }
}

TEST(OpsAttention, NoRowsGivesZero) {
  std::vector<float> q(8, 1.0f), out(8, 5.0f), scratch;
  for (Numerics n : {Numerics::Default, Numerics::Quality}) {
    attention_with_sink(q, {}, 0.0f, 1.0f, scratch, out, n);
    for (float v : out) EXPECT_EQ(v, 0.0f);
  }
}


// ---- Default numerics, every ISA level ----

std::vector<const AttentionRowKernels*> levels() {
  std::vector<const AttentionRowKernels*> out;
  for (const quant::DotKernels* dots : quant::dot_kernels_available()) out.push_back(&attention_row_kernels_for(dots->isa));
  return out;
}

// n_rows rows of dim f16 values, as f16 bits and as their exact f32 values.
struct F16Rows {
  std::vector<std::vector<uint16_t>> bits;
  std::vector<std::vector<float>> values;
  std::vector<const uint16_t*> bit_ptrs;
  std::vector<const float*> value_ptrs;

  void finish() {
    for (const auto& r : bits) {
      values.emplace_back();
      for (uint16_t h : r) values.back().push_back(f16_to_f32(h));
    }
    for (const auto& r : bits) bit_ptrs.push_back(r.data());
    for (const auto& r : values) value_ptrs.push_back(r.data());
  }
};

// Normal-ish values, as a KV cache holds them.
F16Rows gaussian_rows(std::size_t n_rows, std::size_t dim, std::mt19937& rng) {
  F16Rows rows;
  for (std::size_t r = 0; r < n_rows; ++r) {
    rows.bits.emplace_back();
    for (float v : random_vec(dim, rng)) rows.bits.back().push_back(f32_to_f16(v));
  }
  rows.finish();
  return rows;
}

// Any finite f16 bits: subnormals, zeros of both signs, +-65504.
F16Rows any_finite_rows(std::size_t n_rows, std::size_t dim, std::mt19937& rng) {
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  F16Rows rows;
  for (std::size_t r = 0; r < n_rows; ++r) {
    rows.bits.emplace_back();
    while (rows.bits.back().size() < dim) {
      const auto h = static_cast<uint16_t>(bits(rng));
      if ((h & 0x7c00u) != 0x7c00u) rows.bits.back().push_back(h);
    }
  }
  rows.finish();
  return rows;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  return true;
}

// Dims: the Flash head (512), tails shorter than one vector, odd tails after
// whole blocks. Row counts: below, at and past the dot kernels' row groups.
const std::size_t kDims[] = {512, 1, 7, 40, 100, 129, 200};
const std::size_t kRowCounts[] = {0, 1, 2, 3, 4, 5, 9, 160};

TEST(OpsAttentionDefault, EveryLevelMatchesDouble) {
  std::mt19937 rng(3);
  for (const AttentionRowKernels* k : levels()) {
    for (std::size_t dim : kDims) {
      for (std::size_t n_rows : kRowCounts) {
        SCOPED_TRACE(std::string(k->isa) + " dim " + std::to_string(dim) + " rows " + std::to_string(n_rows));
        const auto q = random_vec(dim, rng, 2.0f);
        const F16Rows rows = gaussian_rows(n_rows, dim, rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        const float sink = 0.3f;

        std::vector<double> p(n_rows);
        double m = sink;
        for (std::size_t r = 0; r < n_rows; ++r) {
          double acc = 0.0;
          for (std::size_t i = 0; i < dim; ++i) acc += double(q[i]) * rows.values[r][i];
          p[r] = acc * scale;
          m = std::max(m, p[r]);
        }
        double den = std::exp(sink - m);
        for (double& v : p) den += (v = std::exp(v - m));
        for (double& v : p) v /= den;

        std::vector<float> out(dim, 9.0f), out16(dim, 9.0f), scores(n_rows);
        attention_with_sink_default(*k, q, rows.value_ptrs, sink, scale, scores, out);
        attention_with_sink_default(*k, q, rows.bit_ptrs, sink, scale, scores, out16);
        EXPECT_TRUE(same_bits(out, out16));
        for (std::size_t d = 0; d < dim; ++d) {
          double expect = 0.0, magnitude = 0.0;
          for (std::size_t r = 0; r < n_rows; ++r) {
            expect += p[r] * rows.values[r][d];
            magnitude += std::fabs(p[r] * rows.values[r][d]);
          }
          ASSERT_NEAR(out[d], expect, 1e-5 * magnitude) << "column " << d;
        }
      }
    }
  }
}

TEST(OpsAttentionDefault, F16RowsBitIdenticalToTheirF32Values) {
  // Extreme and subnormal f16 values; q small so no dot overflows.
  std::mt19937 rng(4);
  for (const AttentionRowKernels* k : levels()) {
    for (std::size_t dim : kDims) {
      for (std::size_t n_rows : kRowCounts) {
        SCOPED_TRACE(std::string(k->isa) + " dim " + std::to_string(dim) + " rows " + std::to_string(n_rows));
        const auto q = random_vec(dim, rng, 1e-4f);
        const F16Rows rows = any_finite_rows(n_rows, dim, rng);
        std::vector<float> out(dim), out16(dim), scores(n_rows), scores16(n_rows);
        attention_with_sink_default(*k, q, rows.value_ptrs, 1.0f, 0.5f, scores, out);
        attention_with_sink_default(*k, q, rows.bit_ptrs, 1.0f, 0.5f, scores16, out16);
        EXPECT_TRUE(same_bits(out, out16));
        EXPECT_TRUE(same_bits(scores, scores16));
      }
    }
  }
}

// Two heads over the same f16 rows at once give each head's one-head result
// bit for bit, at every level, every dim (tails included) and row count.
TEST(OpsAttentionDefault, HeadPairEqualsTwoSingleHeads) {
  std::mt19937 rng(6);
  for (const AttentionRowKernels* k : levels()) {
    for (std::size_t dim : kDims) {
      for (std::size_t n_rows : kRowCounts) {
        SCOPED_TRACE(std::string(k->isa) + " dim " + std::to_string(dim) + " rows " + std::to_string(n_rows));
        const auto q0 = random_vec(dim, rng, 2.0f), q1 = random_vec(dim, rng, 2.0f);
        const F16Rows rows = gaussian_rows(n_rows, dim, rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        std::vector<float> out0(dim, 9.0f), out1(dim, 9.0f), s0(n_rows), s1(n_rows);
        attention_with_sink_default(*k, q0, rows.bit_ptrs, 0.3f, scale, s0, out0);
        attention_with_sink_default(*k, q1, rows.bit_ptrs, -0.7f, scale, s1, out1);
        std::vector<float> pair0(dim, 7.0f), pair1(dim, 7.0f), p0(n_rows), p1(n_rows);
        attention_with_sink_default_pair(*k, q0, q1, rows.bit_ptrs, 0.3f, -0.7f, scale, p0, p1, pair0, pair1);
        EXPECT_TRUE(same_bits(out0, pair0));
        EXPECT_TRUE(same_bits(out1, pair1));
        EXPECT_TRUE(same_bits(s0, p0));
        EXPECT_TRUE(same_bits(s1, p1));
      }
    }
  }
}

TEST(OpsAttentionDefault, ScalarLevelIsDs4Loop) {
  // ds4 layer_attention_rows_one: one running float sum per dot (mul, add),
  // exp weights summed after the sink term, rows accumulated one by one.
  std::mt19937 rng(5);
  const AttentionRowKernels& scalar = attention_row_kernels_for("scalar");
  for (std::size_t dim : kDims) {
    for (std::size_t n_rows : kRowCounts) {
      const auto q = random_vec(dim, rng, 2.0f);
      const F16Rows rows = gaussian_rows(n_rows, dim, rng);
      const float scale = 1.0f / std::sqrt(static_cast<float>(dim)), sink = -0.4f;
      std::vector<float> s(n_rows), expect(dim, 0.0f);
      float max = sink;
      for (std::size_t r = 0; r < n_rows; ++r) {
        float acc = 0.0f;
        for (std::size_t i = 0; i < dim; ++i) {
          const float prod = q[i] * rows.values[r][i];
          acc = acc + prod;
        }
        s[r] = acc * scale;
        max = std::max(max, s[r]);
      }
      float denom = std::exp(sink - max);
      for (std::size_t r = 0; r < n_rows; ++r) {
        const float w = std::exp(s[r] - max);
        denom += w;
        for (std::size_t d = 0; d < dim; ++d) {
          const float prod = w * rows.values[r][d];
          expect[d] = expect[d] + prod;
        }
      }
      const float inv = 1.0f / denom;
      for (float& v : expect) v *= inv;

      std::vector<float> out(dim), scores(n_rows);
      attention_with_sink_default(scalar, q, rows.value_ptrs, sink, scale, scores, out);
      EXPECT_TRUE(same_bits(out, expect)) << "dim " << dim << " rows " << n_rows;
    }
  }
}

TEST(OpsAttentionDefault, GroupingDoesNotChangeResults) {
  // A row's score is the same computed alone or in a group; an output column
  // is the same whatever block of columns it is computed in.
  std::mt19937 rng(6);
  const std::size_t dim = 512, n_rows = 11;
  const auto q = random_vec(dim, rng);
  const F16Rows rows = gaussian_rows(n_rows, dim, rng);
  const auto w = random_vec(n_rows, rng);
  for (const AttentionRowKernels* k : levels()) {
    SCOPED_TRACE(k->isa);
    std::vector<float> scores(n_rows), alone(n_rows);
    k->dots_f32(q.data(), rows.value_ptrs.data(), n_rows, dim, 0.25f, scores.data());
    for (std::size_t r = 0; r < n_rows; ++r) k->dots_f32(q.data(), &rows.value_ptrs[r], 1, dim, 0.25f, &alone[r]);
    EXPECT_TRUE(same_bits(scores, alone));

    std::vector<float> full(dim);
    k->weighted_sum_f16(rows.bit_ptrs.data(), w.data(), n_rows, dim, full.data());
    for (std::size_t first : {std::size_t{3}, std::size_t{37}, std::size_t{130}}) {
      const std::size_t len = dim - first - 5;
      std::vector<const uint16_t*> shifted;
      for (const uint16_t* r : rows.bit_ptrs) shifted.push_back(r + first);
      std::vector<float> part(len);
      k->weighted_sum_f16(shifted.data(), w.data(), n_rows, len, part.data());
      EXPECT_TRUE(same_bits(part, std::vector<float>(full.begin() + first, full.begin() + first + len))) << first;
    }
  }
}

TEST(OpsAttentionDefault, EntryPointsUseTheDotLevel) {
  // One variable (DS4_ISA) picks both kernel families.
  const std::string dot_isa = quant::dot_kernels().isa;
  const AttentionRowKernels& k = attention_row_kernels();
  EXPECT_EQ(std::string(k.isa), dot_isa.rfind("avx512", 0) == 0 ? "avx512" : dot_isa);
  EXPECT_EQ(&k, &attention_row_kernels_for(dot_isa.c_str()));

  std::mt19937 rng(7);
  const std::size_t dim = 512, n_rows = 37;
  const auto q = random_vec(dim, rng);
  const F16Rows rows = gaussian_rows(n_rows, dim, rng);
  std::vector<float> expect(dim), out(dim), out16(dim), scores(n_rows);
  attention_with_sink_default(k, q, rows.value_ptrs, 0.1f, 0.05f, scores, expect);
  attention_with_sink(q, rows.value_ptrs, 0.1f, 0.05f, scores, out, Numerics::Default);
  attention_with_sink_f16(q, rows.bit_ptrs, 0.1f, 0.05f, scores, out16);
  EXPECT_TRUE(same_bits(out, expect));
  EXPECT_TRUE(same_bits(out16, expect));
}

TEST(OpsAttentionDefault, UnknownLevelIsAnError) {
  EXPECT_ANY_THROW(attention_row_kernels_for("sse9"));
}

}  // namespace
}  // namespace ds4::cpu
