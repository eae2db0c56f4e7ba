// RMSNorm, weighted and unweighted, in both numerics.
#pragma once

#include <span>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

// 1 / sqrt(mean(x^2) + eps), the factor every RMSNorm multiplies by.
// Default (ds4 rms_norm_*): sum of (double)x * x, i.e. exact products.
// Quality (ggml rms_norm_f32): sum of (double)(x * x), i.e. float products.
// Both divide by n in double, round the mean to float, then 1.0f/sqrtf.
float rms_norm_scale(std::span<const float> x, float eps, Numerics n);

// y = x * scale (HC flat norm, per-head Q norm). y may alias x.
void rms_norm_unweighted(std::span<const float> x, std::span<float> y, float eps, Numerics n);

// y = (x * scale) * w, the order both ds4 and ggml's fused rms_norm+mul use.
// y may alias x.
void rms_norm(std::span<const float> x, std::span<const float> w, std::span<float> y, float eps,
              Numerics n);

}  // namespace ds4::cpu
