// Scalar activations of the DeepSeek V4 forward pass, in both numerics.
// Inline so the per-element loops that call them stay vectorisable.
#pragma once

#include <cmath>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

// ggml's sigmoid (ggml_vec_sigmoid_f32, op_sigmoid): one formula for all x.
// ds4 also uses this form inside its HC split (pre and post weights).
inline float sigmoid_plain(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// ds4's sigmoid_stable: the exponent is never positive, so exp never
// overflows; used by ds4's SiLU and output-head weights.
inline float sigmoid_two_branch(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}

// SiLU. ds4: x * sigmoid_two_branch(x). ggml (swiglu_clamp): x / (1 + exp(-x)).
inline float silu(float x, Numerics n) {
  return n == Numerics::Default ? x * sigmoid_two_branch(x) : x / (1.0f + std::exp(-x));
}

// Softplus. ds4 (softplus_stable): x above 20, exp(x) below -20, else
// log1p(exp(x)). ggml (op_softplus): x above 20, else log(1 + exp(x)).
inline float softplus(float x, Numerics n) {
  if (x > 20.0f) return x;
  if (n == Numerics::Quality) return std::log(1.0f + std::exp(x));
  if (x < -20.0f) return std::exp(x);
  return std::log1p(std::exp(x));
}

}  // namespace ds4::cpu
