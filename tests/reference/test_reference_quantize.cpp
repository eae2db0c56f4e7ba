// Our quantize_row against ggml's reference quantizers (ggml_quantize_chunk via
// ds4-ref-runner) on the same seeded data. Our error must be no worse than 1.05 x
// ggml's on the measure the quantizer minimises (importance-weighted when an
// importance vector is given). Where ours implements the same deterministic algorithm
// (today: every case here, including the K-quants' and IQ2_XXS's searches) the bytes
// must also be identical; a case whose algorithm deliberately departs from ggml's sets
// same_bytes = false and is held to the error bound only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "quant/quant.h"
#include "reference_client.h"

namespace ds4 {
namespace {

constexpr int64_t kRow = 4096;   // elements per row, like a DS4 weight row
constexpr int64_t kRows = 16;    // 64 Ki elements per case

enum class Data { kGaussian, kHeavyTailed, kZeroGroups };
enum class Importance { kNone, kRandom, kEnergy };

struct Case {
  GgmlType type;
  Importance importance;
  Data data;
  bool same_bytes;   // same algorithm as ggml: bytes must match exactly
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name(ggml_type_name(c.type));
  name += c.data == Data::kGaussian ? "_gaussian" : c.data == Data::kHeavyTailed ? "_heavy" : "_zero_groups";
  if (c.importance == Importance::kRandom) name += "_imatrix";
  if (c.importance == Importance::kEnergy) name += "_energy";
  return name;
}
// Readable parameter in test listings (ctest shows it after the name).
void PrintTo(const Case& c, std::ostream* os) { *os << case_name({c, 0}); }

std::vector<float> make_data(Data data, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(static_cast<size_t>(kRow * kRows));
  if (data == Data::kGaussian || data == Data::kZeroGroups) {
    std::normal_distribution<float> g(0.0f, 0.02f);
    for (auto& v : x) v = g(rng);
  } else {
    // Student's t with 3 degrees of freedom: rare values tens of sigmas out, as in
    // real weight matrices' outlier columns.
    std::student_t_distribution<float> t(3.0f);
    for (auto& v : x) v = 0.02f * t(rng);
  }
  if (data == Data::kZeroGroups) {
    // Gaussian with about a quarter of the 32-element groups all zero: the
    // quantizers' empty-group paths (IQ3_S's later groups then shift in ggml's
    // layout, which ours reproduces).
    std::uniform_int_distribution<int> pick(0, 3);
    for (size_t g = 0; g < x.size(); g += 32) {
      if (pick(rng) == 0) std::fill_n(x.begin() + static_cast<std::ptrdiff_t>(g), 32, 0.0f);
    }
  }
  return x;
}

// An imatrix-like importance per column: positive, spread over orders of magnitude.
std::vector<float> make_importance(Importance kind, const std::vector<float>& x, uint64_t seed) {
  if (kind == Importance::kNone) return {};
  std::vector<float> w(static_cast<size_t>(kRow), 0.0f);
  if (kind == Importance::kRandom) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.5f);
    for (auto& v : w) v = std::exp(g(rng));
  } else if (kind == Importance::kEnergy) {
    // The weight-energy fallback for IQ2_XXS when no imatrix exists: sum of w^2 per column.
    for (size_t i = 0; i < x.size(); ++i) w[i % static_cast<size_t>(kRow)] += x[i] * x[i];
  }
  return w;
}

struct Errors {
  double rms = 0;       // sqrt(mean e^2)
  double weighted = 0;  // sqrt(sum w e^2 / sum w), w = importance per column (1 without)
  double max_abs = 0;
};

Errors measure(GgmlType type, const std::vector<uint8_t>& q, const std::vector<float>& x,
               const std::vector<float>& importance) {
  std::vector<float> y(x.size());
  quant::dequantize_row(type, q.data(), y.data(), static_cast<int64_t>(x.size()));
  double se = 0, wse = 0, wsum = 0;
  Errors e;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(y[i]) - x[i];
    const double w = importance.empty() ? 1.0 : importance[i % static_cast<size_t>(kRow)];
    se += d * d;
    wse += w * d * d;
    wsum += w;
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.rms = std::sqrt(se / static_cast<double>(x.size()));
  e.weighted = std::sqrt(wse / wsum);
  return e;
}

class ReferenceQuantize : public testing::TestWithParam<Case> {};

TEST_P(ReferenceQuantize, ErrorNoWorseThanGgml) {
  ASSERT_TRUE(reference::available()) << "runner missing: " << reference::runner_path();
  const Case& c = GetParam();
  const uint64_t seed = 1000 + static_cast<uint64_t>(c.type) * 10 + static_cast<uint64_t>(c.data);
  const std::vector<float> x = make_data(c.data, seed);
  const std::vector<float> importance = make_importance(c.importance, x, seed + 1);
  const bool weighted = c.importance != Importance::kNone;

  const std::vector<uint8_t> theirs = reference::quantize(c.type, x, kRow, weighted ? importance.data() : nullptr);

  const uint64_t row_bytes = *ggml_nbytes(c.type, kRow);
  std::vector<uint8_t> ours(theirs.size());
  for (int64_t r = 0; r < kRows; ++r)
    quant::quantize_row(c.type, x.data() + r * kRow, ours.data() + static_cast<uint64_t>(r) * row_bytes, kRow,
                        weighted ? importance.data() : nullptr);

  const Errors eo = measure(c.type, ours, x, importance);
  const Errors et = measure(c.type, theirs, x, importance);
  const GgmlTypeTraits& t = ggml_type_traits(c.type);
  size_t same_blocks = 0;
  const size_t n_blocks = ours.size() / t.block_bytes;
  for (size_t b = 0; b < n_blocks; ++b)
    same_blocks += std::memcmp(&ours[b * t.block_bytes], &theirs[b * t.block_bytes], t.block_bytes) == 0;

  std::printf("%-28s rms ours %.6e ggml %.6e (ratio %.4f)  weighted ours %.6e ggml %.6e (ratio %.4f)  "
              "identical blocks %zu/%zu\n",
              case_name({c, 0}).c_str(), eo.rms, et.rms, eo.rms / et.rms, eo.weighted, et.weighted,
              eo.weighted / et.weighted, same_blocks, n_blocks);

  ASSERT_TRUE(std::isfinite(eo.rms) && std::isfinite(et.rms));
  ASSERT_GT(et.rms, 0.0) << "ggml's quantization is lossless on random data: the comparison is meaningless";
  if (weighted) {
    EXPECT_LE(eo.weighted, 1.05 * et.weighted) << "importance-weighted RMS error";
  } else {
    EXPECT_LE(eo.rms, 1.05 * et.rms) << "RMS error";
  }
  if (c.same_bytes) {
    EXPECT_EQ(same_blocks, n_blocks) << "ggml's algorithm is deterministic and ours is the same";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, ReferenceQuantize,
    testing::Values(Case{GgmlType::Q8_0, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q8_0, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::MXFP4, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::MXFP4, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q2_K, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q2_K, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q2_K, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q2_K, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::Q4_K, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q4_K, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q4_K, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q4_K, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::Q6_K, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q6_K, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q6_K, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q6_K, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::Q4_0, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q4_0, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q4_0, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q4_0, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::Q4_1, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q4_1, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q4_1, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q4_1, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::Q5_0, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q5_0, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q5_0, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q5_0, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::Q5_1, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q5_1, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q5_1, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q5_1, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ2_XXS, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::IQ2_XXS, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ2_XXS, Importance::kEnergy, Data::kGaussian, true},
                    Case{GgmlType::IQ2_XXS, Importance::kEnergy, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ2_XS, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::IQ2_XS, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ2_XS, Importance::kEnergy, Data::kGaussian, true},
                    Case{GgmlType::IQ2_S, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::IQ2_S, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ2_S, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::IQ2_S, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ2_S, Importance::kNone, Data::kZeroGroups, true},
                    Case{GgmlType::IQ2_S, Importance::kRandom, Data::kZeroGroups, true},
                    Case{GgmlType::IQ1_M, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::IQ1_M, Importance::kEnergy, Data::kGaussian, true},
                    Case{GgmlType::IQ1_S, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ1_S, Importance::kEnergy, Data::kGaussian, true},
                    Case{GgmlType::IQ3_XXS, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::IQ3_XXS, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ3_XXS, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::IQ3_XXS, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ3_S, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::IQ3_S, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ3_S, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::IQ3_S, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ3_XXS, Importance::kRandom, Data::kZeroGroups, true},
                    Case{GgmlType::IQ3_S, Importance::kNone, Data::kZeroGroups, true},
                    Case{GgmlType::IQ3_S, Importance::kRandom, Data::kZeroGroups, true},
                    Case{GgmlType::Q3_K, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q3_K, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q3_K, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q3_K, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::Q5_K, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::Q5_K, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::Q5_K, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::Q5_K, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ4_NL, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::IQ4_NL, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ4_NL, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::IQ4_NL, Importance::kRandom, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ4_XS, Importance::kNone, Data::kGaussian, true},
                    Case{GgmlType::IQ4_XS, Importance::kNone, Data::kHeavyTailed, true},
                    Case{GgmlType::IQ4_XS, Importance::kRandom, Data::kGaussian, true},
                    Case{GgmlType::IQ4_XS, Importance::kRandom, Data::kHeavyTailed, true}),
    case_name);

}  // namespace
}  // namespace ds4
