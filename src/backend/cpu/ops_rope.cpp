#include "backend/cpu/ops_rope.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

namespace ds4::cpu {
namespace {

// Both ds4 and ggml: n_dims * ln(n_ctx_orig / (n_rot * 2 pi)) / (2 ln base), in float.
float corr_dim(int n_dims, uint32_t n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

// 1 for pairs below lo, 0 above hi, linear between; i0 is the dim index (2k).
float yarn_ramp(float lo, float hi, int i0) {
  const float y = (static_cast<float>(i0 / 2) - lo) / std::max(0.001f, hi - lo);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

// The YaRN magnitude factor both implementations multiply cos/sin by:
// attn_factor * (1 + 0.1 ln(1/freq_scale)) when YaRN is on, which is exactly
// 1.0f with attn_factor = 1 / (1 + 0.1 ln 16) (checked in the tests).
float rope_mscale(const RopeParams& p) {
  float mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) {
    const float l = std::log(1.0f / p.freq_scale);
    mscale *= p.fused ? std::fma(0.1f, l, 1.0f) : 1.0f + 0.1f * l;
  }
  return mscale;
}

}  // namespace

std::array<float, 2> rope_yarn_corr_dims(int n_dims, uint32_t n_ctx_orig, float freq_base,
                                         float beta_fast, float beta_slow) {
  const float start = std::floor(corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
  const float end = std::ceil(corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
  return {std::max(0.0f, start), std::min(static_cast<float>(n_dims - 1), end)};
}

RopeParams rope_params(const model::Deepseek4HParams& hp, uint32_t compress_ratio, Numerics n) {
  RopeParams p;
  p.n_rot = static_cast<int>(hp.n_rot);
  p.fused = n == Numerics::Quality;
  if (compress_ratio == 0) {
    p.freq_base = hp.rope_freq_base;
    return p;
  }
  p.freq_base = hp.compress_rope_freq_base;
  const float factor = hp.rope_scaling_factor;
  if (factor <= 0.0f) return p;  // ds4: no scaling configured
  p.freq_scale = 1.0f / factor;
  const bool yarn = n == Numerics::Default ? factor > 1.0f : hp.rope_scaling_type == "yarn";
  if (!yarn) return p;
  p.ext_factor = 1.0f;
  // Cancels the magnitude scale rope_mscale applies: V4 does no YaRN scaling.
  const float l = std::log(1.0f / p.freq_scale);
  p.attn_factor = 1.0f / (p.fused ? std::fma(0.1f, l, 1.0f) : 1.0f + 0.1f * l);
  const auto dims =
      rope_yarn_corr_dims(p.n_rot, hp.rope_scaling_orig_ctx, p.freq_base, 32.0f, 1.0f);
  p.corr_lo = dims[0];
  p.corr_hi = dims[1];
  return p;
}

void rope_thetas(const RopeParams& p, int64_t pos, std::span<float> theta) {
  const int n_pairs = p.n_rot / 2;
  assert(static_cast<int>(theta.size()) >= n_pairs);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float theta_extrap = static_cast<float>(pos);
  for (int k = 0; k < n_pairs; ++k) {
    const float theta_interp = p.freq_scale * theta_extrap;
    float t = theta_interp;
    if (p.ext_factor != 0.0f) {
      const float ramp_mix = yarn_ramp(p.corr_lo, p.corr_hi, 2 * k) * p.ext_factor;
      t = p.fused ? std::fma(theta_interp, 1.0f - ramp_mix, theta_extrap * ramp_mix)
                  : theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
    }
    theta[k] = t;
    theta_extrap *= theta_scale;
  }
}

RopeCache rope_cache(const RopeParams& p, int64_t pos, bool inverse) {
  RopeCache c;
  c.n_pairs = p.n_rot / 2;
  c.fused = p.fused;
  assert(c.n_pairs <= kRopeMaxPairs);
  std::array<float, kRopeMaxPairs> theta{};
  rope_thetas(p, pos, theta);
  const float mscale = rope_mscale(p);
  const float sin_sign = inverse ? -1.0f : 1.0f;
  for (int k = 0; k < c.n_pairs; ++k) {
    c.cos[k] = std::cos(theta[k]) * mscale;
    // ggml: (sinf * mscale) * sin_sign; ds4: (sin_sign * sinf) * mscale. A sign
    // flip commutes with rounding, so both are this value.
    c.sin[k] = std::sin(theta[k]) * mscale * sin_sign;
  }
  return c;
}

void rope_apply(std::span<float> tail, const RopeCache& cache) {
  assert(static_cast<int>(tail.size()) >= 2 * cache.n_pairs);
  for (int k = 0; k < cache.n_pairs; ++k) {
    const float c = cache.cos[k];
    const float s = cache.sin[k];
    const float a = tail[2 * k];
    const float b = tail[2 * k + 1];
    if (cache.fused) {
      tail[2 * k] = std::fma(a, c, -(b * s));
      tail[2 * k + 1] = std::fma(a, s, b * c);
    } else {
      tail[2 * k] = a * c - b * s;
      tail[2 * k + 1] = a * s + b * c;
    }
  }
}

void rope_heads(std::span<float> x, int n_head, int head_dim, const RopeCache& cache) {
  const int n_rot = 2 * cache.n_pairs;
  assert(static_cast<int>(x.size()) >= n_head * head_dim && n_rot <= head_dim);
  for (int h = 0; h < n_head; ++h) {
    rope_apply(x.subspan(static_cast<std::size_t>(h) * head_dim + (head_dim - n_rot), n_rot),
               cache);
  }
}

}  // namespace ds4::cpu
