#include "backend/cpu/attention_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/matvec.h"
#include "backend/cpu/ops_attention.h"
#include "backend/cpu/ops_norm.h"
#include "backend/cpu/ops_qat.h"
#include "backend/cpu/report_inputs.h"
#include "core/error.h"
#include "core/ggml_type.h"
#include "core/scratch_vector.h"
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

namespace {

// One pass's working buffers (row t = token t of the pass). Layers run one
// after another, so every layer on a thread shares one set instead of each
// keeping its own (~45 MB for a 128-token pass at Flash widths, ~1.9 GB over
// 43 layers). The intermediates accessors (xn, q, kv, heads, ...) read them:
// they hold the last pass run on this thread.
struct AttentionPassScratch {
  // Written in full before they are read: growing them fills nothing.
  ScratchVector<float> xn, qa, qr, q, kv, heads, low;
  std::vector<float> scores;
  std::vector<float> comp_kv, comp_score, index_kv, index_score;  // compressor projections
  std::vector<float> index_q, index_w;
  ActivationBatch xn_batch, qr_batch, heads_batch, low_batch;
  std::vector<const float *> rows, index_rows;
  std::vector<const uint16_t *> index_rows_f16;
  std::vector<const uint16_t *> rows_f16;  // Default: the attended rows as stored (f16), read in place
  std::vector<int64_t> cells;              // rows' KV-cache cells (Quality float order)
};

AttentionPassScratch &ps() {
  thread_local AttentionPassScratch scratch;
  return scratch;
}

std::span<const float> pass_row(std::span<const float> v, int width, int64_t t) {
  return std::span<const float>(v).subspan(static_cast<size_t>(t) * width, static_cast<size_t>(width));
}

}  // namespace

std::span<const float> AttentionLayer::xn(int64_t t) const { return pass_row(ps().xn, n_embd_, t); }
std::span<const float> AttentionLayer::qr(int64_t t) const { return pass_row(ps().qr, q_lora_, t); }
std::span<const float> AttentionLayer::q(int64_t t) const { return pass_row(ps().q, n_head_ * head_dim_, t); }
std::span<const float> AttentionLayer::kv(int64_t t) const { return pass_row(ps().kv, head_dim_, t); }
std::span<const float> AttentionLayer::heads(int64_t t) const {
  return pass_row(ps().heads, n_head_ * head_dim_, t);
}

AttentionLayer::AttentionLayer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, Numerics numerics)
    : AttentionDims(layer, hp),
      w_(&layer),
      numerics_(numerics),
      rope_(rope_params(hp, layer.compress_ratio, numerics)) {
  attn_norm_ = to_f32(layer.attn_norm, hp.n_embd);
  q_a_norm_ = to_f32(layer.attn_q_a_norm, hp.q_lora_rank);
  kv_norm_ = to_f32(layer.attn_kv_norm, hp.head_dim);
  sinks_ = to_f32(layer.attn_sinks, hp.n_head);
  // The file stores attn_output_a as {H*hd/G, o_lora*G}; row g*o_lora + j is
  // output j of group g (llama.cpp views it {H*hd/G, o_lora, G}). Viewing it
  // 3-D lets matvec pick group g as an "expert".
  out_a_grouped_ = layer.attn_output_a;
  if (out_a_grouped_.ne[0] != hp.o_group_in() || out_a_grouped_.ne[1] != uint64_t{hp.o_lora_rank} * hp.o_groups)
    throw Error("attention layer " + std::to_string(layer.index) + ": attn_output_a has a bad shape");
  out_a_grouped_.ne[1] = hp.o_lora_rank;
  out_a_grouped_.ne[2] = hp.o_groups;
  if (ratio_ == 4) indexer_.emplace(layer, hp, numerics);
  group_end_ = o_groups_;
}

void AttentionLayer::set_share(backend::TensorShare share) {
  group_begin_ = 0;
  group_end_ = o_groups_;
  out_b_columns_.clear();
  out_b_share_ = model::TensorView{};
  if (share.size == 1) return;
  const model::TensorView &b = w_->attn_output_b;
  const GgmlTypeTraits &traits = ggml_type_traits(b.type);
  if (o_lora_ % static_cast<int>(traits.block_elems) != 0) {
    if (share.rank != 0) group_end_ = 0;
    return;
  }
  group_begin_ = o_groups_ * share.rank / share.size;
  group_end_ = o_groups_ * (share.rank + 1) / share.size;
  if (group_begin_ == group_end_ || (group_begin_ == 0 && group_end_ == o_groups_)) return;
  // Columns [g0 * o_lora, g1 * o_lora) of every row: whole blocks.
  const uint64_t col0 = static_cast<uint64_t>(group_begin_) * static_cast<uint64_t>(o_lora_);
  const uint64_t cols = static_cast<uint64_t>(group_end_ - group_begin_) * static_cast<uint64_t>(o_lora_);
  const uint64_t skip = col0 / traits.block_elems * traits.block_bytes;
  const uint64_t width = cols / traits.block_elems * traits.block_bytes;
  out_b_columns_.resize(static_cast<size_t>(width * b.n_rows));
  for (uint64_t r = 0; r < b.n_rows; ++r)
    std::memcpy(out_b_columns_.data() + r * width, b.row(r) + skip, static_cast<size_t>(width));
  out_b_share_ = b;
  out_b_share_.data = out_b_columns_.data();
  out_b_share_.ne[0] = cols;
  out_b_share_.row_bytes = width;
  out_b_share_.nbytes = width * b.n_rows;
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
  std::vector<LayerKvState *> states(static_cast<size_t>(n), &state);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = pos0 + t;
  forward_tokens(X, n, states, pos, OUT, pool);
}

void AttentionLayer::forward_tokens(const float *X, int64_t n, std::span<LayerKvState *const> states,
                                    std::span<const int64_t> pos, float *OUT, ThreadPool *pool) {
  if (n <= 0) return;
  if (states.size() != static_cast<size_t>(n) || pos.size() != static_cast<size_t>(n))
    throw Error("attention forward: one state and one position per token");
  for (const LayerKvState *state : states)
    if (state->ratio() != ratio_ || state->head_dim() != head_dim_ || state->numerics() != numerics_)
      throw Error(
          "attention forward: the state belongs to another kind of layer "
          "or numerics");
  chunk_tokens_ = n;
  for (int64_t at = 0; at < n; at += kMaxBatch) {
    const int64_t m = std::min(kMaxBatch, n - at);
    forward_pass(X + at * n_embd_, m, states.data() + at, pos.data() + at, OUT + at * n_embd_, pool);
  }
}

bool AttentionLayer::index_scoring(const int64_t *pos, int64_t n) const {
  // A state that evaluated positions 0 .. p - 1 holds p / ratio index rows,
  // so after the token at pos it holds (pos + 1) / ratio.
  const int64_t ratio = ratio_;
  for (int64_t t = 0; t < n; ++t)
    if ((pos[t] + 1) / ratio > indexer_->top_k()) return true;
  return false;
}

void AttentionLayer::forward_pass(const float *X, int64_t n, LayerKvState *const *states, const int64_t *pos,
                                  float *OUT, ThreadPool *pool) {
  AttentionPassScratch &s = ps();
  const size_t un = static_cast<size_t>(n);
  const size_t hq = static_cast<size_t>(n_head_) * head_dim_;
  batch_ = n;
  s.xn.resize(un * n_embd_);
  s.qa.resize(un * q_lora_);
  s.qr.resize(un * q_lora_);
  s.q.resize(un * hq);
  s.kv.resize(un * head_dim_);
  s.heads.resize(un * hq);
  s.low.resize(un * o_groups_ * o_lora_);

  // Per-token loops run split over the pool (each token's values are the
  // same whatever the split); `s` is this thread's scratch, shared with the
  // workers by reference.
  parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      rms_norm(std::span<const float>(X + t * n_embd_, static_cast<size_t>(n_embd_)), attn_norm_,
               std::span<float>(s.xn).subspan(static_cast<size_t>(t) * n_embd_, static_cast<size_t>(n_embd_)), eps_,
               numerics_);
  });
  // q_a, kv and the compressors read the same xn: each form converted once.
  s.xn_batch.reset(s.xn.data(), n, n_embd_, n_embd_, numerics_);
  if (n == 1) {
    // Decode: both products in one pool run.
    s.xn_batch.prepare(w_->attn_q_a.type, pool);
    s.xn_batch.prepare(w_->attn_kv.type, pool);
    const MatvecJob jobs[] = {{&w_->attn_q_a, -1, s.xn_batch.rows(w_->attn_q_a.type)[0], s.qa.data()},
                              {&w_->attn_kv, -1, s.xn_batch.rows(w_->attn_kv.type)[0], s.kv.data()}};
    matvec_many(jobs, numerics_, pool);
  } else {
    matmul(w_->attn_q_a, -1, s.xn_batch, s.qa.data(), q_lora_, pool);
    matmul(w_->attn_kv, -1, s.xn_batch, s.kv.data(), head_dim_, pool);
  }
  parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const auto off = static_cast<size_t>(t) * q_lora_;
      rms_norm(std::span<const float>(s.qa).subspan(off, static_cast<size_t>(q_lora_)), q_a_norm_,
               std::span<float>(s.qr).subspan(off, static_cast<size_t>(q_lora_)), eps_, numerics_);
    }
  });
  s.qr_batch.reset(s.qr.data(), n, q_lora_, q_lora_, numerics_);
  const int h0 = head_begin(), h1 = head_end();
  if (h0 == 0 && h1 == n_head_) {
    matmul(w_->attn_q_b, -1, s.qr_batch, s.q.data(), static_cast<int64_t>(hq), pool);
  } else if (h0 < h1) {
    // This rank's heads: their rows of q_b, into their columns of q.
    model::TensorView rows = w_->attn_q_b;
    rows.data = rows.row(static_cast<uint64_t>(h0) * static_cast<uint64_t>(head_dim_));
    rows.ne[1] = static_cast<uint64_t>(h1 - h0) * static_cast<uint64_t>(head_dim_);
    rows.n_rows = rows.ne[1];
    rows.nbytes = rows.n_rows * rows.row_bytes;
    matmul(rows, -1, s.qr_batch, s.q.data() + static_cast<size_t>(h0) * head_dim_, static_cast<int64_t>(hq), pool);
  }
  if (inputs_ != nullptr) report_pass_inputs(n);
  // The compressors' projections do not depend on their state: the first
  // token's compressor projects the whole batch.
  if (Compressor *c = states[0]->attn_compressor()) {
    s.comp_kv.resize(un * c->state_width());
    s.comp_score.resize(s.comp_kv.size());
    c->project(s.xn_batch, s.comp_kv.data(), s.comp_score.data(), pool);
  }
  index_projected_ = false;
  if (Compressor *c = states[0]->index_compressor()) {
    s.index_kv.resize(un * c->state_width());
    s.index_score.resize(s.index_kv.size());
    c->project(s.xn_batch, s.index_kv.data(), s.index_score.data(), pool);
    // The indexer scores rows only once there are more than top_k of them;
    // then its two projections run batched too (a token that does not score
    // yet ignores them: the result is the same either way).
    if (index_scoring(pos, n)) {
      index_projected_ = true;
      s.index_q.resize(un * static_cast<size_t>(indexer_->n_head()) * indexer_->head_dim());
      s.index_w.resize(un * static_cast<size_t>(indexer_->n_head()));
      indexer_->project(s.qr_batch, s.xn_batch, s.index_q.data(), s.index_w.data(), pool);
    }
  }

  parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      prepare_q_kv(std::span<float>(s.q).subspan(static_cast<size_t>(t) * hq, hq),
                   std::span<float>(s.kv).subspan(static_cast<size_t>(t) * head_dim_, static_cast<size_t>(head_dim_)),
                   pos[t]);
  });
  // Token by token: each token updates its cache, then attends over it.
  for (int64_t t = 0; t < n; ++t) token_core(t, pos[t], *states[t], pool);
  parallel_ranges(pool, n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      unrope_heads(std::span<float>(s.heads).subspan(static_cast<size_t>(t) * hq, hq), pos[t]);
  });
  output_projection(n, OUT, pool);
}

void AttentionLayer::report_pass_inputs(int64_t n) const {
  const AttentionPassScratch &s = ps();
  const float *xn = s.xn.data(), *qr = s.qr.data();
  const backend::MatrixSlice whole;
  report_inputs(inputs_, w_->attn_q_a, whole, xn, n, n_embd_, chunk_tokens_);
  report_inputs(inputs_, w_->attn_kv, whole, xn, n, n_embd_, chunk_tokens_);
  report_inputs(inputs_, w_->attn_q_b, whole, qr, n, q_lora_, chunk_tokens_);
  for (const model::CompressorWeights *c : {&w_->attn_compressor, &w_->indexer_compressor}) {
    if (!c->present()) continue;
    report_inputs(inputs_, c->kv, whole, xn, n, n_embd_, chunk_tokens_);
    report_inputs(inputs_, c->gate, whole, xn, n, n_embd_, chunk_tokens_);
  }
  if (w_->indexer_q_b.present()) {
    report_inputs(inputs_, w_->indexer_q_b, whole, qr, n, q_lora_, chunk_tokens_);
    report_inputs(inputs_, w_->indexer_proj, whole, xn, n, n_embd_, chunk_tokens_);
  }
}

void AttentionLayer::output_projection(int64_t n, float *OUT, ThreadPool *pool) {
  AttentionPassScratch &s = ps();
  const size_t hq = static_cast<size_t>(n_head_) * head_dim_;
  const int g0 = group_begin_, g1 = group_end_;
  if (g0 == g1) {  // no heads on this rank: its part is zero
    std::fill(OUT, OUT + n * n_embd_, 0.0f);
    return;
  }
  // Grouped output LoRA: group g's o_lora outputs read only its heads.
  const int64_t group_in = static_cast<int64_t>(n_head_ / o_groups_) * head_dim_;
  const int64_t low_width = static_cast<int64_t>(o_groups_) * o_lora_;
  if (n == 1) {
    // Decode: the token's heads as one activation row per group, all groups'
    // products in one pool run.
    s.heads_batch.reset(s.heads.data() + g0 * group_in, g1 - g0, group_in, group_in, numerics_);
    s.heads_batch.prepare(out_a_grouped_.type, pool);
    const void* const* acts = s.heads_batch.rows(out_a_grouped_.type);
    std::vector<MatvecJob> jobs;
    jobs.reserve(static_cast<size_t>(g1 - g0));
    for (int g = g0; g < g1; ++g)
      jobs.push_back({&out_a_grouped_, g, acts[g - g0], s.low.data() + static_cast<size_t>(g) * o_lora_});
    matvec_many(jobs, numerics_, pool);
  } else {
    for (int g = g0; g < g1; ++g) {
      s.heads_batch.reset(s.heads.data() + g * group_in, n, group_in, static_cast<int64_t>(hq), numerics_);
      matmul(out_a_grouped_, g, s.heads_batch, s.low.data() + static_cast<size_t>(g) * o_lora_, low_width, pool);
    }
  }
  if (g0 == 0 && g1 == o_groups_) {
    if (inputs_ != nullptr) {
      for (int g = 0; g < o_groups_; ++g)
        report_inputs(inputs_, out_a_grouped_, {backend::MatrixSlice::Kind::Group, g, o_groups_},
                      s.heads.data() + g * group_in, n, static_cast<int64_t>(hq), chunk_tokens_);
      report_inputs(inputs_, w_->attn_output_b, {}, s.low.data(), n, low_width, chunk_tokens_);
    }
    s.low_batch.reset(s.low.data(), n, low_width, low_width, numerics_);
    matmul(w_->attn_output_b, -1, s.low_batch, OUT, n_embd_, pool);
    return;
  }
  // This rank's groups' columns of attn_output_b against their outputs.
  const int64_t cols = static_cast<int64_t>(g1 - g0) * o_lora_;
  s.low_batch.reset(s.low.data() + static_cast<size_t>(g0) * o_lora_, n, cols, low_width, numerics_);
  matmul(out_b_share_, -1, s.low_batch, OUT, n_embd_, pool);
}

void AttentionLayer::prepare_q_kv(std::span<float> q, std::span<float> kv, int64_t pos) const {
  // This rank's heads only (every head without tensor parallel).
  const int h0 = head_begin(), h1 = head_end();
  for (int h = h0; h < h1; ++h) {
    std::span<float> qh = q.subspan(static_cast<size_t>(h) * head_dim_, static_cast<size_t>(head_dim_));
    rms_norm_unweighted(qh, qh, eps_, numerics_);
  }
  rms_norm(kv, kv_norm_, kv, eps_, numerics_);

  const RopeCache fwd = rope_cache(rope_, pos, /*inverse=*/false);
  rope_heads(q.subspan(static_cast<size_t>(h0) * head_dim_, static_cast<size_t>(h1 - h0) * head_dim_), h1 - h0,
             head_dim_, fwd);
  rope_apply(kv.subspan(static_cast<size_t>(head_dim_ - n_rot_)), fwd);
  if (numerics_ == Numerics::Default) fp8_e4m3_round_trip(kv.first(static_cast<size_t>(head_dim_ - n_rot_)));
}

void AttentionLayer::unrope_heads(std::span<float> heads, int64_t pos) const {
  const int h0 = head_begin(), h1 = head_end();
  rope_heads(heads.subspan(static_cast<size_t>(h0) * head_dim_, static_cast<size_t>(h1 - h0) * head_dim_), h1 - h0,
             head_dim_, rope_cache(rope_, pos, /*inverse=*/true));
}

void AttentionLayer::token_core(int64_t t, int64_t pos, LayerKvState &state, ThreadPool *pool) {
  AttentionPassScratch &s = ps();
  const size_t hq = static_cast<size_t>(n_head_) * head_dim_;
  const std::span<float> q(s.q.data() + static_cast<size_t>(t) * hq, hq);
  const std::span<float> kv(s.kv.data() + static_cast<size_t>(t) * head_dim_, static_cast<size_t>(head_dim_));
  const std::span<const float> xn = this->xn(t), qr = this->qr(t);

  // Cache update before attention: this token's row, and a compressed row
  // this token completes, are visible to it (trap T9).
  state.push_raw(kv, pos);
  if (Compressor *c = state.attn_compressor()) {
    const size_t off = static_cast<size_t>(t) * c->state_width();
    if (auto row = c->push(s.comp_kv.data() + off, s.comp_score.data() + off, pos)) state.append_compressed(*row);
  }
  allowed_.clear();
  if (Compressor *c = state.index_compressor()) {
    const size_t off = static_cast<size_t>(t) * c->state_width();
    if (auto row = c->push(s.index_kv.data() + off, s.index_score.data() + off, pos)) state.append_index(*row);
    // Every index row is scored every token: f16 rows are read in place
    // rather than converted into a scratch copy of the whole cache.
    const KvRows &rows = state.index_rows();
    float *iq = index_projected_ ? s.index_q.data() + static_cast<size_t>(t) * indexer_->n_head() * indexer_->head_dim()
                                 : nullptr;
    float *iw = index_projected_ ? s.index_w.data() + static_cast<size_t>(t) * indexer_->n_head() : nullptr;
    if (rows.is_f16()) {
      s.index_rows_f16.clear();
      for (int64_t i = 0; i < rows.rows(); ++i) s.index_rows_f16.push_back(rows.f16_row(i));
      allowed_ = iq ? indexer_->allowed_projected(iq, iw, pos, s.index_rows_f16, pool)
                    : indexer_->allowed(qr, xn, pos, s.index_rows_f16, pool);
    } else {
      s.index_rows.clear();
      for (int64_t i = 0; i < rows.rows(); ++i) s.index_rows.push_back(rows.row(i, nullptr));
      allowed_ = iq ? indexer_->allowed_projected(iq, iw, pos, s.index_rows, pool)
                    : indexer_->allowed(qr, xn, pos, s.index_rows, pool);
    }
  } else {
    for (int64_t i = 0; i < state.n_compressed(); ++i) allowed_.push_back(static_cast<int32_t>(i));
  }

  float *heads = s.heads.data() + static_cast<size_t>(t) * hq;
  attend(state, q.data(), heads, pool);
}

void AttentionLayer::attend(const LayerKvState &state, const float *q, float *heads, ThreadPool *pool) {
  AttentionPassScratch &s = ps();
  // Window rows oldest first, then the allowed compressed rows in index order.
  // f16 rows (Default) are read in place by attention_with_sink_f16; f32 rows
  // (Quality) are used in place with their KV-cache cells.
  const size_t n_rows = static_cast<size_t>(state.raw_count()) + allowed_.size();
  const bool f16 = state.rows_are_f16();
  s.rows.clear();
  s.rows_f16.clear();
  s.cells.clear();
  if (f16) {
    for (int i = 0; i < state.raw_count(); ++i) s.rows_f16.push_back(state.raw_row_f16(i));
    for (int32_t c : allowed_) s.rows_f16.push_back(state.compressed_row_f16(c));
  } else {
    for (int i = 0; i < state.raw_count(); ++i) {
      s.rows.push_back(state.raw_row(i, nullptr));
      s.cells.push_back(state.raw_pos(i));
    }
    for (int32_t c : allowed_) {
      s.rows.push_back(state.compressed_row(c, nullptr));
      s.cells.push_back(kCompressedCellBase + c);
    }
  }
  s.scores.resize(n_rows * static_cast<size_t>(n_head_));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  auto head = [&](int h) {
    const size_t off = static_cast<size_t>(h) * head_dim_;
    const std::span<const float> qh(q + off, static_cast<size_t>(head_dim_));
    const std::span<float> scores = std::span<float>(s.scores).subspan(static_cast<size_t>(h) * n_rows, n_rows);
    const std::span<float> out(heads + off, static_cast<size_t>(head_dim_));
    if (f16)
      attention_with_sink_f16(qh, s.rows_f16, sinks_[static_cast<size_t>(h)], scale, scores, out);
    else
      attention_with_sink(qh, s.rows, sinks_[static_cast<size_t>(h)], scale, scores, out, numerics_, s.cells);
  };
  // f16 rows: heads in pairs, each row read once for both (the same results
  // as one head at a time).
  auto head_pair = [&](int pair) {
    const int h = 2 * pair;
    const size_t off = static_cast<size_t>(h) * head_dim_, hd = static_cast<size_t>(head_dim_);
    const std::span<float> scores = std::span<float>(s.scores).subspan(static_cast<size_t>(h) * n_rows, 2 * n_rows);
    attention_with_sink_f16_pair(std::span<const float>(q + off, hd), std::span<const float>(q + off + hd, hd),
                                 s.rows_f16, sinks_[static_cast<size_t>(h)], sinks_[static_cast<size_t>(h) + 1], scale,
                                 scores.first(n_rows), scores.last(n_rows), std::span<float>(heads + off, hd),
                                 std::span<float>(heads + off + hd, hd));
  };
  // This rank's heads (every head without tensor parallel).
  const int h0 = head_begin(), n_heads = head_end() - h0;
  const bool pairs = f16 && n_heads % 2 == 0 && h0 % 2 == 0;
  const int tasks = pairs ? n_heads / 2 : n_heads;
  auto task = [&](int t) {
    if (pairs) {
      head_pair(h0 / 2 + t);
    } else {
      head(h0 + t);
    }
  };
  if (pool) {
    pool->run(tasks, [&](int t, int) { task(t); });
  } else {
    for (int t = 0; t < tasks; ++t) task(t);
  }
}

}  // namespace ds4::cpu
