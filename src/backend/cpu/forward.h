// The whole DeepSeek V4 forward pass on the CPU (MODEL.md 4-5): embedding,
// per layer HC pre -> attention -> HC post -> HC pre -> MoE -> HC post, then
// the output HC head, norm and vocab head. Evaluates any number of tokens
// into a Session in chunks of prefill_chunk tokens, layer-major inside a
// chunk (every token of the chunk passes layer l before any passes l + 1);
// inside a layer tokens stream through the cache in order, so the result is
// the same for every chunk size and equals token-by-token decoding.
#pragma once

#include <optional>
#include <utility>
#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "backend/backend.h"
#include "backend/collective.h"
#include "backend/cpu/attention_layer.h"
#include "backend/cpu/matvec.h"
#include "backend/cpu/moe_layer.h"
#include "backend/cpu/numerics.h"
#include "backend/cpu/ops_hc.h"
#include "backend/cpu/session.h"
#include "core/scratch_vector.h"

namespace ds4 {
class ThreadPool;
}
namespace ds4::model {
class Deepseek4Model;
}

namespace ds4::cpu {

inline constexpr int kDefaultPrefillChunk = 4096;

class Forward final : public backend::Backend {
 public:
  // Binds every layer of `model` (which must outlive this object) in
  // `numerics`; pool (may be null: single-threaded) splits the matrix work.
  Forward(const model::Deepseek4Model &model, Numerics numerics, ThreadPool *pool);

  // backend::Backend.
  std::string name() const override { return "cpu"; }
  const model::Deepseek4Model &model() const override { return *model_; }
  Numerics numerics() const override { return numerics_; }
  int64_t hidden_size() const override { return hc_dim_; }
  std::unique_ptr<backend::Session> new_session(int64_t n_ctx) const override;
  bool owns(const backend::Session &session) const override;
  void eval(std::span<const backend::Part> parts, backend::LayerRange range = {}) override;
  using backend::Backend::eval;
  void eval_head(const float *hidden, int64_t n, float *logits) override { head_batch(hidden, n, logits); }
  void set_progress(Progress progress) override { progress_ = std::move(progress); }
  // Tokens per layer-major chunk (>= 1); default kDefaultPrefillChunk.
  void set_prefill_chunk(int n) override;
  int prefill_chunk() const override { return chunk_; }
  void set_matrix_inputs(backend::MatrixInputs *inputs) override;
  std::vector<uint8_t> save_state(const backend::Session &session) const override;
  void load_state(std::span<const uint8_t> payload, backend::Session &session) const override;
  std::vector<uint8_t> save_layers(const backend::Session &session, backend::LayerRange range) const override;
  void load_layers(std::span<const uint8_t> state, backend::Session &session, backend::LayerRange range) const override;
  void save_session_file(const std::string &path, const backend::Session &session) const override;
  void load_session_file(const std::string &path, backend::Session &session) const override;

  // A new empty session, as its CPU type (tests, tools that copy sessions).
  Session make_session(int64_t n_ctx) const;

  // The batched evaluation over every layer (backend::Backend::eval with the
  // whole range): one session's part, and optionally a buffer for the logits
  // after each of its tokens. A cancel marks every session of the call
  // inconsistent. Evaluating a prompt in chunks gives the same result for
  // every chunk size and equals token-by-token decoding.
  using SessionTokens = backend::Part;
  void eval_batch(std::span<const SessionTokens> parts) { eval(parts); }

  // The sublayers of layer il; their last_*() / selected_*() accessors describe
  // the last token evaluated (diagnostics, tests).
  const AttentionLayer &attention(size_t il) const { return present(attn_, il); }

  // Diagnostics: when set, called with every per-token intermediate under the
  // name llama.cpp's graph gives it (hc_attn_pre, attn_norm, q, kv,
  // attn_derope, attn_out, hc_attn_post, hc_ffn_pre, ffn_out, l_last; layer
  // -1 for result_norm), so a run can be compared with ds4-ref-runner
  // --dump-tensors tensor by tensor. Costs one branch per call when unset.
  using Trace = std::function<void(std::string_view name, int layer, int64_t pos, std::span<const float> v)>;
  void set_trace(Trace trace) { trace_ = std::move(trace); }
  const MoeLayer &moe(size_t il) const { return present(moe_, il); }
  // Where every MoE sublayer gets its routed experts: the model's mapping
  // (null, the default) or the SSD streaming cache (backend/cpu/expert_cache.h).
  // Results are bit-identical either way.
  void set_expert_source(std::unique_ptr<ExpertSource> source);
  ExpertSource *expert_source() const { return expert_source_.get(); }
  // Selections of every routed expert so far, [layer][expert].
  std::vector<std::vector<uint64_t>> expert_usage() const;

  // Tensor parallel (docs/distributed.md): this backend becomes rank
  // collective->rank() of a group that evaluates the model together, every
  // rank with the same sessions and calls. It runs the routed experts it owns
  // (backend::TensorShare), the shared expert on rank 0, the attention heads
  // of its output groups (AttentionLayer::set_share) and its rows of the
  // vocab head; the q_a/kv/compressor/indexer projections, the cache
  // updates, the HC mixes and norms run on every rank. Each attention and
  // MoE output is the ranks' parts added in rank order (two sums per layer),
  // and the logits are gathered, so every rank ends each call with the same
  // state. `collective` must outlive this object; null: alone again.
  void set_tensor_split(backend::Collective *collective);
  backend::TensorShare share() const { return share_; }

 private:
  struct HcWeights {
    model::TensorView fn;       // hc_dim -> hc_mix_dim
    std::vector<float> scale;   // 3
    std::vector<float> base;    // hc_mix_dim
  };

  // The CPU session of a part; ds4::Error when it is missing or another backend's.
  static Session &cpu_session(const backend::Part &part, size_t index);
  void check(const Session &session, std::span<const int32_t> tokens) const;
  // ds4::Error unless the range fits the model and every part with tokens
  // has the hidden-state buffers it needs; returns the range's end layer.
  // Where each token of a batched evaluation goes: its part (index into the
  // parts) and its position in that part's session.
  struct TokenPlace {
    size_t part;
    int64_t pos;
    int64_t index;  // in the part's tokens
  };
  // Evaluates one chunk of the flattened parts (tokens[t] goes to
  // places[t]); the logits of a part's tokens are computed when it has
  // all_logits, and after its last token when the chunk holds it.
  void eval_chunk(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                  std::span<const TokenPlace> places);
  // h_ of the chunk: the embedding rows, or the parts' hidden_in rows for a
  // range that starts after layer 0.
  // Starts reading the hash-routed layers' experts of these tokens (with an
  // expert source that prefetches).
  void prefetch_hash_layers(std::span<const int32_t> tokens);
  void chunk_input(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                   std::span<const TokenPlace> places);
  // The sublayers of every layer over the chunk's states h_.
  void layers_chunk(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                    std::span<const TokenPlace> places);
  // Logits (or hidden states, for a range short of the output head) and
  // token lists of the parts after a chunk.
  void finish_chunk(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                    std::span<const TokenPlace> places);
  void hidden_out_chunk(std::span<const SessionTokens> parts, std::span<const int32_t> tokens,
                        std::span<const TokenPlace> places);
  // X (n x n_embd) = HC pre of the n flat states H (n x hc_dim, row-major),
  // the fn projection batched; splits_[t] receives token t's pre/post/comb
  // and mixes_ its mixes. Each row equals hc_pre() of it bit for bit.
  void hc_pre_batch(const float *H, int64_t n, const HcWeights &w, float *X);
  // batch_mix_ (n x n_mixes) = fn . unweighted-RMS-normed H rows (n x hc_dim).
  void hc_mixes_batch(const float *H, int64_t n, const model::TensorView &fn, int n_mixes);
  // H[t] = HC post of F[t] into H[t] with splits_[t], for t < n.
  void hc_post_batch(const float *F, int64_t n, float *H);
  // logits (n x n_vocab) of the n flat states H (n x hc_dim).
  void head_batch(const float *H, int64_t n, float *logits);
  // The vocab projection of the normed head inputs (head_batch_): this
  // rank's rows, gathered from every rank into logits.
  void split_vocab_head(int64_t n, float *logits);

  const model::Deepseek4Model *model_;
  Numerics numerics_;
  ThreadPool *pool_;
  backend::MatrixInputs *inputs_ = nullptr;
  int chunk_ = kDefaultPrefillChunk;
  int n_embd_ = 0, hc_dim_ = 0, n_vocab_ = 0;
  float rms_eps_ = 1e-6f, hc_eps_ = 1e-6f;
  int sinkhorn_iters_ = kHcSinkhornIters;

  // Per layer; empty for a layer whose tensors are in a shard not present
  // here (a pipeline stage's partial shard set: gguf::File::open_partial).
  std::vector<std::optional<AttentionLayer>> attn_;
  std::vector<std::optional<MoeLayer>> moe_;
  template <typename Layer>
  static Layer &present(std::vector<std::optional<Layer>> &layers, size_t il) {
    return const_cast<Layer &>(present(std::as_const(layers), il));
  }
  template <typename Layer>
  static const Layer &present(const std::vector<std::optional<Layer>> &layers, size_t il) {
    if (!layers.at(il)) {
      throw Error("layer " + std::to_string(il) + " is in a shard of the model that is not present in this process");
    }
    return *layers[il];
  }
  std::unique_ptr<ExpertSource> expert_source_;
  backend::Collective *collective_ = nullptr;
  backend::TensorShare share_;
  ScratchVector<float> split_logits_, gathered_logits_;  // split_vocab_head's
  std::vector<int> hash_experts_;  // prefetch_hash_layers' scratch
  std::vector<HcWeights> hc_attn_, hc_ffn_;
  HcWeights hc_head_;  // fn: hc_dim -> 4; scale 1; base 4
  std::vector<float> output_norm_;

  // Chunk buffers, kept across calls; each written in full before it is read.
  ScratchVector<float> h_;        // chunk x hc_dim: the running HC state
  std::vector<HcSplit> splits_;
  ScratchVector<float> batch_flat_, batch_mix_, batch_x_, batch_f_;  // chunk x (hc_dim, mixes, n_embd, n_embd)
  ActivationBatch flat_batch_, head_batch_;
  std::vector<LayerKvState *> chunk_states_;  // per chunk token: its session's state of the layer running
  std::vector<int64_t> chunk_pos_;
  ScratchVector<float> head_h_, head_logits_;  // gathered last-token states and their logits
  // The call being evaluated: each part's CPU session, the layer range.
  std::vector<Session *> sessions_;
  int layer_begin_ = 0, layer_end_ = 0;
  bool head_ = true;  // the call's range ends with the output head
  Trace trace_;
  Progress progress_;
  int64_t progress_done_ = 0, progress_total_ = 0;
};

}  // namespace ds4::cpu
