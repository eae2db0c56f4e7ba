#include "backend/cpu/forward.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cpu/ops_norm.h"
#include "backend/cpu/report_inputs.h"
#include "backend/cpu/session_payload.h"
#include "backend/cpu/tensor_f32.h"
#include "core/error.h"
#include "core/thread_pool.h"
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
    if (!layer.attn_norm.present()) {  // in an absent shard: another stage's
      attn_.emplace_back();
      moe_.emplace_back();
      hc_attn_.emplace_back();
      hc_ffn_.emplace_back();
      continue;
    }
    attn_.emplace_back(std::in_place, layer, hp, numerics);
    moe_.emplace_back(std::in_place, layer, hp, numerics);
    hc_attn_.push_back({layer.hc_attn_fn, tensor_to_f32(layer.hc_attn_scale, 3), tensor_to_f32(layer.hc_attn_base, mixes)});
    hc_ffn_.push_back({layer.hc_ffn_fn, tensor_to_f32(layer.hc_ffn_scale, 3), tensor_to_f32(layer.hc_ffn_base, mixes)});
  }
  if (w.output_norm.present()) {  // absent in a stage before the last
    hc_head_ = {w.output_hc_fn, tensor_to_f32(w.output_hc_scale, 1), tensor_to_f32(w.output_hc_base, kHcStreams)};
    output_norm_ = tensor_to_f32(w.output_norm, hp.n_embd);
  }

}

void Forward::set_expert_source(std::unique_ptr<ExpertSource> source) {
  expert_source_ = std::move(source);
  for (auto &m : moe_)
    if (m) m->set_expert_source(expert_source_.get());
}

void Forward::set_tensor_split(backend::Collective *collective) {
  share_ = collective ? backend::TensorShare{collective->rank(), collective->size()} : backend::TensorShare{};
  if (share_.size < 1 || share_.rank < 0 || share_.rank >= share_.size)
    throw Error("tensor split: rank " + std::to_string(share_.rank) + " of " + std::to_string(share_.size));
  if (share_.size > n_vocab_) throw Error("tensor split: more ranks than vocab rows");
  collective_ = collective;
  for (auto &m : moe_)
    if (m) m->set_share(share_);
  for (auto &a : attn_)
    if (a) a->set_share(share_);
}

void Forward::set_matrix_inputs(backend::MatrixInputs *inputs) {
  if (inputs != nullptr && collective_ != nullptr)
    throw Error("a tensor-parallel rank cannot report whole matrices' inputs");
  inputs_ = inputs;
  for (auto &m : moe_)
    if (m) m->set_matrix_inputs(inputs);
  for (auto &a : attn_)
    if (a) a->set_matrix_inputs(inputs);
}

std::vector<std::vector<uint64_t>> Forward::expert_usage() const {
  std::vector<std::vector<uint64_t>> out;
  for (const auto &m : moe_) {
    if (m) {
      out.emplace_back(m->expert_usage().begin(), m->expert_usage().end());
    } else {
      out.emplace_back();
    }
  }
  return out;
}

void Forward::set_prefill_chunk(int n) {
  if (n < 1) throw Error("prefill chunk " + std::to_string(n) + " must be at least 1");
  chunk_ = n;
}

std::unique_ptr<backend::Session> Forward::new_session(int64_t n_ctx) const {
  return std::make_unique<Session>(*model_, numerics_, n_ctx);
}

bool Forward::owns(const backend::Session &session) const {
  const auto *cpu = dynamic_cast<const Session *>(&session);
  return cpu && &cpu->model() == model_ && cpu->numerics() == numerics_;
}

Session Forward::make_session(int64_t n_ctx) const { return Session(*model_, numerics_, n_ctx); }

std::vector<uint8_t> Forward::save_state(const backend::Session &session) const {
  if (!owns(session)) throw Error("save state: the session belongs to another backend, model or numerics");
  return serialize_payload(static_cast<const Session &>(session), chunk_);
}

void Forward::load_state(std::span<const uint8_t> payload, backend::Session &session) const {
  if (!owns(session)) throw Error("load state: the session belongs to another backend, model or numerics");
  deserialize_payload(payload, static_cast<Session &>(session));
}

std::vector<uint8_t> Forward::save_layers(const backend::Session &session, backend::LayerRange range) const {
  if (!owns(session)) throw Error("save layers: the session belongs to another backend, model or numerics");
  return serialize_layers(static_cast<const Session &>(session), range);
}

void Forward::load_layers(std::span<const uint8_t> state, backend::Session &session, backend::LayerRange range) const {
  if (!owns(session)) throw Error("load layers: the session belongs to another backend, model or numerics");
  deserialize_layers(state, static_cast<Session &>(session), range);
}

void Forward::save_session_file(const std::string &path, const backend::Session &session) const {
  const auto *cpu = dynamic_cast<const Session *>(&session);
  if (!cpu) throw Error(path + ": the session to save belongs to another backend");
  cpu::save_session_file(path, *cpu, chunk_);
}

void Forward::load_session_file(const std::string &path, backend::Session &session) const {
  auto *cpu = dynamic_cast<Session *>(&session);
  if (!cpu) throw Error(path + ": the session to load into belongs to another backend");
  cpu::load_session_file(path, *cpu);
}

Session &Forward::cpu_session(const backend::Part &part, size_t index) {
  if (!part.session) throw Error("eval: part " + std::to_string(index) + " has no session");
  auto *cpu = dynamic_cast<Session *>(part.session);
  if (!cpu) throw Error("eval: the session of part " + std::to_string(index) + " belongs to another backend");
  return *cpu;
}

void Forward::check(const Session &session, std::span<const int32_t> tokens) const {
  if (&session.model() != model_) throw Error("eval: the session belongs to another model");
  if (session.numerics() != numerics_) throw Error("eval: the session was made for other numerics");
  if (!session.consistent())
    throw Error("eval: the session was left incomplete by a cancelled evaluation; restore a snapshot first");
  backend::check_tokens(tokens, n_vocab_, session.size(), session.n_ctx());
}

void Forward::eval(std::span<const backend::Part> parts, backend::LayerRange range) {
  layer_end_ = backend::check_range(parts, range, static_cast<int>(attn_.size()));
  layer_begin_ = range.begin;
  head_ = range.end < 0;
  sessions_.resize(parts.size());
  size_t total = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    sessions_[p] = &cpu_session(parts[p], p);
    for (size_t q = 0; q < p; ++q)
      if (sessions_[q] == sessions_[p])
        throw Error("eval: parts " + std::to_string(q) + " and " + std::to_string(p) + " name the same session");
    check(*sessions_[p], parts[p].tokens);
    total += parts[p].tokens.size();
  }
  // The parts flattened in order: a session's tokens stay together and in
  // position order, which is all the layers need.
  std::vector<int32_t> tokens;
  std::vector<TokenPlace> places;
  tokens.reserve(total);
  places.reserve(total);
  for (size_t p = 0; p < parts.size(); ++p) {
    const int64_t pos0 = sessions_[p]->size();
    for (size_t i = 0; i < parts[p].tokens.size(); ++i) {
      tokens.push_back(parts[p].tokens[i]);
      places.push_back({p, pos0 + static_cast<int64_t>(i), static_cast<int64_t>(i)});
    }
  }
  progress_done_ = 0;
  progress_total_ = static_cast<int64_t>(total) * static_cast<int64_t>(layer_end_ - layer_begin_);
  for (size_t at = 0; at < total; at += static_cast<size_t>(chunk_)) {
    const size_t n = std::min(total - at, static_cast<size_t>(chunk_));
    eval_chunk(parts, std::span<const int32_t>(tokens).subspan(at, n),
               std::span<const TokenPlace>(places).subspan(at, n));
  }
}

void Forward::hc_mixes_batch(const float *H, int64_t n, const model::TensorView &fn, int n_mixes) {
  // Passes of up to 256 tokens bound the normalised copy of the states
  // (64 KiB a token at Flash widths).
  constexpr int64_t kPass = 256;
  const size_t hd = static_cast<size_t>(hc_dim_);
  batch_mix_.resize(std::max(batch_mix_.size(), static_cast<size_t>(n) * n_mixes));
  for (int64_t at = 0; at < n; at += kPass) {
    const int64_t m = std::min(kPass, n - at);
    batch_flat_.resize(static_cast<size_t>(m) * hd);
    parallel_ranges(pool_, m, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        rms_norm_unweighted(std::span<const float>(H + (at + t) * hc_dim_, hd),
                            std::span<float>(batch_flat_.data() + t * hc_dim_, hd), rms_eps_, numerics_);
    });
    report_inputs(inputs_, fn, {}, batch_flat_.data(), m, hc_dim_, n);
    flat_batch_.reset(batch_flat_.data(), m, hc_dim_, hc_dim_, numerics_);
    matmul(fn, -1, flat_batch_, batch_mix_.data() + at * n_mixes, n_mixes, pool_);
  }
}

void Forward::hc_pre_batch(const float *H, int64_t n, const HcWeights &w, float *X) {
  const size_t hd = static_cast<size_t>(hc_dim_);
  splits_.resize(static_cast<size_t>(n));
  hc_mixes_batch(H, n, w.fn, kHcMixes);
  // Tokens are independent (each its own split and output row).
  parallel_ranges(pool_, n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      HcSplit &split = splits_[static_cast<size_t>(t)];
      split = hc_split_sinkhorn(std::span<const float, kHcMixes>(batch_mix_.data() + t * kHcMixes, kHcMixes),
                                std::span<const float, 3>(w.scale.data(), 3),
                                std::span<const float, kHcMixes>(w.base.data(), kHcMixes), hc_eps_, numerics_,
                                sinkhorn_iters_);
      hc_weighted_sum(std::span<const float>(H + t * hc_dim_, hd), split.pre,
                      std::span<float>(X + t * n_embd_, static_cast<size_t>(n_embd_)), numerics_);
    }
  });
}

void Forward::hc_post_batch(const float *F, int64_t n, float *H) {
  const size_t hd = static_cast<size_t>(hc_dim_);
  // Tokens are independent: split them over the pool (each thread its own
  // next-state row), the same operations per token whatever the split.
  auto post = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> next;
    next.resize(hd);
    for (int64_t t = t0; t < t1; ++t) {
      const std::span<float> h(H + t * hc_dim_, hd);
      hc_post(std::span<const float>(F + t * n_embd_, static_cast<size_t>(n_embd_)), h,
              splits_[static_cast<size_t>(t)], next, numerics_);
      std::copy(next.begin(), next.end(), h.begin());
    }
  };
  parallel_ranges(pool_, n, post);
}

void Forward::head_batch(const float *H, int64_t n, float *logits) {
  if (output_norm_.empty()) throw Error("the output head is in a shard of the model that is not present in this process");
  const size_t hd = static_cast<size_t>(hc_dim_), ne = static_cast<size_t>(n_embd_);
  batch_x_.resize(std::max(batch_x_.size(), static_cast<size_t>(n) * ne));
  hc_mixes_batch(H, n, hc_head_.fn, kHcStreams);
  for (int64_t t = 0; t < n; ++t) {
    const auto weights = hc_head_weights(std::span<const float, kHcStreams>(batch_mix_.data() + t * kHcStreams, kHcStreams),
                                         hc_head_.scale[0],
                                         std::span<const float, kHcStreams>(hc_head_.base.data(), kHcStreams), hc_eps_,
                                         numerics_);
    const std::span<float> x(batch_x_.data() + t * n_embd_, ne);
    hc_weighted_sum(std::span<const float>(H + t * hc_dim_, hd), weights, x, numerics_);
    rms_norm(x, output_norm_, x, rms_eps_, numerics_);
  }
  head_batch_.reset(batch_x_.data(), n, n_embd_, n_embd_, numerics_);
  if (collective_ != nullptr) {
    split_vocab_head(n, logits);
    return;
  }
  report_inputs(inputs_, model_->weights().output, {}, batch_x_.data(), n, n_embd_, n);
  matmul(model_->weights().output, -1, head_batch_, logits, n_vocab_, pool_);
}

void Forward::split_vocab_head(int64_t n, float *logits) {
  const int ranks = share_.size;
  const auto [first, last] = backend::TensorShare::vocab_rows(n_vocab_, share_.rank, ranks);
  // This rank's rows as a matrix of their own: each logit is its row's dot
  // product alone, the same bits as in the whole head.
  model::TensorView rows = model_->weights().output;
  rows.data = rows.row(static_cast<uint64_t>(first));
  rows.ne[1] = static_cast<uint64_t>(last - first);
  rows.n_rows = rows.ne[1];
  rows.nbytes = rows.n_rows * rows.row_bytes;
  const size_t un = static_cast<size_t>(n), mine = static_cast<size_t>(last - first);
  split_logits_.resize(un * mine);
  matmul(rows, -1, head_batch_, split_logits_.data(), last - first, pool_);
  // Rank r's block is n rows of its vocab range; laid end to end in rank order.
  std::vector<size_t> counts(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const auto [a, b] = backend::TensorShare::vocab_rows(n_vocab_, r, ranks);
    counts[static_cast<size_t>(r)] = un * static_cast<size_t>(b - a);
  }
  gathered_logits_.resize(un * static_cast<size_t>(n_vocab_));
  collective_->gather(split_logits_.data(), counts, gathered_logits_.data());
  const float *block = gathered_logits_.data();
  for (int r = 0; r < ranks; ++r) {
    const auto [a, b] = backend::TensorShare::vocab_rows(n_vocab_, r, ranks);
    const size_t width = static_cast<size_t>(b - a);
    for (size_t t = 0; t < un; ++t)
      std::memcpy(logits + t * static_cast<size_t>(n_vocab_) + static_cast<size_t>(a), block + t * width,
                  width * sizeof(float));
    block += un * width;
  }
}

void Forward::eval_chunk(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                         std::span<const TokenPlace> places) {
  const size_t n = tokens.size();
  const size_t hd = static_cast<size_t>(hc_dim_);
  h_.resize(n * hd);
  batch_x_.resize(n * static_cast<size_t>(n_embd_));
  batch_f_.resize(batch_x_.size());

  if (expert_source_) {
    expert_source_->begin_tokens(static_cast<int64_t>(n));
    prefetch_hash_layers(tokens);
  }
  chunk_input(parts, tokens, places);
  layers_chunk(parts, tokens, places);
  finish_chunk(parts, tokens, places);
}

void Forward::prefetch_hash_layers(std::span<const int32_t> tokens) {
  // The hash-routed layers' experts follow from the token ids alone: their
  // reads can start before the first layer runs (the source takes as many as
  // it has room for, the earliest layers first).
  for (int il = layer_begin_; il < layer_end_; ++il) {
    MoeLayer &moe = present(moe_, static_cast<size_t>(il));
    if (!moe.hash_routed() || !expert_source_->wants_prefetch()) continue;
    moe.likely_experts(nullptr, tokens.data(), static_cast<int64_t>(tokens.size()), hash_experts_, pool_);
    expert_source_->prefetch(moe.weights(), hash_experts_);
  }
}

void Forward::chunk_input(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                          std::span<const TokenPlace> places) {
  const size_t n = tokens.size();
  const size_t hd = static_cast<size_t>(hc_dim_);
  if (layer_begin_ > 0) {  // a later pipeline stage: the previous range's states
    for (size_t t = 0; t < n; ++t)
      std::memcpy(h_.data() + t * hd, parts[places[t].part].hidden_in + static_cast<size_t>(places[t].index) * hd,
                  hd * sizeof(float));
    return;
  }
  // Embedding: every stream starts as the token's embedding row.
  const auto &embd = model_->weights().token_embd;
  if (!embd.present()) throw Error("token_embd is in a shard of the model that is not present in this process");
  parallel_ranges(pool_, static_cast<int64_t>(n), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float *h = h_.data() + static_cast<size_t>(t) * hd;
      quant::dequantize_row(embd.type, embd.row(static_cast<uint64_t>(tokens[static_cast<size_t>(t)])), h, n_embd_);
      for (int s = 1; s < kHcStreams; ++s) std::memcpy(h + static_cast<size_t>(s) * n_embd_, h, sizeof(float) * n_embd_);
    }
  });
}

void Forward::layers_chunk(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                           std::span<const TokenPlace> places) {
  const size_t n = tokens.size();
  const size_t hd = static_cast<size_t>(hc_dim_);
  chunk_states_.resize(n);
  chunk_pos_.resize(n);
  for (size_t t = 0; t < n; ++t) chunk_pos_[t] = places[t].pos;

  // Sublayers run over the whole chunk at once (batched matmuls; results do
  // not depend on the batch). A trace reports every token's intermediates,
  // which the sublayers keep for their last token only: tracing runs the
  // same code one token at a time, in the same order.
  const size_t step = trace_ ? 1 : n;
  const size_t ne = static_cast<size_t>(n_embd_);
  for (size_t il = static_cast<size_t>(layer_begin_); il < static_cast<size_t>(layer_end_); ++il) {
    for (size_t t = 0; t < n; ++t) chunk_states_[t] = &sessions_[places[t].part]->layers()[il];
    const int l = static_cast<int>(il);
    for (size_t at = 0; at < n; at += step) {
      const size_t m = std::min(step, n - at);
      float *h = h_.data() + at * hd;
      float *x = batch_x_.data() + at * ne, *f = batch_f_.data() + at * ne;
      const int64_t pos = chunk_pos_[at];
      hc_pre_batch(h, static_cast<int64_t>(m), hc_attn_[il], x);
      present(attn_, il).forward_tokens(x, static_cast<int64_t>(m), std::span<LayerKvState *const>(chunk_states_).subspan(at, m),
                               std::span<const int64_t>(chunk_pos_).subspan(at, m), f, pool_);
      // Tensor parallel: each rank's heads' part, added in rank order.
      if (collective_ != nullptr) collective_->sum(f, m * ne);
      hc_post_batch(f, static_cast<int64_t>(m), h);
      if (trace_) {
        const HcSplit &split = splits_[0];
        trace_("hc_mixes", l, pos, std::span<const float>(batch_mix_.data(), kHcMixes));
        trace_("hc_pre", l, pos, split.pre);
        trace_("hc_post", l, pos, split.post);
        trace_("hc_comb", l, pos, split.comb);
        trace_("hc_attn_pre", l, pos, std::span<const float>(x, ne));
        trace_("attn_norm", l, pos, present(attn_, il).last_xn());
        trace_("qr_norm", l, pos, present(attn_, il).last_qr());
        trace_("q", l, pos, present(attn_, il).last_q());
        trace_("kv", l, pos, present(attn_, il).last_kv());
        trace_("attn_derope", l, pos, present(attn_, il).last_heads());
        trace_("attn_out", l, pos, std::span<const float>(f, ne));
        trace_("hc_attn_post", l, pos, std::span<const float>(h, hd));
      }
    }
    for (size_t at = 0; at < n; at += step) {
      const size_t m = std::min(step, n - at);
      float *h = h_.data() + at * hd;
      float *x = batch_x_.data() + at * ne, *f = batch_f_.data() + at * ne;
      hc_pre_batch(h, static_cast<int64_t>(m), hc_ffn_[il], x);
      MoeLayer *next = il + 1 < static_cast<size_t>(layer_end_) ? &present(moe_, il + 1) : nullptr;
      present(moe_, il).forward_batch(x, tokens.data() + at, static_cast<int64_t>(m), f, pool_, next);
      // Tensor parallel: each rank's experts' part, added in rank order.
      if (collective_ != nullptr) collective_->sum(f, m * ne);
      hc_post_batch(f, static_cast<int64_t>(m), h);
      if (trace_) {
        const int64_t pos = chunk_pos_[at];
        trace_("hc_ffn_pre", l, pos, std::span<const float>(x, ne));
        trace_("ffn_out", l, pos, std::span<const float>(f, ne));
        trace_("l_last", l, pos, std::span<const float>(h, hd));
      }
    }
    if (progress_) {
      progress_done_ += static_cast<int64_t>(n);
      if (!progress_(progress_done_, progress_total_)) {
        for (Session *session : sessions_) session->mark_inconsistent();
        throw Cancelled("evaluation cancelled");
      }
    }
  }
}

void Forward::finish_chunk(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                           std::span<const TokenPlace> places) {
  const size_t n = tokens.size();
  const size_t hd = static_cast<size_t>(hc_dim_), nv = static_cast<size_t>(n_vocab_);
  // A part's tokens are one run of the chunk. Parts that keep every row's
  // logits get them straight into their buffer; the last rows of the others
  // go through the vocab head together (one read of it for all sessions).
  if (!head_) {
    hidden_out_chunk(parts, tokens, places);
    return;
  }
  std::vector<size_t> gathered;  // chunk rows whose logits become a session's last logits
  for (size_t a = 0; a < n;) {
    size_t b = a + 1;
    while (b < n && places[b].part == places[a].part) ++b;
    const SessionTokens &part = parts[places[a].part];
    const bool holds_last = places[b - 1].index + 1 == static_cast<int64_t>(part.tokens.size());
    auto &last = sessions_[places[a].part]->mutable_logits();
    if (part.all_logits) {
      float *rows = part.all_logits + static_cast<size_t>(places[a].index) * nv;
      head_batch(h_.data() + a * hd, static_cast<int64_t>(b - a), rows);
      if (holds_last) {
        last.resize(nv);
        std::copy(rows + (b - a - 1) * nv, rows + (b - a) * nv, last.begin());
      }
    } else if (holds_last && part.skip_logits) {
      last.clear();
    } else if (holds_last) {
      gathered.push_back(b - 1);
    }
    auto &tok = sessions_[places[a].part]->mutable_tokens();
    tok.insert(tok.end(), tokens.begin() + static_cast<std::ptrdiff_t>(a), tokens.begin() + static_cast<std::ptrdiff_t>(b));
    a = b;
  }
  if (gathered.empty()) return;
  const size_t g = gathered.size();
  if (g == 1) {  // one session's decode or prompt end: straight into its logits
    auto &last = sessions_[places[gathered[0]].part]->mutable_logits();
    last.resize(nv);
    head_batch(h_.data() + gathered[0] * hd, 1, last.data());
    return;
  }
  head_h_.resize(g * hd);
  head_logits_.resize(g * nv);
  for (size_t i = 0; i < g; ++i) std::memcpy(head_h_.data() + i * hd, h_.data() + gathered[i] * hd, hd * sizeof(float));
  head_batch(head_h_.data(), static_cast<int64_t>(g), head_logits_.data());
  for (size_t i = 0; i < g; ++i) {
    auto &last = sessions_[places[gathered[i]].part]->mutable_logits();
    last.resize(nv);
    std::copy(head_logits_.data() + i * nv, head_logits_.data() + (i + 1) * nv, last.begin());
  }
}

void Forward::hidden_out_chunk(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                               std::span<const TokenPlace> places) {
  const size_t hd = static_cast<size_t>(hc_dim_);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const SessionTokens &part = parts[places[t].part];
    std::memcpy(part.hidden_out + static_cast<size_t>(places[t].index) * hd, h_.data() + t * hd, hd * sizeof(float));
    Session &session = *sessions_[places[t].part];
    session.mutable_tokens().push_back(tokens[t]);
    session.mutable_logits().clear();
  }
}

}  // namespace ds4::cpu
