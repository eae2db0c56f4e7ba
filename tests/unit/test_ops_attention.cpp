// Attention with a sink: the position-0 closed form o = v e^s / (e^s + e^sink),
// a plain softmax when the sink is -inf, and many rows against double math.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops_attention.h"

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

}  // namespace
}  // namespace ds4::cpu
