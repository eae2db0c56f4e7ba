// The interface between the engine and whatever computes the model
// (DESIGN.md "Seams"): per-session state, and the evaluation of a batch of
// (session, token span) pairs over a range of layers. The runtime, the
// server and the engine see only this; the CPU backend (backend/cpu)
// implements it, as do the CUDA backend (backend/cuda) and the distributed
// runners (dist/).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/matrix_inputs.h"
#include "backend/numerics.h"

namespace ds4::model {
class Deepseek4Model;
}

namespace ds4::backend {

// The DSV4 session payload's magic and version (PROTOCOL.md 6.4): what
// Backend::save_state writes, and what the disk KV cache checks in a file.
inline constexpr uint32_t kDsv4PayloadMagic = 0x34565344;  // "DSV4"
inline constexpr uint32_t kDsv4PayloadVersion = 1;

// One conversation's state on a backend: the exact tokens evaluated so far,
// every layer's KV state, and the logits after the last token.
class Session {
 public:
  virtual ~Session() = default;

  virtual int64_t n_ctx() const = 0;
  // Tokens evaluated so far; the next one goes to position size().
  virtual std::span<const int32_t> tokens() const = 0;
  int64_t size() const { return static_cast<int64_t>(tokens().size()); }
  // Logits after the last token (n_vocab); empty while size() == 0, after
  // an evaluation that skipped them, and after one that ended before the
  // output head (a layer range short of the last layer).
  virtual std::span<const float> logits() const = 0;
  // False after an evaluation was cancelled part-way: unusable until
  // restore() or reset().
  virtual bool consistent() const = 0;
  // Back to no tokens; reserved memory is kept.
  virtual void reset() = 0;
  // A complete copy (an in-RAM snapshot), and putting one back: ds4::Error,
  // this session unchanged, when the snapshot comes from another backend,
  // model, numerics or context size.
  virtual std::unique_ptr<Session> snapshot() const = 0;
  virtual void restore(const Session &snapshot) = 0;
  // Bytes of KV state held now.
  virtual size_t state_bytes() const = 0;

 protected:
  Session() = default;
  Session(const Session &) = default;
  Session &operator=(const Session &) = default;
};

// Layers [begin, end) of the model; end -1 means through the last layer and
// then the output head (logits). A range with an end (n_layer included: the
// last layer without the head) hands each token's hidden state
// (Backend::hidden_size() floats) to the next range, or to eval_head; one
// that starts after layer 0 takes them instead of the embedding. Pipeline
// stages are ranges.
struct LayerRange {
  int begin = 0;
  int end = -1;
};

// One session's part of a batched evaluation.
struct Part {
  Session *session = nullptr;
  std::span<const int32_t> tokens;
  // The logits after each token (tokens.size() x n_vocab), when wanted; only
  // for a range that ends with the output head.
  float *all_logits = nullptr;
  // The logits after this part are not wanted (a piece of a prompt that more
  // pieces follow): the output head is not run for it and the session's
  // logits are left empty. Ignored with all_logits.
  bool skip_logits = false;
  // Hidden states in (range.begin > 0) and out (range short of the last
  // layer): tokens.size() x hidden_size() floats, row i for tokens[i].
  const float *hidden_in = nullptr;
  float *hidden_out = nullptr;
};

// The checks every backend makes before it evaluates `tokens` after the
// `held` tokens of a session with a context of n_ctx: each id inside the
// vocabulary, and room for them all. ds4::Error naming the first offender.
void check_tokens(std::span<const int32_t> tokens, int n_vocab, int64_t held, int64_t n_ctx);

// The layer-range checks every backend makes before it evaluates: a
// non-empty range of the model's n_layer layers, and each part with tokens
// holding the hidden states a range after layer 0 takes, the buffer a range
// short of the head gives, and no logits buffer there. Returns the range's
// end layer; ds4::Error naming the part or the range otherwise.
int check_range(std::span<const Part> parts, LayerRange range, int n_layer);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu"
  virtual const model::Deepseek4Model &model() const = 0;
  virtual Numerics numerics() const = 0;
  int n_layer() const;
  int n_vocab() const;
  // Floats per token passed between layer ranges.
  virtual int64_t hidden_size() const = 0;

  // A new empty session holding at most n_ctx tokens (ds4::Error when n_ctx < 1).
  virtual std::unique_ptr<Session> new_session(int64_t n_ctx) const = 0;
  // Whether `session` was made by this backend (its model and numerics).
  virtual bool owns(const Session &session) const = 0;

  // Evaluates every part's tokens after its session's tokens, over `range`;
  // every matrix is read once for all parts, and each session ends exactly as
  // evaluating its part alone leaves it, bit for bit. Sessions must be
  // distinct and made by this backend; a part may have no tokens. Everything
  // is checked first: ds4::Error, every session unchanged, on a token outside
  // the vocabulary, a context overflow, a session of another backend or
  // model, an inconsistent session, a bad range or a missing hidden-state
  // buffer. A cancel (progress) throws ds4::Cancelled and marks every session
  // of the call inconsistent.
  virtual void eval(std::span<const Part> parts, LayerRange range = {}) = 0;
  // The output head alone (output HC head, norm, vocab projection) on n
  // hidden states after the last layer (n x hidden_size()): logits (n x
  // n_vocab) bit-identical to those of a range through the head. A pipeline
  // whose last stage stops at n_layer computes its logits here.
  virtual void eval_head(const float *hidden, int64_t n, float *logits) = 0;
  // One session over every layer.
  void eval(Session &session, std::span<const int32_t> tokens, float *all_logits = nullptr);

  // Called after every layer of every chunk with the token-layers done and
  // the total of the call; returning false cancels. Unset: no calls.
  using Progress = std::function<bool(int64_t done, int64_t total)>;
  virtual void set_progress(Progress progress) = 0;

  // Tokens per layer-major prefill chunk (>= 1). Part of the run's
  // configuration: the disk KV cache records it.
  virtual void set_prefill_chunk(int n) = 0;
  virtual int prefill_chunk() const = 0;

  // Reports the input rows of every weight matrix to `inputs` during the
  // evaluations that follow (backend/matrix_inputs.h; null: stop). ds4::Error
  // on a backend that cannot (one whose layers run elsewhere).
  virtual void set_matrix_inputs(MatrixInputs *inputs);

  // Per-session state as the DSV4 session payload (PROTOCOL.md 6.4), and
  // back (ds4::Error, session unchanged, when it does not fit).
  virtual std::vector<uint8_t> save_state(const Session &session) const = 0;
  virtual void load_state(std::span<const uint8_t> payload, Session &session) const = 0;
  // The state of one layer range with the token list (and, for a range
  // ending with the head, the logits): what a pipeline stage holds of a
  // session. load_layers replaces those layers, the tokens and (with the
  // head) the logits, leaving the other layers as they are; ds4::Error,
  // session unchanged, when it does not fit. A pipeline assembles a whole
  // payload from its stages' ranges and splits one the same way.
  virtual std::vector<uint8_t> save_layers(const Session &session, LayerRange range) const = 0;
  virtual void load_layers(std::span<const uint8_t> state, Session &session, LayerRange range) const = 0;
  // The same in a session file (docs/session-files.md): payload, model
  // fingerprint, numerics and checksum; written atomically.
  virtual void save_session_file(const std::string &path, const Session &session) const = 0;
  virtual void load_session_file(const std::string &path, Session &session) const = 0;

  // Greedy continuation: n ids, each the argmax (lowest index on ties) of the
  // logits before it, every id but the last also evaluated into the session,
  // which must hold at least one token. ds4::Error when the context would
  // overflow.
  std::vector<int32_t> generate_greedy(Session &session, int n);
};

}  // namespace ds4::backend
