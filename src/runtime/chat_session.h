// A multi-turn chat over one live KV session, as the interactive CLI (and
// later the agent) runs it: the transcript is kept as tokens and never
// re-rendered, so every turn evaluates only what it adds (PROTOCOL.md §2.6).
//   conversation start  BOS [Think Max prefix] system
//   each turn           <｜User｜>text<｜Assistant｜><think> | </think>, the generated tokens verbatim
//                       (reasoning included), then EOS (evaluated with the next turn)
// Rendering comes from the official encoding (text/chat_render); typed text
// is tokenized as plain text, never as control tokens.
// A turn is transactional: a cancelled prefill, a turn that produced nothing
// before Ctrl+C, or one that cannot fit the context leaves the conversation
// as it was before the turn.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <memory>

#include "backend/backend.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "text/chat_render.h"

namespace ds4::text {
class Tokenizer;
}

namespace ds4::runtime {

struct TurnHooks {
  // Prefill progress in tokens (done, total); return false to cancel.
  std::function<bool(int64_t done, int64_t total)> progress;
  // Polled between generated tokens; true stops the turn (Ctrl+C).
  std::function<bool()> cancelled;
  // Each generated token with the text it completes; `reasoning` is true
  // while the model is inside <think> … </think> (the </think> token itself
  // is reported with reasoning = true).
  std::function<void(int32_t id, std::string_view text, bool reasoning)> on_token;
};

struct TurnResult {
  bool rolled_back = false;  // the conversation is as it was before the turn
  StopReason reason = StopReason::None;
  int64_t prompt_tokens = 0;  // tokens evaluated before generation (incl. carried-over ones)
  double prefill_seconds = 0;
  int64_t generated_tokens = 0;
  double generate_seconds = 0;
  std::string text;  // generated text (reasoning and </think> included, as generated)
};

class ChatSession {
 public:
  // The backend and tokenizer must outlive this object.
  ChatSession(backend::Backend& backend, const text::Tokenizer& tokenizer, int64_t n_ctx, std::string system,
              text::ThinkingMode mode);

  // Runs one user turn. ds4::Error (conversation unchanged) when it cannot fit
  // the context.
  TurnResult turn(std::string_view user_text, Sampler& sampler, const GenerateLimits& limits, const TurnHooks& hooks);

  // Starts the conversation with an already rendered prompt (token ids that
  // include BOS and the assistant prefix), then generates. Reasoning is
  // assumed when the prompt ends with <think>. ds4::Error unless the
  // conversation is empty.
  TurnResult rendered_turn(std::vector<int32_t> tokens, Sampler& sampler, const GenerateLimits& limits,
                           const TurnHooks& hooks);

  // Context tokens the next turn with this text would need at least (its
  // prompt and one generated token).
  int64_t turn_cost(std::string_view user_text) const;

  // Thinking mode for the next turns. Switching Think Max on or off changes
  // the conversation start, so the next turn re-evaluates the transcript.
  void set_mode(text::ThinkingMode mode);
  text::ThinkingMode mode() const { return mode_; }

  // Drops the conversation; n_ctx > 0 also changes the context size.
  void reset(int64_t n_ctx = 0);

  int64_t n_ctx() const { return session_->n_ctx(); }
  // Tokens in the transcript (evaluated or waiting to be).
  int64_t used() const { return static_cast<int64_t>(session_->size() + pending_.size()); }
  // The whole transcript as token ids.
  std::vector<int32_t> transcript() const;

  // Tokens of the conversation start and of a user turn (for tests and
  // --dump-tokens style diagnostics).
  std::vector<int32_t> start_tokens() const;
  std::vector<int32_t> user_turn_tokens(std::string_view user_text) const;

 private:
  // Evaluates `add` (with Think Max prefix size `prefix_tokens` when the
  // conversation starts here) and generates; transactional as described above.
  TurnResult run(std::vector<int32_t> add, size_t prefix_tokens, bool reasoning, Sampler& sampler,
                 const GenerateLimits& limits, const TurnHooks& hooks);

  backend::Backend* backend_;
  const text::Tokenizer* tokenizer_;
  std::string system_;
  text::ThinkingMode mode_;
  std::unique_ptr<backend::Session> session_;
  // Transcript tokens not evaluated yet (EOS of the last turn, a token the
  // generation stopped on, or the whole transcript after a Max toggle).
  std::vector<int32_t> pending_;
  bool started_ = false;
  size_t max_prefix_tokens_ = 0;  // Think Max prefix tokens after BOS in the transcript
};

}  // namespace ds4::runtime
