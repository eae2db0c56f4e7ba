#include "backend/cpu/ops_moe.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/ops_activation.h"
#include "backend/cpu/ops_topk.h"
#include "quant/dot.h"

namespace ds4::cpu {

void router_scores(std::span<const float> logits, std::span<float> scores, Numerics n) {
  assert(scores.size() == logits.size());
  for (std::size_t e = 0; e < logits.size(); ++e) scores[e] = std::sqrt(softplus(logits[e], n));
}

void expert_weights(std::span<const float> scores, std::span<const int32_t> ids, float scale,
                    std::span<float> weights, Numerics n) {
  assert(weights.size() == ids.size());
  float sum;
  if (n == Numerics::Default) {
    sum = 0.0f;
    for (int32_t e : ids) sum += scores[e];
  } else {
    double dsum = 0.0;
    for (int32_t e : ids) dsum += static_cast<double>(scores[e]);
    sum = static_cast<float>(dsum);
  }
  // ds4: if (sum < floor) sum = floor; ggml_clamp: max then min. Same value.
  sum = std::max(sum, kExpertWeightSumFloor);
  for (std::size_t s = 0; s < ids.size(); ++s) weights[s] = scores[ids[s]] / sum * scale;
}

void route_top_k(std::span<const float> scores, std::span<const float> bias, float scale,
                 std::span<int32_t> ids, std::span<float> weights, Numerics n) {
  assert(bias.empty() || bias.size() == scores.size());
  std::vector<float> selection(scores.begin(), scores.end());
  for (std::size_t e = 0; e < bias.size(); ++e) selection[e] += bias[e];
  if (n == Numerics::Quality)
    argsort_top_k_ggml(selection, ids);
  else
    top_k_desc(selection, ids);
  expert_weights(scores, ids, scale, weights, n);
}

void route_hash(std::span<const float> scores, std::span<const int32_t> tid2eid_row, float scale,
                std::span<int32_t> ids, std::span<float> weights, Numerics n) {
  assert(tid2eid_row.size() == ids.size());
  for (std::size_t s = 0; s < ids.size(); ++s) {
    const int32_t e = tid2eid_row[s];
    if (e < 0 || static_cast<std::size_t>(e) >= scores.size()) {
      throw std::out_of_range("hash-routed expert id " + std::to_string(e) + " outside [0, " +
                              std::to_string(scores.size()) + ")");
    }
    ids[s] = e;
  }
  expert_weights(scores, ids, scale, weights, n);
}

void swiglu_clamp(std::span<const float> gate, std::span<const float> up, float limit, float weight,
                  std::span<float> out, Numerics n) {
  assert(up.size() == gate.size() && out.size() == gate.size());
  if (n == Numerics::Quality && weight != 1.0f) {
    throw std::invalid_argument(
        "quality numerics apply the expert weight after the down projection");
  }
  if (n == Numerics::Default && std::strncmp(quant::dot_kernels().isa, "avx512", 6) == 0) {
    swiglu_clamp_default_avx512(gate.data(), up.data(), gate.size(), limit, weight, out.data());
    return;
  }
  if (n == Numerics::Default && std::strcmp(quant::dot_kernels().isa, "avx2") == 0) {
    swiglu_clamp_default_avx2(gate.data(), up.data(), gate.size(), limit, weight, out.data());
    return;
  }
  const bool clamp = limit > 1.0e-6f;
  for (std::size_t i = 0; i < gate.size(); ++i) {
    float g = gate[i];
    float u = up[i];
    if (clamp) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    out[i] = n == Numerics::Default ? silu(g, n) * u * weight : silu(g, n) * u;
  }
}

}  // namespace ds4::cpu
