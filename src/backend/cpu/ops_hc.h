// Hyper-connections (4 streams): the split of the 24 control mixes into
// pre/post weights and the Sinkhorn-normalised 4x4 combine matrix, the
// pre-sum of the streams, the post update, and the output head's weights.
// MODEL.md sections 4.2, 4.3, 4.9; traps T1-T3.
#pragma once

#include <array>
#include <span>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

inline constexpr int kHcStreams = 4;
inline constexpr int kHcMixes = (2 + kHcStreams) * kHcStreams;  // 24
inline constexpr int kHcSinkhornIters = 20;

struct HcSplit {
  std::array<float, kHcStreams> pre{};   // sigmoid(mix*s0 + b) + eps
  std::array<float, kHcStreams> post{};  // 2 * sigmoid(mix*s1 + b)
  // comb[i * 4 + j] = weight of source stream i in destination stream j.
  std::array<float, kHcStreams * kHcStreams> comb{};
};

// mix = hc_*_fn . RMSNorm_unweighted(H), scale = hc_*_scale (3), base =
// hc_*_base (24). Combine matrix: softmax over j of each source row i, + eps,
// one column pass, then (iters - 1) x (row pass, column pass); every pass
// multiplies by the reciprocal of its sum.
// Default (ds4 hc_split_sinkhorn_one): a pass's sum is (v0+v1+v2+v3) + eps.
// Quality (ggml dsv4_hc_comb): a pass's sum starts from eps: eps+v0+v1+v2+v3.
// pre/post are 1/(1+exp(-z)) in both (ds4 writes post as 2/(1+exp(-z)),
// which rounds the same as ggml's 2 * sigmoid).
HcSplit hc_split_sinkhorn(std::span<const float, kHcMixes> mix, std::span<const float, 3> scale,
                          std::span<const float, kHcMixes> base, float eps, Numerics n,
                          int iters = kHcSinkhornIters);

// out[d] = sum_i weights[i] * state[i][d], starting from 0, streams in order
// (ds4 hc_weighted_sum_one and ggml dsv4_hc_pre agree). state is stream-major
// [4][n_embd]. Quality fuses each step into an fma, as the compiler does in
// the llama.cpp build (ggml's scalar `sum += x * w` loops are contracted; the
// tensor dumps of ds4-ref-runner show it bit for bit); Default does not.
void hc_weighted_sum(std::span<const float> state, std::span<const float, kHcStreams> weights,
                     std::span<float> out, Numerics n = Numerics::Default);

// out[j][d] = post[j] * f[d] + sum_i comb[i*4+j] * state_in[i][d], terms in that
// order (ds4 hc_post_one and ggml dsv4_hc_post agree). out must not alias
// state_in.
// Quality: each "+ state * comb" step is an fma (see hc_weighted_sum).
void hc_post(std::span<const float> f, std::span<const float> state_in, const HcSplit& split,
             std::span<float> out, Numerics n = Numerics::Default);

// Output head: w[i] = sigmoid(mix[i] * scale + base[i]) + eps, no Sinkhorn.
// Default: ds4's two-branch sigmoid; Quality: ggml's 1/(1+exp(-z)).
std::array<float, kHcStreams> hc_head_weights(std::span<const float, kHcStreams> mix, float scale,
                                              std::span<const float, kHcStreams> base, float eps,
                                              Numerics n);

}  // namespace ds4::cpu
