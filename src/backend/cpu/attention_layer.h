// The attention sublayer of one layer for one token (MODEL.md 4.4), from the
// HC-pre output x to the sublayer output that HC post mixes back in:
// q-LoRA and kv projections with their norms, RoPE, (Default) FP8 on kv,
// cache update (raw window, compressors), indexer selection, attention with
// sink over window + compressed rows, inverse RoPE, grouped output LoRA.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/attention_dims.h"
#include "backend/collective.h"
#include "backend/matrix_inputs.h"
#include "backend/cpu/indexer.h"
#include "backend/cpu/layer_kv_state.h"
#include "backend/cpu/matvec.h"
#include "backend/cpu/numerics.h"
#include "backend/cpu/ops_rope.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4 {
class ThreadPool;
}

namespace ds4::cpu {

class AttentionLayer : private backend::AttentionDims {
 public:
  // Binds the layer's attention weights (views into the model's mapping,
  // which must outlive this object); norms and sinks are copied to f32.
  // ds4::Error on shapes that do not fit hp.
  AttentionLayer(const model::LayerWeights &layer, const model::Deepseek4HParams &hp, Numerics numerics);

  // One token at absolute position pos: x is the HC-pre output (n_embd), out
  // receives the sublayer output (n_embd). Updates state (which must belong
  // to this layer, in the same numerics); positions must follow each other
  // from 0 or from the state's last position. Not thread-safe (reuses
  // buffers); the pool splits matvecs and heads.
  void forward(std::span<const float> x, int64_t pos, LayerKvState &state, std::span<float> out,
               ThreadPool *pool = nullptr);

  // n tokens at positions pos0, pos0 + 1, ... in order: X and OUT are n x
  // n_embd, row-major (OUT may alias X). Each token sees the cache as the
  // tokens before it left it, so the result equals n forward() calls bit for
  // bit; the projections run as batched matmuls (prefill). Intermediates of
  // the last token (and of row t of the last batch, t < last_batch_size())
  // stay readable.
  void forward_batch(const float *X, int64_t n, int64_t pos0, LayerKvState &state, float *OUT,
                     ThreadPool *pool = nullptr);

  // n tokens of possibly several sessions in one batch (batched decode):
  // token t goes to position pos[t] of *states[t]. A state's tokens must
  // come in position order, following its last position. The projections
  // run as one matmul for all of them; each token's cache update and
  // attention use its own state, so every session gets what forward_batch
  // on it alone gives, bit for bit.
  void forward_tokens(const float *X, int64_t n, std::span<LayerKvState *const> states, std::span<const int64_t> pos,
                      float *OUT, ThreadPool *pool = nullptr);

  // Intermediates of the last forward (tests, diagnostics): row t of the
  // last pass, or its last token. The pass buffers are per thread and shared
  // by every layer (attention_layer.cpp), so these are valid on the thread
  // that ran the forward, until any layer runs another pass there.
  int64_t last_batch_size() const { return batch_; }
  std::span<const float> xn(int64_t t) const;
  std::span<const float> qr(int64_t t) const;
  std::span<const float> q(int64_t t) const;      // normed, roped
  std::span<const float> kv(int64_t t) const;     // roped, QAT'd, before storage
  std::span<const float> heads(int64_t t) const;  // inverse-roped
  std::span<const float> last_xn() const { return xn(batch_ - 1); }
  std::span<const float> last_qr() const { return qr(batch_ - 1); }
  std::span<const float> last_q() const { return q(batch_ - 1); }
  std::span<const float> last_kv() const { return kv(batch_ - 1); }
  std::span<const float> last_heads() const { return heads(batch_ - 1); }
  std::span<const int32_t> last_allowed() const { return allowed_; }

  int ratio() const { return ratio_; }
  Numerics numerics() const { return numerics_; }

  // Tensor parallel: this rank computes the heads of its output groups
  // (groups [G r / K, G (r+1) / K) of the grouped output LoRA, so each
  // rank's heads feed only its own groups) and its columns of attn_output_b;
  // the output is then this rank's part of the sum the ranks add up
  // (Forward does). The q_a, kv, compressor and indexer projections and the
  // cache update run on every rank, so every rank's state stays whole. When
  // a group's columns do not start on a block of attn_output_b's type, rank
  // 0 keeps every head and the others none.
  void set_share(backend::TensorShare share);

  // Reports every product's input rows to `inputs` (null: stop); see
  // backend/matrix_inputs.h. The whole layer only (not a tensor-parallel
  // share).
  void set_matrix_inputs(backend::MatrixInputs *inputs) { inputs_ = inputs; }

 private:
  // Up to kMaxBatch tokens per pass bound the per-token buffers (a chunk of
  // 4096 tokens would need ~0.5 GB for q and heads alone).
  static constexpr int64_t kMaxBatch = 128;
  void forward_pass(const float *X, int64_t n, LayerKvState *const *states, const int64_t *pos, float *OUT,
                    ThreadPool *pool);
  // Whether a pass reaching these positions scores index rows (more rows
  // than the indexer keeps), so its projections are worth batching.
  bool index_scoring(const int64_t *pos, int64_t n) const;
  // Token t's q heads and kv as they enter the cache and attention: normed,
  // roped, kv QAT'd. Needs nothing from the cache, so a pass runs it for all
  // its tokens at once, split over the pool.
  void prepare_q_kv(std::span<float> q, std::span<float> kv, int64_t pos) const;
  // The pass's output from its heads: the grouped output LoRA over this
  // rank's groups, then attn_output_b over their columns (zeros without any).
  void output_projection(int64_t n, float *OUT, ThreadPool *pool);
  int head_begin() const { return group_begin_ * (n_head_ / o_groups_); }
  int head_end() const { return group_end_ * (n_head_ / o_groups_); }
  void token_core(int64_t t, int64_t pos, LayerKvState &state, ThreadPool *pool);
  void unrope_heads(std::span<float> heads, int64_t pos) const;
  void attend(const LayerKvState &state, const float *q, float *heads, ThreadPool *pool);

  const model::LayerWeights *w_;
  Numerics numerics_;
  RopeParams rope_;
  model::TensorView out_a_grouped_;  // attn_output_a viewed {H*hd/G, o_lora, G}
  // Tensor parallel: this rank's output groups, and attn_output_b's columns
  // of a part of them (a copy: they are not contiguous in the file).
  int group_begin_ = 0, group_end_ = 0;
  std::vector<uint8_t> out_b_columns_;
  model::TensorView out_b_share_;
  std::optional<Indexer> indexer_;
  std::vector<float> attn_norm_, q_a_norm_, kv_norm_, sinks_;

  backend::MatrixInputs *inputs_ = nullptr;
  int64_t chunk_tokens_ = 0;  // the evaluation chunk's tokens (what inputs_ is told)
  // The input-side reports of a pass (inputs_ set): the products of xn and
  // qr, including the indexer's when it does not score yet.
  void report_pass_inputs(int64_t n) const;

  // The pass's working buffers are per thread (attention_layer.cpp).
  int64_t batch_ = 0;
  bool index_projected_ = false;  // the pass's index_q / index_w hold this batch's indexer projections
  std::vector<int32_t> allowed_;
};

}  // namespace ds4::cpu
