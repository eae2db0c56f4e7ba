#include "backend/cpu/attention_layer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/matvec.h"
#include "backend/cpu/ops_attention.h"
#include "backend/cpu/ops_norm.h"
#include "backend/cpu/ops_qat.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

namespace ds4::cpu {
namespace {

std::vector<float> to_f32(const model::TensorView &t, uint64_t n) {
  if (!t.present() || t.ne[0] * t.n_rows != n)
    throw Error("attention: tensor " + std::string(t.name) + " has a bad size");
  std::vector<float> v(static_cast<size_t>(n));
  quant::dequantize_row(t.type, t.data, v.data(), static_cast<int64_t>(n));
  return v;
}

}  // namespace

AttentionLayer::AttentionLayer(const model::LayerWeights &layer, const model::Deepseek4HParams &hp, Numerics numerics)
    : w_(&layer),
      numerics_(numerics),
      ratio_(static_cast<int>(layer.compress_ratio)),
      n_embd_(static_cast<int>(hp.n_embd)),
      n_head_(static_cast<int>(hp.n_head)),
      head_dim_(static_cast<int>(hp.head_dim)),
      n_rot_(static_cast<int>(hp.n_rot)),
      q_lora_(static_cast<int>(hp.q_lora_rank)),
      o_groups_(static_cast<int>(hp.o_groups)),
      o_lora_(static_cast<int>(hp.o_lora_rank)),
      eps_(hp.rms_eps),
      rope_(rope_params(hp, layer.compress_ratio, numerics)) {
  attn_norm_ = to_f32(layer.attn_norm, hp.n_embd);
  q_a_norm_ = to_f32(layer.attn_q_a_norm, hp.q_lora_rank);
  kv_norm_ = to_f32(layer.attn_kv_norm, hp.head_dim);
  sinks_ = to_f32(layer.attn_sinks, hp.n_head);
  if (n_head_ % o_groups_ != 0 || (head_dim_ - n_rot_) % kFp8BlockSize != 0)
    throw Error("attention layer " + std::to_string(layer.index) + ": heads or head_dim do not fit");
  // The file stores attn_output_a as {H*hd/G, o_lora*G}; row g*o_lora + j is
  // output j of group g (llama.cpp views it {H*hd/G, o_lora, G}). Viewing it
  // 3-D lets matvec pick group g as an "expert".
  out_a_grouped_ = layer.attn_output_a;
  if (out_a_grouped_.ne[0] != hp.o_group_in() || out_a_grouped_.ne[1] != uint64_t{hp.o_lora_rank} * hp.o_groups)
    throw Error("attention layer " + std::to_string(layer.index) + ": attn_output_a has a bad shape");
  out_a_grouped_.ne[1] = hp.o_lora_rank;
  out_a_grouped_.ne[2] = hp.o_groups;
  if (ratio_ == 4) indexer_.emplace(layer, hp, numerics);
}

void AttentionLayer::forward(std::span<const float> x, int64_t pos, LayerKvState &state, std::span<float> out,
                             ThreadPool *pool) {
  if (x.size() != static_cast<size_t>(n_embd_) || out.size() != static_cast<size_t>(n_embd_))
    throw Error("attention forward: x and out must be n_embd wide");
  forward_batch(x.data(), 1, pos, state, out.data(), pool);
}

void AttentionLayer::forward_batch(const float *X, int64_t n, int64_t pos0, LayerKvState &state, float *OUT,
                                   ThreadPool *pool) {
  if (n <= 0) return;
  if (state.ratio() != ratio_ || state.head_dim() != head_dim_ || state.numerics() != numerics_)
    throw Error(
        "attention forward: the state belongs to another kind of layer "
        "or numerics");
  for (int64_t at = 0; at < n; at += kMaxBatch) {
    const int64_t m = std::min(kMaxBatch, n - at);
    forward_pass(X + at * n_embd_, m, pos0 + at, state, OUT + at * n_embd_, pool);
  }
}

void AttentionLayer::forward_pass(const float *X, int64_t n, int64_t pos0, LayerKvState &state, float *OUT,
                                  ThreadPool *pool) {
  const size_t un = static_cast<size_t>(n);
  const size_t hq = static_cast<size_t>(n_head_) * head_dim_;
  batch_ = n;
  xn_.resize(un * n_embd_);
  qa_.resize(un * q_lora_);
  qr_.resize(un * q_lora_);
  q_.resize(un * hq);
  kv_.resize(un * head_dim_);
  heads_.resize(un * hq);
  low_.resize(un * o_groups_ * o_lora_);

  for (int64_t t = 0; t < n; ++t)
    rms_norm(std::span<const float>(X + t * n_embd_, static_cast<size_t>(n_embd_)), attn_norm_,
             std::span<float>(xn_).subspan(static_cast<size_t>(t) * n_embd_, static_cast<size_t>(n_embd_)), eps_,
             numerics_);
  // q_a, kv and the compressors read the same xn: each form converted once.
  xn_batch_.reset(xn_.data(), n, n_embd_, n_embd_, numerics_);
  matmul(w_->attn_q_a, -1, xn_batch_, qa_.data(), q_lora_, pool);
  matmul(w_->attn_kv, -1, xn_batch_, kv_.data(), head_dim_, pool);
  for (int64_t t = 0; t < n; ++t) {
    const auto off = static_cast<size_t>(t) * q_lora_;
    rms_norm(std::span<const float>(qa_).subspan(off, static_cast<size_t>(q_lora_)), q_a_norm_,
             std::span<float>(qr_).subspan(off, static_cast<size_t>(q_lora_)), eps_, numerics_);
  }
  qr_batch_.reset(qr_.data(), n, q_lora_, q_lora_, numerics_);
  matmul(w_->attn_q_b, -1, qr_batch_, q_.data(), static_cast<int64_t>(hq), pool);
  if (Compressor *c = state.attn_compressor()) {
    comp_kv_.resize(un * c->state_width());
    comp_score_.resize(comp_kv_.size());
    c->project(xn_batch_, comp_kv_.data(), comp_score_.data(), pool);
  }
  index_projected_ = false;
  if (Compressor *c = state.index_compressor()) {
    index_kv_.resize(un * c->state_width());
    index_score_.resize(index_kv_.size());
    c->project(xn_batch_, index_kv_.data(), index_score_.data(), pool);
    // The indexer scores rows only once there are more than top_k of them;
    // then its two projections run batched too.
    const int64_t rows_at_end = state.index_rows().rows() + (pos0 + n) / c->ratio() - pos0 / c->ratio();
    if (rows_at_end > indexer_->top_k()) {
      index_projected_ = true;
      index_q_.resize(un * static_cast<size_t>(indexer_->n_head()) * indexer_->head_dim());
      index_w_.resize(un * static_cast<size_t>(indexer_->n_head()));
      indexer_->project(qr_batch_, xn_batch_, index_q_.data(), index_w_.data(), pool);
    }
  }

  // Token by token: each token updates the cache, then attends over it.
  for (int64_t t = 0; t < n; ++t) token_core(t, pos0 + t, state, pool);

  // Grouped output LoRA: group g's o_lora outputs read only its heads.
  const int64_t group_in = static_cast<int64_t>(n_head_ / o_groups_) * head_dim_;
  const int64_t low_width = static_cast<int64_t>(o_groups_) * o_lora_;
  for (int g = 0; g < o_groups_; ++g) {
    heads_batch_.reset(heads_.data() + g * group_in, n, group_in, static_cast<int64_t>(hq), numerics_);
    matmul(out_a_grouped_, g, heads_batch_, low_.data() + static_cast<size_t>(g) * o_lora_, low_width, pool);
  }
  low_batch_.reset(low_.data(), n, low_width, low_width, numerics_);
  matmul(w_->attn_output_b, -1, low_batch_, OUT, n_embd_, pool);
}

void AttentionLayer::token_core(int64_t t, int64_t pos, LayerKvState &state, ThreadPool *pool) {
  const size_t hq = static_cast<size_t>(n_head_) * head_dim_;
  const std::span<float> q(q_.data() + static_cast<size_t>(t) * hq, hq);
  const std::span<float> kv(kv_.data() + static_cast<size_t>(t) * head_dim_, static_cast<size_t>(head_dim_));
  const std::span<const float> xn = this->xn(t), qr = this->qr(t);
  for (int h = 0; h < n_head_; ++h) {
    std::span<float> qh = q.subspan(static_cast<size_t>(h) * head_dim_, static_cast<size_t>(head_dim_));
    rms_norm_unweighted(qh, qh, eps_, numerics_);
  }
  rms_norm(kv, kv_norm_, kv, eps_, numerics_);

  const RopeCache fwd = rope_cache(rope_, pos, /*inverse=*/false);
  rope_heads(q, n_head_, head_dim_, fwd);
  rope_apply(kv.subspan(static_cast<size_t>(head_dim_ - n_rot_)), fwd);
  if (numerics_ == Numerics::Default) fp8_e4m3_round_trip(kv.first(static_cast<size_t>(head_dim_ - n_rot_)));

  // Cache update before attention: this token's row, and a compressed row
  // this token completes, are visible to it (trap T9).
  state.push_raw(kv, pos);
  if (Compressor *c = state.attn_compressor()) {
    const size_t off = static_cast<size_t>(t) * c->state_width();
    if (auto row = c->push(comp_kv_.data() + off, comp_score_.data() + off, pos)) state.append_compressed(*row);
  }
  allowed_.clear();
  if (Compressor *c = state.index_compressor()) {
    const size_t off = static_cast<size_t>(t) * c->state_width();
    if (auto row = c->push(index_kv_.data() + off, index_score_.data() + off, pos)) state.append_index(*row);
    // Every index row is scored every token: f16 rows are read in place
    // rather than converted into a scratch copy of the whole cache.
    const KvRows &rows = state.index_rows();
    float *iq = index_projected_ ? index_q_.data() + static_cast<size_t>(t) * indexer_->n_head() * indexer_->head_dim()
                                 : nullptr;
    float *iw = index_projected_ ? index_w_.data() + static_cast<size_t>(t) * indexer_->n_head() : nullptr;
    if (rows.is_f16()) {
      index_rows_f16_.clear();
      for (int64_t i = 0; i < rows.rows(); ++i) index_rows_f16_.push_back(rows.f16_row(i));
      allowed_ = iq ? indexer_->allowed_projected(iq, iw, pos, index_rows_f16_, pool)
                    : indexer_->allowed(qr, xn, pos, index_rows_f16_, pool);
    } else {
      index_rows_.clear();
      for (int64_t i = 0; i < rows.rows(); ++i) index_rows_.push_back(rows.row(i, nullptr));
      allowed_ = iq ? indexer_->allowed_projected(iq, iw, pos, index_rows_, pool)
                    : indexer_->allowed(qr, xn, pos, index_rows_, pool);
    }
  } else {
    for (int64_t i = 0; i < state.n_compressed(); ++i) allowed_.push_back(static_cast<int32_t>(i));
  }

  float *heads = heads_.data() + static_cast<size_t>(t) * hq;
  attend(state, q.data(), heads, pool);
  const RopeCache inv = rope_cache(rope_, pos, /*inverse=*/true);
  rope_heads(std::span<float>(heads, hq), n_head_, head_dim_, inv);
}

void AttentionLayer::attend(const LayerKvState &state, const float *q, float *heads, ThreadPool *pool) {
  // Window rows oldest first, then the allowed compressed rows in index order.
  // f16 rows (Default) are read in place by attention_with_sink_f16; f32 rows
  // (Quality) are used in place with their KV-cache cells.
  const size_t n_rows = static_cast<size_t>(state.raw_count()) + allowed_.size();
  const bool f16 = state.rows_are_f16();
  rows_.clear();
  rows_f16_.clear();
  cells_.clear();
  if (f16) {
    for (int i = 0; i < state.raw_count(); ++i) rows_f16_.push_back(state.raw_row_f16(i));
    for (int32_t c : allowed_) rows_f16_.push_back(state.compressed_row_f16(c));
  } else {
    for (int i = 0; i < state.raw_count(); ++i) {
      rows_.push_back(state.raw_row(i, nullptr));
      cells_.push_back(state.raw_pos(i));
    }
    for (int32_t c : allowed_) {
      rows_.push_back(state.compressed_row(c, nullptr));
      cells_.push_back(kCompressedCellBase + c);
    }
  }
  scores_.resize(n_rows * static_cast<size_t>(n_head_));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  auto head = [&](int h) {
    const size_t off = static_cast<size_t>(h) * head_dim_;
    const std::span<const float> qh(q + off, static_cast<size_t>(head_dim_));
    const std::span<float> scores = std::span<float>(scores_).subspan(static_cast<size_t>(h) * n_rows, n_rows);
    const std::span<float> out(heads + off, static_cast<size_t>(head_dim_));
    if (f16)
      attention_with_sink_f16(qh, rows_f16_, sinks_[static_cast<size_t>(h)], scale, scores, out);
    else
      attention_with_sink(qh, rows_, sinks_[static_cast<size_t>(h)], scale, scores, out, numerics_, cells_);
  };
  if (pool) {
    pool->run(n_head_, [&](int task, int) { head(task); });
  } else {
    for (int h = 0; h < n_head_; ++h) head(h);
  }
}

}  // namespace ds4::cpu
