// The decode loop shared by the CLI and (later) the server: sample from the
// session's last logits, hand each token to the caller as text that never
// splits a UTF-8 character, and evaluate it so the next step can sample.
// Stop conditions, first wins: cancellation, EOS (not evaluated into the KV),
// a caller decision on the token (stop string, tool block end), max tokens,
// context full.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/stop_reason.h"

namespace ds4::backend {
class Backend;
class Session;
}  // namespace ds4::backend
namespace ds4::text {
class Tokenizer;
}

namespace ds4::runtime {

class ToolCallConstraint;

struct GenerateHooks {
  // Polled before every step; true stops with StopReason::Cancelled.
  std::function<bool()> cancelled;
  // True when the next token must be the argmax (DSML syntax, PROTOCOL §3.6).
  std::function<bool()> force_greedy;
  // Every sampled token but EOS, with the bytes that became final with it
  // (possibly empty while a UTF-8 character is open or a stop string may be
  // forming). A reason other than None stops generation after this token.
  std::function<StopReason(int32_t id, std::string_view text)> on_token;
};

struct GenerateLimits {
  int max_tokens = 0;
  // Never sample EOS (llama.cpp's --ignore-eos): replies run to max_tokens
  // or the context end. For benchmarks and tests.
  bool ignore_eos = false;
  // Generation stops when the text contains one of these (StopReason::
  // StopString); the text is cut before it. While a stop string could still
  // be forming, its bytes are held back from on_token.
  std::vector<std::string> stop_strings;

  // Tool calls (PROTOCOL.md §3.6, §4), for requests with tools:
  // greedy_syntax samples DSML syntax at temperature 0 and payloads with the
  // request's sampling; stop_at_tool_block ends generation right after the
  // closing </｜DSML｜tool_calls> (StopReason::ToolCalls). `assistant_prefix`
  // is assistant text the prompt already holds before the first generated
  // token (a forced response prefix), seen by both; `thinking` says whether
  // the turn started inside <think> (tool blocks count only after </think>).
  bool greedy_syntax = false;
  bool stop_at_tool_block = false;
  bool thinking = true;
  std::string assistant_prefix;

  // Added to the logits before sampling (OpenAI logit_bias): token id → bias.
  // -infinity bans a token; +100 all but forces it.
  std::map<int32_t, float> logit_bias;

  // Forced tool call (tool_choice required / a named tool): tokens that cannot
  // continue the constraint's DSML block are masked before sampling (after
  // logit_bias), so EOS only comes once the block is complete. generate()
  // advances its own copy from this state; the block's closing tag stops
  // generation with StopReason::ToolCalls.
  const ToolCallConstraint* constraint = nullptr;
};

struct GenerateResult {
  std::vector<int32_t> tokens;        // sampled, in order (EOS excluded)
  // Sampled tokens not yet evaluated into the session (the last one when
  // generation stopped for max tokens, a caller stop or a full context):
  // evaluate them before anything that follows them in the transcript.
  std::vector<int32_t> unevaluated;
  std::string text;                   // the generated text (cut before a stop string)
  std::string tail;                   // final bytes never handed to on_token (held back at the end)
  StopReason reason = StopReason::None;
  double seconds = 0;                 // wall time of the loop
};

// Generates at most limits.max_tokens tokens after the session's tokens (which must
// be at least one, so that logits exist). The session must not be shared with
// another thread while this runs.
GenerateResult generate(backend::Backend& backend, backend::Session& session, const text::Tokenizer& tokenizer,
                        Sampler& sampler, const GenerateLimits& limits, const GenerateHooks& hooks);

// One session's decode as a sequence of steps, so that several sessions can
// be stepped together (batched decode, issue 23): step() samples from the
// session's logits and applies the stop rules; the caller evaluates the token
// it returns into the session (alone or in a batch) before the next step().
// generate() is exactly this loop with one eval per step.
class Generation {
 public:
  // Every reference must outlive this object; ds4::Error when the session
  // holds no tokens or max_tokens is negative.
  Generation(backend::Session& session, const text::Tokenizer& tokenizer, Sampler& sampler, const GenerateLimits& limits,
             const GenerateHooks& hooks);
  ~Generation();
  Generation(Generation&&) noexcept;
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;
  Generation& operator=(Generation&&) = delete;

  // The next token to evaluate into the session, or nothing once the
  // generation has stopped (then finish() says why).
  std::optional<int32_t> step();
  bool stopped() const;
  backend::Session& session();
  // The result; call once, after step() returned nothing.
  GenerateResult finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Steps every generation until all have stopped, evaluating the tokens of
// all still running in one batched evaluation per step. Each session ends
// exactly as generate() on it alone leaves it (same tokens, text, reason,
// KV state and logits). The results, in order.
std::vector<GenerateResult> generate_batch(backend::Backend& backend, std::span<Generation* const> generations);

}  // namespace ds4::runtime
