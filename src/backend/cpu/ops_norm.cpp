#include "backend/cpu/ops_norm.h"

#include <cassert>
#include <cmath>
#include <cstddef>

namespace ds4::cpu {

float rms_norm_scale(std::span<const float> x, float eps, Numerics n) {
  double sum = 0.0;
  if (n == Numerics::Default) {
    for (float v : x) sum += static_cast<double>(v) * v;
  } else {
    for (float v : x) sum += static_cast<double>(v * v);
  }
  const float mean = static_cast<float>(sum / static_cast<double>(x.size()));
  return 1.0f / std::sqrt(mean + eps);
}

void rms_norm_unweighted(std::span<const float> x, std::span<float> y, float eps, Numerics n) {
  assert(y.size() == x.size());
  const float scale = rms_norm_scale(x, eps, n);
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale;
}

void rms_norm(std::span<const float> x, std::span<const float> w, std::span<float> y, float eps,
              Numerics n) {
  assert(w.size() == x.size() && y.size() == x.size());
  const float scale = rms_norm_scale(x, eps, n);
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
}

}  // namespace ds4::cpu
