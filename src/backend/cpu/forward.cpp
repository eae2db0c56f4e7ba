#include "backend/cpu/forward.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cpu/ops_norm.h"
#include "backend/cpu/tensor_f32.h"
#include "core/error.h"
#include "model/deepseek4_model.h"
#include "quant/quant.h"

namespace ds4::cpu {

Forward::Forward(const model::Deepseek4Model &model, Numerics numerics, ThreadPool *pool)
    : model_(&model), numerics_(numerics), pool_(pool) {
  const auto &hp = model.hparams();
  const auto &w = model.weights();
  if (hp.hc_count != kHcStreams)
    throw Error("forward: " + std::to_string(hp.hc_count) + " hyper-connection streams; only " +
                std::to_string(kHcStreams) + " are supported");
  n_embd_ = static_cast<int>(hp.n_embd);
  hc_dim_ = static_cast<int>(hp.hc_dim());
  n_vocab_ = static_cast<int>(hp.n_vocab);
  rms_eps_ = hp.rms_eps;
  hc_eps_ = hp.hc_eps;
  sinkhorn_iters_ = static_cast<int>(hp.hc_sinkhorn_iters);

  const uint64_t mixes = hp.hc_mix_dim();
  attn_.reserve(w.layers.size());
  moe_.reserve(w.layers.size());
  for (const auto &layer : w.layers) {
    attn_.emplace_back(layer, hp, numerics);
    moe_.emplace_back(layer, hp, numerics);
    hc_attn_.push_back({layer.hc_attn_fn, tensor_to_f32(layer.hc_attn_scale, 3), tensor_to_f32(layer.hc_attn_base, mixes)});
    hc_ffn_.push_back({layer.hc_ffn_fn, tensor_to_f32(layer.hc_ffn_scale, 3), tensor_to_f32(layer.hc_ffn_base, mixes)});
  }
  hc_head_ = {w.output_hc_fn, tensor_to_f32(w.output_hc_scale, 1), tensor_to_f32(w.output_hc_base, kHcStreams)};
  output_norm_ = tensor_to_f32(w.output_norm, hp.n_embd);

  flat_.resize(static_cast<size_t>(hc_dim_));
  h_next_.resize(static_cast<size_t>(hc_dim_));
  mix_.resize(mixes);
  x_.resize(static_cast<size_t>(n_embd_));
  f_.resize(static_cast<size_t>(n_embd_));
}

void Forward::set_prefill_chunk(int n) {
  if (n < 1) throw Error("prefill chunk " + std::to_string(n) + " must be at least 1");
  chunk_ = n;
}

Session Forward::new_session(int64_t n_ctx) const { return Session(*model_, numerics_, n_ctx); }

void Forward::check(const Session &session, std::span<const int32_t> tokens) const {
  if (&session.model() != model_) throw Error("eval: the session belongs to another model");
  if (session.numerics() != numerics_) throw Error("eval: the session was made for other numerics");
  if (!session.consistent())
    throw Error("eval: the session was left incomplete by a cancelled evaluation; restore a snapshot first");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab_)
      throw Error("token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) +
                  ", outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
  const auto need = session.size() + static_cast<int64_t>(tokens.size());
  if (need > session.n_ctx())
    throw Error(std::to_string(session.size()) + " + " + std::to_string(tokens.size()) + " tokens do not fit the context of " +
                std::to_string(session.n_ctx()));
}

void Forward::eval(Session &session, std::span<const int32_t> tokens, float *all_logits) {
  check(session, tokens);
  progress_done_ = 0;
  progress_total_ = static_cast<int64_t>(tokens.size()) * static_cast<int64_t>(attn_.size());
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(chunk_)) {
    const size_t n = std::min(tokens.size() - at, static_cast<size_t>(chunk_));
    eval_chunk(session, tokens.subspan(at, n), all_logits ? all_logits + at * static_cast<size_t>(n_vocab_) : nullptr,
               at + n == tokens.size());
  }
}

void Forward::hc_pre(std::span<const float> h, const HcWeights &w, std::span<float> x, HcSplit &split) {
  rms_norm_unweighted(h, flat_, rms_eps_, numerics_);
  flat_cache_.reset(flat_.data(), hc_dim_, numerics_);
  matvec(w.fn, -1, flat_cache_, mix_.data(), pool_);
  split = hc_split_sinkhorn(std::span<const float, kHcMixes>(mix_.data(), kHcMixes),
                            std::span<const float, 3>(w.scale.data(), 3),
                            std::span<const float, kHcMixes>(w.base.data(), kHcMixes), hc_eps_, numerics_,
                            sinkhorn_iters_);
  hc_weighted_sum(h, split.pre, x, numerics_);
}

void Forward::head(std::span<const float> h, std::span<float> logits) {
  rms_norm_unweighted(h, flat_, rms_eps_, numerics_);
  flat_cache_.reset(flat_.data(), hc_dim_, numerics_);
  matvec(hc_head_.fn, -1, flat_cache_, mix_.data(), pool_);
  const auto weights = hc_head_weights(std::span<const float, kHcStreams>(mix_.data(), kHcStreams), hc_head_.scale[0],
                                       std::span<const float, kHcStreams>(hc_head_.base.data(), kHcStreams), hc_eps_,
                                       numerics_);
  hc_weighted_sum(h, weights, x_, numerics_);
  rms_norm(x_, output_norm_, x_, rms_eps_, numerics_);
  matvec(model_->weights().output, -1, x_.data(), logits.data(), numerics_, pool_);
}

void Forward::eval_chunk(Session &session, std::span<const int32_t> tokens, float *all_logits, bool last_chunk) {
  const size_t n = tokens.size();
  const size_t hd = static_cast<size_t>(hc_dim_);
  const int64_t pos0 = session.size();
  h_.resize(n * hd);

  // Embedding: every stream starts as the token's embedding row.
  const auto &embd = model_->weights().token_embd;
  for (size_t t = 0; t < n; ++t) {
    float *h = h_.data() + t * hd;
    quant::dequantize_row(embd.type, embd.row(static_cast<uint64_t>(tokens[t])), h, n_embd_);
    for (int s = 1; s < kHcStreams; ++s) std::memcpy(h + static_cast<size_t>(s) * n_embd_, h, sizeof(float) * n_embd_);
  }

  HcSplit split;
  for (size_t il = 0; il < attn_.size(); ++il) {
    LayerKvState &state = session.layers()[il];
    // Attention for every token in order: token t reads the cache as tokens
    // < t of this chunk left it.
    for (size_t t = 0; t < n; ++t) {
      const std::span<float> h(h_.data() + t * hd, hd);
      const int64_t pos = pos0 + static_cast<int64_t>(t);
      hc_pre(h, hc_attn_[il], x_, split);
      attn_[il].forward(x_, pos, state, f_, pool_);
      hc_post(f_, h, split, h_next_, numerics_);
      std::copy(h_next_.begin(), h_next_.end(), h.begin());
      if (trace_) {
        const int l = static_cast<int>(il);
        trace_("hc_mixes", l, pos, mix_);
        trace_("hc_pre", l, pos, split.pre);
        trace_("hc_post", l, pos, split.post);
        trace_("hc_comb", l, pos, split.comb);
        trace_("hc_attn_pre", l, pos, x_);
        trace_("attn_norm", l, pos, attn_[il].last_xn());
        trace_("qr_norm", l, pos, attn_[il].last_qr());
        trace_("q", l, pos, attn_[il].last_q());
        trace_("kv", l, pos, attn_[il].last_kv());
        trace_("attn_derope", l, pos, attn_[il].last_heads());
        trace_("attn_out", l, pos, f_);
        trace_("hc_attn_post", l, pos, h);
      }
    }
    for (size_t t = 0; t < n; ++t) {
      const std::span<float> h(h_.data() + t * hd, hd);
      hc_pre(h, hc_ffn_[il], x_, split);
      moe_[il].forward(x_, tokens[t], f_, pool_);
      hc_post(f_, h, split, h_next_, numerics_);
      std::copy(h_next_.begin(), h_next_.end(), h.begin());
      if (trace_) {
        const int l = static_cast<int>(il);
        const int64_t pos = pos0 + static_cast<int64_t>(t);
        trace_("hc_ffn_pre", l, pos, x_);
        trace_("ffn_out", l, pos, f_);
        trace_("l_last", l, pos, h);
      }
    }
    if (progress_) {
      progress_done_ += static_cast<int64_t>(n);
      if (!progress_(progress_done_, progress_total_)) {
        session.mark_inconsistent();
        throw Cancelled("evaluation cancelled");
      }
    }
  }

  auto &tok = session.mutable_tokens();
  tok.insert(tok.end(), tokens.begin(), tokens.end());
  auto &last = session.mutable_logits();
  last.resize(static_cast<size_t>(n_vocab_));
  const size_t nv = static_cast<size_t>(n_vocab_);
  if (all_logits) {
    for (size_t t = 0; t < n; ++t) head({h_.data() + t * hd, hd}, {all_logits + t * nv, nv});
    std::copy(all_logits + (n - 1) * nv, all_logits + n * nv, last.begin());
  } else if (last_chunk) {
    head({h_.data() + (n - 1) * hd, hd}, last);
  }
}

std::vector<int32_t> Forward::generate_greedy(Session &session, int n) {
  if (n < 0) throw Error("greedy: token count " + std::to_string(n) + " is negative");
  if (n == 0) return {};
  if (session.size() == 0) throw Error("greedy: the session holds no tokens to continue");
  if (session.size() + n - 1 > session.n_ctx())
    throw Error("greedy: " + std::to_string(session.size()) + " + " + std::to_string(n - 1) +
                " tokens do not fit the context of " + std::to_string(session.n_ctx()));
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto logits = session.logits();
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    out.push_back(static_cast<int32_t>(best));
    if (i + 1 < n) {
      const int32_t id = out.back();
      eval(session, std::span<const int32_t>(&id, 1));
    }
  }
  return out;
}

}  // namespace ds4::cpu
