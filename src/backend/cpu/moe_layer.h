// One layer's MoE sublayer (MODEL.md 4.8) for one token: RMSNorm, router,
// expert selection (token-hash table on hash layers, biased top-k elsewhere),
// the selected routed experts with clamped SwiGLU, plus the shared expert.
// Input is the HC-pre output x; output is routed + shared, before HC post.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/collective.h"
#include "backend/matrix_inputs.h"
#include "backend/cpu/expert_source.h"
#include "backend/cpu/matvec.h"
#include "backend/cpu/numerics.h"
#include "model/deepseek4_hparams.h"
#include "model/deepseek4_weights.h"

namespace ds4 {
class ThreadPool;
}

namespace ds4::cpu {

class MoeLayer {
 public:
  // Binds the MoE weights of `layer`. Copies ffn_norm and exp_probs_b to f32
  // once (an absent exp_probs_b is a zero bias); the matrices stay in the
  // model's mapping, which must outlive this object. ds4::Error when a tensor
  // is missing or its shape does not match hp.
  MoeLayer(const model::LayerWeights& layer, const model::Deepseek4HParams& hp, Numerics numerics);

  // out = routed + shared experts of x (n_embd wide; out may alias x).
  // token_id picks the experts on hash layers only, where it must lie in
  // [0, n_vocab) (ds4::Error otherwise); other layers ignore it. Buffers are
  // kept between calls, so only the first call allocates in this class.
  void forward(std::span<const float> x, int32_t token_id, std::span<float> out, ThreadPool* pool);

  // n tokens at once (prefill): X and OUT are n x n_embd row-major (OUT may
  // alias X), token_ids n ids. The tokens are grouped by routed expert so
  // each expert's matrices are read once per batch and run as one matmul over
  // its tokens. Each output row equals forward() of that token bit for bit;
  // the selection accessors below then describe the last token. With an
  // expert source that prefetches, `next` (the layer that runs after this
  // one) gets its likely experts prefetched while this one computes.
  void forward_batch(const float* X, const int32_t* token_ids, int64_t n, float* OUT, ThreadPool* pool,
                     MoeLayer* next = nullptr);

  // The experts this layer will likely select for n tokens, most selected
  // first: on a hash layer exactly (the token table; ids outside the
  // vocabulary are skipped, the pass itself rejects them), otherwise its
  // router on X (n x n_embd: an earlier sublayer's input, the best guess of
  // this layer's before it exists; ffn_norm, bias and top-k as the pass).
  void likely_experts(const float* X, const int32_t* token_ids, int64_t n, std::vector<int>& out, ThreadPool* pool);

  // The last forward's expert ids (slot order) and their weights (normalised,
  // times expert_weights_scale), n_expert_used each; for tests and tracing.
  std::span<const int32_t> selected_ids() const {
    return std::span<const int32_t>(ids_).subspan(static_cast<size_t>(last_ * n_used_), static_cast<size_t>(n_used_));
  }
  std::span<const float> selected_weights() const {
    return std::span<const float>(weights_).subspan(static_cast<size_t>(last_ * n_used_), static_cast<size_t>(n_used_));
  }
  // The last forward's router scores sqrt(softplus(logit)), n_expert wide.
  std::span<const float> scores() const {
    return std::span<const float>(scores_).subspan(static_cast<size_t>(last_ * n_expert_),
                                                   static_cast<size_t>(n_expert_));
  }

  // Where the routed experts' matrices come from: the model's mapping when
  // null (the default), else `source` (the SSD streaming cache), which must
  // outlive this object. Results are the same either way.
  void set_expert_source(ExpertSource* source) { source_ = source; }

  // Tensor parallel: only the routed experts `share` owns run here, and the
  // shared expert only on its owner; the output is then this rank's part of
  // the sum, which the ranks add up (Forward does). Routing still sees every
  // expert, so the selections are the whole model's.
  void set_share(backend::TensorShare share) { share_ = share; }

  // Reports every product's input rows to `inputs` (null: stop); see
  // backend/matrix_inputs.h.
  void set_matrix_inputs(backend::MatrixInputs* inputs) { inputs_ = inputs; }

  // How often each routed expert was selected since this object was made
  // (n_expert counts; every token counts n_expert_used): what a hot list for
  // --ssd-streaming is made from.
  std::span<const uint64_t> expert_usage() const { return usage_; }

  bool hash_routed() const { return hash_routed_; }
  const model::LayerWeights& weights() const { return *w_; }
  uint32_t layer_index() const { return index_; }

 private:
  // Tokens per pass: bounds the per-(token, slot) expert outputs kept for the
  // in-order sum (n x n_expert_used x n_embd floats). Large, because each
  // routed expert meets ~n * 6 / 256 of the pass's tokens: at 2048 about 48,
  // which fills the tile kernels' 16-lane groups and spreads each weight
  // block's decode over 4x more tokens than at 512 (measured: ds4-q2 bench
  // model, 2048-token prefill, +12-45 %), for ~330 MB of pass buffers at
  // Flash widths instead of ~80 MB. --prefill-chunk bounds a pass too.
  static constexpr int64_t kMaxBatch = 2048;
  void forward_pass(const float* X, const int32_t* token_ids, int64_t n, float* OUT, ThreadPool* pool,
                    MoeLayer* next);
  // The routed experts of the pass (active_, grouped in expert_start_) from
  // the source, each run as soon as its matrices are readable; next's likely
  // experts prefetched into the room this leaves.
  void run_streamed(const std::function<void(int, const ExpertMatrices&, ThreadPool*)>& run_expert, const float* X,
                    const int32_t* token_ids, int64_t n, MoeLayer* next, ThreadPool* pool);
  // Token t's scores, ids and weights from its router logits; thread-safe
  // for distinct t (tid_row: n_used ids of scratch).
  void route(int64_t t, int32_t token_id, const float* logits, std::span<int32_t> tid_row);
  // MID (n_acts x ff) = swiglu_clamp(gate . x, up . x) [* weight], DOWN = down . MID
  // (n_acts x n_embd, rows ldd apart), for the activations `acts` (xn rows in
  // the gate/up form) of one expert (or the shared expert, expert = -1).
  void expert_ffn(const model::TensorView& gate, const model::TensorView& up, const model::TensorView& down,
                  int expert, const void* const* gate_acts, const void* const* up_acts, int64_t n_acts, float limit,
                  const float* weights_before_down, float* DOWN, int64_t ldd, ThreadPool* pool);

  const model::LayerWeights* w_;  // views into the model's mapping
  ExpertSource* source_ = nullptr;
  backend::MatrixInputs* inputs_ = nullptr;
  int64_t chunk_tokens_ = 0;  // the evaluation chunk's tokens (what inputs_ is told)
  backend::TensorShare share_;
  Numerics numerics_;
  uint32_t index_ = 0;
  bool hash_routed_ = false;
  int n_embd_ = 0, n_ff_shared_ = 0, n_expert_ = 0, n_used_ = 0, n_vocab_ = 0;
  float eps_ = 1e-6f, scale_ = 1.0f, clamp_exp_ = 0.0f, clamp_shexp_ = 0.0f;
  std::vector<float> norm_;  // ffn_norm, n_embd
  std::vector<float> bias_;  // exp_probs_b, n_expert; empty on hash layers or when absent

  // The routing of the last pass (what the accessors report); the pass's
  // working buffers are per thread, shared by every layer (moe_layer.cpp).
  std::vector<float> scores_, weights_;  // per token of the pass
  std::vector<int32_t> ids_;
  std::vector<int> active_;  // the pass's experts with tokens, in run order
  std::vector<ExpertMatrices> acquired_;  // from source_, for a part of active_
  std::vector<int> predicted_;            // the next layer's likely experts
  std::vector<int32_t> expert_count_, expert_start_;  // tokens grouped by expert
  int64_t last_ = 0;  // the last token's row in ids_ / weights_ / scores_
  std::vector<uint64_t> usage_;  // selections per expert
};

}  // namespace ds4::cpu
