// MoE routing and expert activation: sqrt-softplus router scores, biased
// top-k or token-hash expert selection, normalised and scaled expert
// weights, clamped SwiGLU (MODEL.md 4.8, traps T13, T14).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/numerics.h"

namespace ds4::cpu {

// Smallest normal f16: the floor on the selected scores' sum (ds4 and llama.cpp).
inline constexpr float kExpertWeightSumFloor = 6.103515625e-5f;

// scores[e] = sqrtf(softplus(logits[e])); softplus per ops_activation.h.
void router_scores(std::span<const float> logits, std::span<float> scores, Numerics n);

// weights[s] = scores[ids[s]] / max(sum_s scores[ids[s]], 2^-14) * scale.
// Default (ds4): the sum in float, slots in order. Quality (ggml sum_rows):
// the sum in double, rounded to float. Both then divide and multiply.
void expert_weights(std::span<const float> scores, std::span<const int32_t> ids, float scale,
                    std::span<float> weights, Numerics n);

// Non-hash layers: ids = top-k of scores + bias (the bias steers selection
// only; ties: Default -> lower expert, Quality -> as ggml_argsort_top_k
// sorts them), weights from the unbiased scores.
// ids.size() = weights.size() = k. bias may be empty (no exp_probs_b).
void route_top_k(std::span<const float> scores, std::span<const float> bias, float scale,
                 std::span<int32_t> ids, std::span<float> weights, Numerics n);

// Hash layers: ids = tid2eid[token] in table order (no bias), weighted by the
// router scores like route_top_k. Throws std::out_of_range on an expert id
// outside scores.
void route_hash(std::span<const float> scores, std::span<const int32_t> tid2eid_row, float scale,
                std::span<int32_t> ids, std::span<float> weights, Numerics n);

// Where the routed expert's weight is applied. Default (ds4, DeepSeek's
// model.py): on the SwiGLU output, before Q8_K quantisation and the down
// projection. Quality (llama.cpp build_moe_ffn): on the down projection's output.
constexpr bool expert_weight_before_down(Numerics n) { return n == Numerics::Default; }

// out[i] = silu(min(gate[i], limit)) * clamp(up[i], -limit, limit) [* weight].
// limit <= 1e-6 disables the clamp (ds4 and llama.cpp both do that).
// Default: (silu(g) * u) * weight with ds4's two-branch SiLU; pass weight 1
// for the shared expert (exact). Quality: g / (1 + exp(-g)) * u (ggml
// swiglu_clamp); weight must be 1, since llama.cpp weights after down.
// Throws std::invalid_argument on a Quality call with weight != 1.
void swiglu_clamp(std::span<const float> gate, std::span<const float> up, float limit, float weight,
                  std::span<float> out, Numerics n);

// swiglu_clamp's Default path at the avx512 levels (ops_moe_avx512.cpp), the
// same bits as the scalar loop; call only where the dot kernels run AVX-512.
void swiglu_clamp_default_avx512(const float* gate, const float* up, size_t n, float limit, float weight, float* out);
// The same at the avx2 level (ops_moe_avx2.cpp).
void swiglu_clamp_default_avx2(const float* gate, const float* up, size_t n, float limit, float weight, float* out);

}  // namespace ds4::cpu
