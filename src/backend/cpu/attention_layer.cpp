#include "backend/cpu/attention_layer.h"

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

  xn_.resize(static_cast<size_t>(n_embd_));
  qa_.resize(static_cast<size_t>(q_lora_));
  qr_.resize(static_cast<size_t>(q_lora_));
  q_.resize(static_cast<size_t>(n_head_) * head_dim_);
  kv_.resize(static_cast<size_t>(head_dim_));
  heads_.resize(q_.size());
  low_.resize(static_cast<size_t>(o_groups_) * o_lora_);
}

void AttentionLayer::forward(std::span<const float> x, int64_t pos, LayerKvState &state, std::span<float> out,
                             ThreadPool *pool) {
  if (x.size() != static_cast<size_t>(n_embd_) || out.size() != static_cast<size_t>(n_embd_))
    throw Error("attention forward: x and out must be n_embd wide");
  if (state.ratio() != ratio_ || state.head_dim() != head_dim_ || state.numerics() != numerics_)
    throw Error(
        "attention forward: the state belongs to another kind of layer "
        "or numerics");

  rms_norm(x, attn_norm_, xn_, eps_, numerics_);
  // q_a and kv read the same xn: convert it once.
  ActivationCache xa;
  xa.reset(xn_.data(), n_embd_, numerics_);
  matvec(w_->attn_q_a, -1, xa, qa_.data(), pool);
  matvec(w_->attn_kv, -1, xa, kv_.data(), pool);
  rms_norm(qa_, q_a_norm_, qr_, eps_, numerics_);
  matvec(w_->attn_q_b, -1, qr_.data(), q_.data(), numerics_, pool);
  for (int h = 0; h < n_head_; ++h) {
    std::span<float> qh(q_.data() + static_cast<size_t>(h) * head_dim_, static_cast<size_t>(head_dim_));
    rms_norm_unweighted(qh, qh, eps_, numerics_);
  }
  rms_norm(kv_, kv_norm_, kv_, eps_, numerics_);

  const RopeCache fwd = rope_cache(rope_, pos, /*inverse=*/false);
  rope_heads(q_, n_head_, head_dim_, fwd);
  rope_apply(std::span<float>(kv_).subspan(static_cast<size_t>(head_dim_ - n_rot_)), fwd);
  if (numerics_ == Numerics::Default)
    fp8_e4m3_round_trip(std::span<float>(kv_).first(static_cast<size_t>(head_dim_ - n_rot_)));

  // Cache update before attention: this token's row, and a compressed row
  // this token completes, are visible to it (trap T9).
  state.push_raw(kv_, pos);
  if (Compressor *c = state.attn_compressor())
    if (auto row = c->step(xn_, pos, pool)) state.append_compressed(*row);
  allowed_.clear();
  if (Compressor *c = state.index_compressor()) {
    if (auto row = c->step(xn_, pos, pool)) state.append_index(*row);
    // Every index row is scored every token: f16 rows are read in place
    // rather than converted into a scratch copy of the whole cache.
    const KvRows &rows = state.index_rows();
    if (rows.is_f16()) {
      index_rows_f16_.clear();
      for (int64_t i = 0; i < rows.rows(); ++i) index_rows_f16_.push_back(rows.f16_row(i));
      allowed_ = indexer_->allowed(qr_, xn_, pos, index_rows_f16_, pool);
    } else {
      index_rows_.clear();
      for (int64_t i = 0; i < rows.rows(); ++i) index_rows_.push_back(rows.row(i, nullptr));
      allowed_ = indexer_->allowed(qr_, xn_, pos, index_rows_, pool);
    }
  } else {
    for (int64_t i = 0; i < state.n_compressed(); ++i) allowed_.push_back(static_cast<int32_t>(i));
  }

  attend(state, pool);

  const RopeCache inv = rope_cache(rope_, pos, /*inverse=*/true);
  rope_heads(heads_, n_head_, head_dim_, inv);

  // Grouped output LoRA: group g's o_lora outputs read only its heads.
  const size_t group_in = static_cast<size_t>(n_head_ / o_groups_) * head_dim_;
  for (int g = 0; g < o_groups_; ++g)
    matvec(out_a_grouped_, g, heads_.data() + static_cast<size_t>(g) * group_in,
           low_.data() + static_cast<size_t>(g) * o_lora_, numerics_, pool);
  matvec(w_->attn_output_b, -1, low_.data(), out.data(), numerics_, pool);
}

void AttentionLayer::attend(const LayerKvState &state, ThreadPool *pool) {
  // Window rows oldest first, then the allowed compressed rows in index order.
  // f16 rows (Default) are converted into rows_f32_, one slot per row, sized
  // before any pointer into it is taken; f32 rows are used in place.
  const size_t n_rows = static_cast<size_t>(state.raw_count()) + allowed_.size();
  const size_t hd = static_cast<size_t>(head_dim_);
  if (numerics_ == Numerics::Default) rows_f32_.resize(n_rows * hd);
  auto scratch = [&](size_t r) { return rows_f32_.empty() ? nullptr : rows_f32_.data() + r * hd; };
  rows_.clear();
  cells_.clear();
  for (int i = 0; i < state.raw_count(); ++i) {
    rows_.push_back(state.raw_row(i, scratch(rows_.size())));
    cells_.push_back(state.raw_pos(i));
  }
  for (int32_t c : allowed_) {
    rows_.push_back(state.compressed_row(c, scratch(rows_.size())));
    cells_.push_back(kCompressedCellBase + c);
  }
  scores_.resize(n_rows * static_cast<size_t>(n_head_));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  auto head = [&](int h) {
    const size_t off = static_cast<size_t>(h) * head_dim_;
    attention_with_sink(std::span<const float>(q_).subspan(off, static_cast<size_t>(head_dim_)), rows_,
                        sinks_[static_cast<size_t>(h)], scale,
                        std::span<float>(scores_).subspan(static_cast<size_t>(h) * n_rows, n_rows),
                        std::span<float>(heads_).subspan(off, static_cast<size_t>(head_dim_)), numerics_,
                        cells_);
  };
  if (pool) {
    pool->run(n_head_, [&](int task, int) { head(task); });
  } else {
    for (int h = 0; h < n_head_; ++h) head(h);
  }
}

}  // namespace ds4::cpu
