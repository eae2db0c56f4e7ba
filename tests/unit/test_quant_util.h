// Helpers shared by the test_quant_* tests: reproducible data and error
// measures.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace ds4::quant::test {

// N(0,1) samples by Box-Muller over mt19937 (both fully specified, so the
// data is the same with every standard library).
inline std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out(n);
  const double two_pi = 6.283185307179586;
  for (size_t i = 0; i < n; i += 2) {
    const double u1 = (rng() + 1.0) / 4294967297.0;  // (0, 1]
    const double u2 = rng() / 4294967296.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(r * std::cos(two_pi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(two_pi * u2));
  }
  return out;
}

// llama.cpp tests/test-quantize-fns.cpp synthetic data: 0.1 + 2*cos(i + offset).
inline std::vector<float> ggml_test_data(size_t n, float offset) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(0.1 + 2 * std::cos(static_cast<float>(i) + offset));
  return out;
}

inline double rms(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += static_cast<double>(v) * v;
  return std::sqrt(s / static_cast<double>(a.size()));
}

inline double rms_error(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return std::sqrt(s / static_cast<double>(a.size()));
}

// sqrt(sum w*e^2 / sum w).
inline double weighted_rms_error(const std::vector<float>& a, const std::vector<float>& b,
                                 const std::vector<float>& w) {
  double s = 0, sw = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += w[i] * d * d;
    sw += w[i];
  }
  return std::sqrt(s / sw);
}

}  // namespace ds4::quant::test
