// One inference session on the CPU backend (MODEL.md 6): the exact token list
// evaluated so far, every layer's KV state (raw window, compressed and indexer
// rows, compressor frontiers) and the logits after the last token. A copy is
// a complete in-RAM snapshot; restore() puts one back. Above the backend it
// is seen as a backend::Session.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/layer_kv_state.h"
#include "backend/cpu/numerics.h"

namespace ds4::model {
class Deepseek4Model;
}

namespace ds4::cpu {

class Session final : public backend::Session {
 public:
  // Empty session for `model` (which must outlive it) holding at most n_ctx
  // tokens; compressed-row capacity for n_ctx is reserved up front.
  // ds4::Error when n_ctx < 1.
  Session(const model::Deepseek4Model &model, Numerics numerics, int64_t n_ctx);

  const model::Deepseek4Model &model() const { return *model_; }
  Numerics numerics() const { return numerics_; }
  int64_t n_ctx() const override { return n_ctx_; }

  // Tokens evaluated so far; the next token goes to position size().
  std::span<const int32_t> tokens() const override { return tokens_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // Logits after the last token (n_vocab); empty while size() == 0 and
  // after an evaluation that skipped them (Forward::SessionTokens).
  std::span<const float> logits() const override { return logits_; }

  std::vector<LayerKvState> &layers() { return layers_; }
  const std::vector<LayerKvState> &layers() const { return layers_; }

  // Back to no tokens; reserved capacity is kept.
  void reset() override;

  // False after an evaluation was cancelled part-way (layer-major chunks leave
  // some layers ahead of others): the state is then unusable until restore()
  // or reset(); Forward::eval refuses it.
  bool consistent() const override { return consistent_; }
  void mark_inconsistent() { consistent_ = false; }

  // Makes this session equal to `snapshot` (a copy taken earlier). ds4::Error,
  // this session unchanged, when the snapshot belongs to another model object,
  // numerics or context size.
  void restore(const Session &snapshot);
  // backend::Session: the same, for a snapshot seen through the interface
  // (ds4::Error when it is not a CPU session).
  std::unique_ptr<backend::Session> snapshot() const override;
  void restore(const backend::Session &snapshot) override;

  // Bytes of KV state held now (all layers), see LayerKvState::bytes().
  size_t state_bytes() const override;

  // For the forward pass and for deserialisation: the token list and the
  // logits are written directly, in step with the layers' state.
  std::vector<int32_t> &mutable_tokens() { return tokens_; }
  std::vector<float> &mutable_logits() { return logits_; }

 private:
  const model::Deepseek4Model *model_;
  Numerics numerics_;
  int64_t n_ctx_;
  std::vector<LayerKvState> layers_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  bool consistent_ = true;
};

}  // namespace ds4::cpu
