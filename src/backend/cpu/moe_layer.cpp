#include "backend/cpu/moe_layer.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backend/cpu/ops_moe.h"
#include "backend/cpu/ops_norm.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "quant/quant.h"

namespace ds4::cpu {
namespace {

[[noreturn]] void fail(uint32_t layer, const std::string& what) {
  throw Error("moe of layer " + std::to_string(layer) + ": " + what);
}

void check_shape(uint32_t layer, const model::TensorView& t, uint64_t ne0, uint64_t ne1, uint64_t ne2) {
  if (!t.present()) fail(layer, "weight " + std::string(t.name.empty() ? "(unnamed)" : t.name) + " missing");
  if (t.ne[0] != ne0 || t.ne[1] != ne1 || t.ne[2] != ne2 || t.ne[3] != 1)
    fail(layer, "weight " + std::string(t.name) + " has an unexpected shape");
}

}  // namespace

MoeLayer::MoeLayer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, Numerics numerics)
    : w_(&layer),
      numerics_(numerics),
      index_(layer.index),
      hash_routed_(hp.is_hash_layer(layer.index)),
      n_embd_(static_cast<int>(hp.n_embd)),
      n_ff_(static_cast<int>(hp.n_ff_exp)),
      n_ff_shared_(static_cast<int>(hp.n_ff_exp * hp.n_expert_shared)),
      n_expert_(static_cast<int>(hp.n_expert)),
      n_used_(static_cast<int>(hp.n_expert_used)),
      n_vocab_(static_cast<int>(hp.n_vocab)),
      eps_(hp.rms_eps),
      scale_(hp.expert_weights_scale),
      clamp_exp_(hp.swiglu_clamp_exp.at(layer.index)),
      clamp_shexp_(hp.clamp_shexp(layer.index)) {
  // ds4 and llama.cpp's deepseek4 graph always normalise; the unnormalised
  // variant is not part of this model family.
  if (!hp.expert_weights_norm) fail(index_, "expert_weights_norm = false is not supported");
  if (n_used_ <= 0 || n_used_ > n_expert_) fail(index_, "bad expert counts");
  const uint64_t d = hp.n_embd, ff = hp.n_ff_exp, ne = hp.n_expert, sff = static_cast<uint64_t>(n_ff_shared_);
  check_shape(index_, layer.ffn_norm, d, 1, 1);
  check_shape(index_, layer.ffn_gate_inp, d, ne, 1);
  check_shape(index_, layer.ffn_gate_exps, d, ff, ne);
  check_shape(index_, layer.ffn_up_exps, d, ff, ne);
  check_shape(index_, layer.ffn_down_exps, ff, d, ne);
  check_shape(index_, layer.ffn_gate_shexp, d, sff, 1);
  check_shape(index_, layer.ffn_up_shexp, d, sff, 1);
  check_shape(index_, layer.ffn_down_shexp, sff, d, 1);
  if (hash_routed_) {
    check_shape(index_, layer.ffn_gate_tid2eid, hp.n_expert_used, hp.n_vocab, 1);
    if (layer.ffn_gate_tid2eid.type != GgmlType::I32) fail(index_, "ffn_gate_tid2eid is not i32");
  } else if (layer.exp_probs_b.present()) {
    check_shape(index_, layer.exp_probs_b, ne, 1, 1);
    bias_.resize(static_cast<size_t>(ne));
    quant::dequantize_row(layer.exp_probs_b.type, layer.exp_probs_b.data, bias_.data(), n_expert_);
  }
  norm_.resize(static_cast<size_t>(d));
  quant::dequantize_row(layer.ffn_norm.type, layer.ffn_norm.data, norm_.data(), n_embd_);

  xn_.resize(static_cast<size_t>(d));
  logits_.resize(static_cast<size_t>(ne));
  scores_.resize(static_cast<size_t>(ne));
  ids_.resize(static_cast<size_t>(n_used_));
  weights_.resize(static_cast<size_t>(n_used_));
  tid_row_.resize(static_cast<size_t>(n_used_));
  const size_t ffmax = static_cast<size_t>(std::max(n_ff_, n_ff_shared_));
  gate_.resize(ffmax);
  up_.resize(ffmax);
  mid_.resize(ffmax);
  down_.resize(static_cast<size_t>(d));
  acc_.resize(static_cast<size_t>(d));
}

// mid = swiglu_clamp(gate.xn, up.xn) [* weight_before_down]; down_ = down.mid.
void MoeLayer::expert_ffn(const model::TensorView& gate, const model::TensorView& up, const model::TensorView& down,
                          int expert, float limit, float weight_before_down, ThreadPool* pool) {
  const size_t ff = static_cast<size_t>(gate.ne[1]);
  matvec(gate, expert, xn_cache_, gate_.data(), pool);
  matvec(up, expert, xn_cache_, up_.data(), pool);
  swiglu_clamp(std::span<const float>(gate_.data(), ff), std::span<const float>(up_.data(), ff), limit,
               weight_before_down, std::span<float>(mid_.data(), ff), numerics_);
  mid_cache_.reset(mid_.data(), static_cast<int64_t>(ff), numerics_);
  matvec(down, expert, mid_cache_, down_.data(), pool);
}

void MoeLayer::forward(std::span<const float> x, int32_t token_id, std::span<float> out, ThreadPool* pool) {
  if (x.size() != static_cast<size_t>(n_embd_) || out.size() != static_cast<size_t>(n_embd_))
    fail(index_, "input/output width must be n_embd = " + std::to_string(n_embd_));
  // Validate before any work so a bad token leaves the last selection intact.
  if (hash_routed_ && (token_id < 0 || token_id >= n_vocab_))
    fail(index_, "token id " + std::to_string(token_id) + " outside [0, " + std::to_string(n_vocab_) + ")");
  const model::LayerWeights& w = *w_;

  rms_norm(x, norm_, xn_, eps_, numerics_);
  // Router, gate_exps and up_exps all read xn: each activation form once.
  xn_cache_.reset(xn_.data(), n_embd_, numerics_);
  matvec(w.ffn_gate_inp, -1, xn_cache_, logits_.data(), pool);
  router_scores(logits_, scores_, numerics_);

  if (hash_routed_) {
    // The mapping gives no alignment promise for an int32 row: copy it.
    std::memcpy(tid_row_.data(), w.ffn_gate_tid2eid.row(static_cast<uint64_t>(token_id)),
                tid_row_.size() * sizeof(int32_t));
    try {
      route_hash(scores_, tid_row_, scale_, ids_, weights_, numerics_);
    } catch (const std::out_of_range& e) {
      fail(index_, std::string(e.what()) + " (token " + std::to_string(token_id) + ")");
    }
  } else {
    route_top_k(scores_, bias_, scale_, ids_, weights_, numerics_);
  }

  // Routed experts, summed in slot order (ds4 and llama.cpp agree).
  const bool before = expert_weight_before_down(numerics_);
  std::fill(acc_.begin(), acc_.end(), 0.0f);
  for (int s = 0; s < n_used_; ++s) {
    const float wt = weights_[static_cast<size_t>(s)];
    expert_ffn(w.ffn_gate_exps, w.ffn_up_exps, w.ffn_down_exps, ids_[static_cast<size_t>(s)], clamp_exp_,
               before ? wt : 1.0f, pool);
    if (before) {
      for (size_t i = 0; i < acc_.size(); ++i) acc_[i] += down_[i];
    } else {
      for (size_t i = 0; i < acc_.size(); ++i) acc_[i] += down_[i] * wt;
    }
  }

  // Shared expert, unweighted, added after the routed sum.
  expert_ffn(w.ffn_gate_shexp, w.ffn_up_shexp, w.ffn_down_shexp, -1, clamp_shexp_, 1.0f, pool);
  for (size_t i = 0; i < acc_.size(); ++i) out[i] = acc_[i] + down_[i];
}

}  // namespace ds4::cpu
