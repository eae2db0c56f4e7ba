// Synthetic weights: the generators against reference values, the statistics of
// generated tensors in every storage type (read back through the quant
// library's dequantizers, not through the generator), and byte-for-byte
// independence from thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ggml_type.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_tensors.h"
#include "model/synthetic_weights.h"
#include "quant/quant.h"

namespace ds4::model {
namespace {

struct Moments {
  double mean = 0, std = 0, kurtosis = 0;
};

Moments moments(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  const double mean = s / v.size();
  double m2 = 0, m4 = 0;
  for (float x : v) {
    const double d = x - mean;
    m2 += d * d;
    m4 += d * d * d * d;
  }
  m2 /= v.size();
  m4 /= v.size();
  return {mean, std::sqrt(m2), m4 / (m2 * m2)};
}

std::vector<float> dequantize(GgmlType type, const std::vector<uint8_t>& bytes, uint64_t n) {
  std::vector<float> out(n);
  quant::dequantize_row(type, bytes.data(), out.data(), static_cast<int64_t>(n));
  return out;
}

std::vector<uint8_t> fill(const TensorSpec& spec, GgmlType type, const WeightInit& init, uint64_t seed,
                          unsigned threads) {
  std::vector<uint8_t> buf(*ggml_nbytes(type, spec.n_elements()));
  fill_tensor(spec, type, init, seed, buf, threads);
  return buf;
}

TensorSpec routed_spec(uint64_t rows, uint64_t experts) {
  return {"blk.0.ffn_gate_exps.weight", TensorKind::FfnGateExps, 0, {256, rows, experts}};
}

TEST(MkmodelWeights, Splitmix64MatchesTheReference) {
  // First outputs of Vigna's splitmix64 from state 0.
  uint64_t st = 0;
  EXPECT_EQ(splitmix64(st), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix64(st), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(splitmix64(st), 0x06c45d188009454full);
}

TEST(MkmodelWeights, XoshiroMatchesTheReference) {
  // xoshiro256** seeded with four splitmix64 outputs from state 42, values from
  // a direct transcription of the published algorithm.
  Rng rng(42);
  EXPECT_EQ(rng.next(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(rng.next(), 0x6104d9866d113a7eull);
  EXPECT_EQ(rng.next(), 0xae17533239e499a1ull);
}

TEST(MkmodelWeights, NormalsAreStandardNormal) {
  Rng rng(7);
  std::vector<float> z(400000);
  for (float& x : z) x = rng.normal();
  const Moments m = moments(z);
  EXPECT_NEAR(m.mean, 0.0, 0.006);
  EXPECT_NEAR(m.std, 1.0, 0.005);
  EXPECT_NEAR(m.kurtosis, 3.0, 0.05);
  const double within1 = std::count_if(z.begin(), z.end(), [](float x) { return std::fabs(x) < 1.0f; });
  EXPECT_NEAR(within1 / z.size(), 0.682689, 0.003);  // P(|Z| < 1)
  const double within2 = std::count_if(z.begin(), z.end(), [](float x) { return std::fabs(x) < 2.0f; });
  EXPECT_NEAR(within2 / z.size(), 0.954500, 0.002);  // P(|Z| < 2)
}

TEST(MkmodelWeights, UniformAndBelowStayInRange) {
  Rng rng(3);
  std::vector<int> hits(7);
  for (int i = 0; i < 70000; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const uint32_t b = rng.below(7);
    ASSERT_LT(b, 7u);
    ++hits[b];
  }
  for (int h : hits) EXPECT_NEAR(h, 10000, 400);
}

TEST(MkmodelWeights, StreamSeedsSeparateTensorsChunksAndSeeds) {
  std::set<uint64_t> seeds;
  for (uint64_t seed : {1ull, 2ull})
    for (const char* name : {"a.weight", "b.weight"})
      for (uint64_t chunk : {0ull, 1ull}) seeds.insert(stream_seed(seed, name, chunk));
  EXPECT_EQ(seeds.size(), 8u);
  EXPECT_EQ(stream_seed(5, "x", 3), stream_seed(5, "x", 3));
}

// Every storage type ends up with the intended distribution: mean 0 and the
// target standard deviation (the mixes' routed types are written as random
// codes, the others are quantized floats).
TEST(MkmodelWeights, DequantizedStatisticsMatchTheTarget) {
  const TensorSpec spec = routed_spec(512, 4);  // 524288 values, two chunks
  for (float sigma : {0.0625f, 0.02f, 0.0039f}) {
    const WeightInit init{WeightInit::Kind::Normal, 0.0f, sigma};
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K,
                          GgmlType::IQ2_XXS, GgmlType::MXFP4}) {
      SCOPED_TRACE(std::string(ggml_type_name(type)) + " sigma " + std::to_string(sigma));
      const std::vector<float> v = dequantize(type, fill(spec, type, init, 11, 2), spec.n_elements());
      const Moments m = moments(v);
      EXPECT_NEAR(m.std / sigma, 1.0, 0.05);
      EXPECT_LT(std::fabs(m.mean), 0.01 * sigma);
      // Not degenerate: many distinct values, few exact zeros.
      const std::set<float> distinct(v.begin(), v.begin() + 4096);
      EXPECT_GT(distinct.size(), 6u);
      const double zeros = std::count(v.begin(), v.end(), 0.0f);
      EXPECT_LT(zeros / v.size(), 0.2);
    }
  }
}

TEST(MkmodelWeights, NonzeroMeansAndUniformsSurviveStorage) {
  const TensorSpec norm{"blk.0.attn_norm.weight", TensorKind::AttnNorm, 0, {4096}};
  const WeightInit ones{WeightInit::Kind::Normal, 1.0f, 0.05f};
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    const Moments m = moments(dequantize(type, fill(norm, type, ones, 1, 1), 4096));
    EXPECT_NEAR(m.mean, 1.0, 0.005) << ggml_type_name(type);
    EXPECT_NEAR(m.std, 0.05, 0.005) << ggml_type_name(type);
  }
  const WeightInit uni{WeightInit::Kind::Uniform, 0.0f, 0.0f, 0.5f, 1.0f};
  const std::vector<float> u = dequantize(GgmlType::F32, fill(norm, GgmlType::F32, uni, 1, 1), 4096);
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.5f);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0f);
  EXPECT_NEAR(moments(u).mean, 0.75, 0.01);
}

TEST(MkmodelWeights, BytesDoNotDependOnThreads) {
  const WeightInit normal{WeightInit::Kind::Normal, 0.0f, 0.03f};
  const TensorSpec big = routed_spec(1024, 3);  // three chunks of 2^18 values
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0, GgmlType::IQ2_XXS, GgmlType::Q2_K, GgmlType::MXFP4}) {
    SCOPED_TRACE(ggml_type_name(type));
    const auto one = fill(big, type, normal, 9, 1);
    EXPECT_EQ(fill(big, type, normal, 9, 2), one);
    EXPECT_EQ(fill(big, type, normal, 9, 5), one);
    EXPECT_NE(fill(big, type, normal, 10, 2), one);
  }
  // Another name, another stream.
  TensorSpec renamed = big;
  renamed.name = "blk.1.ffn_gate_exps.weight";
  EXPECT_NE(fill(renamed, GgmlType::F16, normal, 9, 1), fill(big, GgmlType::F16, normal, 9, 1));

  const TensorSpec tid{"blk.0.ffn_gate_tid2eid.weight", TensorKind::FfnGateTid2Eid, 0, {6, 100000}};
  const WeightInit t2e{WeightInit::Kind::Tid2Eid, 0.0f, 0.0f, 0.0f, 256.0f};
  EXPECT_EQ(fill(tid, GgmlType::I32, t2e, 4, 1), fill(tid, GgmlType::I32, t2e, 4, 3));
}

TEST(MkmodelWeights, Tid2EidRowsAreDistinctExperts) {
  const uint32_t used = 6, experts = 16, vocab = 5000;
  const TensorSpec tid{"blk.0.ffn_gate_tid2eid.weight", TensorKind::FfnGateTid2Eid, 0, {used, vocab}};
  const WeightInit init{WeightInit::Kind::Tid2Eid, 0.0f, 0.0f, 0.0f, static_cast<float>(experts)};
  const std::vector<uint8_t> bytes = fill(tid, GgmlType::I32, init, 1, 2);
  const auto* ids = reinterpret_cast<const int32_t*>(bytes.data());
  std::vector<int> per_expert(experts);
  std::set<std::vector<int32_t>> rows;
  for (uint32_t r = 0; r < vocab; ++r) {
    std::set<int32_t> row;
    for (uint32_t k = 0; k < used; ++k) {
      const int32_t e = ids[r * used + k];
      ASSERT_GE(e, 0);
      ASSERT_LT(e, static_cast<int32_t>(experts));
      row.insert(e);
      ++per_expert[e];
    }
    EXPECT_EQ(row.size(), used) << "row " << r << " repeats an expert";
    rows.insert(std::vector<int32_t>(ids + r * used, ids + (r + 1) * used));
  }
  // Uniform use of experts (each chosen vocab*used/experts = 1875 times).
  for (int n : per_expert) EXPECT_NEAR(n, 1875, 200);
  EXPECT_GT(rows.size(), vocab * 9 / 10);
  // Too few experts is an error, not a silent repeat.
  const WeightInit few{WeightInit::Kind::Tid2Eid, 0.0f, 0.0f, 0.0f, 4.0f};
  std::vector<uint8_t> buf(used * vocab * 4);
  EXPECT_THROW(fill_tensor(tid, GgmlType::I32, few, 1, buf, 1), Error);
}

TEST(MkmodelWeights, RouterBiasIsADistinctSpread) {
  const TensorSpec bias{"blk.3.exp_probs_b.bias", TensorKind::ExpProbsB, 3, {64}};
  const WeightInit init = weight_init(bias, preset_tiny());
  ASSERT_EQ(init.kind, WeightInit::Kind::SpreadBias);
  const std::vector<uint8_t> bytes = fill(bias, GgmlType::F32, init, 1, 1);
  std::vector<float> v(64);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  std::vector<float> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, v) << "the spread is permuted over the experts";
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(sorted[i], init.lo + (init.hi - init.lo) * i / 63.0f, 1e-6f);
  EXPECT_GT(init.hi - init.lo, 0.5f);
}

// --routing-skew S: hash rows draw expert of popularity rank r with weight
// 1 / (1 + r)^S (Zipf), still distinct within a row; the router bias of rank
// r is lowered by S ln(1 + r) on top of the distinct spread.
TEST(MkmodelWeights, RoutingSkewFollowsAZipfLaw) {
  const uint32_t used = 6, experts = 64, vocab = 20000;
  const TensorSpec tid{"blk.0.ffn_gate_tid2eid.weight", TensorKind::FfnGateTid2Eid, 0, {used, vocab}};
  WeightInit init{WeightInit::Kind::Tid2Eid, 0.0f, 0.0f, 0.0f, static_cast<float>(experts)};
  init.skew = 1.0f;
  const std::vector<uint8_t> bytes = fill(tid, GgmlType::I32, init, 1, 2);
  EXPECT_EQ(bytes, fill(tid, GgmlType::I32, init, 1, 1)) << "the same bytes whatever the threads";
  std::vector<int32_t> ids(used * vocab);
  std::memcpy(ids.data(), bytes.data(), bytes.size());
  std::vector<double> count(experts);
  for (uint32_t r = 0; r < vocab; ++r) {
    const std::set<int32_t> row(ids.begin() + r * used, ids.begin() + (r + 1) * used);
    ASSERT_EQ(row.size(), used) << "row " << r << " repeats an expert";
    for (int32_t e : row) ++count[static_cast<size_t>(e)];
  }
  std::sort(count.begin(), count.end(), std::greater<>());
  // Without replacement flattens the head (an expert is drawn at most once a
  // row), so compare with even use (1875 = vocab * used / experts): the most
  // used expert far above it, the least far below, and counts falling with rank.
  EXPECT_GT(count.front(), 2.5 * 1875);
  EXPECT_LT(count.back(), 0.5 * 1875);
  EXPECT_GT(count[1] / count[15], 2.0);

  const TensorSpec bias{"blk.3.exp_probs_b.bias", TensorKind::ExpProbsB, 3, {64}};
  WeightInit b = weight_init(bias, preset_tiny());
  const std::vector<uint8_t> even = fill(bias, GgmlType::F32, b, 1, 1);
  b.skew = 0.5f;
  const std::vector<uint8_t> skewed = fill(bias, GgmlType::F32, b, 1, 1);
  std::vector<float> v0(64), v1(64);
  std::memcpy(v0.data(), even.data(), even.size());
  std::memcpy(v1.data(), skewed.data(), skewed.size());
  std::vector<float> drop(64);
  for (int i = 0; i < 64; ++i) drop[i] = v0[i] - v1[i];  // skew * ln(1 + rank) of expert i
  std::sort(drop.begin(), drop.end());
  for (int r = 0; r < 64; ++r) EXPECT_NEAR(drop[r], 0.5f * std::log(1.0f + r), 1e-5f) << "rank " << r;
}

TEST(MkmodelWeights, InitScalesFollowTheRowLength) {
  const Deepseek4HParams hp = preset_bench(2);
  for (const TensorSpec& s : deepseek4_tensors(hp)) {
    const WeightInit w = weight_init(s, hp);
    const double unit = 1.0 / std::sqrt(static_cast<double>(s.ne[0]));
    switch (s.family()) {
      case TensorFamily::AttnProjection:
      case TensorFamily::SharedExpert:
      case TensorFamily::RoutedGateUp:
      case TensorFamily::RoutedDown:
      case TensorFamily::OutputHead:
      case TensorFamily::HcFn:
      case TensorFamily::CompressorProj:
      case TensorFamily::IndexerProj:
        EXPECT_NEAR(w.std, unit, 1e-6 * unit) << s.name;
        EXPECT_EQ(w.mean, 0.0f) << s.name;
        break;
      case TensorFamily::Router: EXPECT_NEAR(w.std, 2 * unit, 1e-6 * unit) << s.name; break;
      case TensorFamily::Norm: EXPECT_EQ(w.mean, 1.0f) << s.name; break;
      case TensorFamily::Embedding: EXPECT_EQ(w.std, 1.0f) << s.name; break;
      case TensorFamily::Tid2Eid: EXPECT_EQ(w.hi, 256.0f) << s.name; break;
      default: break;
    }
  }
}

}  // namespace
}  // namespace ds4::model
