#include "backend/cpu/ops_hc.h"

#include <cassert>
#include <cmath>
#include <cstddef>

#include "backend/cpu/ops_activation.h"

namespace ds4::cpu {
namespace {

constexpr int kN = kHcStreams;

// Sum of four values plus eps in the numerics' order.
float sum_plus_eps(float v0, float v1, float v2, float v3, float eps, Numerics n) {
  if (n == Numerics::Quality) return (((eps + v0) + v1) + v2) + v3;
  return (((v0 + v1) + v2) + v3) + eps;
}

// Normalise each source row i over its destinations j.
void normalize_rows(std::array<float, kN * kN>& c, float eps, Numerics n) {
  for (int i = 0; i < kN; ++i) {
    float* r = &c[i * kN];
    const float inv = 1.0f / sum_plus_eps(r[0], r[1], r[2], r[3], eps, n);
    for (int j = 0; j < kN; ++j) r[j] *= inv;
  }
}

// Normalise each destination column j over its sources i.
void normalize_cols(std::array<float, kN * kN>& c, float eps, Numerics n) {
  for (int j = 0; j < kN; ++j) {
    const float inv = 1.0f / sum_plus_eps(c[j], c[kN + j], c[2 * kN + j], c[3 * kN + j], eps, n);
    for (int i = 0; i < kN; ++i) c[i * kN + j] *= inv;
  }
}

}  // namespace

HcSplit hc_split_sinkhorn(std::span<const float, kHcMixes> mix, std::span<const float, 3> scale,
                          std::span<const float, kHcMixes> base, float eps, Numerics n, int iters) {
  HcSplit s;
  for (int i = 0; i < kN; ++i) {
    s.pre[i] = sigmoid_plain(mix[i] * scale[0] + base[i]) + eps;
    s.post[i] = 2.0f * sigmoid_plain(mix[kN + i] * scale[1] + base[kN + i]);
  }

  // Quality: ggml's fused dsv4_hc_comb is scalar C whose `a * b + c` steps
  // the llama.cpp build contracts into fmas (visible in tensor dumps).
  const bool fused = n == Numerics::Quality;
  auto& c = s.comb;
  for (int i = 0; i < kN; ++i) {
    float* r = &c[i * kN];
    float max = -INFINITY;
    for (int j = 0; j < kN; ++j) {
      const int k = 2 * kN + i * kN + j;
      r[j] = fused ? std::fma(mix[k], scale[2], base[k]) : mix[k] * scale[2] + base[k];
      max = r[j] > max ? r[j] : max;
    }
    float sum = 0.0f;
    for (int j = 0; j < kN; ++j) {
      r[j] = std::exp(r[j] - max);
      sum += r[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < kN; ++j) r[j] = fused ? std::fma(r[j], inv, eps) : r[j] * inv + eps;
  }

  normalize_cols(c, eps, n);
  for (int it = 1; it < iters; ++it) {
    normalize_rows(c, eps, n);
    normalize_cols(c, eps, n);
  }
  return s;
}

void hc_weighted_sum(std::span<const float> state, std::span<const float, kHcStreams> weights,
                     std::span<float> out, Numerics n) {
  const std::size_t n_embd = out.size();
  assert(state.size() == kN * n_embd);
  const float* __restrict s = state.data();
  float* __restrict o = out.data();
  float w[kN];
  for (int i = 0; i < kN; ++i) w[i] = weights[i];
  if (n == Numerics::Quality) {
    for (std::size_t d = 0; d < n_embd; ++d) {
      float acc = 0.0f;
      for (int i = 0; i < kN; ++i) acc = std::fma(s[i * n_embd + d], w[i], acc);
      o[d] = acc;
    }
  } else {
    // Vectorises over d; per element the same additions in the same order.
    for (std::size_t d = 0; d < n_embd; ++d) {
      float acc = 0.0f;
#pragma GCC unroll 8
      for (int i = 0; i < kN; ++i) acc += s[i * n_embd + d] * w[i];
      o[d] = acc;
    }
  }
}

void hc_post(std::span<const float> f, std::span<const float> state_in, const HcSplit& split,
             std::span<float> out, Numerics n) {
  const std::size_t n_embd = f.size();
  assert(state_in.size() == kN * n_embd && out.size() == kN * n_embd);
  const float* __restrict fv = f.data();
  const float* __restrict state = state_in.data();
  for (int j = 0; j < kN; ++j) {
    const float post = split.post[j];
    float comb[kN];
    for (int i = 0; i < kN; ++i) comb[i] = split.comb[i * kN + j];
    float* __restrict o = out.data() + j * n_embd;
    // Element by element the same operations in the same order either way;
    // Default's loop (no fma) vectorises over d.
    if (n == Numerics::Quality) {
      for (std::size_t d = 0; d < n_embd; ++d) {
        float acc = fv[d] * post;
        for (int i = 0; i < kN; ++i) acc = std::fma(state[i * n_embd + d], comb[i], acc);
        o[d] = acc;
      }
    } else {
      for (std::size_t d = 0; d < n_embd; ++d) {
        float acc = fv[d] * post;
#pragma GCC unroll 8
        for (int i = 0; i < kN; ++i) acc = acc + state[i * n_embd + d] * comb[i];
        o[d] = acc;
      }
    }
  }
}

std::array<float, kHcStreams> hc_head_weights(std::span<const float, kHcStreams> mix, float scale,
                                              std::span<const float, kHcStreams> base, float eps,
                                              Numerics n) {
  std::array<float, kHcStreams> w{};
  for (int i = 0; i < kN; ++i) {
    const float z = mix[i] * scale + base[i];
    w[i] = (n == Numerics::Default ? sigmoid_two_branch(z) : sigmoid_plain(z)) + eps;
  }
  return w;
}

}  // namespace ds4::cpu
